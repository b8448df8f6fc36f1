"""ImgData's painting options, checked once: colormaps, display ranges, colorbars, titles, colours."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from matplotlib import colormaps as _mpl_colormaps
from matplotlib.colors import Colormap, is_color_like

from xaikit.checks import check_int
from xaikit.errors import XaikitTypeError, XaikitValueError, describe

__all__ = ["GridOptions", "channel_axes", "check_known", "get_cmap", "name_set"]


def check_known(names: Iterable[str], argname: str, columns: list[str]) -> None:
    """Raise if an option names a column that does not exist."""
    unknown = sorted(str(n) for n in names if n not in columns)
    if unknown:
        raise XaikitValueError(f"{argname} names unknown column(s) {unknown}; the columns are {columns}")


def name_set(arg: Any, argname: str, columns: list[str]) -> set[str]:
    """The column names an option names; ``True`` means every column."""
    if arg is None or arg is False:
        return set()
    if arg is True:
        return set(columns)
    if isinstance(arg, str):
        arg = [arg]
    if not isinstance(arg, Iterable):
        raise XaikitTypeError(f"{argname} must be True, a column name or a set of them; got {describe(arg)}")
    names = set(arg)
    check_known(names, argname, columns)
    return names


def get_cmap(cmap: Any, argname: str) -> Colormap:
    """A matplotlib colormap from its name or itself."""
    if isinstance(cmap, Colormap):
        return cmap
    if not isinstance(cmap, str):
        raise XaikitTypeError(
            f"{argname} must be a matplotlib colormap name or Colormap; got {describe(cmap)}"
        )
    try:
        return _mpl_colormaps[cmap]
    except KeyError:
        raise XaikitValueError(
            f"{argname} must be a matplotlib colormap name such as 'Greys', 'inferno' or 'RdBu_r'; "
            f"got {cmap!r}"
        ) from None


def check_vrange(key: str, vr: Any) -> tuple[float, float] | str:
    """``(low, high)`` finite with ``low < high``, or ``"minmax"``."""
    if isinstance(vr, str):
        if vr == "minmax":
            return "minmax"
        raise XaikitValueError(f"vranges[{key!r}] must be (low, high) or 'minmax'; got {vr!r}")
    try:
        low, high = (float(v) for v in vr)
    except (TypeError, ValueError):
        raise XaikitValueError(
            f"vranges[{key!r}] must be (low, high) or 'minmax'; got {describe(vr)}"
        ) from None
    if not (np.isfinite(low) and np.isfinite(high) and low < high):
        raise XaikitValueError(f"vranges[{key!r}] must be finite with low < high; got ({low}, {high})")
    return low, high


def channel_axes(channel_axis: Any, names: list[str]) -> dict[str, int]:
    """``channel_axis`` (one int or ``{column: axis}``) as ``{column: axis}``."""
    if channel_axis is None:
        return {}
    if isinstance(channel_axis, Mapping):
        check_known(channel_axis, "channel_axis", names)
        items = dict(channel_axis)
    else:
        items = dict.fromkeys(names, channel_axis)
    for key, axis in items.items():
        check_int(axis, f"channel_axis for {key!r}", kind=XaikitTypeError)
    return {k: int(a) for k, a in items.items()}


def check_text_colors(text_colors: Any, names: list[str]) -> dict[str, list[str | None]]:
    """``{column: [colour or None per row]}``, colours as matplotlib understands them."""
    if text_colors is None:
        return {}
    if not isinstance(text_colors, Mapping):
        raise XaikitTypeError(
            f"text_colors must be a mapping {{column: [colour or None per row]}}; got {describe(text_colors)}"
        )
    check_known(text_colors, "text_colors", names)
    out: dict[str, list[str | None]] = {}
    for key, colors in text_colors.items():
        if isinstance(colors, str) or not isinstance(colors, Sequence):
            raise XaikitTypeError(
                f"text_colors[{key!r}] must be a list with a colour (or None) per row; got {describe(colors)}"
            )
        for c in colors:
            if c is not None and not is_color_like(c):
                raise XaikitValueError(f"text_colors[{key!r}] holds {c!r}, which is not a matplotlib colour")
        out[key] = list(colors)
    return out


@dataclass
class GridOptions:
    """The checked options of one ImgData (see its docstring for their meaning)."""

    cmap: Colormap
    cmaps: dict[str, Colormap] = field(default_factory=dict)
    vranges: dict[str, tuple[float, float] | str] = field(default_factory=dict)
    signed: set[str] = field(default_factory=set)
    colorbars: set[str] = field(default_factory=set)
    titles: dict[str, str] = field(default_factory=dict)
    text_colors: dict[str, list[str | None]] = field(default_factory=dict)
    figure_title: str | None = None

    @classmethod
    def build(
        cls,
        names: list[str],
        colormap: Any,
        colormaps: Mapping[str, Any] | None,
        vranges: Mapping[str, Any] | None,
        signed: Any,
        colorbars: Any,
        titles: Mapping[str, Any] | None,
        text_colors: Any = None,
        figure_title: Any = None,
    ) -> GridOptions:
        """Check every option against the column ``names``."""
        opts = cls(get_cmap(colormap, "colormap"))
        for key, cmap in (colormaps or {}).items():
            check_known([key], "colormaps", names)
            opts.cmaps[key] = get_cmap(cmap, f"colormaps[{key!r}]")
        for key, vr in (vranges or {}).items():
            check_known([key], "vranges", names)
            opts.vranges[key] = check_vrange(key, vr)
        opts.signed = name_set(signed, "signed", names)
        opts.colorbars = name_set(colorbars, "colorbars", names)
        opts.titles = dict(titles or {})
        check_known(opts.titles, "titles", names)
        for key, title in opts.titles.items():
            if not isinstance(title, str):
                raise XaikitTypeError(f"titles[{key!r}] must be a string; got {describe(title)}")
        opts.text_colors = check_text_colors(text_colors, names)
        if figure_title is not None and not isinstance(figure_title, str):
            raise XaikitTypeError(f"figure_title must be a string or None; got {describe(figure_title)}")
        opts.figure_title = figure_title or None
        return opts

    def image_named(self, signed: Any, colorbars: Any) -> set[str]:
        """Columns named explicitly by an image-only option: images even if (B, H, 4|5) or 2-D."""
        named = set(self.cmaps) | set(self.vranges)
        named |= self.signed if signed is not True else set()
        named |= self.colorbars if colorbars is not True else set()
        return named

    def title(self, column: str) -> str:
        """The display title of ``column``."""
        return self.titles.get(column, column)

    def text_color(self, column: str, row: int) -> str | None:
        """The colour of the text of ``column`` in ``row`` (``None``: the default)."""
        colors = self.text_colors.get(column)
        if colors is None or row >= len(colors):
            return None
        return colors[row]
