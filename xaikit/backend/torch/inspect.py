"""PyTorch side of the module tracker: forward pre-hooks and forward hooks on every submodule."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from xaikit.backend.inspector import EnterHook, ExitHook, Inspector, ModuleInfo, T
from xaikit.errors import XaikitTypeError, describe

#: exponent bias, mantissa bits and the integer type of the same width, of the dtypes reduced
_FLOAT_BITS = {torch.float32: (127, 23, torch.int32), torch.float64: (1023, 52, torch.int64)}


def _inverse_power_of_two(top: torch.Tensor) -> torch.Tensor:
    """``2**-e`` (same dtype and device as the 0-dim ``top``) with ``top = m * 2**e``, ``0.5 <= m < 1``,
    and ``e`` clamped so that both ``2**e`` and ``2**-e`` are normal numbers; 1 for 0, NaN and inf.
    Built from its bits: exact on every device, without a host synchronisation."""
    bias, bits, itype = _FLOAT_BITS[top.dtype]
    e = torch.frexp(top).exponent.to(itype).clamp(1 - bias, bias - 1)
    return ((bias - e) << bits).view(top.dtype)


class TorchInspector(Inspector):
    """A ``torch.nn.Module`` tree, hooked with ``register_forward_pre_hook`` /
    ``register_forward_hook`` (never by replacing ``forward``)."""

    framework = "torch"
    unit_axis = 1

    def __init__(self, model: nn.Module, root_name: str = "model") -> None:
        self._handles: list[Any] = []
        super().__init__(model, root_name)

    def _walk(self, model: Any, root_name: str) -> None:
        for path, module in model.named_modules():
            name = f"{root_name}.{path}" if path else root_name
            parent = name.rsplit(".", 1)[0] if path else None
            info = ModuleInfo(
                name=name,
                short=path.rsplit(".", 1)[-1] if path else root_name,
                cls=type(module).__name__,
                parent=parent,
                obj=module,
                params=[(pname, p) for pname, p in module.named_parameters(recurse=False)],
            )
            self.modules[name] = info
            if parent is not None and parent in self.modules:
                self.modules[parent].children.append(name)

    def trainable(self) -> list[Any]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def attach(self, on_enter: EnterHook, on_exit: ExitHook) -> None:
        if self._handles:
            return
        for name, info in self.modules.items():

            def pre(module: nn.Module, args: tuple, kwargs: dict, _name: str = name) -> None:
                on_enter(_name, args, kwargs)

            def post(module: nn.Module, args: tuple, kwargs: dict, output: Any, _name: str = name) -> None:
                on_exit(_name, output, output is None)

            module = info.obj
            self._handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
            self._handles.append(module.register_forward_hook(post, with_kwargs=True, always_call=True))

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, torch.Tensor)

    def describe(self, t: T) -> tuple[list[int], str]:
        return list(t.shape), str(t.dtype).replace("torch.", "")

    def value(self, var: Any) -> T:
        return var.detach()

    def grad(self, var: Any, given: dict[int, Any] | None) -> T | None:
        if given is not None:
            g = given.get(id(var))
        else:
            g = var.grad
        return None if g is None else g.detach()

    def version(self, t: T) -> int:
        return int(t._version)

    def default_stats(self, t: T, units: bool) -> T:
        # Few passes, each a cheap vectorised reduction (torch.std_mean and isfinite().sum() are
        # several times slower on CPU): aminmax, a scaled copy, its sum and (in place) its centred
        # sum of squares, two nonzero counts.
        with torch.no_grad():
            x = t.detach()
            if x.is_complex():
                x = x.abs()
            if not x.is_floating_point():  # integers: float64 holds them exactly up to 2**53
                x = x.double()
            elif x.dtype in (torch.float16, torch.bfloat16):
                x = x.float()
            n = x.numel()
            k = 7 if units else 6
            if n == 0:
                return torch.full((k,), float("nan"), dtype=torch.float64, device=x.device)
            lo, hi = torch.aminmax(x)
            # Sums of huge finite values overflow (1e20**2 > float32 max) and squares of tiny ones
            # underflow, so the sums are taken of y = x * 2**-e, 2**e being the power of two of the
            # largest magnitude, and scaled back in float64. A power of two scales every rounding
            # exactly: y's sums are x's float32 sums, without the overflow.
            inv = _inverse_power_of_two(torch.maximum(hi, -lo))
            y = x * inv
            total = y.sum()
            # square and sum in place: torch's CPU vector_norm of float32 accumulates sequentially
            # (0.7% off on 4096 x 4096 values); sum() adds pairwise
            std = (y.sub_(total / n).square_().sum().double() / n).sqrt()
            inv64 = inv.double()
            mean, std = total.double() / n / inv64, std / inv64  # NaN or inf iff x has NaN or inf
            zeros = n - torch.count_nonzero(x)
            nonfinite = torch.count_nonzero(x - x)  # NaN and +-inf give NaN, finite values 0
            parts = [
                torch.stack([mean, std, lo.double(), hi.double()]),
                torch.stack([zeros / n, nonfinite]).double(),
            ]
            if units:
                if x.dim() >= 2 and x.shape[1] > 0:
                    dims = [d for d in range(x.dim()) if d != 1]
                    dead = (torch.amax(x, dim=dims) == 0) & (torch.amin(x, dim=dims) == 0)
                    parts.append(dead.double().mean().reshape(1))
                else:
                    parts.append(torch.full((1,), float("nan"), dtype=torch.float64, device=x.device))
            return torch.cat(parts)

    def flat(self, value: Any) -> T:
        if isinstance(value, torch.Tensor):
            return value.detach().reshape(-1).double()
        return torch.as_tensor(np.asarray(value, dtype=np.float64).reshape(-1))

    def to_host(self, parts: Sequence[T]) -> np.ndarray:
        if not parts:
            return np.zeros(0)
        device = parts[0].device
        joined = torch.cat([p.to(device) for p in parts])
        return joined.cpu().numpy()


def inspector(model: Any, root_name: str = "model") -> Inspector:
    """The inspector facet of this backend for ``model``."""
    if not isinstance(model, nn.Module):
        raise XaikitTypeError(f"model must be a torch.nn.Module or a Keras model; got {describe(model)}")
    return TorchInspector(model, root_name)
