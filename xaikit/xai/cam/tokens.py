"""Vision-transformer tokens laid back on their patch grid: :func:`token_grid` finds the grid of
a layer's (B, N, C) tokens, the leading class / distillation / register tokens dropped
(``N - h*w`` of them, at most :data:`MAX_EXTRA`), and refuses a token count that fits more than
one grid (:func:`grid_or_error`).

The grid follows the image's aspect ratio: given the image size (H, W) the CAM code knows, the
grids are those with ``h * w = N - extra`` and ``h / w == H / W`` (a 32 x 48 image cut in 16-pixel
patches gives 2 x 3 tokens; a Swin stage's tokens are un-windowed by the model itself). Without a
size, or for a square image, the grid is square. A grid whose ratio is not exactly the image's
(a side that is not a multiple of the patch) is not guessed: ``reshape=(h, w)`` says it."""

from __future__ import annotations

import math

from xaikit.errors import XaikitValueError

#: the most leading non-patch tokens dropped: a class token, a distillation token (DeiT) and up
#: to four register tokens (ViT with registers, Darcet et al. 2024) would be 6; 5 keeps every
#: grid from 3 x 3 up unambiguous
MAX_EXTRA = 5

Size = tuple[int, int] | None


def _fits(m: int, size: Size) -> list[tuple[int, int]]:
    """The grids (h, w) of ``m`` patch tokens, h, w >= 1, h * w >= 4: the square one without a
    size, else those whose h / w is exactly H / W."""
    if size is None or size[0] == size[1]:
        r = math.isqrt(max(m, 0))
        return [(r, r)] if r >= 2 and r * r == m else []
    big, small = max(size), min(size)
    g = math.gcd(big, small)
    p, q = big // g, small // g  # the reduced ratio of the long side to the short one
    s = math.isqrt(max(m, 0) // (p * q)) if m > 0 else 0  # the grid is (s*q, s*p) on its sides
    if s < 1 or s * s * p * q != m or m < 4:
        return []
    return [(s * q, s * p)] if size[0] < size[1] else [(s * p, s * q)]


def grid_candidates(n: int, size: Size = None) -> list[tuple[int, int]]:
    """The grids (h, w) whose h*w tokens are the last of ``n`` with at most :data:`MAX_EXTRA`
    leading tokens before them: square (r >= 2) without ``size``, else with the aspect ratio of
    the image ``size`` = (H, W).

    Example:
        >>> grid_candidates(197), grid_candidates(198), grid_candidates(9)
        ([(14, 14)], [(14, 14)], [(3, 3), (2, 2)])
        >>> grid_candidates(7, (32, 48)), grid_candidates(24, (64, 96)), grid_candidates(6, (48, 32))
        ([(2, 3)], [(4, 6)], [(3, 2)])
        >>> grid_candidates(197, (224, 224)), grid_candidates(253, (224, 300))  # 14 x 18: ratio 0.78
        ([(14, 14)], [])
    """
    out = []
    for extra in range(MAX_EXTRA + 1):
        out.extend(_fits(n - extra, size))
    return out


def token_grid(n: int, size: Size = None) -> tuple[int, int] | None:
    """The grid of ``n`` ViT tokens (the leading class / distillation / register tokens dropped),
    square or with the aspect ratio of ``size`` = (H, W); None when there is no such grid or
    more than one.

    Example:
        >>> token_grid(197), token_grid(198), token_grid(49), token_grid(31)
        ((14, 14), (14, 14), (7, 7), None)
        >>> token_grid(97, (128, 192)), token_grid(6, (32, 48)), token_grid(30, (32, 48))
        ((8, 12), (2, 3), None)
    """
    found = grid_candidates(n, size)
    return found[0] if len(found) == 1 else None


def grid_or_error(n: int, channels: object, layer: str, size: Size = None) -> tuple[int, int]:
    """:func:`token_grid` of ``n`` tokens for an image of ``size``, or an error naming ``layer``
    and the reshape it would need (none found, or several grids fit)."""
    found = grid_candidates(n, size)
    shape = "square" if size is None or size[0] == size[1] else f"{size[0]}:{size[1]} (the image's H:W)"
    if len(found) == 1:
        return found[0]
    if found:
        fits = " or ".join(f"{h}x{w} ({n - h * w} leading tokens dropped)" for h, w in found)
        raise XaikitValueError(
            f"layer {layer!r} gives tokens (B, {n}, {channels}) that fit more than one {shape} patch "
            f"grid: {fits}; pass reshape=(h, w) (the last h*w tokens) or a callable that returns a "
            "4-D map"
        )
    hint = (
        ""
        if size is None or size[0] == size[1]
        else " (an image side that is no multiple of the patch, or a model that resizes its input "
        "inside, gives a grid of another ratio)"
    )
    raise XaikitValueError(
        f"layer {layer!r} gives tokens (B, {n}, {channels}) that are not a {shape} patch grid after "
        f"dropping at most {MAX_EXTRA} leading class / distillation / register tokens{hint}: pass "
        "reshape=(h, w) (the last h*w tokens) or a callable that returns a 4-D map"
    )
