"""Vision-transformer tokens laid back on their patch grid: :func:`token_grid` finds the square
grid of a layer's (B, N, C) tokens, the leading class / distillation / register tokens dropped
(``N - h*w`` of them, at most :data:`MAX_EXTRA`), and refuses a token count that fits more than
one grid (:func:`grid_or_error`)."""

from __future__ import annotations

import math

from xaikit.errors import XaikitValueError

#: the most leading non-patch tokens dropped: a class token, a distillation token (DeiT) and up
#: to four register tokens (ViT with registers, Darcet et al. 2024) would be 6; 5 keeps every
#: grid from 3 x 3 up unambiguous
MAX_EXTRA = 5


def grid_candidates(n: int) -> list[tuple[int, int]]:
    """The square grids (r, r), r >= 2, whose r*r tokens are the last of ``n`` with at most
    :data:`MAX_EXTRA` leading tokens before them.

    Example:
        >>> grid_candidates(197), grid_candidates(198), grid_candidates(9)
        ([(14, 14)], [(14, 14)], [(3, 3), (2, 2)])
    """
    out = []
    for extra in range(MAX_EXTRA + 1):
        m = n - extra
        r = math.isqrt(max(m, 0))
        if r >= 2 and r * r == m:
            out.append((r, r))
    return out


def token_grid(n: int) -> tuple[int, int] | None:
    """The square grid of ``n`` ViT tokens (the leading class / distillation / register tokens
    dropped); None when there is no such grid or more than one.

    Example:
        >>> token_grid(197), token_grid(198), token_grid(49), token_grid(31)
        ((14, 14), (14, 14), (7, 7), None)
    """
    found = grid_candidates(n)
    return found[0] if len(found) == 1 else None


def grid_or_error(n: int, channels: object, layer: str) -> tuple[int, int]:
    """:func:`token_grid` of ``n`` tokens, or an error naming ``layer`` and the reshape it would
    need (none found, or several grids fit)."""
    found = grid_candidates(n)
    if len(found) == 1:
        return found[0]
    if found:
        fits = " or ".join(f"{h}x{w} ({n - h * w} leading tokens dropped)" for h, w in found)
        raise XaikitValueError(
            f"layer {layer!r} gives tokens (B, {n}, {channels}) that fit more than one square patch "
            f"grid: {fits}; pass reshape=(h, w) (the last h*w tokens) or a callable that returns a "
            "4-D map"
        )
    raise XaikitValueError(
        f"layer {layer!r} gives tokens (B, {n}, {channels}) that are not a square patch grid after "
        f"dropping at most {MAX_EXTRA} leading class / distillation / register tokens: pass "
        "reshape=(h, w) (the last h*w tokens) or a callable that returns a 4-D map"
    )
