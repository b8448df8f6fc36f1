"""Atomic saving of matplotlib figures (shared by ImgData and the history plots)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from xaikit.errors import XaikitTypeError, XaikitValueError

__all__ = ["SAVE_FORMATS", "new_figure", "save_figure"]

SAVE_FORMATS = ("png", "svg", "pdf")


def new_figure(width: float, height: float, dpi: float) -> Figure:
    """A pyplot-free figure of ``width`` × ``height`` inches with an Agg canvas attached."""
    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def _open_temp(path: Path) -> tuple[int, str]:
    """Create a new temporary file next to ``path``; unlike ``mkstemp`` (always 0600) its mode
    follows the umask like any other new file."""
    for _ in range(100):
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a temporary file next to {str(path)!r}")


def save_figure(fig: Figure, save_path: str | os.PathLike[str], dpi: float = 96) -> Path:
    """Write ``fig`` to ``save_path`` atomically; the format comes from the extension.

    The figure is first written to a temporary file in the destination folder and then moved
    over the destination with :func:`os.replace`, so a reader never sees a half-written file
    and a failure leaves neither a partial file nor the temporary one behind. Missing parent
    folders are created.

    Args:
        fig: the figure to write.
        save_path: destination ending in ``.png``, ``.svg`` or ``.pdf`` (any case).
        dpi: resolution for the raster parts.

    Returns:
        The destination path.

    Raises:
        XaikitValueError: the extension is not one of the supported formats.
    """
    if not isinstance(save_path, (str, os.PathLike)):
        raise XaikitTypeError(f"save_path must be a str or path; got {type(save_path).__name__}")
    path = Path(save_path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in SAVE_FORMATS:
        raise XaikitValueError(
            f"save_path must end in one of {', '.join('.' + f for f in SAVE_FORMATS)}; got {str(path)!r}"
        )
    if not isinstance(dpi, (int, float)) or dpi <= 0:
        raise XaikitValueError(f"dpi must be a positive number; got {dpi!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _open_temp(path)
    try:
        with os.fdopen(fd, "wb") as handle:
            fig.savefig(handle, format=fmt, dpi=dpi)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path
