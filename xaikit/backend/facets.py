"""The facets of a backend: what training and evaluation need from a framework.

Each framework implements them in its own package (``backend/torch/train.py``,
``backend/tf/eval.py``, ...); a backend loads a facet the first time it is used
(``get_backend(model).train``), so ``import xaikit`` never loads a framework.

The training facet knows nothing of the loop above it: :class:`xaikit.Network` hands it the
forward ops (objects with ``inputs``, ``outputs`` and ``forward(data, state)``) and the updates
as plain ``(model, loss key)`` pairs.
"""

from __future__ import annotations

import abc
import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from xaikit.backend.rows import Rows
from xaikit.errors import XaikitValueError, describe

T = Any  # a framework tensor

#: one optimizer step: the model whose trainable weights minimize the (mean of the) loss key
Update = tuple[Any, str]

#: LRP: the rules each kind of layer takes, the same on both frameworks (a layer of no kind takes
#: only the plain gradient)
LRP_ALLOWED: dict[str | None, tuple[str, ...]] = {
    "conv": ("epsilon", "zplus", "alpha_beta", "gamma", "zbox", "flat", "wsquare", "norm", "gradient"),
    "dense": ("epsilon", "zplus", "alpha_beta", "gamma", "zbox", "flat", "wsquare", "norm", "gradient"),
    "avgpool": ("norm", "epsilon", "gradient"),
    "maxpool": ("norm", "epsilon", "gradient"),
    "batchnorm": ("pass", "epsilon", "norm", "gradient"),
    "activation": ("pass", "gradient"),
    None: ("gradient",),
}

#: DeepLIFT: ``|x - x0|`` below which a nonlinearity uses its plain derivative instead of the
#: Rescale multiplier ``(f(x) - f(x0)) / (x - x0)`` (captum: 1e-10); such an element's
#: contribution ``(x - x0) * multiplier`` is then below 1e-7 times the slope
DEEPLIFT_EPS = 1e-7
#: DeepLIFT's max rule: values within this fraction of their row's largest ``|value|`` below a
#: window's maximum are tied with it (their difference is float rounding: a constant
#: baseline's activations come out of the kernels a few ulp apart, differently for another
#: chunk size or framework), so that the routing does not depend on the rounding
DEEPLIFT_TIES = 1e-5
#: the most peeling rounds that look for a window's tied values (a window of more tied values,
#: a flat global max, keeps the rest apart by their rounding)
MAX_TIE_ROUNDS = 256

__all__ = [
    "DEEPLIFT_EPS",
    "DEEPLIFT_TIES",
    "MAX_TIE_ROUNDS",
    "CamFacet",
    "CamLayer",
    "EvalFacet",
    "RelevanceFacet",
    "Step",
    "Stepper",
    "TrainFacet",
    "Update",
    "check_baselines",
    "optimizer_factory",
    "redraw",
]


@dataclass
class Step:
    """One network step, as the loop hands it to the backend.

    Attributes:
        ops: forward ops, in order.
        updates: ``(model, loss key)`` pairs (applied only when training).
        batch: the batch, numpy arrays by key.
        mode: ``"train"``, ``"eval"``, ``"test"`` or ``"infer"``.
        needed: the batch keys the ops read.
        models: every model of the network (put in train or inference mode).
    """

    ops: Sequence[Any]
    updates: Sequence[Update]
    batch: dict[str, Any]
    mode: str
    needed: Sequence[str]
    models: Sequence[Any]

    @property
    def training(self) -> bool:
        return self.mode == "train"


class Stepper(abc.ABC):
    """Runs one network step per batch; keeps whatever a framework caches between steps."""

    #: how many times a compiled step was traced (0 for eager frameworks; a test checks it stays 1)
    trace_count: int = 0

    @abc.abstractmethod
    def run_step(self, step: Step) -> dict[str, Any]:
        """Run the ops on a batch and, when training, one optimizer step per update (the
        gradients of every loss are computed first, then applied); returns the keys written by
        the ops, as numpy arrays."""


def optimizer_factory(optimizer_fn: Any, named: dict[str, Any]) -> Any:
    """The factory of a named optimizer (``"adam"``, any case) from a framework's table, or the
    user's callable as it is."""
    if not isinstance(optimizer_fn, str):
        return optimizer_fn
    if optimizer_fn.lower() not in named:
        raise XaikitValueError(
            f"optimizer_fn must be one of {sorted(named)} or a callable; got {optimizer_fn!r}"
        )
    return named[optimizer_fn.lower()]


def redraw(values: Sequence[np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
    """New values for a layer's weight tensors: zero-mean normal with each tensor's standard
    deviation (a constant tensor, e.g. zero biases, takes the layer's largest one; 1 if all are
    constant), drawn in order from ``rng``."""
    spread = max((float(a.std()) if a.size > 1 else 0.0 for a in values), default=0.0)
    out = []
    for a in values:
        std = float(a.std()) if a.size > 1 else 0.0
        std = std if std > 0 else (spread if spread > 0 else 1.0)
        out.append(rng.normal(0.0, std, size=a.shape))
    return out


def check_baselines(inputs: Sequence[Any], baselines: Sequence[Any]) -> None:
    """DeepLIFT's baselines must be one tensor per input, each with its input's shape (else a
    :class:`~xaikit.errors.XaikitValueError` naming both)."""
    if len(baselines) != len(inputs) or any(
        tuple(b.shape) != tuple(x.shape) for x, b in zip(inputs, baselines)
    ):
        raise XaikitValueError(
            "deeplift_step needs one baseline tensor per input with that input's shape; got "
            f"inputs {[tuple(x.shape) for x in inputs]} and baselines {[tuple(b.shape) for b in baselines]}"
        )


class TrainFacet(abc.ABC):
    """Optimizers, learning rates, weights and the step runner of one framework."""

    @abc.abstractmethod
    def is_model(self, obj: Any) -> bool:
        """Whether ``obj`` is a trainable model of this framework."""

    @abc.abstractmethod
    def make_optimizer(self, model: Any, optimizer_fn: Any) -> Any:
        """An optimizer for ``model`` from a name (``"adam"``, ...), a callable, or None."""

    @abc.abstractmethod
    def get_lr(self, model: Any) -> float:
        """The learning rate of ``model.optimizer``."""

    @abc.abstractmethod
    def set_lr(self, model: Any, lr: float) -> None:
        """Set the learning rate of ``model.optimizer``."""

    @abc.abstractmethod
    def get_weights(self, model: Any) -> Any:
        """An exact in-memory copy of the weights (and buffers)."""

    @abc.abstractmethod
    def set_weights(self, model: Any, weights: Any) -> None:
        """Restore weights from :meth:`get_weights`."""

    @abc.abstractmethod
    def save_model(self, model: Any, path: str) -> str:
        """Write the weights to ``path`` (a file, or a folder) atomically; returns the file."""

    @abc.abstractmethod
    def load_model(self, model: Any, path: str) -> None:
        """Load weights written by :meth:`save_model`."""

    @abc.abstractmethod
    def stepper(self) -> Stepper:
        """A new step runner (one per network: compiled steps are cached in it)."""


class EvalFacet(abc.ABC):
    """What ``xaikit.evaluate`` does to a model: walk, snapshot, re-draw, restore."""

    @abc.abstractmethod
    def weighted_layers(self, model: Any) -> list[tuple[str, Any]]:
        """``(name, layer)`` of every layer owning trainable weights, in forward order."""

    @abc.abstractmethod
    def snapshot(self, model: Any) -> list[tuple[Any, Any]]:
        """Exact copies of every weight and buffer, for :meth:`restore`."""

    @abc.abstractmethod
    def restore(self, saved: list[tuple[Any, Any]]) -> None:
        """Write a snapshot back into the same variables, bit for bit."""

    @abc.abstractmethod
    def randomize(self, layer: Any, rng: np.random.Generator) -> list[str]:
        """Re-draw a layer's trainable weights (zero-mean normal, each tensor's std); returns their
        names."""

    @abc.abstractmethod
    def blend(self, x: T, base: T, rank: T, threshold: T, insert: bool) -> T:
        """Rows where positions with ``rank < threshold`` take the baseline (deletion) or the
        input (insertion, the rest being the baseline); exact values, no arithmetic blending."""

    @abc.abstractmethod
    def absorb_shift(self, model: Any, shift: float, run: Any) -> str:
        """Make the model's first layer (past flatten / reshape / dropout layers) absorb a shift
        of every input value by ``shift``: its bias becomes ``b - W m`` (Kindermans et al.'s
        input invariance), in place; returns the layer's name. ``run()`` runs the model once
        (torch finds the first layer called). A first layer that is not a dense or convolution
        layer with a bias, or that pads with zeros, is refused by name. The caller restores the
        weights (:meth:`snapshot` / :meth:`restore`)."""


class CamLayer(NamedTuple):
    """A layer chosen for a class-activation map: its name, the module / layer object, the
    shape of its output without the batch axis (None where Keras does not know a size) and what
    the model returned on the row that found it (None where the search did not keep it): the
    engine reads the class count of given targets off it, so that a CAM call does not run the
    model on one row twice."""

    name: str
    obj: Any
    shape: tuple[int | None, ...]
    probe: Any = None


class CamFacet(abc.ABC):
    """What the class-activation maps of :mod:`xaikit.xai.cam` read from a model: a layer's
    activations and the gradient of the target scores with respect to them, in one fused
    forward+backward per chunk of rows, and guided-backprop input gradients.

    Layers are named as the framework names them (torch: a ``named_modules`` path such as
    ``"layer4.1.conv2"``; Keras: a layer name) or given as the module / layer object. Tensors
    come back in the layer's own layout (the engine moves channels and reshapes tokens). The
    model is left as it was: hooks and swapped activations are removed and no parameter
    gradient is kept, also when a call raises.
    """

    def __init__(self, bk: Any) -> None:
        self.bk = bk

    @abc.abstractmethod
    def resolve(
        self,
        model: Any,
        layer: Any,
        inputs: Sequence[T],
        model_kwargs: dict[str, Any] | None,
        output: int | str = 0,
    ) -> CamLayer:
        """The layer ``layer`` names (a name, an object, or None: the last layer with a spatial
        4-D output; for a model that returns several outputs, the last such layer that
        ``output`` depends on), with its output shape, found by running the model on ``inputs``
        (one row) where the framework needs it; an unknown name is a
        :class:`~xaikit.errors.XaikitValueError`, a wrong type a :class:`~xaikit.errors.XaikitTypeError`."""

    @abc.abstractmethod
    def channel_first(self, model: Any) -> bool:
        """Whether the model's 4-D layer outputs are (B, C, h, w) (else (B, h, w, C))."""

    @abc.abstractmethod
    def grad_step(self, rows: Rows, layer: CamLayer, spread: T | None = None) -> tuple[T, T, T]:
        """One fused forward+backward of a chunk of rows: ``(A, dA, scores)``, the layer's
        activations, the gradient of the sum of the target scores with respect to them (both in
        the layer's layout, float32 for a half-precision model) and the target scores (rows,).
        ``rows.targets=None``: each row's highest score (its predicted class, read off this
        pass). ``rows.target``: a bound target object (:class:`xaikit.targets.Bound`);
        ``rows.targets`` are then each row's sample index and the scores are ``target.scores``
        of the model's raw output.
        ``spread``: int (rows,) the input row each row reads (several targets of one image):
        the layers below the layer run on ``rows.inputs`` once, the layer's output is gathered
        by ``spread`` and the rest of the model runs on the gathered rows, so ``A``, ``dA`` and
        the scores have ``len(spread)`` rows; a model whose rows above the layer do not follow
        the layer's (one that reads the input's batch size or a tensor from below the layer) is
        an error (the caller runs the repeated rows instead)."""

    @abc.abstractmethod
    def activations(
        self,
        model: Any,
        layer: CamLayer,
        inputs: Sequence[T],
        output: int | str = 0,
        model_kwargs: dict[str, Any] | None = None,
    ) -> T:
        """Forward only: the layer's activations (rows, ...) in its layout."""

    @abc.abstractmethod
    def guided_step(self, rows: Rows) -> list[T]:
        """Guided backpropagation (Springenberg et al., 2015) of a chunk of rows: the gradient of
        the target scores with respect to each input, where every ReLU the backend can reach
        passes back only positive gradients (and only where its input was positive). With a
        bound ``rows.target`` object the rows are sample indices, scored by the target."""


class RelevanceFacet:
    """What the rule-based methods of :mod:`xaikit.xai.rules` need from a framework: one
    modified backward pass per chunk of rows (LRP with a composite of rules, DeepLIFT's
    multipliers, guided backprop and deconvnet).

    Rules, composites and the relevance convention are framework-free
    (:mod:`xaikit.xai.rules.spec`): relevance flows as ``R = a * g`` at every tensor ``a``, so
    sums, concatenations, reshapes and max pooling pass it on as LRP-0 does. The model is left
    as it was: every hook, swapped ``call`` and stopped gradient is removed, weights and
    BatchNorm statistics are never written (a merged BatchNorm is computed on the fly), also when
    a call raises.

    One class serves both frameworks: each backend's ``relevance`` module
    (``backend/torch/relevance.py``, ``backend/tf/relevance.py``) provides the three steps as
    functions that take the backend first (``lrp_step(bk, rows, composite)``), and a method here
    calls its backend's function with the same arguments.
    """

    def __init__(self, bk: Any) -> None:
        self.bk = bk

    def _steps(self) -> Any:
        """The backend's ``relevance`` module (imported the first time a step runs)."""
        return importlib.import_module(f"{self.bk.package}.relevance")

    def lrp_step(self, rows: Rows, composite: Any) -> tuple[list[T], T]:
        """LRP of a chunk of rows: ``(relevance per input, target scores (rows,))``. The output
        relevance is the target score (one-hot times the output); each layer gets
        ``composite.rule_for(name, kind, first)`` (a
        :class:`~xaikit.xai.rules.spec.Composite`), with BatchNorm merged when
        ``composite.canonize``. Relevance comes back with each input's shape, in the model's
        layout, float32. With a bound ``rows.target`` object (:class:`xaikit.targets.Bound`),
        ``rows.targets`` are each row's sample index and the starting relevance is the target's
        score of the model's raw output."""
        return self._steps().lrp_step(self.bk, rows, composite)  # type: ignore[no-any-return]

    def deeplift_step(self, rows: Rows, baselines: Sequence[T]) -> tuple[list[T], T, T]:
        """DeepLIFT (Rescale rule) of a chunk of n rows against one baseline row each:
        ``(attributions per input, f(x) target scores (n,), f(baseline) target scores (n,))``;
        the attributions are ``(x - baseline) * multipliers`` and sum to ``f(x) - f(baseline)``
        where every nonlinearity has a rule. ``baselines`` hold each input's n baseline rows
        (the input's shape, see :func:`check_baselines`); ``rows.targets`` are int64 (n,)
        classes. The 2n rows [inputs; baselines] run as one batch, so ``rows.model_kwargs`` are
        those of the 2n rows (a per-sample value given twice, once for each half). With a bound
        ``rows.target`` object (:class:`xaikit.targets.Bound`), ``rows.targets`` are each row's
        sample index: both halves score their sample of the raw output."""
        return self._steps().deeplift_step(self.bk, rows, baselines)  # type: ignore[no-any-return]

    def modified_step(self, rows: Rows, mode: str) -> list[T]:
        """The gradient of the target scores w.r.t. each input with every ReLU's backward
        modified: ``mode="guided"`` (guided backprop: positive gradients, where the input was
        positive) or ``"deconvnet"`` (positive gradients, whatever the input). With a bound
        ``rows.target`` object the rows are sample indices, scored by the target. Another
        ``mode`` is a :class:`~xaikit.errors.XaikitValueError`."""
        if mode not in ("guided", "deconvnet"):
            raise XaikitValueError(f"mode must be 'guided' or 'deconvnet'; got {describe(mode)}")
        return self._steps().modified_step(self.bk, rows, mode)  # type: ignore[no-any-return]


class Attentions(NamedTuple):
    """What :meth:`AttentionFacet.attentions` returns: per block, in call order, the host
    float64 attention probabilities, their gradients (or None) and the block's name where the
    framework gives one (a Keras layer's name; None for a Hugging Face model's ``attentions``
    tuple, whose blocks are named by their index)."""

    atts: list[np.ndarray]
    grads: list[np.ndarray] | None
    names: list[str] | None = None


class AttentionFacet(abc.ABC):
    """What the attention methods of :mod:`xaikit.xai.transformer` read from a vision
    transformer: every block's attention probabilities (B, heads, N, N) for a batch, and, for
    gradient-weighted relevance, their gradients with respect to the target scores, from one
    forward (+ backward) pass. The model is left as it was, also when a call raises."""

    def __init__(self, bk: Any) -> None:
        self.bk = bk

    @abc.abstractmethod
    def attentions(self, rows: Rows, gradients: bool) -> Attentions:
        """Per block, host float64 (B, heads, N, N) attention probabilities and (with
        ``gradients``) the gradient of the summed target scores (class ``rows.targets``, or the
        bound ``rows.target`` object) with respect to them (else None), and the blocks' names
        where the framework has them. The shapes are as the model gave them: the attention
        methods check them (:func:`xaikit.xai.transformer.attention.check_blocks`)."""

    def _host(
        self, atts: Sequence[T], grads: Sequence[T] | None, names: list[str] | None = None
    ) -> Attentions:
        """What :meth:`attentions` returns for the framework's attention tensors and gradients:
        host float64 arrays."""
        host = [self.bk.to_numpy(a).astype(np.float64) for a in atts]
        back = None if grads is None else [self.bk.to_numpy(g).astype(np.float64) for g in grads]
        return Attentions(host, back, names)
