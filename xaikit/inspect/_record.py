"""Records of the module tracker: what a statistic describes and how call tensors are named."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from xaikit.errors import XaikitValueError

__all__ = ["KINDS", "Pending", "StatFn", "check_kinds", "flatten"]

#: what a statistic describes: a module's call inputs, its call outputs, its own weights, their grads
KINDS = ("input", "output", "weight", "grad")

#: a statistic function: one framework tensor -> dict of name -> number or framework tensor
StatFn = Callable[[Any], Mapping[str, Any]]


@dataclass
class Pending:
    """A record whose statistics are still on the device.

    ``meta`` holds the row's leading columns (step, call, module, class, kind, tname, shape,
    dtype); ``fields`` say where each statistic lies in the step's device parts; ``host`` holds
    the values a custom statistic function returned as plain Python numbers.
    """

    meta: dict[str, Any]
    #: (statistic name, index of the device part, first element in it, value shape)
    fields: list[tuple[str, int, int, tuple[int, ...]]] = field(default_factory=list)
    host: dict[str, Any] = field(default_factory=dict)


def flatten(obj: Any, prefix: str, is_tensor: Callable[[Any], bool], out: list[tuple[str, Any]]) -> None:
    """Append the tensors inside nested tuples / lists / dicts / namedtuples to ``out``.

    Each is named ``prefix.key.index...``: positional arguments as ``x.0``, keywords as
    ``x.<keyword>``, namedtuple fields by name, outputs as ``out`` or ``out.0``.

    Example:
        >>> found = []
        >>> flatten(({"a": 1.0}, [2.0, "s"]), "x", lambda o: isinstance(o, float), found)
        >>> found
        [('x.0.a', 1.0), ('x.1.0', 2.0)]
    """
    if is_tensor(obj):
        out.append((prefix, obj))
    elif isinstance(obj, Mapping):
        for key, value in obj.items():
            flatten(value, f"{prefix}.{key}", is_tensor, out)
    elif isinstance(obj, (list, tuple)):
        names = getattr(obj, "_fields", None) or range(len(obj))
        for key, value in zip(names, obj):
            flatten(value, f"{prefix}.{key}", is_tensor, out)


def check_kinds(kinds: Iterable[Any], arg: str) -> tuple[str, ...]:
    """``kinds`` as a tuple, each checked to be one of :data:`KINDS` (``arg`` names the argument)."""
    result = []
    for kind in kinds:
        if kind not in KINDS:
            raise XaikitValueError(f"{arg} must name kinds among {KINDS}; got {kind!r}")
        result.append(kind)
    return tuple(result)
