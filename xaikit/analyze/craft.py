"""CRAFT-style concepts (Fel et al., 2023, https://arxiv.org/abs/2211.10154): a non-negative
matrix factorization of one layer's activations over a class's images.

Every spatial position ``p`` of image ``i`` gives a row ``A[i, p]`` (the layer's ``ch`` channels,
non-negative after a ReLU); NMF writes the ``n * h * w`` rows as ``A ~= U @ W`` with ``W`` (rank,
ch) the *concept directions* and ``U`` (n, h, w, rank) the *coefficients*: how much of each
concept sits at each position, which is the concept's heatmap once upsampled to the input. The
importance of concept ``r`` for class ``klass`` is the first-order (Taylor) estimate of the drop of
the class score if the concept's part ``U[..., r] W_r`` were removed from the activations,
``mean_i sum_p U[i, p, r] <W_r, dA[i, p]>`` with ``dA`` the gradient of the class score with
respect to the layer's activations (exact for a head that is linear in the layer).

The model runs only through the backend's CAM facet (``bk.cam``: the same layer resolution and
fused forward+backward as Grad-CAM), in blocks of ``batch_size`` rows: one forward pass collects
the rows NMF is fitted on (at most ``max_rows``, a seeded sample), one forward+backward pass
computes each block's coefficients (``W`` fixed) and gradients, so memory stays one block plus
the fitted rows whatever the number of images.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from xaikit.backend import Rows
from xaikit.checks import check_int
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.xai.internal import (
    Inputs,
    check_model_kwargs,
    chunked,
    find_layer,
    grid_size,
    image_size,
    prepare,
    to_chw,
    upsample,
)

__all__ = ["ConceptSet", "extract_concepts", "resolve_layer"]

#: the analysis package's logger (NMF that stopped at ``max_iter``, negative activations clipped)
logger = logging.getLogger("xaikit.analyze")

#: NMF's iteration cap and tolerance (scikit-learn's coordinate descent)
MAX_ITER = 1000
TOL = 1e-4


@dataclass(frozen=True, repr=False)
class ConceptSet:
    """The concepts of one class at one layer, most important first.

    Attributes:
        layer: the layer's name.
        klass: the class whose score the importance is measured on.
        directions: (rank, ch) float32, >= 0, each row of unit L2 norm: the concept directions ``W``.
        importance: (rank,) float64, descending: the mean over the images of the Taylor estimate
            of the class-score drop if the concept were removed, ``sum_p U[i,p,r] <W_r, dA[i,p]>``.
        coefficients: (n, h, w, rank) float32, >= 0: ``U``, each position's amount of each concept
            (on the scale of the unit-norm directions).
        top: (rank, T) int64 dataset indices of the ``T = min(top, n)`` images with the largest
            mean coefficient of each concept, largest first.
        heatmaps: (rank, T, H, W) float32: the coefficients of the top images, bilinearly
            upsampled to the input size.
        image_importance: (n, rank) float64: the Taylor estimate per image (``importance`` is its
            mean over the images).
        indices: (n,) int64 dataset indices of the images, in the order of ``coefficients``.
        clipped: the fraction of the layer's activation values that were negative and set to 0.
        fit_error: the relative Frobenius error ``||A - U W|| / ||A||`` over the fitted rows.
        fit_rows: how many (image, position) rows NMF was fitted on (``<= max_rows``).
        converged: whether NMF's fit and every block's coefficients converged within ``MAX_ITER``.
    """

    layer: str
    klass: int
    directions: np.ndarray
    importance: np.ndarray
    coefficients: np.ndarray
    top: np.ndarray
    heatmaps: np.ndarray
    image_importance: np.ndarray
    indices: np.ndarray
    clipped: float = 0.0
    fit_error: float = 0.0
    fit_rows: int = 0
    converged: bool = True

    @property
    def rank(self) -> int:
        """The number of concepts."""
        return int(self.directions.shape[0])

    def __repr__(self) -> str:
        imp = ", ".join(f"{v:.3g}" for v in self.importance)
        return (
            f"ConceptSet(layer={self.layer!r}, klass={self.klass}, rank={self.rank}, "
            f"images={len(self.indices)}, importance=[{imp}], fit_error={self.fit_error:.3g}, "
            f"clipped={self.clipped:.3g}, converged={self.converged})"
        )


def extract_concepts(
    model: Any,
    x_rows: Any,
    klass: int,
    *,
    layer: Any = None,
    rank: int = 5,
    seed: int = 0,
    batch_size: int = 64,
    framework: str | None = None,
    top: int = 8,
    indices: Any = None,
    max_rows: int = 20_000,
    negative: str = "clip",
    model_kwargs: Mapping[str, Any] | None = None,
) -> ConceptSet:
    """The CRAFT concepts of class ``klass`` at one layer (see the module's docstring).

    Args:
        model: a torch module or Keras model (left exactly as it was: weights, mode, no hooks).
        x_rows: (n, ...) images of the class, in the model's layout or the other one (numpy).
        klass: the class whose score the importance is measured on.
        layer: a layer name / object, or None: the last layer with a spatial output (as the
            class-activation maps choose it).
        rank: the number of concepts, in ``[1, channels]``.
        seed: seeds the randomized SVD of NMF's ``nndsvda`` start and the fitted-row sample.
        batch_size: images per forward(+backward) pass.
        framework: ``"torch"`` or ``"tf"`` when the model is a plain function.
        top: images per concept in ``top`` / ``heatmaps``.
        indices: (n,) dataset indices of the images (default ``0..n-1``).
        max_rows: the most (image, position) rows NMF is fitted on (a seeded uniform sample
            when there are more; the coefficients of every row are then computed with the
            fitted directions): memory is ``max_rows * channels`` float32 values.
        negative: what to do with negative activation values (a layer before its ReLU, e.g.
            LeNet's last convolution): ``"clip"`` sets them to 0 (what a following ReLU does;
            ``ConceptSet.clipped`` says how many were), ``"raise"`` refuses the layer.
        model_kwargs: further keyword arguments of every model call (as in ``xk.xai.explain``):
            a tensor or array whose first axis has one row per image is sliced with the images'
            blocks, anything else is passed as it is.

    Returns:
        The :class:`ConceptSet`, concepts ordered by importance (descending).

    Raises:
        XaikitValueError / XaikitTypeError: a bad argument, named in the message; a layer that
            does not exist (the message names some that do), or whose activations are all zero.
    """
    from xaikit.backend import get_backend

    if negative not in ("clip", "raise"):
        raise XaikitValueError(f"negative must be 'clip' or 'raise'; got {describe(negative)}")
    rank = check_int(rank, "rank", low=1)
    seed = check_int(seed, "seed", low=0)
    batch_size = check_int(batch_size, "batch_size", low=1)
    top = check_int(top, "top", low=1)
    max_rows = check_int(max_rows, "max_rows", low=1)
    klass = check_int(klass, "klass", low=0)
    bk = get_backend(model, framework)
    x = np.asarray(bk.to_numpy(x_rows)) if bk.is_tensor(x_rows) else np.asarray(x_rows)
    if x.ndim < 3 or x.shape[0] == 0:
        raise XaikitValueError(
            f"x_rows must be a non-empty batch of images (n, C, H, W), (n, H, W, C) or (n, H, W); "
            f"got {describe(x_rows)}"
        )
    n = int(x.shape[0])
    ids = _check_indices(indices, n)

    with bk.inference(model):
        run = _Layer(bk, model, x, batch_size, layer, model_kwargs)
        n_classes = _n_classes(run.first)
        if klass >= n_classes:
            raise XaikitValueError(
                f"klass must be a class index in [0, {n_classes - 1}] for a model with {n_classes} "
                f"outputs; got {klass}"
            )
        data, clipped = _fit_rows(run, rank, max_rows, seed, negative)
        nmf, fit_error, converged = _fit(data, rank, seed)
        coeffs, per_image, ok = _coefficients(run, nmf, klass)

    importance = per_image.mean(axis=0)
    order = np.argsort(-importance, kind="stable")
    norms = _norms(nmf)
    directions = (nmf.components_ / norms[:, None])[order].astype(np.float32)
    coefficients = coeffs[..., order]
    mean_coef = coefficients.mean(axis=(1, 2))  # (n, rank)
    top_pos = np.argsort(-mean_coef, axis=0, kind="stable")[: min(top, n)].T  # (rank, T)
    heatmaps = np.stack(
        [upsample(coefficients[top_pos[r], :, :, r].astype(np.float64), run.size) for r in range(rank)]
    ).astype(np.float32)
    return ConceptSet(
        layer=run.found.name,
        klass=klass,
        directions=directions,
        importance=importance[order],
        coefficients=coefficients,
        top=ids[top_pos],
        heatmaps=heatmaps,
        image_importance=per_image[:, order],
        indices=ids,
        clipped=clipped,
        fit_error=fit_error,
        fit_rows=len(data),
        converged=converged and ok,
    )


def resolve_layer(
    model: Any, x_rows: np.ndarray, layer: Any = None, framework: str | None = None
) -> tuple[str, int]:
    """``(name, channels)`` of the layer :func:`extract_concepts` would read for ``layer`` on these
    images (one image is run forward), or the error it would raise: a check before costly work."""
    from xaikit.backend import get_backend

    bk = get_backend(model, framework)
    with bk.inference(model):
        run = _Layer(bk, model, np.asarray(x_rows[:1], dtype=np.float32), 1, layer)
        return str(run.found.name), int(run.activations(0, 1).shape[1])


class _Layer:
    """The model's layer over the images, block by block (``batch_size`` images each), through
    the backend's CAM facet: activations and gradients on the host, channel-first (b, ch, h, w)
    float64 whatever the framework. Runs inside ``bk.inference(model)``."""

    def __init__(
        self,
        bk: Any,
        model: Any,
        x: np.ndarray,
        batch_size: int,
        layer: Any,
        model_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.bk, self.model, self.x, self.batch_size = bk, model, x, batch_size
        n = len(x)
        self.blocks = [(r0, min(r0 + batch_size, n)) for r0 in range(0, n, batch_size)]
        #: model_kwargs checked against all n images once; each block gets its rows of them
        self.kwargs = check_model_kwargs(bk, model_kwargs, n, bk.model_device(model))
        self.first = self._prepare(0, self.blocks[0][1])
        self.found = find_layer(self.first, layer)
        self.size = image_size(self.first)[1]
        self.tokens_on = grid_size(self.first)  # the image a token layer's grid follows
        self.chw = bk.cam.channel_first(model)
        self.grid = (0, 0)  # the layer's (h, w), once pass 1 has run

    def _prepare(self, r0: int, r1: int) -> Inputs:
        kw = self.kwargs.rows(np.arange(r0, r1)) if self.kwargs else None
        return prepare(self.bk, self.model, [self.x[r0:r1]], ["x_rows"], model_kwargs=kw)

    def inputs(self, r0: int, r1: int) -> Inputs:
        """The prepared images ``r0:r1`` (a block)."""
        return self.first if r0 == 0 else self._prepare(r0, r1)

    def host(self, t: Any) -> np.ndarray:
        """A layer tensor on the host, channel-first."""
        return to_chw(np.asarray(self.bk.to_numpy(t), dtype=np.float64), self.chw, None, self.tokens_on)

    def activations(self, r0: int, r1: int) -> np.ndarray:
        """The layer's activations of a block (forward only)."""
        facet = self.bk.cam

        def step(rows: list[Any], _tg: Any, kw: Any) -> np.ndarray:
            return self.host(facet.activations(self.model, self.found, rows, 0, kw))

        return chunked(self.inputs(r0, r1), None, self.batch_size, step, forward_only=True)  # type: ignore[no-any-return]

    def gradients(self, r0: int, r1: int, klass: int) -> tuple[np.ndarray, np.ndarray]:
        """A block's activations and the gradient of class ``klass``'s score with respect to them."""
        facet = self.bk.cam

        def step(rows: list[Any], tg: Any, kw: Any) -> tuple[np.ndarray, np.ndarray]:
            a, da, _ = facet.grad_step(Rows(self.model, rows, tg, 0, kw), self.found)
            return self.host(a), self.host(da)

        targets = self.bk.index(np.full(r1 - r0, klass), self.bk.model_device(self.model))
        return chunked(self.inputs(r0, r1), targets, self.batch_size, step)  # type: ignore[no-any-return]


def _rows(a: np.ndarray) -> np.ndarray:
    """(b, ch, h, w) activations as (b * h * w, ch) rows, positions in row-major order."""
    return a.transpose(0, 2, 3, 1).reshape(-1, a.shape[1])


def _fit_rows(run: _Layer, rank: int, max_rows: int, seed: int, negative: str) -> tuple[np.ndarray, float]:
    """Pass 1, forward only: the (rows, ch) float32 rows NMF is fitted on (all of them, or a
    seeded uniform sample of ``max_rows``), negatives set to 0, and the fraction of the layer's
    values that were negative; the layer is refused when ``rank`` exceeds its channels, when
    ``negative="raise"`` and it has negative values, or when it is all zero."""
    name, n = run.found.name, len(run.x)
    parts: list[np.ndarray] = []
    picked: np.ndarray | None = None
    negatives = values = hw = 0
    for r0, r1 in run.blocks:
        a = run.activations(r0, r1)
        if picked is None:
            ch, hw = int(a.shape[1]), int(a.shape[2] * a.shape[3])
            run.grid = (int(a.shape[2]), int(a.shape[3]))
            if rank > ch:
                raise XaikitValueError(
                    f"rank must be an int in [1, {ch}] (the channels of layer {name!r}); got {rank}"
                )
            total, rng = n * hw, np.random.default_rng(seed)
            picked = (
                np.sort(rng.choice(total, max_rows, replace=False)) if total > max_rows else np.arange(total)
            )
        rows = _rows(a)
        negatives += int(np.count_nonzero(rows < 0))
        values += rows.size
        lo, hi = np.searchsorted(picked, [r0 * hw, r1 * hw])
        parts.append(np.maximum(rows[picked[lo:hi] - r0 * hw], 0.0).astype(np.float32))
    if negatives and negative == "raise":
        raise XaikitValueError(
            f"layer {name!r} has negative activations ({negatives / values:.1%} of its values) and "
            "NMF needs non-negative ones: pass the layer after its ReLU (or negative='clip', which "
            "sets them to 0 as a ReLU would)"
        )
    if negatives:
        logger.info(
            "concepts: %.1f%% of layer %r's values were negative, set to 0", 100 * negatives / values, name
        )
    data = np.concatenate(parts)
    if not np.any(data > 0):
        raise XaikitValueError(
            f"layer {name!r}'s activations are all zero (after clipping negatives) on these images: "
            "choose another layer (layer=)"
        )
    if len(data) < rank:
        raise XaikitValueError(
            f"rank must be at most the {len(data)} (image, position) rows NMF is fitted on; got "
            f"{rank}: raise max_rows or lower rank"
        )
    return data, negatives / values


def _norms(nmf: Any) -> np.ndarray:
    """The L2 norm of each fitted direction (1 for an all-zero one)."""
    norms = np.linalg.norm(nmf.components_.astype(np.float64), axis=1)
    return np.where(norms == 0, 1.0, norms)  # type: ignore[no-any-return]


def _coefficients(run: _Layer, nmf: Any, klass: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """Pass 2, forward + backward: the coefficients (n, h, w, rank) float32 of every position
    with the directions fixed (on the scale of the unit-norm directions), the Taylor importance
    per image (n, rank), ``sum_p U[i,p,r] <W_r, dA[i,p]>``, and whether every block's
    coefficients converged."""
    norms = _norms(nmf)
    unit = nmf.components_.astype(np.float64) / norms[:, None]
    n, rank = len(run.x), len(norms)
    coeffs = np.empty((n, *run.grid, rank), dtype=np.float32)
    per_image = np.empty((n, rank), dtype=np.float64)
    converged = True
    for r0, r1 in run.blocks:
        a, da = run.gradients(r0, r1, klass)
        m, (h, w) = r1 - r0, run.grid
        u, ok = _transform(nmf, np.maximum(_rows(a), 0.0).astype(np.float32))
        converged = converged and ok
        u = u.astype(np.float64) * norms
        g = _rows(da) @ unit.T  # <W_r, dA[i, p]>
        coeffs[r0:r1] = u.reshape(m, h, w, rank)
        per_image[r0:r1] = (u * g).reshape(m, h * w, rank).sum(axis=1)
    return coeffs, per_image, converged


def _n_classes(inp: Inputs) -> int:
    """The class count of the model's output, from a forward pass of one row."""
    kw = {"model_kwargs": inp.kwargs.rows(np.arange(1))} if inp.kwargs else {}
    one = inp.bk.forward(inp.model, [t[:1] for t in inp.tensors], 0, **kw)
    return int(one.shape[1]) if len(one.shape) == 2 else 1


def _check_indices(indices: Any, n: int) -> np.ndarray:
    """``indices`` as (n,) int64 (``0..n-1`` when None)."""
    if indices is None:
        return np.arange(n, dtype=np.int64)
    ids = np.asarray(indices)
    if ids.ndim != 1 or len(ids) != n or (ids.size and ids.dtype.kind not in "iu"):
        raise XaikitTypeError(
            f"indices must be None or {n} integer dataset indices (one per row of x_rows); "
            f"got {describe(indices)}"
        )
    return ids.astype(np.int64)


def _fit(data: np.ndarray, rank: int, seed: int) -> tuple[Any, float, bool]:
    """NMF of the (rows, ch) non-negative data: the fitted model, the relative Frobenius error
    and whether it converged (scikit-learn's ConvergenceWarning is caught and reported as
    ``converged=False``, not raised)."""
    from sklearn.decomposition import NMF

    nmf = NMF(n_components=rank, init="nndsvda", solver="cd", max_iter=MAX_ITER, tol=TOL, random_state=seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        u = nmf.fit_transform(data)
    converged = not _stopped(caught)
    if not converged:
        logger.info("concepts: NMF stopped at max_iter=%d before converging", MAX_ITER)
    err = float(np.linalg.norm(data - u @ nmf.components_)) / max(float(np.linalg.norm(data)), 1e-30)
    return nmf, err, converged


def _transform(nmf: Any, rows: np.ndarray) -> tuple[np.ndarray, bool]:
    """The coefficients of ``rows`` with the fitted directions fixed, and whether they converged."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        u = nmf.transform(rows)
    return u, not _stopped(caught)


def _stopped(caught: list[warnings.WarningMessage]) -> bool:
    """Whether scikit-learn warned that NMF stopped before converging (other warnings re-raised)."""
    from sklearn.exceptions import ConvergenceWarning

    stopped = False
    for w in caught:
        if issubclass(w.category, ConvergenceWarning):
            stopped = True
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return stopped
