"""PyTorch implementation of the backend's core: tensors, the gradient step, memory and layout.

The facets live beside this file (``train.py``, ``eval.py``, ``inspect.py``, ``layers.py``).
"""

from __future__ import annotations

import contextlib
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from xaikit.backend.base import HALF_DTYPES, Backend, T
from xaikit.backend.outputs import as_matrix, select_output
from xaikit.backend.rows import Rows
from xaikit.errors import XaikitError, XaikitValueError, XaikitWarning, caller_level
from xaikit.layout import ModelLayout


class TorchBackend(Backend):
    """PyTorch tensors and ``torch.nn.Module`` models."""

    name = "torch"
    channel_first = True
    package = "xaikit.backend.torch"

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self._layouts: weakref.WeakKeyDictionary[Any, ModelLayout] = weakref.WeakKeyDictionary()
        #: ids of the models inside an :meth:`inference` context (its buffers are watched once)
        self._guarded: set[int] = set()

    # ---- process-wide settings and model facts -----------------------------------------------
    def _seed_framework(self, seed: int) -> None:
        self.torch.manual_seed(seed)

    def limit_threads(self, threads: int) -> None:
        self.torch.set_num_threads(int(threads))

    def model_layout(self, model: Any) -> ModelLayout:
        """Channel-first; the input channels of the model's first 2-D convolution, in any model
        form: nn.Module, TorchScript, torch.compile, torch.export (cached per model; see
        :func:`xaikit.backend.torch.forms.first_conv_channels`)."""
        if not isinstance(model, self.torch.nn.Module):
            return ModelLayout(channel_first=True)
        if model not in self._layouts:
            from xaikit.backend.torch.forms import first_conv_channels

            self._layouts[model] = ModelLayout(channel_first=True, channels=first_conv_channels(model))
        return self._layouts[model]

    # ---- ownership and placement -------------------------------------------------------------
    def owns(self, obj: Any) -> bool:
        torch = self.torch
        return isinstance(obj, (torch.Tensor, torch.nn.Module))

    def is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, self.torch.Tensor)

    def model_device(self, model: Any) -> Any:
        if isinstance(model, self.torch.nn.Module):
            for p in model.parameters():
                return p.device
            for b in model.buffers():
                return b.device
            for c in self._frozen_constants(model):  # torch.jit.freeze: the weights are graph constants
                return c.device
        return self.torch.device("cpu")

    def model_dtype(self, model: Any) -> str:
        if isinstance(model, self.torch.nn.Module):
            for p in model.parameters():
                if p.is_floating_point():
                    return str(p.dtype).replace("torch.", "")
            for c in self._frozen_constants(model):
                if c.is_floating_point() and c.ndim > 1:  # a weight, not a scalar of the graph
                    return str(c.dtype).replace("torch.", "")
        return "float32"

    def _frozen_constants(self, model: Any) -> list[Any]:
        from xaikit.backend.torch.forms import graph_constants

        return graph_constants(model)

    def _dtype(self, name: str | None) -> Any:
        return None if name is None else getattr(self.torch, name)

    def as_tensor(self, x: Any, device: Any, dtype: str | None = "float32") -> T:
        torch = self.torch
        if torch.is_inference_mode_enabled() or (isinstance(x, torch.Tensor) and x.is_inference()):
            # a caller inside torch.inference_mode, or a tensor made there (a data pipeline's):
            # autograd can neither record nor save such tensors, so the explanation works on a
            # normal copy
            with torch.inference_mode(False):
                inferred = isinstance(x, torch.Tensor) and x.is_inference()
                return self._as_tensor(x.clone() if inferred else x, device, dtype)
        return self._as_tensor(x, device, dtype)

    def _as_tensor(self, x: Any, device: Any, dtype: str | None) -> T:
        torch = self.torch
        if not isinstance(x, torch.Tensor):
            if hasattr(x, "numpy") and not isinstance(x, np.ndarray):
                x = x.numpy()  # a TF tensor
            x = torch.as_tensor(np.asarray(x))
        return x.detach().to(device=device, dtype=self._dtype(dtype))

    def unshared(self, t: T, source: Any) -> T:
        torch = self.torch
        if isinstance(source, torch.Tensor):
            shared = (
                source.device == t.device
                and source.numel() > 0
                and source.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
            )
        elif isinstance(source, np.ndarray) and t.device.type == "cpu" and t.dtype != torch.bfloat16:
            shared = bool(np.may_share_memory(source, t.detach().numpy()))
        else:
            shared = False
        if not shared:
            return t
        with torch.inference_mode(False):  # a normal tensor, as as_tensor made it, for autograd
            return t.clone()

    def dtype_name(self, t: T) -> str:
        return str(t.dtype).replace("torch.", "")

    def to_numpy(self, t: T) -> np.ndarray:
        if t.dtype == self.torch.bfloat16:
            t = t.float()
        return t.detach().cpu().numpy()

    def arange(self, start: int, stop: int, device: Any) -> T:
        return self.torch.arange(int(start), int(stop), device=device, dtype=self.torch.int64)

    # ---- tensor operations --------------------------------------------------------------------
    def gather(self, t: T, idx: T) -> T:
        return t.index_select(0, idx)

    def index_add(self, acc: T, idx: T, values: T) -> T:
        return acc.index_add(0, idx, values.to(acc.dtype))

    def working(self, t: T) -> T:
        return t.float() if t.dtype in (self.torch.float16, self.torch.bfloat16) else t

    def pick(self, t: T, idx: T) -> T:
        shape = (t.shape[0], 1, *t.shape[2:])
        return t.gather(1, idx.reshape((-1,) + (1,) * (t.ndim - 1)).expand(shape)).squeeze(1)

    def matmul(self, a: T, b: T) -> T:
        return a @ b

    def cat(self, ts: Sequence[T], axis: int = 0) -> T:
        return ts[0] if len(ts) == 1 else self.torch.cat(list(ts), dim=axis)

    def zeros(self, shape: Sequence[int], device: Any, dtype: str = "float32") -> T:
        return self.torch.zeros(tuple(shape), device=device, dtype=self._dtype(dtype))

    def reshape(self, t: T, shape: Sequence[int]) -> T:
        return t.reshape(tuple(shape))

    def moveaxis(self, t: T, source: int, destination: int) -> T:
        return self.torch.movedim(t, source, destination).contiguous()

    def squeeze(self, t: T, axis: int | None = None) -> T:
        return t.squeeze() if axis is None else t.squeeze(axis)

    def mean(self, t: T, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> T:
        t = t if t.is_floating_point() else t.float()
        if axis is None:
            out = t.mean()
            return out.reshape([1] * t.ndim) if keepdims else out
        return t.mean(dim=axis, keepdim=keepdims)

    def sum0(self, t: T) -> T:
        return t.sum(dim=0)

    def sample_min(self, t: T) -> T:
        return t.amin(dim=tuple(range(1, t.ndim)), keepdim=True)

    def sample_max(self, t: T) -> T:
        return t.amax(dim=tuple(range(1, t.ndim)), keepdim=True)

    def sample_sum(self, t: T) -> T:
        return t.reshape(t.shape[0], -1).sum(dim=1)

    def _generator(self, seed: int, device: Any) -> Any:
        gen = self.torch.Generator(device=device)
        gen.manual_seed(int(seed) % (2**63))
        return gen

    def normal(self, seed: int, shape: Sequence[int], device: Any, dtype: str = "float32") -> T:
        gen = self._generator(seed, device)
        return self.torch.randn(tuple(shape), generator=gen, device=device, dtype=self._dtype(dtype))

    def uniform(self, seed: int, shape: Sequence[int], device: Any, dtype: str = "float32") -> T:
        gen = self._generator(seed, device)
        return self.torch.rand(tuple(shape), generator=gen, device=device, dtype=self._dtype(dtype))

    # ---- the model ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def inference(self, model: Any) -> Iterator[None]:
        # a caller inside torch.inference_mode (or no_grad) still gets gradients: the methods
        # that need them turn autograd on for their own steps, which inference mode forbids
        with self.torch.inference_mode(False), self._eval(model):
            yield

    @contextlib.contextmanager
    def _eval(self, model: Any) -> Iterator[None]:
        if not isinstance(model, self.torch.nn.Module) or id(model) in self._guarded:
            yield  # not a module, or already in a call's eval mode (an evaluate metric's explain)
            return
        # a frozen TorchScript module (torch.jit.freeze) has no training flag: its mode was fixed
        # when it was frozen
        flags = [(m, m.training) for m in model.modules() if hasattr(m, "training")]
        _warn_batch_statistics(model)
        buffers = _BufferSnapshot(model)
        self._guarded.add(id(model))
        try:
            try:
                model.eval()
            except NotImplementedError:  # a torch.export program's module: its mode was fixed at export
                for m, _ in flags:
                    m.training = False
            yield
        finally:
            self._guarded.discard(id(model))
            for m, flag in flags:
                m.training = flag
            changed = buffers.restore()
        if changed:
            raise XaikitValueError(
                f"the model changed its buffers {changed[:4]}{' ...' if len(changed) > 4 else ''} while it "
                "was explained, so each row's map would be of another state of the model (they are "
                "put back as they were). A BatchNorm in a torch.jit.trace or torch.export of a model "
                "in train mode keeps updating its running statistics (and normalizes with the rows' "
                "own): trace or export the model after model.eval(). A forward that updates a buffer "
                "of its own (a counter, a running mean) has to leave it alone in eval mode"
            )

    def _half(self, model: Any) -> Any:
        """The model's half-precision dtype (float16 / bfloat16), or None."""
        name = self.model_dtype(model)
        return getattr(self.torch, name) if name in HALF_DTYPES else None

    def _call(self, model: Any, inputs: Sequence[T], output: int | str, kw: dict[str, Any] | None) -> T:
        """The selected output of ``model(*inputs, **kw)`` as a (rows, classes) matrix or (rows,)
        vector; a half-precision model gets its inputs cast to its dtype (inside the autograd
        graph) and gives its output back in float32."""
        half = self._half(model)
        out = select_output(self._raw(model, inputs, kw), output, len(inputs[0]))
        return out.float() if half is not None and out.is_floating_point() else out

    def _raw(self, model: Any, inputs: Sequence[T], kw: dict[str, Any] | None) -> Any:
        """What ``model(*inputs, **kw)`` returns; a half-precision model gets its inputs cast."""
        half = self._half(model)
        if half is not None:
            inputs = [x.to(half) if x.is_floating_point() else x for x in inputs]
        # the version counters of the inputs and of the model_kwargs tensors: a model that writes
        # one in place is refused (the engine passes the same values again, and an input's
        # gradient is taken with respect to it). Tensors made in inference mode (the forward-only
        # methods' masked copies) have none.
        watched = [(None, x) for x in inputs] + list((kw or {}).items())
        versions = [
            (key, x, x._version)
            for key, x in watched
            if isinstance(x, self.torch.Tensor) and not x.is_inference()
        ]
        try:
            raw = model(*inputs, **(kw or {}))
        except XaikitError:
            raise
        except Exception as exc:
            from xaikit.backend.torch.grads import exported_call_error

            error = exported_call_error(model, inputs, exc)
            if error is None and "leaf Variable that requires grad is being used in an in-place" in str(exc):
                error = _writes_input_error()
            if error is None:
                raise
            raise error from exc
        for key, x, v in versions:
            if x._version != v:
                raise _writes_input_error(key)
        return raw

    def _scored(self, rows: Rows, inputs: Sequence[T], model: Any = None) -> tuple[T, T]:
        """``(scores, output)`` of one pass of ``model`` (default ``rows.model``) on ``inputs``
        (the rows' inputs, or tensors standing for them, e.g. watched copies): a bound target
        object's scores of the raw output (the scores stand for the output), else the
        ``rows.targets`` column of each row of the selected output (a (rows, classes) matrix)."""
        model = rows.model if model is None else model
        if rows.target is not None:
            scores = rows.target.scores(self, self._raw(model, inputs, rows.model_kwargs), rows.targets)
            return scores, scores
        out = as_matrix(self._call(model, inputs, rows.output, rows.model_kwargs))
        return out.gather(1, rows.targets[:, None]).squeeze(1), out

    @contextlib.contextmanager
    def forward_only(self) -> Iterator[None]:
        with self.torch.inference_mode():
            yield

    def forward(
        self,
        model: Any,
        inputs: Sequence[T],
        output: int | str = 0,
        model_kwargs: dict[str, Any] | None = None,
    ) -> T:
        with self.torch.no_grad():
            return self._call(model, inputs, output, model_kwargs)

    def outputs(self, model: Any, inputs: Sequence[T], model_kwargs: dict[str, Any] | None = None) -> Any:
        with self.torch.no_grad():
            return self._raw(model, inputs, model_kwargs)

    def scores(self, rows: Rows, xla: bool = False) -> T:
        with self.torch.no_grad():
            return self._scored(rows, rows.inputs)[0]

    def grad_step(self, rows: Rows, xla: bool = False) -> tuple[T, list[T], T]:
        """One forward+backward; a gradient that does not reach the output or an input is an
        error naming the input and the likely causes (see
        :func:`xaikit.backend.torch.grads.input_grads`), never a map of zeros."""
        from xaikit.backend.torch.grads import f16_scaled_grads, input_grads

        model, output = rows.model, rows.output
        f16 = self._half(model) == self.torch.float16
        with self.torch.enable_grad():
            xs = [x.detach().requires_grad_(True) for x in rows.inputs]
            scores, out = self._scored(rows, xs)
            grads = input_grads(model, scores, xs, output, retain=f16)
            if f16:  # loss scaling: small gradients lose bits or become 0 in float16
                grads = f16_scaled_grads(scores, xs, grads)
        return scores.detach(), grads, out.detach()

    # ---- memory and chunking ------------------------------------------------------------------
    def is_oom(self, exc: BaseException) -> bool:
        oom = getattr(self.torch, "OutOfMemoryError", None)
        if oom is not None and isinstance(exc, oom):
            return True
        return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()

    def is_accelerator(self, device: Any) -> bool:
        return getattr(device, "type", "cpu") != "cpu"

    def free_memory(self, device: Any) -> int | None:
        if getattr(device, "type", "cpu") != "cuda":
            return None
        free, _total = self.torch.cuda.mem_get_info(device)
        return int(free)

    def peak_memory(self, fn: Callable[[], Any], device: Any) -> tuple[Any, int | None]:
        """CUDA: ``torch.cuda.max_memory_allocated`` after a reset, above the allocated bytes at
        the start; CPU: the resident set (see :meth:`Backend.peak_memory`)."""
        if getattr(device, "type", "cpu") != "cuda":
            return super().peak_memory(fn, device)
        cuda = self.torch.cuda
        cuda.synchronize(device)
        cuda.reset_peak_memory_stats(device)
        base = cuda.memory_allocated(device)
        out = fn()
        cuda.synchronize(device)
        return out, max(0, int(cuda.max_memory_allocated(device)) - int(base))

    def empty_cache(self, device: Any) -> None:
        if getattr(device, "type", "cpu") == "cuda":
            self.torch.cuda.empty_cache()

    def synchronize(self, device: Any) -> None:
        if getattr(device, "type", "cpu") == "cuda":
            self.torch.cuda.synchronize(device)

    def layouts(self, inputs: Sequence[T]) -> tuple[str, ...]:
        if all(x.ndim == 4 for x in inputs):
            return ("contiguous", "channels_last")
        return ("contiguous",)

    def to_layout(self, t: T, name: str) -> T:
        if t.ndim != 4:
            return t
        if name == "channels_last":
            return t.contiguous(memory_format=self.torch.channels_last)
        return t.contiguous()


def _writes_input_error(key: str | None = None) -> XaikitValueError:
    if key is not None:
        return XaikitValueError(
            f"the model writes model_kwargs[{key!r}] in place (e.g. {key}.mul_(...), or an in-place "
            "operation on a view of it): explaining passes the same values to the model in every "
            "pass, so the model must leave them as they are (the value you passed is unchanged). "
            "Make that operation out of place, or copy the value first inside forward "
            f"({key} = {key}.clone())"
        )
    return XaikitValueError(
        "the model writes its input in place (its first operation on an input is in place, e.g. "
        "nn.ReLU(inplace=True) or x.clamp_(...)): explaining passes the same input to the model "
        "again and takes gradients with respect to it, so the model must leave it as it is (the "
        "array you passed is unchanged). Make that operation out of place (nn.ReLU(inplace=False)), "
        "or copy the input first inside forward (x = x.clone())"
    )


#: the models already told that a BatchNorm of theirs normalizes with each chunk's statistics
_TOLD: weakref.WeakSet[Any] = weakref.WeakSet()


def _warn_batch_statistics(model: Any) -> None:
    """Warn (once per model) where a BatchNorm keeps no running statistics
    (``track_running_stats=False``): in eval mode too it normalizes each forward pass with that
    pass's own rows, so a sample's map depends on the rows it shares a chunk with."""
    import torch

    if model in _TOLD:
        return
    names = [
        name
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.running_mean is None
    ]
    if not names:
        return
    _TOLD.add(model)
    warnings.warn(
        f"the model's BatchNorm layers {names[:4]}{' ...' if len(names) > 4 else ''} keep no running "
        "statistics (track_running_stats=False): in eval mode too they normalize each forward pass "
        "with its own rows, so a sample's map depends on the other rows of its chunk (the batch, "
        "its noisy or masked copies) and changes with max_batch. max_batch=1 runs each row alone; "
        "a model trained with running statistics (the default) has none of this. (Shown once per model.)",
        XaikitWarning,
        stacklevel=caller_level(),
    )


class _BufferSnapshot:
    """The buffers of a module tree before a call, to find and undo the call's changes: each
    buffer's owner, name, tensor, version counter and a copy of its values. After the call
    (:meth:`restore`), a buffer whose tensor was replaced or whose version counter moved (an
    in-place update: a BatchNorm's ``num_batches_tracked``, a ``mul_``) and whose values differ
    is put back; the version check costs no device synchronization on an unchanged model."""

    def __init__(self, model: Any) -> None:
        import torch

        #: (owner, name, label, tensor, version, copy)
        self.saved: list[tuple[Any, str, str, Any, int, Any]] = []
        with torch.no_grad():
            for prefix, module in model.named_modules(remove_duplicate=False):
                for name, buf in list(getattr(module, "_buffers", {}).items()):
                    if isinstance(buf, torch.Tensor):
                        label = f"{prefix}.{name}" if prefix else name
                        self.saved.append((module, name, label, buf, buf._version, buf.detach().clone()))

    def restore(self) -> list[str]:
        """Put back what the call changed; the changed buffers' names."""
        import torch

        moved = {
            id(module)
            for module, name, _, buf, version, _ in self.saved
            if _buffer(module, name) is not buf or buf._version != version
        }
        changed = []
        with torch.no_grad():
            for module, name, label, buf, _, copy in self.saved:
                if id(module) not in moved:
                    continue
                now = _buffer(module, name)
                if now is not buf or not _same(buf, copy):
                    changed.append(label)
                    buf.copy_(copy)
                    if now is not buf:
                        module._buffers[name] = buf
        return changed


def _buffer(module: Any, name: str) -> Any:
    """The module's buffer ``name`` now (a TorchScript module's buffers are a mapping without
    ``get``), or None."""
    buffers = module._buffers
    return buffers[name] if name in buffers else None


def _same(a: Any, b: Any) -> bool:
    """Equal values (NaN equal to NaN) of two tensors of one shape and dtype."""
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        return bool(torch.all((a == b) | (torch.isnan(a) & torch.isnan(b))))
    return bool(torch.equal(a, b))
