"""Picture of docs/transformers.md: a small vision transformer's attention rollout beside its
transformer attribution (Chefer et al.) and Grad-CAM on a token layer, each for the predicted
class, with the shape's outline drawn on the image.

The model is a Hugging Face ``ViTForImageClassification`` built from a small config (random
initial weights; nothing downloads) and trained here, seeded, for a fixed number of steps on xaikit's
synthetic shapes (circle, square, triangle, cross, ring on a textured background, 32x32).

Run: ``python gallery/vit_attention.py`` (writes ``docs/img/transformers_vit.png``; about 90 s on a
2-core CPU). ``--steps`` sets the training steps (``--quick``: 20, a check of the script).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers

import xaikit as xk
from xaikit.dataset.data import shapes

NAMES = {v: k for k, v in shapes.label_mapping.items()}
#: a token layer with gradients on the patch tokens: the last block's input norm (the last block's
#: output reaches the classifier through the class token only)
CAM_LAYER = "vit.layers.2.layernorm_before"


def as_tensor(images: np.ndarray) -> Any:
    """(N, 32, 32, 3) uint8 -> (N, 3, 32, 32) float in [0, 1]."""
    return torch.tensor(images).permute(0, 3, 1, 2).float() / 255.0


def train(steps: int, seed: int = 0) -> tuple[Any, Any, Any, Any]:
    """``(model, eval images, eval labels, eval masks)``; the model trained ``steps`` steps of 64."""
    torch.manual_seed(seed)
    train_data, eval_data = shapes.load_data(n_train=8000, n_eval=300, seed=seed)
    x, y = as_tensor(train_data["x"]), torch.tensor(train_data["y"]).long()
    config = transformers.ViTConfig(
        image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
        intermediate_size=128, num_labels=len(NAMES), hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    model = transformers.ViTForImageClassification(config)
    opt = torch.optim.AdamW(model.parameters(), 3e-3, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, 3e-3, total_steps=steps)
    rng = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        idx = torch.randint(0, len(x), (64,), generator=rng)
        loss = torch.nn.functional.cross_entropy(model(x[idx]).logits, y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        schedule.step()
    return model.eval(), as_tensor(eval_data["x"]), np.asarray(eval_data["y"]), np.asarray(eval_data["mask"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument(
        "--out", default=str(Path(__file__).resolve().parent.parent / "docs" / "img" / "transformers_vit.png")
    )
    p.add_argument("--steps", type=int, default=3000, help="training steps (batches of 64)")
    p.add_argument("--quick", action="store_true", help="train 20 steps (a check of the script)")
    p.add_argument("--rows", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(2)
    model, x, y, masks = train(20 if args.quick else args.steps)
    with torch.no_grad():
        predicted = model(x).logits.argmax(1).numpy()
    accuracy = float((predicted == y).mean())
    right = np.flatnonzero(predicted == y)
    # one correctly classified example of each class first, then others
    picks: list[int] = []
    for k in range(len(NAMES)):
        picks += [int(i) for i in right if y[i] == k][:1]
    picks = (picks + [int(i) for i in right if i not in picks])[: args.rows]
    if len(picks) < args.rows:  # a model trained too briefly (--quick) gets some wrong ones
        picks += [int(i) for i in range(len(y)) if i not in picks][: args.rows - len(picks)]
    idx = np.array(picks)
    images = x[idx]
    maps = {
        "attention rollout": xk.xai.explain(model, images, method="attention_rollout"),
        "transformer attribution": xk.xai.explain(model, images, method="transformer_attribution"),
        "Grad-CAM (last block's tokens)": xk.xai.explain(model, images, method="gradcam", layer=CAM_LAYER),
    }
    shown = images.numpy()
    outline = xk.viz.Contour(masks[idx].reshape(len(idx), 32, 32) > 0)
    text = [f"{NAMES[int(y[i])]} → {NAMES[int(predicted[i])]}" for i in idx]
    cols: dict[str, list[Any]] = {"true → predicted": [text], "image (shape outlined)": [shown, outline]}
    cols.update({title: [np.asarray(m)] for title, m in maps.items()})
    figure = xk.viz.ImgData(
        cols,
        colormap="inferno",
        figure_title=f"ViT (3 blocks, 4x4 patches of 8 px), eval accuracy {accuracy:.0%}",
    ).paint_figure()
    figure.savefig(args.out, dpi=110)
    print(f"eval accuracy {accuracy:.3f}; wrote {args.out}")


if __name__ == "__main__":
    main()
