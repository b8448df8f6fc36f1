"""The backend protocol: one object per framework, reached with
:func:`xaikit.backend.get_backend`, that holds everything xaikit does with that framework.

Its core (this class) is the few tensor operations and the one gradient primitive that the
saliency engine (``xaikit.xai``) is written against. The rest comes in lazily loaded facets,
each one file of the framework's package (``backend/torch/``, ``backend/tf/``):

* ``bk.train``: optimizers, weights I/O and the training step of :class:`xaikit.Network`
  (``train.py``);
* ``bk.eval``: weight snapshots, re-drawing a layer, masked blends for ``xaikit.evaluate``
  (``eval.py``), over the layer walks of ``layers.py``;
* ``bk.inspector(model)``: hooks and on-device statistics for ``xaikit.inspect``
  (``inspect.py``);
* ``bk.cam``: a layer's activations and the target score's gradient with respect to them, in
  one fused forward+backward, for the class-activation maps of ``xaikit.xai.cam`` (``cam.py``);
* ``bk.seed(n)``, ``bk.limit_threads(n)``, ``bk.model_layout(model)``.

The engine never imports a framework itself; it receives a backend and works on that
framework's tensors, on the model's device, until the very end.

Conventions:

* ``T`` below is a framework tensor (``torch.Tensor`` or ``tf.Tensor``).
* Row-indexed tensors have the row (batch) axis first.
* Integer index tensors come from :meth:`Backend.index`.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import importlib
import random
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from xaikit.backend.rows import Rows
from xaikit.layout import ModelLayout

if TYPE_CHECKING:
    from xaikit.backend.facets import AttentionFacet, CamFacet, EvalFacet, RelevanceFacet, TrainFacet
    from xaikit.backend.inspector import Inspector

T = Any  # a framework tensor; kept loose so that no framework is imported for typing

#: compute dtypes of half-precision models: their rows, gradients and accumulators stay float32
#: (the inputs are cast to the model's dtype inside the step)
HALF_DTYPES = ("float16", "bfloat16")

#: Loss scaling of a float16 model's input gradients (the backward pass runs in float16, whose
#: smallest normal value is 6.1e-5: smaller gradients lose bits, and below 6e-8 they become 0).
#: When a row's largest input gradient is below :data:`F16_GRAD_GOAL`, the backward pass is run
#: again with that row's score multiplied by a power of two, ``2**e`` with ``e`` at most
#: :data:`F16_SCALE_MAX_EXP`, that brings it to about the goal, and divided by it afterwards
#: (exact in float32). The goal leaves 2**15 of headroom to float16's largest value (65504) for
#: the gradients inside the model; the cap keeps the scaled score's own gradient, which enters
#: the float16 graph at the output, below 65504. A row whose scaled gradients are not finite
#: keeps its unscaled ones. bfloat16 has float32's exponent range and is not scaled.
F16_GRAD_GOAL = 1.0
F16_SCALE_MAX_EXP = 14


def working_dtype(compute_dtype: str) -> str:
    """The dtype explanation rows and accumulators are held in for a model computing in
    ``compute_dtype``: float32 for a half-precision model, else the model's own.

    Example:
        >>> working_dtype("bfloat16"), working_dtype("float64")
        ('float32', 'float64')
    """
    return "float32" if compute_dtype in HALF_DTYPES else compute_dtype


class Backend(abc.ABC):
    """One deep-learning framework, seen through the operations xaikit needs."""

    #: short name, ``"torch"`` or ``"tf"``
    name: str = ""
    #: the framework's conventional image layout: True for (B, C, H, W)
    channel_first: bool = False
    #: the package holding this framework's facet files (``train.py``, ``eval.py``, ...)
    package: str = ""

    # ---- facets (each imported the first time it is used) -------------------------------------
    def _facet_module(self, name: str) -> Any:
        return importlib.import_module(f"{self.package}.{name}")

    @functools.cached_property
    def train(self) -> TrainFacet:
        """Optimizers, weights I/O and the training step (see :class:`~xaikit.backend.facets.TrainFacet`)."""
        return self._facet_module("train").Train()  # type: ignore[no-any-return]

    @functools.cached_property
    def eval(self) -> EvalFacet:
        """Weight snapshots, layer re-drawing and masked blends (:class:`~xaikit.backend.facets.EvalFacet`)."""
        return self._facet_module("eval").Eval()  # type: ignore[no-any-return]

    @functools.cached_property
    def cam(self) -> CamFacet:
        """A layer's activations and their gradients (:class:`~xaikit.backend.facets.CamFacet`)."""
        return self._facet_module("cam").Cam(self)  # type: ignore[no-any-return]

    @functools.cached_property
    def relevance(self) -> RelevanceFacet:
        """LRP, DeepLIFT and modified-ReLU backward passes (:class:`~xaikit.backend.facets.RelevanceFacet`)."""
        from xaikit.backend.facets import RelevanceFacet

        return RelevanceFacet(self)

    @functools.cached_property
    def attention(self) -> AttentionFacet:
        """A transformer's attention probabilities and their gradients (:class:`~xaikit.backend.facets.AttentionFacet`)."""
        return self._facet_module("attention").Attention(self)  # type: ignore[no-any-return]

    def inspector(self, model: Any, root_name: str = "model") -> Inspector:
        """A hookable view of ``model`` for :mod:`xaikit.inspect` (see :class:`~xaikit.backend.inspector.Inspector`)."""
        return self._facet_module("inspect").inspector(model, root_name)  # type: ignore[no-any-return]

    def seed(self, seed: int) -> None:
        """Seed Python's, numpy's and this framework's global random state from ``seed``."""
        random.seed(seed)
        np.random.seed(seed % (2**32))  # noqa: NPY002 (user code may use the global generator)
        self._seed_framework(int(seed))

    @abc.abstractmethod
    def _seed_framework(self, seed: int) -> None:
        """Seed the framework's own global generator."""

    @abc.abstractmethod
    def limit_threads(self, threads: int) -> None:
        """Use at most ``threads`` CPU threads for this framework's kernels (call before it starts work)."""

    @abc.abstractmethod
    def model_layout(self, model: Any) -> ModelLayout:
        """Which image layout the model takes: channel-first or -last, and how many channels
        its first convolution reads (None when it has none or it cannot be told)."""

    def input_shapes(self, model: Any) -> list[tuple[int | None, ...]] | None:
        """The input shapes the model declares (None for a free size), one per input, or None
        when it declares none (for error messages)."""
        return None

    def error_text(self, exc: BaseException) -> str:
        """The part of an exception's message that says what went wrong, for xaikit's own
        messages (a framework whose messages carry tracebacks or array dumps leaves them out;
        by default the whole message)."""
        return str(exc).strip()

    # ---- ownership and placement -------------------------------------------------------------
    @abc.abstractmethod
    def owns(self, obj: Any) -> bool:
        """Whether ``obj`` is a tensor, variable or model of this framework."""

    @abc.abstractmethod
    def is_tensor(self, obj: Any) -> bool:
        """Whether ``obj`` is a tensor of this framework."""

    @abc.abstractmethod
    def model_device(self, model: Any) -> Any:
        """The device the model's weights live on (where explanation rows are generated)."""

    @abc.abstractmethod
    def model_dtype(self, model: Any) -> str:
        """The floating dtype name the model computes in (``"float32"`` when unknown)."""

    @abc.abstractmethod
    def as_tensor(self, x: Any, device: Any, dtype: str | None = "float32") -> T:
        """Convert numpy / torch / TF values to this framework's tensor on ``device``."""

    def unshared(self, t: T, source: Any) -> T:
        """``t``, or a copy of it where it shares memory with ``source`` (the caller's array it
        was made from): a model that writes its input in place must not reach the caller's
        values. TF tensors are immutable: nothing to copy."""
        return t

    @abc.abstractmethod
    def to_numpy(self, t: T) -> np.ndarray:
        """Copy a tensor to a host numpy array."""

    @abc.abstractmethod
    def dtype_name(self, t: T) -> str:
        """The dtype of a tensor as a short name, e.g. ``"float32"``."""

    def index(self, idx: np.ndarray, device: Any) -> T:
        """An int64 index tensor on ``device`` (copied from the host: for indices that follow a
        pattern, :meth:`arange` builds them on the device)."""
        return self.as_tensor(np.asarray(idx, dtype=np.int64), device, dtype="int64")

    def arange(self, start: int, stop: int, device: Any) -> T:
        """The int64 tensor ``start, ..., stop - 1``, made on ``device`` (no host copy); the
        engine derives row indices from it (``% B``, ``// B``)."""
        return self.index(np.arange(start, stop), device)

    # ---- tensor operations used by the engine -------------------------------------------------
    @abc.abstractmethod
    def gather(self, t: T, idx: T) -> T:
        """Rows ``t[idx]``."""

    @abc.abstractmethod
    def index_add(self, acc: T, idx: T, values: T) -> T:
        """A new tensor ``acc`` with ``values[i]`` added to row ``idx[i]`` (duplicates add up)."""

    @abc.abstractmethod
    def working(self, t: T) -> T:
        """A float16/bfloat16 tensor cast to float32 (differentiable), any other unchanged: a
        half-precision model's output before a target object scores it."""

    @abc.abstractmethod
    def pick(self, t: T, idx: T) -> T:
        """Entry ``idx[r]`` of axis 1 of each row r: ``t[r, idx[r], ...]``, axis 1 dropped
        (differentiable; ``idx`` int64 (rows,))."""

    @abc.abstractmethod
    def matmul(self, a: T, b: T) -> T:
        """Matrix product of two 2-D tensors, or a batched product over the leading axes of
        3-D tensors (a 2-D operand broadcasts over the batch), as :func:`numpy.matmul`."""

    @abc.abstractmethod
    def cat(self, ts: Sequence[T], axis: int = 0) -> T:
        """Concatenate along an axis."""

    @abc.abstractmethod
    def zeros(self, shape: Sequence[int], device: Any, dtype: str = "float32") -> T:
        """A tensor of zeros."""

    @abc.abstractmethod
    def reshape(self, t: T, shape: Sequence[int]) -> T:
        """Reshape."""

    @abc.abstractmethod
    def moveaxis(self, t: T, source: int, destination: int) -> T:
        """The tensor with one axis moved (like :func:`numpy.moveaxis`), contiguous."""

    @abc.abstractmethod
    def squeeze(self, t: T, axis: int | None = None) -> T:
        """Remove size-1 axes (all of them, or only ``axis``)."""

    @abc.abstractmethod
    def mean(self, t: T, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> T:
        """Mean over ``axis`` (all axes when None); integer tensors are averaged as float32."""

    @abc.abstractmethod
    def sum0(self, t: T) -> T:
        """Sum over the first axis."""

    @abc.abstractmethod
    def sample_min(self, t: T) -> T:
        """Per-row minimum over all non-row axes, keeping them as size-1 axes."""

    @abc.abstractmethod
    def sample_max(self, t: T) -> T:
        """Per-row maximum over all non-row axes, keeping them as size-1 axes."""

    @abc.abstractmethod
    def sample_sum(self, t: T) -> T:
        """Per-row sum over all non-row axes, shape (rows,)."""

    @abc.abstractmethod
    def normal(self, seed: int, shape: Sequence[int], device: Any, dtype: str = "float32") -> T:
        """Standard normal values, a pure function of ``seed`` (same seed, same values)."""

    @abc.abstractmethod
    def uniform(self, seed: int, shape: Sequence[int], device: Any, dtype: str = "float32") -> T:
        """Uniform values in [0, 1), a pure function of ``seed``."""

    def seed_list(self, seeds: Sequence[int], device: Any) -> Any:
        """Seeds of :meth:`normal` as an argument of a :meth:`folded_grads` body, which draws
        with :meth:`normal_at` (a backend with compiled graphs makes them a tensor, so that
        other seeds trace nothing new)."""
        return [int(s) for s in seeds]

    def normal_at(self, seeds: Any, j: int, shape: Sequence[int], device: Any, dtype: str = "float32") -> T:
        """:meth:`normal` of seed ``j`` of a :meth:`seed_list`: the same values, inside a
        compiled body too."""
        return self.normal(seeds[j], shape, device, dtype)

    # ---- the model ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def inference(self, model: Any) -> Iterator[None]:
        """Run the model in inference mode inside the block and restore its exact state after."""
        yield

    @contextlib.contextmanager
    def forward_only(self) -> Iterator[None]:
        """Inside the block the framework records nothing for gradients and may skip its
        bookkeeping (torch: ``torch.inference_mode``): for the forward-only methods' masked
        passes, whose tensors never reach a gradient (tensors made inside are for forward use
        only)."""
        yield

    @abc.abstractmethod
    def forward(
        self,
        model: Any,
        inputs: Sequence[T],
        output: int | str = 0,
        model_kwargs: dict[str, Any] | None = None,
    ) -> T:
        """The selected model output for ``inputs``, without gradients, in inference mode: a
        (rows, classes) matrix or a (rows,) score vector (see :func:`~xaikit.backend.outputs.select_output`),
        in float32 for a float16/bfloat16 model. ``model_kwargs`` are passed to the model's call
        by keyword, as they are (the engine has already cut per-sample values to the rows)."""

    @abc.abstractmethod
    def outputs(self, model: Any, inputs: Sequence[T], model_kwargs: dict[str, Any] | None = None) -> Any:
        """What the model returns for ``inputs`` (a tensor, tuple, dict or output object), as it
        returns it, without gradients, in inference mode (target objects read it)."""

    def logits(self, rows: Rows) -> T:
        """:meth:`forward` of the rows (``rows.targets`` and ``rows.target`` are not read): the
        classes a call explains are read off it. A backend with compiled steps may compile it
        for calls that repeat (TensorFlow: from the fourth call with the same input signature)."""
        return self.forward(rows.model, rows.inputs, rows.output, model_kwargs=rows.model_kwargs)

    @abc.abstractmethod
    def scores(self, rows: Rows, xla: bool = False) -> T:
        """Forward only: the target score of each of the rows (``rows.targets``' class, or with
        ``rows.target`` that target object's score of each row's sample), (rows,).
        ``xla``: compile the step with XLA (TensorFlow; ignored elsewhere)."""

    @abc.abstractmethod
    def grad_step(self, rows: Rows, xla: bool = False) -> tuple[T, list[T], T]:
        """The fused forward+backward of one chunk of rows.

        The model computes in its own dtype: inputs are cast to it inside the differentiated
        graph, so a float16/bfloat16 model gets half-precision inputs while the gradients come
        back in the inputs' dtype (float32) and the scores in float32.

        Args:
            rows: the rows (see :class:`Rows`): with a bound ``rows.target``, its
                ``scores(bk, raw, rows.targets)`` are differentiated instead of the class
                scores, and ``rows.targets`` holds the sample of each row.
            xla: compile the step with XLA (TensorFlow; ignored elsewhere).

        Returns:
            ``(scores, grads, outputs)``: the differentiated score of each row (rows,), the
            gradient of the sum of scores with respect to each input (one per input, each with
            its input's shape), and the selected model output (rows, classes) (with
            ``target``: the scores again, (rows,)).
        """

    def folded_grads(
        self,
        model: Any,
        body: Callable[..., Any],
        args: tuple[Any, ...],
        output: int | str = 0,
        xla: bool = False,
    ) -> Any:
        """One whole chunk of the engine's gradient sweep in one call: ``body(self, grad, *args)``,
        where ``grad(rows, targets)`` gives the input gradients of a chunk of rows (those of
        :meth:`grad_step`). ``body`` builds the rows, calls ``grad`` once and folds the
        gradients (:func:`xaikit.xai._engine.sweep.fused_chunk`).

        An eager framework runs it as it is. A framework with compiled graphs compiles the whole
        body into one graph (TensorFlow: one ``tf.function`` per model and body, traced once per
        input signature), so building and folding the rows cost no eager op each; see
        :meth:`fuses_chunks`.
        """
        return self._chunk_runner(model, body, len(args[0]), output, xla)(*args)

    def _chunk_runner(
        self, model: Any, body: Callable[..., Any], n: int, output: Any, xla: bool
    ) -> Callable[..., Any]:
        """What runs :meth:`folded_grads`'s ``body`` on a chunk's arguments (``n``: the model's
        inputs): eager here, around :meth:`grad_step`; a backend with graphs compiles it."""
        return lambda *args: body(
            self, lambda xs, t: self.grad_step(Rows(model, xs, t, output), xla)[1], *args
        )

    def fuses_chunks(self) -> bool:
        """Whether the engine's sweep should build, step and fold a chunk in one
        :meth:`folded_grads` call (worth it where each eager op costs more than its arithmetic)."""
        return False

    # ---- memory and chunking ------------------------------------------------------------------
    def is_oom(self, exc: BaseException) -> bool:
        """Whether an exception is this framework's out-of-memory error."""
        return False

    def free_memory(self, device: Any) -> int | None:
        """Free accelerator memory in bytes on ``device``, or None on a CPU."""
        return None

    def is_accelerator(self, device: Any) -> bool:
        """Whether ``device`` is a GPU (or other accelerator)."""
        return False

    def available_memory(self, device: Any) -> int | None:
        """Bytes a computation on ``device`` may still allocate: free accelerator memory, or on
        a CPU the host's available RAM (None when unknown)."""
        if self.is_accelerator(device):
            return self.free_memory(device)
        from xaikit.backend.memory import available_ram

        return available_ram()

    def peak_memory(self, fn: Callable[[], Any], device: Any) -> tuple[Any, int | None]:
        """Run ``fn()`` and return ``(its result, the peak memory it used on device)``.

        The peak is in bytes above what was in use when ``fn`` started: on a CPU the process's
        resident set (see :func:`xaikit.backend.memory.host_peak`), on an accelerator the
        framework's allocator statistics; None where it cannot be measured.
        """
        if self.is_accelerator(device):
            return fn(), None
        from xaikit.backend.memory import host_peak

        return host_peak(fn)

    def empty_cache(self, device: Any) -> None:  # noqa: B027 - optional hook
        """Release cached accelerator memory after an out-of-memory error."""

    def pads_chunks(self) -> bool:
        """Whether every chunk should have the same number of rows (compiled steps retrace on
        a new shape; the last chunk is padded)."""
        return False

    def layouts(self, inputs: Sequence[T]) -> tuple[str, ...]:
        """Memory layouts worth trying for these inputs (``"contiguous"`` always first)."""
        return ("contiguous",)

    def to_layout(self, t: T, name: str) -> T:
        """A tensor in the given memory layout (values unchanged)."""
        return t

    def synchronize(self, device: Any) -> None:  # noqa: B027 - optional hook
        """Wait for queued device work (for honest timings)."""
