"""Attention rollout and gradient-weighted attention relevance of vision transformers.

Both read every block's attention probabilities ``A_l`` (B, heads, N, N) from one pass
(:class:`~xaikit.backend.facets.AttentionFacet`) and propagate a token-to-token relevance
``R`` (B, N, N) from the input tokens up through the blocks; the map is the class token's row
of ``R`` over the patch tokens, laid on the patch grid (:func:`~xaikit.xai.cam.tokens.token_grid`:
class, distillation and register tokens dropped) and upsampled to the image (bilinear).

* ``attention_rollout`` (Abnar & Zuidema, 2020): ``R = Â_L ... Â_1`` with
  ``Â_l = rownorm(0.5 * fuse_heads(A_l) + 0.5 * I)`` (the residual connection as the identity).
  Class-agnostic: the same map for every target.
* ``transformer_attribution`` (Chefer, Gur & Wolf, 2021, "Generic attention-model
  explainability"): ``R = I``, then per block ``R = R + mean_heads(max(dS/dA_l * A_l, 0)) @ R``,
  with ``S`` the target score: class-specific.

Everything after the backend's pass is float64 numpy on the host.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xaikit.backend import Rows
from xaikit.checks import check_choice
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.xai._engine.chunks import run_chunks
from xaikit.xai.cam.resize import image_size, upsample
from xaikit.xai.cam.tokens import grid_candidates
from xaikit.xai.registry import Call, Explained, Method, register_method

#: how the heads of a block are fused in the rollout
HEAD_FUSIONS = ("mean", "max", "min")


#: which models the attention methods read, for their refusals
SUPPORTED = (
    "the attention methods read ViT-style global self-attention over one token sequence (ViT, DeiT, "
    "a Keras ViT: a class token, every block's queries and keys the same tokens of each image); "
    "windowed attention such as Swin's (each image's windows stacked along the batch), "
    "cross-attention and blocks that merge tokens are not supported: use a CAM method on a token "
    "layer (gradcam, layer=...)"
)


def check_blocks(method: str, atts: list[np.ndarray], batch: int, names: list[str] | None = None) -> None:
    """Refuse, naming the block, attention probabilities that are not (``batch``, heads, N, N)
    with the same N queries and keys in every block: the relevance ``R`` (B, N, N) they
    propagate would be wrong or fail to broadcast (Swin's windows come as ``B * windows`` rows
    of the window's tokens; cross-attention has fewer queries than keys).

    Example:
        >>> check_blocks("attention_rollout", [np.zeros((2, 1, 5, 5))], 2)
        >>> try:
        ...     check_blocks("attention_rollout", [np.zeros((8, 1, 9, 9))], 2)
        ... except XaikitValueError as e:
        ...     print(str(e).split("; ")[0])
        model: attention_rollout: block 0 gave attention probabilities (8, 1, 9, 9), expected (2, 1, 9, 9): 8 rows for a batch of 2 (windowed attention stacks each image's windows along the batch)
    """
    n = None
    for i, a in enumerate(atts):
        shape = tuple(int(d) for d in a.shape)
        if n is None and len(shape) == 4 and shape[-2] == shape[-1]:
            n = shape[-1]
        why = None
        if len(shape) != 4:
            why = "not 4-D"
        elif shape[0] != batch:
            why = f"{shape[0]} rows for a batch of {batch} (windowed attention stacks each image's windows along the batch)"
        elif shape[2] != shape[3]:
            why = f"{shape[2]} queries attend to {shape[3]} keys (cross-attention)"
        elif shape[3] != n:
            why = f"{shape[3]} tokens where an earlier block has {n} (blocks that merge tokens)"
        if why is not None:
            block = f"block {i}" + (f" ({names[i]!r})" if names is not None and i < len(names) else "")
            heads = shape[1] if len(shape) == 4 else "heads"
            side = "N" if n is None else n
            raise XaikitValueError(
                f"model: {method}: {block} gave attention probabilities {shape}, expected "
                f"({batch}, {heads}, {side}, {side}): {why}; {SUPPORTED}"
            )


def rollout(attentions: list[np.ndarray], head_fusion: str = "mean") -> np.ndarray:
    """Attention rollout ``R = Â_L ... Â_1`` (B, N, N) of per-block (B, heads, N, N) attentions.

    Example:
        >>> a = np.array([[[[0.0, 1.0], [1.0, 0.0]]]])  # (1 sample, 1 head, 2 tokens)
        >>> rollout([a]).round(3).tolist()
        [[[0.5, 0.5], [0.5, 0.5]]]
    """
    r: np.ndarray | None = None
    for a in attentions:
        eye = np.eye(a.shape[-1])
        fused = (
            a.mean(axis=1)
            if head_fusion == "mean"
            else a.max(axis=1)
            if head_fusion == "max"
            else a.min(axis=1)
        )
        hat = 0.5 * fused + 0.5 * eye
        hat = hat / hat.sum(axis=-1, keepdims=True)
        r = hat if r is None else hat @ r
    if r is None:
        raise XaikitValueError(
            "model: no attention blocks were read; the attention methods need at least one"
        )
    return r


def gradient_weighted(attentions: list[np.ndarray], grads: list[np.ndarray]) -> np.ndarray:
    """Chefer et al.'s relevance: ``R = I``, ``R += mean_heads(max(grad * A, 0)) @ R`` per block.

    Example:
        >>> a = np.array([[[[0.5, 0.5], [0.0, 1.0]]]])
        >>> g = np.array([[[[2.0, -1.0], [0.0, 1.0]]]])
        >>> gradient_weighted([a], [g]).tolist()
        [[[2.0, 0.0], [0.0, 2.0]]]
    """
    n = attentions[0].shape[-1]
    r = np.broadcast_to(np.eye(n), (attentions[0].shape[0], n, n)).copy()
    for a, g in zip(attentions, grads, strict=True):
        weighted = np.maximum(a * g, 0.0).mean(axis=1)
        r = r + weighted @ r
    return r


def class_row_map(relevance: np.ndarray, size: tuple[int, int] | None = None) -> np.ndarray:
    """The class token's row of a (B, N, N) relevance over the patch tokens, on their grid
    (B, h, w): square, or with the aspect ratio of the image ``size`` = (H, W) (a ViT fed
    non-square images, :func:`~xaikit.xai.cam.tokens.grid_candidates`); a token count without
    exactly one grid after a leading class token is refused."""
    n = relevance.shape[-1]
    grids = [(h, w) for h, w in grid_candidates(n, size) if n - h * w >= 1]
    if len(grids) != 1:
        shape = "square" if size is None or size[0] == size[1] else f"{size[0]}:{size[1]}"
        raise XaikitValueError(
            f"model: the attention methods read the class token's row over the patch tokens, laid on a "
            f"{shape} grid after 1 to 5 leading tokens; {n} tokens give "
            f"{'no such grid' if not grids else 'several: ' + str(grids)} (a model without a class token "
            "is not read; an image side that is not a multiple of the patch size gives no grid)"
        )
    h, w = grids[0]
    return relevance[:, 0, n - h * w :].reshape(-1, h, w)


#: rows per chunk of an ``max_batch="auto"`` call: the host holds every block's (rows, heads,
#: N, N) float64 attentions (and gradients) of a chunk; 16 rows of ViT-B/16 at 224 px are about
#: 0.7 GB of them
AUTO_ROWS = 16


def run_attention(call: Call, *, head_fusion: str = "mean") -> Explained:
    """The runner of ``attention_rollout`` and ``transformer_attribution``: (B, H, W) maps, in
    chunks of ``max_batch`` rows (``"auto"``: :data:`AUTO_ROWS`) through the engine's chunk loop,
    which halves a chunk that runs out of memory."""
    inp, bk = call.inp, call.inp.bk
    gradient = call.method.name == "transformer_attribution"
    _, size = image_size(inp)
    targets = call.targets

    def step(r0: int, r1: int, _size: int) -> np.ndarray:
        kw = inp.kwargs.rows(np.arange(r0, r1)) if inp.kwargs else None
        tg = None if targets is None else targets[r0:r1]
        asked = Rows(inp.model, [t[r0:r1] for t in inp.tensors], tg, call.output, kw, call.spec)
        atts, grads, names = bk.attention.attentions(asked, gradient)
        check_blocks(call.method.name, atts, r1 - r0, names)
        relevance = gradient_weighted(atts, grads or []) if gradient else rollout(atts, head_fusion)
        return upsample(class_row_map(relevance, size), size).astype(np.float32)

    rows = call.max_batch if isinstance(call.max_batch, int) else AUTO_ROWS
    device = bk.model_device(inp.model)
    parts = run_chunks(bk, device, inp.batch, rows, step).results
    return Explained([np.concatenate(parts)])


def _check(options: dict[str, Any]) -> None:
    fusion = options.get("head_fusion", "mean")
    if not isinstance(fusion, str):  # a wrong type stays a TypeError; check_choice words both alike
        names = ", ".join(map(repr, HEAD_FUSIONS))
        raise XaikitTypeError(f"head_fusion must be one of {names}; got {describe(fusion)}")
    check_choice(fusion, "head_fusion", HEAD_FUSIONS)


register_method(
    Method(
        "attention_rollout", "transformer", "Attention rollout", run_attention, {"head_fusion": "mean"},
        result="map", gradients=False, check=_check, short="Rollout",
        summary="how much each patch flows into the class token through every block's attention: class-agnostic",
        reference="Abnar & Zuidema, 2020, https://arxiv.org/abs/2005.00928",
    )
)  # fmt: skip
register_method(
    Method(
        "transformer_attribution", "transformer", "Transformer attribution", run_attention, {},
        result="map", target_objects=True, short="Chefer",
        summary="attention weighted by its gradient of the target score, propagated through the blocks",
        reference="Chefer, Gur & Wolf, 2021, https://arxiv.org/abs/2103.15679",
    )
)  # fmt: skip
