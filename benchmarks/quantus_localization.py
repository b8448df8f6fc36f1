"""Compare the localisation metrics of issue 31 with Quantus 0.6 on the same maps and masks, and
save Quantus's scores for the CI test.

Quantus is not a dependency of xaikit: run this in a separate environment with Quantus and
torch, this repository on the path::

    PYTHONPATH=. /tmp/qvenv/bin/python benchmarks/quantus_localization.py

A seeded torch LeNet (1 grey channel, 32x32, 5 classes, untrained; the weights of
``tests/data/lenet_seed0.npz``) explains 8 grey ``shapes`` images with vanilla gradients
(``maps``: channel-summed magnitudes made tie-free; ``signed``: the signed one-channel
gradients). On them, with their object masks:

* ``AttributionLocalisation`` (unweighted; ``weighted=True`` recorded to show its weighting),
* ``TopKIntersection`` (k = 20, our default on 32x32, and k = 100; ``concept_influence``),
* ``AUC`` (on the tie-free maps and on maps rounded to 4 levels, many ties),
* ``RelevanceMassAccuracy`` (non-negative maps; the signed maps recorded to show the difference),
* ``Focus`` on 8 mosaics of 16x16 grey ``shapes`` images (``xk.evaluate.make_mosaics``, two of
  the target class each) explained by the LeNet: from given signed maps, and through
  ``explain_func`` = ``xk.xai.explain`` (vanilla) for the explanation path; and on a non-square
  (32 x 48) synthetic case to check Quantus 0.6's quadrants.

Writes ``tests/data/quantus_localization.npz``, which ``tests/test_evaluate_localization_more.py``
checks against without Quantus. Prints the agreement table and rough timings (batch 8).
"""

from __future__ import annotations

import statistics
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

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "quantus_localization.npz"
WEIGHTS = ROOT / "tests" / "data" / "lenet_seed0.npz"
SAMPLES = 8
FOCUS_CLASS = 1


def lenet() -> torch.nn.Module:
    """The recorded grey LeNet (as ``tests/evaluate_models.seeded_lenet(1)``)."""
    model = LeNet(input_shape=(1, 32, 32), classes=5)
    with np.load(WEIGHTS) as data:
        model.load_state_dict({k[3:]: torch.as_tensor(data[k]) for k in data.files if k.startswith("c1/")})
    return model.eval()


def grey(images: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(
        images.astype(np.float32).mean(axis=3, keepdims=True).transpose(0, 3, 1, 2) / 255.0
    )


def _xk_explain(model, inputs, targets, **_):
    return np.asarray(xk.xai.explain(model, inputs, target=targets, method="vanilla"))


def q(metric, model, x, y, **kw) -> np.ndarray:
    out = metric(model=model, x_batch=x, y_batch=y, channel_first=True, device="cpu", **kw)
    return np.asarray(out, dtype=np.float64)


def median_time(fn, reps: int = 5) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    model = lenet()
    checksum = float(sum(p.detach().double().sum().item() for p in model.parameters()))
    _, test = shapes.load_data(n_train=0, n_eval=SAMPLES, seed=3)
    x = grey(test["x"])
    mask = test["mask"].astype(bool)
    with torch.no_grad():
        y = model(torch.as_tensor(x)).argmax(1).numpy()
    raw = np.asarray(xk.xai.explain(model, x, target=y, method="vanilla"), dtype=np.float64)  # (B, 1, H, W)
    maps = np.abs(raw).sum(axis=1)
    maps = maps + 1e-6 * maps.max() * np.random.default_rng(0).random(maps.shape)  # tie-free
    signed = raw[:, 0]
    tied = np.round(4 * maps / maps.max(axis=(1, 2), keepdims=True))  # 5 levels: many ties
    s4 = mask[:, None].astype(np.float64)
    rec: dict[str, np.ndarray] = {}
    ours: dict[str, np.ndarray] = {}
    ev = xk.evaluate

    rec["al"] = q(
        quantus.AttributionLocalisation(disable_warnings=True), model, x, y, a_batch=maps[:, None], s_batch=s4
    )
    ours["al"] = ev.attribution_localisation(maps, mask)
    rec["al_weighted"] = q(quantus.AttributionLocalisation(weighted=True, disable_warnings=True), model, x, y,
                           a_batch=maps[:, None], s_batch=s4)  # fmt: skip
    for k in (20, 100):
        rec[f"tki_{k}"] = q(quantus.TopKIntersection(k=k, normalise=False, disable_warnings=True), model, x, y,
                            a_batch=maps[:, None], s_batch=s4)  # fmt: skip
        ours[f"tki_{k}"] = ev.top_k_intersection(maps, mask, k=k)
    rec["tki_ci"] = q(quantus.TopKIntersection(k=20, concept_influence=True, normalise=False, disable_warnings=True),
                      model, x, y, a_batch=maps[:, None], s_batch=s4)  # fmt: skip
    ours["tki_ci"] = ev.top_k_intersection(maps, mask, k=20, concept_influence=True)
    rec["auc"] = q(quantus.AUC(disable_warnings=True), model, x, y, a_batch=maps[:, None], s_batch=s4)
    ours["auc"] = ev.localization_auc(maps, mask)
    rec["auc_tied"] = q(
        quantus.AUC(normalise=False, disable_warnings=True), model, x, y, a_batch=tied[:, None], s_batch=s4
    )
    ours["auc_tied"] = ev.localization_auc(tied, mask)
    rec["rma"] = q(quantus.RelevanceMassAccuracy(normalise=False, disable_warnings=True), model, x, y,
                   a_batch=maps[:, None], s_batch=s4)  # fmt: skip
    ours["rma"] = ev.relevance_mass_accuracy(maps, mask)
    rec["rma_signed"] = q(quantus.RelevanceMassAccuracy(normalise=False, disable_warnings=True), model, x, y,
                          a_batch=signed[:, None], s_batch=s4)  # fmt: skip

    # Focus: mosaics of 16x16 grey images, two of FOCUS_CLASS each
    _, small = shapes.load_data(image_size=16, n_train=0, n_eval=40, seed=5)
    mos = ev.make_mosaics(grey(small["x"]), small["y"], target_class=FOCUS_CLASS, n=SAMPLES, seed=0)
    focus_maps = np.asarray(
        xk.xai.explain(model, mos.x, target=mos.target, method="vanilla"), dtype=np.float64
    )
    rec["focus_maps"] = q(quantus.Focus(disable_warnings=True), model, mos.x, mos.target, a_batch=focus_maps.copy(),
                          custom_batch=mos.quadrants)  # fmt: skip
    ours["focus_maps"] = ev.focus(None, mos.x, focus_maps, quadrants=mos.quadrants).scores
    rec["focus_explain"] = q(quantus.Focus(disable_warnings=True), model, mos.x, mos.target, a_batch=None,
                             explain_func=_xk_explain, custom_batch=mos.quadrants)  # fmt: skip
    ours["focus_explain"] = ev.focus(
        model, mos.x, "vanilla", target=mos.target, quadrants=mos.quadrants
    ).scores

    # a non-square case: relevance only in the top-right quadrant (rows :16, columns 24:)
    wide = np.zeros((2, 1, 32, 48), dtype=np.float32)
    wide[:, 0, :16, 24:] = 1.0
    wide[1, 0, 16:, :24] = 0.5  # and half as much in the bottom-left one
    wide_q = np.array([[0, 1, 0, 0], [0, 1, 0, 0]])
    try:
        rec["focus_wide"] = q(quantus.Focus(disable_warnings=True), model, wide, np.zeros(2, dtype=int),
                              a_batch=wide.copy(), custom_batch=wide_q)  # fmt: skip
    except Exception as exc:  # the LeNet cannot take 32 x 48 inputs if Quantus calls it
        print(f"Quantus Focus on the 32 x 48 case failed: {exc!r}")
    ours["focus_wide"] = ev.focus(None, wide, wide, quadrants=wide_q).scores

    print(f"quantus {quantus.__version__}, torch {torch.__version__}, {SAMPLES} samples")
    print("| comparison | max abs difference |")
    print("|---|---:|")
    for key, value in ours.items():
        if key in rec:
            print(f"| {key} | {np.nanmax(np.abs(value - rec[key])):.2e} |")
    print("weighted attribution localisation, Quantus:", np.round(rec["al_weighted"], 6))
    print(
        "weighted attribution localisation, ours:   ",
        np.round(ev.attribution_localisation(maps, mask, weighted=True), 4),
    )
    print("relevance mass accuracy on signed maps, Quantus:", np.round(rec["rma_signed"], 4))
    print("relevance mass accuracy on signed maps, ours:   ",
          np.round(ev.relevance_mass_accuracy(signed, mask, absolute=False), 4))  # fmt: skip

    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        OUT, x=x, y=y, mask=mask, maps=maps, signed=signed, tied=tied, checksum=np.float64(checksum),
        mosaics=mos.x, quadrants=mos.quadrants, mosaic_target=mos.target, focus_maps=focus_maps,
        wide=wide, wide_quadrants=wide_q, **{f"q_{k}": v for k, v in rec.items()},
    )  # fmt: skip
    print(f"wrote {OUT} ({OUT.stat().st_size // 1024} KB)")

    # rough timings, batch 8, maps given (Quantus's per-call overhead included)
    print("\n| metric, batch 8 | xaikit s | Quantus s | speed-up |")
    print("|---|---:|---:|---:|")
    cases = [
        ("attribution_localisation", lambda: ev.attribution_localisation(maps, mask),
         lambda: q(quantus.AttributionLocalisation(disable_warnings=True), model, x, y, a_batch=maps[:, None], s_batch=s4)),
        ("top_k_intersection", lambda: ev.top_k_intersection(maps, mask, k=20),
         lambda: q(quantus.TopKIntersection(k=20, disable_warnings=True), model, x, y, a_batch=maps[:, None], s_batch=s4)),
        ("localization_auc", lambda: ev.localization_auc(maps, mask),
         lambda: q(quantus.AUC(disable_warnings=True), model, x, y, a_batch=maps[:, None], s_batch=s4)),
        ("focus (maps)", lambda: ev.focus(None, mos.x, focus_maps, quadrants=mos.quadrants),
         lambda: q(quantus.Focus(disable_warnings=True), model, mos.x, mos.target, a_batch=focus_maps.copy(),
                   custom_batch=mos.quadrants)),
    ]  # fmt: skip
    for name, a, b in cases:
        ta, tb = median_time(a), median_time(b)
        print(f"| {name} | {ta:.4f} | {tb:.4f} | {tb / ta:.1f}x |")


if __name__ == "__main__":
    main()
