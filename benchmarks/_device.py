"""The device a benchmark runs on (``--device cpu|cuda``): where models and inputs go, the
synchronization before a timer stops, the peak GPU memory of one call and the GPU's name for the
report. On the CPU every method is a no-op (the peak is None), so the CPU behaviour of a script
does not change."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any


def default_device() -> str:
    """``"cuda"`` when torch sees a GPU, else ``"cpu"``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def add_argument(parser: argparse.ArgumentParser) -> None:
    """``--device {cpu,cuda}`` (default: cuda when available, else cpu)."""
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default=None,
        help="where the model and inputs live (default: cuda when available, else cpu)",
    )


@dataclass
class Device:
    """One benchmark device; ``name`` is ``"cpu"`` or ``"cuda"``."""

    name: str = "cpu"
    _base: int = field(default=0, repr=False)

    @classmethod
    def pick(cls, name: str | None) -> Device:
        """The named device (None: :func:`default_device`); cuda without a GPU is an error."""
        import torch

        name = name or default_device()
        if name == "cuda" and not torch.cuda.is_available():
            raise SystemExit("--device cuda: torch sees no GPU (torch.cuda.is_available() is False)")
        return cls(name)

    @property
    def cuda(self) -> bool:
        return self.name == "cuda"

    @property
    def torch(self) -> Any:
        """The ``torch.device``."""
        import torch

        return torch.device(self.name)

    def to(self, obj: Any) -> Any:
        """A module or tensor moved to the device (a module in place, as ``.to`` does)."""
        return obj.to(self.torch)

    def sync(self) -> None:
        """Wait for the device's queued work (before a timer stops)."""
        if self.cuda:
            import torch

            torch.cuda.synchronize()

    def reset_peak(self) -> None:
        """Start a peak-memory window: the next :meth:`peak` is the most allocated above now."""
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self._base = int(torch.cuda.memory_allocated())

    def peak(self) -> int | None:
        """Bytes allocated on the GPU at the peak since :meth:`reset_peak`, above the bytes
        allocated then (None on the CPU)."""
        if not self.cuda:
            return None
        import torch

        torch.cuda.synchronize()
        return max(0, int(torch.cuda.max_memory_allocated()) - self._base)

    def describe(self) -> str:
        """The GPU's name, memory, CUDA and cuDNN versions ("CPU only" on the CPU)."""
        if not self.cuda:
            return "CPU only (no GPU used)"
        import torch

        p = torch.cuda.get_device_properties(0)
        return (
            f"GPU: {p.name}, {p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs, "
            f"CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, "
            f"TF32 matmul {torch.backends.cuda.matmul.allow_tf32}, cudnn.allow_tf32 {torch.backends.cudnn.allow_tf32}"
        )
