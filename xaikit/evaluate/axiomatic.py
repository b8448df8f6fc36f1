"""Axiomatic checks: does the explanation keep a property every good explanation should have?

* :func:`non_sensitivity` — Nguyen & Martinez, "On quantitative aspects of model
  interpretability" (2020, https://arxiv.org/abs/2007.07584): the features with zero attribution
  should be exactly those the model does not depend on. Counts the features where the two
  disagree (lower is better).
* :func:`input_invariance` — Kindermans et al., "The (un)reliability of saliency methods"
  (2017, https://arxiv.org/abs/1711.00867): shift every input value by a constant and let the
  first layer's bias absorb it, so the model computes the same function of the same content;
  is the explanation unchanged?

Every perturbed row goes through the chunked forward passes of
:func:`xaikit.xai.internal.forward_scores`; the model is left unchanged (input invariance
restores the shifted bias bit for bit, also on errors).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xaikit.backend import T, get_backend
from xaikit.checks import check_int, check_number
from xaikit.errors import XaikitValueError
from xaikit.evaluate._common import check_bool, check_method_options, fixed_object, input_layout, pin_scored
from xaikit.evaluate._conventions import check_method, public
from xaikit.evaluate._options import RunOptions, RunSettings, Unpack
from xaikit.evaluate.complexity import _normalized
from xaikit.evaluate.faithfulness import _chunk_rows, _PlainMean, _score_rows, _spatial_map, _start
from xaikit.xai.internal import (
    FIXED_BASELINES,
    check_baseline,
    forward_scores,
    prepare,
)

__all__ = ["InputInvarianceResult", "NonSensitivityResult", "input_invariance", "non_sensitivity"]

#: the baselines of :func:`non_sensitivity`: the fixed ones and ``"uniform"`` (seeded draws)
NS_BASELINES = (*FIXED_BASELINES, "uniform")


# ---- non-sensitivity ----------------------------------------------------------------------------
@dataclass
class NonSensitivityResult(_PlainMean):
    """Non-sensitivity of each sample's attribution (lower is better; 0: the zero-attribution
    features are exactly those the model does not depend on).

    Attributes:
        scores: (B,) the violations, ``missed + spurious``.
        missed: (B,) features with zero attribution whose perturbation changes the output.
        spurious: (B,) features with non-zero attribution whose perturbation changes nothing.
        zero: (B, n) which features (pixels, row-major) have zero attribution.
        changed: (B, n) which features change the output when perturbed (with their group).
        deltas: (B, n) ``|f(x) - f(x with the feature's group set to the baseline)|``.
        targets: (B,) the class whose score is used (-1 per sample for a target object: it names no class).
        chunks: rows of each forward pass.
    """

    scores: np.ndarray
    missed: np.ndarray
    spurious: np.ndarray
    zero: np.ndarray
    changed: np.ndarray
    deltas: np.ndarray
    targets: np.ndarray
    chunks: list[int] = field(default_factory=list)


def feature_groups(zero: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Groups of ``size`` features perturbed together, each within one class (zero attribution
    or not), in feature order: ``(group of each feature (B, n), groups per sample (B,))``.

    Example:
        >>> groups, counts = feature_groups(np.array([[True, False, True, True, False]]), 2)
        >>> groups.tolist(), counts.tolist()  # zeros 0, 2 | 3; non-zeros 1, 4
        ([[0, 2, 0, 1, 2]], [3])
    """
    batch, n = zero.shape
    groups = np.empty((batch, n), dtype=np.int64)
    counts = np.empty(batch, dtype=np.int64)
    for b in range(batch):
        first = np.flatnonzero(zero[b])
        second = np.flatnonzero(~zero[b])
        head = -(-len(first) // size)
        groups[b, first] = np.arange(len(first)) // size
        groups[b, second] = head + np.arange(len(second)) // size
        counts[b] = head + -(-len(second) // size)
    return groups, counts


@public()
def non_sensitivity(
    model: Any,
    x: Any,
    saliency: Any,
    *,
    target: Any = None,
    eps: float = 1e-5,
    output_eps: float | None = None,
    features_in_step: int = 1,
    baseline: Any = "black",
    normalize: bool = True,
    **run: Unpack[RunOptions],
) -> NonSensitivityResult:
    r"""Non-sensitivity (Nguyen & Martinez, 2020): do zero attributions mark exactly the features
    the model ignores?

    With :math:`Z_a` the features (pixels) whose attribution magnitude is below ``eps`` and
    :math:`Z_f` those whose perturbation (set to the baseline) leaves the target score within
    ``output_eps``, the score is the size of their symmetric difference,

    .. math:: \mathrm{NS} = |Z_a \,\triangle\, Z_f|
              = \underbrace{|Z_a \setminus Z_f|}_{\texttt{missed}}
              + \underbrace{|Z_f \setminus Z_a|}_{\texttt{spurious}},

    the features credited with nothing that the model uses, plus those credited that it does
    not use. Each feature is perturbed on its own (the paper's definition); with
    ``features_in_step = k`` the features are perturbed k at a time, each group within one class
    (zero attribution or not, in pixel order), and a group's change counts for all its features
    (a cheaper approximation). All ``(groups + 1) x B`` rows are scored in chunked forward passes.

    Quantus 0.6's ``NonSensitivity`` with ``features_in_step=1`` is this score on the same
    features (it treats every channel value as a feature: they coincide on one-channel images),
    except that it divides the maps by the largest magnitude of the whole batch (here: each
    map by its own) and scores the softmax of the output by default (``softmax=True``; here the
    output as the model returns it). With ``features_in_step > 1`` it perturbs runs of consecutive features that
    mix both classes and compares one change per group with every feature, which fails (shape
    error) or, when one group holds every feature, blames each zero-attribution feature for any
    change of the whole image (see the docs' known-answer case; fixed on Quantus's main branch).

    Args:
        model: a torch or Keras/TF model returning (batch, classes).
        x: the input batch (numpy or tensor) of images, in the model's layout.
        saliency: one map per sample (channels summed by magnitude) or a method name.
        target: class per sample (or one for all); None = the model's prediction on x.
        eps: the attribution magnitude below which a feature counts as zero (after dividing by
            the map's largest magnitude with ``normalize``); Quantus's default 1e-5.
        output_eps: the target score change below which a feature counts as ignored by the
            model (None: ``eps``, as Quantus).
        features_in_step: features perturbed together (1: each alone, the paper's definition).
        baseline: what a perturbed pixel becomes: ``"black"`` (the sample's minimum, default as
            Quantus), ``"zeros"``, ``"mean"``, ``"blur"``, ``"uniform"`` (values drawn from
            U[0, 1) per input value from ``seed``), or an array broadcastable to x of explicit
            replacement values (e.g. Quantus's uniform draws).
        normalize: divide each map by its largest magnitude before comparing with ``eps``.
        **run: the shared run options (seed, max_batch, framework, output, model_kwargs,
            method_options), see :class:`~xaikit.evaluate.RunOptions`.

    Returns:
        A :class:`NonSensitivityResult`; lower is better.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 2, bias=False))
        >>> with torch.no_grad():
        ...     _ = model[1].weight.copy_(torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]]))
        >>> x = torch.ones(1, 1, 2, 2)
        >>> a = torch.tensor([[[0.0, 1.0], [1.0, 0.0]]])  # credits pixels 1 and 2; the model uses 0 and 1
        >>> r = non_sensitivity(model, x, a, target=0, baseline="zeros")
        >>> r.scores.tolist(), r.missed.tolist(), r.spurious.tolist()
        ([2.0], [1.0], [1.0])
    """
    eps = check_number(eps, "eps", 0.0)
    output_eps = eps if output_eps is None else check_number(output_eps, "output_eps", 0.0)
    step = check_int(features_in_step, "features_in_step", 1)
    normalize = check_bool(normalize, "normalize")
    check_baseline(baseline, NS_BASELINES)
    settings = RunSettings.of(run)
    job = _start(model, x, saliency, target, settings)
    batch, bk = job.batch, job.bk
    mag = _normalized(_spatial_map(job, absolute=True).reshape(batch, -1), normalize)
    zero = mag < eps
    n = zero.shape[1]
    groups, counts = feature_groups(zero, step)
    rounds = int(counts.max())
    if isinstance(baseline, str) and baseline == "uniform":
        base_t = job.upload(np.random.default_rng(settings.seed).uniform(0.0, 1.0, size=job.shape))
    else:  # an array baseline is read to the host as every metric reads it (a device tensor too)
        base_t = job.baseline_tensor(baseline)
    total = (rounds + 1) * batch  # row r: sample r % B; round r // B - 1 perturbs group (r // B - 1)
    sizes: list[int] = []

    def build(r0: int, r1: int, idx: T) -> T:
        r = np.arange(r0, r1)
        sample, group = r % batch, r // batch - 1  # group -1: the clean row
        keep = (groups[sample] != group[:, None]).astype(np.float32).reshape((r1 - r0,) + job.spatial)
        return job.keep_rows(bk.gather(job.xt, idx), bk.gather(base_t, idx), keep)

    flat, classes = _score_rows(job, model, target, settings.output, total, build, sizes)
    per_group = np.abs(flat[batch:].reshape(max(rounds, 0), batch).T - flat[:batch, None])  # (B, rounds)
    deltas = np.take_along_axis(per_group, groups, axis=1) if n else np.zeros((batch, 0))
    changed = ~(deltas < output_eps)
    missed = (zero & changed).sum(axis=1).astype(np.float64)
    spurious = (~zero & ~changed).sum(axis=1).astype(np.float64)
    return NonSensitivityResult(
        missed + spurious,
        missed,
        spurious,
        zero,
        changed,
        deltas,
        classes,
        sizes,
    )


# ---- input invariance ---------------------------------------------------------------------------
@dataclass
class InputInvarianceResult(_PlainMean):
    """Input invariance of each sample's explanation (higher is better: 1 where the explanation
    of the shifted input on the compensated model equals the original one).

    Attributes:
        scores: (B,) 1.0 where :attr:`invariant`, else 0.0.
        invariant: (B,) whether every value of the two maps agrees within ``atol + rtol * |a'|``.
        max_abs: (B,) the largest absolute difference between the two maps.
        output_diff: (B,) ``|f(x) - f'(x + shift)|`` of the target score: the premise, rounding only.
        layer: the first layer whose bias absorbed the shift.
        shift: the constant added to every input value.
        targets: (B,) the classes explained.
    """

    scores: np.ndarray
    invariant: np.ndarray
    max_abs: np.ndarray
    output_diff: np.ndarray
    layer: str
    shift: float
    targets: np.ndarray


#: the largest relative difference of the target scores of ``f(x)`` and ``f'(x + shift)`` that
#: is float rounding; above it the model is refused (its first layer does not see the raw input)
_PREMISE_RTOL = 1e-3


def _target_scores(
    bk: Any, model: Any, inp: Any, targets: T, settings: RunSettings, spec: Any = None
) -> np.ndarray:
    """(B,) the target scores of the prepared input, in chunked forward passes."""
    xt = inp.tensors[0]
    batch = int(xt.shape[0])
    device = getattr(xt, "device", None)

    def rows_fn(r0: int, r1: int) -> tuple[list[T], T]:
        idx = bk.index(np.arange(r0, r1), device)
        return [bk.gather(xt, idx)], bk.gather(targets, idx)

    flat = forward_scores(
        bk,
        model,
        rows_fn,
        batch,
        _chunk_rows(bk, device, int(np.prod(xt.shape[1:])), settings.max_batch, batch),
        settings.output,
        model_kwargs=inp.kwargs,
        batch=batch,
        target=spec,
    )
    return bk.to_numpy(flat).astype(np.float64)


@public()
def input_invariance(
    model: Any,
    x: Any,
    method: Any,
    *,
    target: Any = None,
    shift: float = -1.0,
    atol: float = 1e-4,
    rtol: float = 1e-5,
    **run: Unpack[RunOptions],
) -> InputInvarianceResult:
    r"""Input invariance (Kindermans et al., 2017): is the explanation blind to a constant input
    shift that the model itself absorbs?

    Every input value is shifted, :math:`x_2 = x + m`, and the model's first layer (a dense or
    convolution layer with a bias, past flatten / reshape / dropout layers) gets the bias
    :math:`b_2 = b - W m`, so that :math:`f_2(x_2) = f(x)` for every x: the two models are the
    same function of the same content. An input-invariant method explains ``f`` at ``x`` and
    :math:`f_2` at :math:`x_2` alike. Vanilla gradients are invariant (the two networks have
    the same gradients); input x gradient is not (it multiplies by the shifted input), nor is
    integrated gradients with a zero baseline. The maps are compared value by value:
    invariant where :math:`|a - a_2| \le \texttt{atol} + \texttt{rtol}\,|a_2|` everywhere
    (``numpy.isclose``, as Quantus).

    The method runs twice (on ``x``, then on :math:`x_2` with the shifted bias: another model,
    so it cannot share a stacked call); the same seed draws the same noise for both. The bias is
    restored bit for bit afterwards, also on errors. The target scores of both are checked to
    agree (the premise); a model whose first layer does not see the raw input is refused.

    Quantus 0.6's ``InputInvariance`` (``input_shift=-1``) compares the given maps with those of
    a deep copy whose first conv layer's bias is ``2 b - min(layer(m))``: a first layer that
    pads with zeros sees less of the shift at the border, where that bias does not absorb it
    (the models then differ, and the answer is meaningless); here such a layer is refused.
    Models whose first layer does not pad, such as Quantus's LeNet, give the same answer.

    Args:
        model: a torch ``nn.Module`` or Keras model returning (batch, classes).
        x: the input batch (numpy or tensor), in the model's layout.
        method: the explanation method's name (it is run on both models).
        target: class per sample (or one for all); None = the model's prediction on x (pinned:
            the same classes are explained on both).
        shift: the constant added to every input value (Quantus's ``input_shift``, -1).
        atol: absolute tolerance of the map comparison (Quantus: 1e-4).
        rtol: relative tolerance of the map comparison (numpy's and Quantus's 1e-5).
        **run: the shared run options (seed, max_batch, framework, output, model_kwargs,
            method_options), see :class:`~xaikit.evaluate.RunOptions`.

    Returns:
        An :class:`InputInvarianceResult`: ``.scores`` (B,) 1.0 for invariant samples,
        ``.max_abs`` (B,) the largest map difference.

    Example:
        >>> import torch
        >>> torch.manual_seed(0) and None
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 8), torch.nn.ReLU(),
        ...                             torch.nn.Linear(8, 2))
        >>> x = torch.rand(3, 1, 4, 4)
        >>> input_invariance(model, x, "vanilla").invariant.tolist()
        [True, True, True]
        >>> input_invariance(model, x, "input_x_gradient").invariant.tolist()
        [False, False, False]
    """
    name = check_method(method)
    shift = check_number(shift, "shift")
    atol = check_number(atol, "atol", 0.0)
    rtol = check_number(rtol, "rtol", 0.0)
    settings = RunSettings.of(run)
    options = check_method_options(settings.method_options)
    bk = get_backend(model, settings.framework)
    input_layout(x, bk)  # a clear error for a wrong batch
    from xaikit.xai import explain

    shifted_x = x + shift
    inp = prepare(bk, model, [x], ["x"], model_kwargs=settings.model_kwargs)
    shifted_inp = prepare(bk, model, [shifted_x], ["x"], model_kwargs=settings.model_kwargs)
    with bk.inference(model):
        targets, spec, classes = pin_scored(inp, target, settings.output)
        before = _target_scores(bk, model, inp, targets, settings, spec)
    explained = classes if spec is None else fixed_object(target, spec)

    def explain_on(data: Any) -> np.ndarray:
        maps = explain(
            model, data, target=explained, method=name, framework=settings.framework, output=settings.output,
            model_kwargs=settings.model_kwargs, seed=settings.seed, max_batch=settings.max_batch, **options,
        )  # fmt: skip
        return np.asarray(bk.to_numpy(maps) if not isinstance(maps, np.ndarray) else maps, dtype=np.float64)

    maps = explain_on(x)
    n = len(maps)
    kw = {"model_kwargs": inp.kwargs.span(0, n, n) if inp.kwargs else None}
    saved = bk.eval.snapshot(model)
    try:
        with bk.inference(model):
            layer = bk.eval.absorb_shift(
                model,
                shift,
                lambda: (
                    bk.outputs(model, list(inp.tensors), **kw)  # a target object reads any output
                    if spec is not None
                    else bk.forward(model, inp.tensors, settings.output, **kw)
                ),
            )
            after = _target_scores(bk, model, shifted_inp, targets, settings, spec)
        output_diff = np.abs(after - before)
        if np.any(output_diff > _PREMISE_RTOL * (1.0 + np.abs(before))):
            worst = int(np.argmax(output_diff))
            raise XaikitValueError(
                f"input_invariance: after shifting the input by {shift} and the bias of the first layer "
                f"{layer!r}, the model's target score of sample {worst} moved from {before[worst]:.6g} to "
                f"{after[worst]:.6g}: the layer does not see the raw input (the model rescales or "
                "normalizes it first?), so the shifted model is not the same function; pass a model whose "
                "first layer takes the input as it is"
            )
        shifted = explain_on(shifted_x)
    finally:
        bk.eval.restore(saved)
    if shifted.shape != maps.shape:  # pragma: no cover - the same method on the same shapes
        raise XaikitValueError(
            f"the maps of the shifted input have shape {shifted.shape}; expected {maps.shape}"
        )
    diff = np.abs(maps - shifted).reshape(len(maps), -1)
    close = diff <= atol + rtol * np.abs(shifted).reshape(len(maps), -1)
    invariant = close.all(axis=1)
    return InputInvarianceResult(
        invariant.astype(np.float64),
        invariant,
        diff.max(axis=1, initial=0.0),
        output_diff,
        layer,
        shift,
        classes,
    )
