"""Small utilities. ``ImgData`` is re-exported here (as in the reference's ``util``) lazily, so
importing :mod:`xaikit.util` does not load matplotlib until ``ImgData`` is used."""

from __future__ import annotations

from typing import Any

__all__ = ["ImgData"]


def __getattr__(name: str) -> Any:
    if name == "ImgData":
        from xaikit.viz import ImgData

        globals()["ImgData"] = ImgData
        return ImgData
    raise AttributeError(f"module 'xaikit.util' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
