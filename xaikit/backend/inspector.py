"""The framework side of :mod:`xaikit.inspect`: walking a model, hooking its calls, and reducing
tensors to statistics on the device.

One small subclass per framework (``torch/inspect.py``, ``tf/inspect.py``), reached with
``get_backend(model).inspector(model)``. The tracker itself
(:class:`xaikit.inspect.ModuleTracker`) is framework-neutral and talks only to this interface.

Statistics stay on the device as 1-D float64 tensors until :meth:`Inspector.to_host` copies the
whole batch of them to the host in one transfer.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

T = Any  # a framework tensor

#: the default statistics, in the order of :meth:`Inspector.default_stats`' vector
DEFAULT_STATS = ("mean", "std", "min", "max", "zero_frac", "nonfinite")
#: the extra default statistic of module outputs with a unit (channel) axis
DEAD_UNITS = "dead_units"

EnterHook = Callable[[str, tuple, dict], None]
ExitHook = Callable[[str, Any, bool], None]


@dataclass
class ModuleInfo:
    """One module (torch) or layer (Keras) of the tracked model."""

    name: str
    short: str
    cls: str
    parent: str | None
    obj: Any
    children: list[str] = field(default_factory=list)
    params: list[tuple[str, Any]] = field(default_factory=list)


class Inspector(abc.ABC):
    """A model seen through the operations the module tracker needs."""

    framework: str = ""
    #: axis of the units (channels / features) in module outputs
    unit_axis: int = 1

    def __init__(self, model: Any, root_name: str = "model") -> None:
        self.model = model
        self.modules: dict[str, ModuleInfo] = {}
        self._walk(model, root_name)

    # ---- model structure ---------------------------------------------------------------------
    @abc.abstractmethod
    def _walk(self, model: Any, root_name: str) -> None:
        """Fill ``self.modules`` (parents before children, in definition order)."""

    @abc.abstractmethod
    def trainable(self) -> list[Any]:
        """The variables that a gradients list given to the tracker is aligned with."""

    # ---- hooks -------------------------------------------------------------------------------
    @abc.abstractmethod
    def attach(self, on_enter: EnterHook, on_exit: ExitHook) -> None:
        """Call ``on_enter(name, args, kwargs)`` before and ``on_exit(name, output, failed)`` after
        every call of every module, until :meth:`detach`."""

    @abc.abstractmethod
    def detach(self) -> None:
        """Remove every hook; the model is left exactly as it was before :meth:`attach`."""

    # ---- tensors -----------------------------------------------------------------------------
    @abc.abstractmethod
    def is_tensor(self, obj: Any) -> bool:
        """Whether ``obj`` is a concrete (not symbolic) tensor of this framework."""

    @abc.abstractmethod
    def describe(self, t: T) -> tuple[list[int], str]:
        """Shape and dtype name of a tensor."""

    @abc.abstractmethod
    def value(self, var: Any) -> T:
        """The current value of a parameter / variable as a tensor."""

    @abc.abstractmethod
    def grad(self, var: Any, given: dict[int, Any] | None) -> T | None:
        """The gradient of ``var``: from ``given`` (keyed by ``id(var)``) or the framework's own
        store (torch ``.grad``); None when there is none."""

    @abc.abstractmethod
    def version(self, t: T) -> int:
        """A counter that changes when ``t`` is modified in place (0 for immutable tensors)."""

    @abc.abstractmethod
    def default_stats(self, t: T, units: bool) -> T:
        """``DEFAULT_STATS`` (plus ``dead_units`` when ``units``) of ``t`` as a 1-D float64 tensor on
        the tensor's device, without any host synchronisation."""

    @abc.abstractmethod
    def flat(self, value: Any) -> T:
        """A statistic value returned by a user function, as a 1-D float64 device tensor."""

    @abc.abstractmethod
    def to_host(self, parts: Sequence[T]) -> np.ndarray:
        """Concatenate 1-D tensors and copy them to the host in one transfer."""
