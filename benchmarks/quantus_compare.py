"""Compare ``xk.evaluate`` with Quantus on the same model, inputs, maps and masks.

Quantus (https://github.com/understandable-machine-intelligence-lab/Quantus) is not a
dependency of xaikit. Run this script in a separate environment that has Quantus and torch,
with this repository on the path, e.g.::

    python -m venv /tmp/qvenv && /tmp/qvenv/bin/pip install torch quantus
    PYTHONPATH=. /tmp/qvenv/bin/python benchmarks/quantus_compare.py

Compared, on a seeded torch LeNet and 16 ``shapes`` images (grey: the channel mean, because
Quantus's pixel flipping steps through flattened features and checks the step size against the
spatial size only) with their object masks:

* our deletion curve (``baseline="black"``) with Quantus's ``PixelFlipping``
  (``perturb_baseline="black"``, ``features_in_step`` = the pixels of one of our steps, the same
  tie-free map). Quantus's
  curve has no unperturbed point and its AUC is a trapezoid with dx = 1 per step, so the curves
  are compared point by point and the AUCs after converting the convention.
* our pointing game with Quantus's ``PointingGame``, and our energy with its
  ``RelevanceMassAccuracy`` (on non-negative maps, where both are "mass inside / total mass").
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import quantus
import torch

import xaikit as xk
from xaikit.architecture.torch import LeNet
from xaikit.dataset.data import shapes

STEPS = 16


def main() -> None:
    torch.manual_seed(0)
    model = LeNet(input_shape=(1, 32, 32), classes=5).eval()
    _, test = shapes.load_data(n_train=0, n_eval=16, seed=3)
    x = np.ascontiguousarray(
        test["x"].astype(np.float32).mean(axis=3, keepdims=True).transpose(0, 3, 1, 2) / 255.0
    )
    mask = test["mask"]
    with torch.no_grad():
        y = model(torch.as_tensor(x)).argmax(1).numpy()
    raw = xk.xai.explain(model, x, target=y, method="integrated", nsamples=16, baseline="black")
    rng = np.random.default_rng(0)
    smap = np.abs(raw).sum(axis=1)  # (B, H, W)
    smap = smap + 1e-9 * smap.max() * rng.random(smap.shape)  # no ties: one ranking for both tools
    rows = []

    t_ours = float("inf")
    for _ in range(2):  # the second call is warm
        t0 = time.perf_counter()
        # Quantus sorts the map as given (abs=False below) = our "signed" order; the map is
        # non-negative, so "magnitude" (and the default "auto") give the same order here
        ours = xk.evaluate.deletion(model, x, smap, target=y, steps=STEPS, baseline="black", rank="signed")
        t_ours = min(t_ours, time.perf_counter() - t0)
    pixels_per_step = 32 * 32 // STEPS
    metric = quantus.PixelFlipping(
        features_in_step=pixels_per_step,
        perturb_baseline="black",
        normalise=False,
        abs=False,
        disable_warnings=True,
    )
    a_batch = smap[:, None]
    t0 = time.perf_counter()
    theirs = np.asarray(
        metric(
            model=model,
            x_batch=x,
            y_batch=y,
            a_batch=a_batch,
            softmax=False,
            channel_first=True,
            device="cpu",
        )
    )
    t_theirs = time.perf_counter() - t0
    diff = np.abs(ours.scores[:, 1:] - theirs).max()
    auc_q = np.trapezoid(theirs, dx=1.0, axis=1)
    auc_ours_in_q_units = np.trapezoid(ours.scores[:, 1:], dx=1.0, axis=1)
    rows.append(
        (
            "deletion curve vs PixelFlipping (max abs difference of 16 x 16 scores)",
            f"{diff:.2e}",
            t_ours,
            t_theirs,
        )
    )
    rows.append(
        (
            "AUC, Quantus convention (dx=1, no 0-point): max abs difference",
            f"{np.abs(auc_q - auc_ours_in_q_units).max():.2e}",
            float("nan"),
            float("nan"),
        )
    )

    t0 = time.perf_counter()
    loc = xk.evaluate.localization(smap, mask)
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    pg = np.asarray(
        quantus.PointingGame(disable_warnings=True)(
            model=model, x_batch=x, y_batch=y, a_batch=smap[:, None], s_batch=mask[:, None].astype(float),
            channel_first=True, device="cpu",
        )
    )  # fmt: skip
    t_pg = time.perf_counter() - t0
    rows.append(
        (
            f"pointing game vs PointingGame (samples that agree, of {len(x)})",
            f"{int((pg.astype(bool) == loc['pointing']).sum())}",
            t_ours,
            t_pg,
        )
    )
    t0 = time.perf_counter()
    rma = np.asarray(
        quantus.RelevanceMassAccuracy(normalise=False, disable_warnings=True)(
            model=model, x_batch=x, y_batch=y, a_batch=smap[:, None], s_batch=mask[:, None].astype(float),
            channel_first=True, device="cpu",
        )
    )  # fmt: skip
    t_rma = time.perf_counter() - t0
    rows.append(
        (
            "energy vs RelevanceMassAccuracy (max abs difference)",
            f"{np.abs(rma - loc['energy']).max():.2e}",
            t_ours,
            t_rma,
        )
    )

    print(f"quantus {quantus.__version__}, torch {torch.__version__}")
    print("| comparison | result | xaikit s | Quantus s |")
    print("|---|---:|---:|---:|")
    for name, result, a, b in rows:
        fa = "" if np.isnan(a) else f"{a:.3f}"
        fb = "" if np.isnan(b) else f"{b:.3f}"
        print(f"| {name} | {result} | {fa} | {fb} |")
    print(f"\nour deletion AUC (fractions, with the 0-point), mean: {ours.auc_mean:.4f}")
    print(f"Quantus PixelFlipping AUC (dx=1 per step), mean: {auc_q.mean():.4f}")


if __name__ == "__main__":
    main()
