"""Flags of the module tracker: dead outputs, non-finite values, exploding / vanishing gradients."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xaikit.checks import check_number
from xaikit.errors import XaikitTypeError

__all__ = ["Thresholds", "check_threshold", "find_flags", "flag_entry"]


def check_threshold(
    value: Any, arg: str, upper: float | None = None, allow_zero: bool = False
) -> float | None:
    """``value`` as a float (or None, which turns its flag off), checked to be in range."""
    return check_number(
        value, arg, low=0, high=upper, low_open=not allow_zero, allow_none=True, kind=XaikitTypeError
    )


@dataclass(frozen=True)
class Thresholds:
    """When a row is flagged; None turns a flag off.

    Attributes:
        dead: zero fraction from which an output is ``"dead"`` (0 < dead <= 1).
        explode: gradient L2 norm above which a gradient is ``"exploding_grad"``.
        vanish: gradient L2 norm below which a gradient is ``"vanishing_grad"``.
    """

    dead: float | None = 0.99
    explode: float | None = 1e3
    vanish: float | None = 1e-7

    @classmethod
    def checked(cls, dead: Any, explode: Any, vanish: Any) -> Thresholds:
        """Thresholds from user arguments, each validated and named as the tracker's argument."""
        return cls(
            dead=check_threshold(dead, "dead_threshold", upper=1.0),
            explode=check_threshold(explode, "explode_threshold"),
            vanish=check_threshold(vanish, "vanish_threshold", allow_zero=True),
        )


def find_flags(row: dict[str, Any], thresholds: Thresholds) -> list[tuple[str, Any, Any]]:
    """The flags a finished row raises, as ``(flag, value, threshold)``.

    Example:
        >>> find_flags({"kind": "output", "zero_frac": 1.0, "nonfinite": 2}, Thresholds())
        [('nonfinite', 2, 0), ('dead', 1.0, 0.99)]
        >>> find_flags({"kind": "grad", "norm": 5.0}, Thresholds(explode=1.0))
        [('exploding_grad', 5.0, 1.0)]
    """
    found: list[tuple[str, Any, Any]] = []
    nonfinite = row.get("nonfinite")
    if isinstance(nonfinite, (int, float)) and nonfinite > 0:
        found.append(("nonfinite", nonfinite, 0))
    zero = row.get("zero_frac")
    if row["kind"] == "output" and thresholds.dead is not None and isinstance(zero, float):
        if zero >= thresholds.dead:
            found.append(("dead", zero, thresholds.dead))
    norm = row.get("norm")
    if row["kind"] == "grad" and isinstance(norm, float) and norm == norm:
        if thresholds.explode is not None and norm > thresholds.explode:
            found.append(("exploding_grad", norm, thresholds.explode))
        if thresholds.vanish is not None and norm < thresholds.vanish:
            found.append(("vanishing_grad", norm, thresholds.vanish))
    return found


def flag_entry(row: dict[str, Any], flag: str, value: Any, threshold: Any) -> dict[str, Any]:
    """One entry of ``ModuleTracker.flags``: where the flag was raised, its value and threshold."""
    return {
        "step": row["step"],
        "call": row["call"],
        "module": row["module"],
        "kind": row["kind"],
        "tname": row["tname"],
        "flag": flag,
        "value": value,
        "threshold": threshold,
    }
