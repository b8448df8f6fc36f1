"""The model-parameter randomization test (Adebayo et al., "Sanity Checks for Saliency Maps",
NeurIPS 2018, https://arxiv.org/abs/1810.03292).

A saliency method that explains the *model* must change when the model's weights are destroyed.
The test re-draws the weights layer by layer — *cascading* from the output layer down (each step
keeps the earlier randomizations), or *independently* (one layer at a time, the rest intact) —
re-explains the same samples for the same target classes after each step, and measures how
similar each map still is to the original one: Spearman rank correlation of the absolute and of
the signed maps, and SSIM of the display masks. Maps that stay similar while the model is
destroyed are edge detectors, not explanations.

How low should the similarity get? Not to 0: the maps of *any* network of the same architecture
share the image's structure (edges, the object's outline), so even two independently randomized
copies of the model give similar maps (Spearman ρ of the absolute maps around 0.8 for a LeNet
on ``shapes``). The test therefore also measures that floor, ``result.baseline``: the similarity
between the maps of two copies of the model with *every* layer re-drawn, from two different seeds.
A fully randomized step whose ρ is near the baseline has lost everything the trained weights
added; one clearly above it still depends on the trained weights.

The model's weights (and buffers / non-trainable variables) are restored bit for bit afterwards,
also when something fails half-way.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xaikit.backend import get_backend
from xaikit.checks import check_choice
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.evaluate._common import (
    check_method_options,
    fixed_object,
    host,
    input_layout,
    pin_scored,
    spatial_shape,
    spearman,
    ssim,
    to_spatial,
)
from xaikit.evaluate._conventions import check_method, public
from xaikit.xai.internal import explain, health, prepare, to_display

__all__ = ["RandomBaseline", "RandomizationResult", "model_layers", "randomization_test"]

ORDERS = ("cascading", "independent")
_BASELINE_COLUMN = "random vs random"


@dataclass
class RandomBaseline:
    """The similarity between the maps of two independently randomized copies of the model.

    Attributes:
        per_sample: a pandas DataFrame (``sample``, ``spearman_abs``, ``spearman``, ``ssim``).
        mean: the means over samples, ``{"spearman_abs": ..., "spearman": ..., "ssim": ...}``.
        seeds: the two seeds of the copies' weights (every layer with weights re-drawn, with the
            same recipe as a randomization step of :func:`randomization_test` with that seed).
        maps: the raw attributions of the two copies.
    """

    per_sample: Any
    mean: dict[str, float]
    seeds: tuple[int, int]
    maps: tuple[np.ndarray, np.ndarray] = field(repr=False)


@dataclass
class RandomizationResult:
    """What :func:`randomization_test` measured.

    Attributes:
        table: a pandas DataFrame, one row per randomization step: ``step``, ``layer`` (the
            layer randomized at that step), ``spearman_abs``, ``spearman``, ``ssim`` (means over
            samples).
        per_sample: the same metrics per sample (long format: ``step``, ``layer``, ``sample``, ...).
        maps: raw attributions, ``{"original": ..., "<layer>": ...}`` in step order.
        targets: (B,) the classes explained at every step.
        order: ``"cascading"`` or ``"independent"``.
        method: the saliency method.
        baseline: the similarity floor, a :class:`RandomBaseline` (None with
            ``random_baseline=False``).
    """

    table: Any
    per_sample: Any
    maps: dict[str, np.ndarray]
    targets: np.ndarray
    order: str
    method: str
    x: np.ndarray = field(repr=False)
    channel_axis: int | None = None
    baseline: RandomBaseline | None = None

    @property
    def caption(self) -> str:
        """How to read the grid: what ρ is, and the baseline's value."""
        text = (
            "ρ: Spearman rank correlation of the absolute map with the original one (1 = same "
            "ranking). It does not fall to 0 for a destroyed model: maps of any network share the "
            "image's edges and outline."
        )
        if self.baseline is not None:
            text += (
                f" Baseline: two independently randomized copies of this model give ρ = "
                f"{self.baseline.mean['spearman_abs']:.2f} between themselves (last column); a fully "
                "randomized step near that value has lost what the trained weights added."
            )
        return text

    def paint_figure(
        self, save_path: str | os.PathLike[str] | None = None, dpi: float = 96, cell_size: float = 1.6
    ) -> Any:
        """Paint :attr:`grid` with :attr:`caption` under it (optionally saving it); returns the figure."""
        from xaikit.viz.caption import paint_with_caption

        return paint_with_caption(self.grid, self.caption, save_path=save_path, dpi=dpi, cell_size=cell_size)

    @property
    def grid(self) -> Any:
        """An :class:`~xaikit.viz.ImgData`: rows = samples; columns = the input, the original
        map and the map after each randomization step, titled with its Spearman (abs) similarity,
        and, with a baseline, the map of a second random copy titled with the baseline ρ."""
        from xaikit.viz import ImgData

        if self.x.ndim != 4 and not (self.x.ndim == 3 and self.channel_axis is None):
            raise XaikitValueError(
                f"the randomization grid needs image inputs (B, H, W[, C]); got inputs of shape {self.x.shape}"
            )
        image = self.x if self.channel_axis is None else np.moveaxis(self.x, self.channel_axis, -1)
        columns: dict[str, Any] = {"input": image}
        titles = {}
        for key, raw in self.maps.items():
            columns[key] = display_maps(raw, self.channel_axis)
        if self.baseline is not None:
            columns[_BASELINE_COLUMN] = display_maps(self.baseline.maps[1], self.channel_axis)
            titles[_BASELINE_COLUMN] = f"2 random copies ρ={self.baseline.mean['spearman_abs']:.2f}"
        rows = {row.layer: row for row in self.table.itertuples()}
        for key in self.maps:
            if key in rows:
                titles[key] = f"{key} ρ={rows[key].spearman_abs:.2f}"
        titles["original"] = f"original ({self.method})"
        maps = [k for k in columns if k != "input"]
        return ImgData(columns, colormap="inferno", vranges=dict.fromkeys(maps, (0.0, 1.0)), titles=titles)

    def __repr__(self) -> str:
        return f"RandomizationResult({self.method}, {self.order}, steps={len(self.table)})\n{self.table}"


@public(old_order=("model", "framework"))
def model_layers(model: Any, *, framework: str | None = None) -> list[str]:
    """The names of the model's layers that own weights, in the model's order (input side first).

    torch: the names of ``named_modules()`` that hold parameters themselves; Keras: the names of
    ``model.layers`` with trainable weights (nested models as ``"outer/inner"``).

    Example:
        >>> import torch
        >>> model_layers(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2)))
        ['0', '2']
    """
    bk = get_backend(model, framework)
    return [name for name, _ in bk.eval.weighted_layers(model)]


def select_layers(available: list[tuple[str, Any]], layers: Any) -> list[tuple[str, Any]]:
    """The ``(name, layer)`` pairs of ``available`` (the model's layers with weights) that
    ``layers`` names (None: all), in the model's order; an error names the layers."""
    names = [n for n, _ in available]
    if not available:
        raise XaikitValueError(
            "the model has no layers with weights to randomize: expected a torch.nn.Module or a Keras "
            "model whose layers hold the weights; a plain function or tf.Module wrapping a model hides "
            "them: pass the model itself (output= picks one of several outputs, model_kwargs= passes "
            "extra forward arguments)"
        )
    if layers is None:
        return list(available)
    if isinstance(layers, str):
        layers = [layers]
    if not isinstance(layers, Sequence) or not all(isinstance(n, str) for n in layers):
        raise XaikitTypeError(f"layers must be None or a list of layer names; got {describe(layers)}")
    unknown = [n for n in layers if n not in names]
    if unknown:
        raise XaikitValueError(
            f"layers {unknown} are not layers with weights of this model; the layers are {names}"
        )
    if len(set(layers)) != len(layers):
        raise XaikitValueError(f"layers must not repeat a name; got {list(layers)}")
    if not layers:
        raise XaikitValueError("layers must name at least one layer (or be None for all)")
    chosen = set(layers)
    return [(n, m) for n, m in available if n in chosen]


@public(old_order=("model", "x", "target", "method", "order", "layers", "seed"))
def randomization_test(
    model: Any,
    x: Any,
    method: str = "vanilla",
    *,
    target: Any = None,
    order: str = "cascading",
    layers: Sequence[str] | None = None,
    random_baseline: bool = True,
    seed: int = 0,
    max_batch: int | str = "auto",
    framework: str | None = None,
    output: int | str = 0,
    model_kwargs: dict[str, Any] | None = None,
    method_options: dict[str, Any] | None = None,
    **options: Any,
) -> RandomizationResult:
    """Randomize the model's weights layer by layer and measure how much the maps change.

    Args:
        model: a torch or Keras model (weights are changed in place during the test and
            restored exactly afterwards, also on errors).
        x: the samples to explain (numpy or tensor, the model's layout).
        method: any method name :func:`xaikit.xai.explain` accepts; it is re-run at every step.
        target: classes to explain (None = the model's predictions on x, pinned for every
            step).
        order: ``"cascading"`` (from the output layer down, randomizations accumulate) or
            ``"independent"`` (each layer alone, the others restored).
        layers: names of the layers to randomize (default: every layer with weights; see
            :func:`model_layers`). They are visited from the output side down.
        random_baseline: also measure the similarity floor (:class:`RandomBaseline`): every layer with
            weights re-drawn with seed ``seed + 1``, then, from the trained weights again, with
            ``seed + 2``, and the two maps compared (two more explanations of ``x``).
        seed: seed of the new weights (the same layer gets the same new weights in both orders)
            and of the method's noise.
        max_batch: rows per fused chunk of the method.
        framework: ``"torch"`` or ``"tf"`` for a plain-function model.
        output: which model output to explain when the model returns several (an index, a dict
            key or an attribute name such as ``"logits"``).
        model_kwargs: extra keyword arguments of the model's forward call (see
            :func:`xaikit.xai.explain`).
        method_options: options of the method (``nsamples``, ``baseline``, ``layer``, ...), as in
            every metric.
        **options: the method's options as keywords, the short form of ``method_options``
            (``randomization_test(model, x, method="occlusion", window=4)``); a key may not be
            given both ways.

    Returns:
        A :class:`RandomizationResult` with ``.table`` (one row per step), ``.baseline``,
        ``.grid`` and ``.paint_figure()`` (the grid with a caption that explains ρ).

    Raises:
        XaikitValueError: unknown ``order`` or layer names (the message lists the layers).

    Example:
        >>> import torch
        >>> torch.manual_seed(0) and None
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 8), torch.nn.ReLU(),
        ...                             torch.nn.Linear(8, 3))
        >>> r = randomization_test(model, torch.rand(2, 1, 4, 4))
        >>> r.table["layer"].tolist()
        ['3', '1']
    """
    import pandas as pd

    if not isinstance(random_baseline, bool):
        raise XaikitTypeError(f"random_baseline must be True or False; got {describe(random_baseline)}")
    check_choice(order, "order", ORDERS)
    method = check_method(method)
    given = check_method_options(method_options)
    both = sorted(set(options) & set(given))
    if both:
        raise XaikitValueError(
            f"options {both} are given both as keywords and in method_options: give each once"
        )
    method_options = check_method_options({**given, **options})
    bk = get_backend(model, framework)
    ops = bk.eval
    chosen = select_layers(ops.weighted_layers(model), layers)
    index = {name: i for i, (name, _) in enumerate(ops.weighted_layers(model))}
    shape, channel_axis = input_layout(x, bk)
    batch = shape[0]
    spatial = spatial_shape(shape, channel_axis)
    x_host = host(x, "x")
    inp = prepare(bk, model, [x], ["x"], model_kwargs=model_kwargs)
    with bk.inference(model):
        _, spec, targets = pin_scored(inp, target, output)
    # a target object: every model (the randomized ones too) explains the region the original
    # model predicts, not one it would re-resolve (ClassRegion(mask=None))
    explained = targets if spec is None else fixed_object(target, spec)

    def run() -> np.ndarray:
        return np.asarray(
            explain(
                model,
                x,
                target=explained,
                method=method,
                framework=framework,
                seed=seed,
                max_batch=max_batch,
                output=output,
                model_kwargs=model_kwargs,
                **method_options,
            )
        )

    def draw(layer_seed: int, name: str) -> np.random.Generator:
        return layer_rng(layer_seed, index[name])

    saved = ops.snapshot(model)
    maps: dict[str, np.ndarray] = {}
    copies: list[np.ndarray] = []
    try:
        maps["original"] = run()
        # the randomized models' maps may well be degenerate: that is not the user's model to warn
        # about (and would use up the one warning of the model object, restored afterwards)
        with health.deferred():
            for name, layer in reversed(chosen):
                if order == "independent":
                    ops.restore(saved)
                ops.randomize(layer, draw(seed, name))
                maps[name] = run()
            if random_baseline:
                for copy_seed in (seed + 1, seed + 2):
                    ops.restore(saved)
                    for name, layer in reversed(ops.weighted_layers(model)):
                        ops.randomize(layer, draw(copy_seed, name))
                    copies.append(run())
    finally:
        ops.restore(saved)

    channels = shape[channel_axis] if channel_axis is not None else None
    table, per_sample = similarity_tables(maps, spatial, batch, channels, channel_axis)
    floor = None
    if random_baseline:
        copy_a, copy_b = copies
        sims = {
            "spearman_abs": spearman(
                to_spatial(copy_a, spatial, batch, channels=channels),
                to_spatial(copy_b, spatial, batch, channels=channels),
            ),
            "spearman": spearman(
                to_spatial(copy_a, spatial, batch, channels=channels, absolute=False),
                to_spatial(copy_b, spatial, batch, channels=channels, absolute=False),
            ),
            "ssim": ssim(display_maps(copy_a, channel_axis), display_maps(copy_b, channel_axis)),
        }
        floor = RandomBaseline(
            pd.DataFrame({"sample": np.arange(batch), **sims}),
            {k: float(np.mean(v)) if np.all(np.isfinite(v)) else float("nan") for k, v in sims.items()},
            (seed + 1, seed + 2),
            (copy_a, copy_b),
        )
    return RandomizationResult(table, per_sample, maps, targets, order, method, x_host, channel_axis, floor)


def layer_rng(seed: int, position: int) -> np.random.Generator:
    """The generator of the new weights of the layer at ``position`` in :func:`model_layers`'s
    order, for a randomization with ``seed``: the same layer gets the same new weights whatever
    the order of the steps."""
    return np.random.default_rng([int(seed) % (2**63), int(position)])


def similarity_tables(
    maps: dict[str, np.ndarray],
    spatial: tuple[int, ...],
    batch: int,
    channels: int | None,
    channel_axis: int | None,
) -> tuple[Any, Any]:
    """``(table, per_sample)``: the similarity of each map in ``maps`` (after ``"original"``) to
    the original one: Spearman of the absolute and of the signed maps, SSIM of the display
    masks; the table holds the means over samples, one row per step."""
    import pandas as pd

    orig_abs = to_spatial(maps["original"], spatial, batch, channels=channels)
    orig_sig = to_spatial(maps["original"], spatial, batch, channels=channels, absolute=False)
    orig_disp = display_maps(maps["original"], channel_axis)
    rows, samples = [], []
    for step, name in enumerate([n for n in maps if n != "original"], start=1):
        a = to_spatial(maps[name], spatial, batch, channels=channels)
        s = to_spatial(maps[name], spatial, batch, channels=channels, absolute=False)
        rho_abs = spearman(orig_abs, a)
        rho = spearman(orig_sig, s)
        sim = ssim(orig_disp, display_maps(maps[name], channel_axis))
        rows.append(
            {
                "step": step,
                "layer": name,
                "spearman_abs": float(rho_abs.mean()),
                "spearman": float(rho.mean()),
                "ssim": float(sim.mean()) if np.all(np.isfinite(sim)) else float("nan"),
            }
        )
        for b in range(batch):
            samples.append(
                {
                    "step": step,
                    "layer": name,
                    "sample": b,
                    "spearman_abs": rho_abs[b],
                    "spearman": rho[b],
                    "ssim": sim[b],
                }
            )
    table = pd.DataFrame(rows, columns=["step", "layer", "spearman_abs", "spearman", "ssim"])
    per_sample = pd.DataFrame(
        samples, columns=["step", "layer", "sample", "spearman_abs", "spearman", "ssim"]
    )
    return table, per_sample


def display_maps(raw: np.ndarray, channel_axis: int | None) -> np.ndarray:
    """Display maps (B, H, W) in [0, 1]; a map with one axis fewer than its input (a CAM or RISE
    map, (B, H, W) for a (B, C, H, W) input) has no channel axis to sum."""
    if raw.ndim == 3:
        channel_axis = None
    disp = to_display(raw, channel_axis)
    if channel_axis is not None:
        disp = np.take(disp, 0, axis=channel_axis)
    return disp.astype(np.float64)
