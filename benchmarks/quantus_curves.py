"""Compare ``xk.evaluate.region_perturbation``, ``irof`` and ``selectivity`` with Quantus 0.6.

Quantus is not a dependency of xaikit: run this in a separate environment with Quantus 0.6 and
torch, with this repository on the path::

    PYTHONPATH=. /tmp/qvenv/bin/python benchmarks/quantus_curves.py

On a seeded torch LeNet (``torch.manual_seed(0)``, 5 classes, softmax output) and grey 32x32
``shapes`` images (each rescaled to span exactly [0, 1], so that SLIC sees the same values on
both sides: xaikit's ``segment`` rescales each image first, Quantus does not), with the same
tie-free signed IG maps (``normalise=False, abs=False`` on Quantus's side):

* RegionPerturbation (MoRF and LeRF, 4x4 patches: 64 regions, ``regions_evaluation=100``
  capped at 64; 5x5 patches: a padded, centred grid, 20 steps), black fill: its curves
  ``f(x) - f(x_k)``, k = 1 ... L, against our ``.drops[:, 1:]``. Its ``"uniform"`` fill (one
  U(0, 1) value per patch and step from ``np.random``) is recorded by wrapping its perturbation
  function and handed to ours as an explicit ``baseline`` array.
* Selectivity (4x4 and 5x5 patches, black): its curves ``f(x_k)``, k = 1 ... N, against our
  ``.curve[:, 1:]``.
* IROF (SLIC at scikit-image's defaults): with an explicit per-image mean fill (the array
  Quantus takes as ``perturb_baseline``), its scores against ours converted to its convention;
  its SLIC segments are saved. With its default ``"mean"`` (the batch's mean, recomputed from
  the perturbed images each step) it is recorded for the whole batch and for each sample alone:
  the two differ (a sample's score depends on its batch).

Saves Quantus's outputs with their inputs to ``tests/data/quantus_curves.npz`` for the CI test
and prints the agreement.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import quantus
import torch
from quantus.functions import perturb_func as qperturb

import xaikit as xk
from xaikit.architecture.torch import LeNet
from xaikit.dataset.data import shapes

if not hasattr(np, "trapz"):  # numpy 2.4 removed it; Quantus 0.6's IROF and get_auc_score call it
    np.trapz = np.trapezoid  # type: ignore[attr-defined]  # noqa: NPY201

SEED = 7
N_SAVED = 8
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "quantus_curves.npz"


def lenet_and_data(n: int) -> tuple[torch.nn.Module, np.ndarray, np.ndarray, np.ndarray]:
    torch.manual_seed(0)
    model = LeNet(input_shape=(1, 32, 32), classes=5).eval()  # softmax output
    _, test = shapes.load_data(n_train=0, n_eval=n, seed=3)
    x = test["x"].astype(np.float64).mean(axis=3, keepdims=True).transpose(0, 3, 1, 2)
    lo = x.reshape(n, -1).min(axis=1)[:, None, None, None]
    hi = x.reshape(n, -1).max(axis=1)[:, None, None, None]
    x = np.ascontiguousarray(((x - lo) / (hi - lo)).astype(np.float32))
    assert np.all(x.reshape(n, -1).min(axis=1) == 0) and np.all(x.reshape(n, -1).max(axis=1) == 1)
    with torch.no_grad():
        y = model(torch.as_tensor(x)).argmax(1).numpy()
    raw = xk.xai.explain(model, x, target=y, method="integrated", nsamples=16, baseline="black")
    smap = np.asarray(raw).sum(axis=1)
    smap = (smap + 1e-6 * np.abs(smap).max() * np.random.default_rng(0).random(smap.shape)).astype(np.float32)
    return model, x, y, smap


def checksum(model: torch.nn.Module) -> float:
    return float(sum(p.detach().double().sum().item() for p in model.parameters()))


def _call(metric: Any, model, x, y, a) -> np.ndarray:
    out = metric(model=model, x_batch=x, y_batch=y, a_batch=a[:, None], softmax=False, channel_first=True,
                 device="cpu")  # fmt: skip
    return np.asarray(out, dtype=np.float64)


def quantus_irof_convention(curve: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Quantus's IROF from our curve: ``S_b - trapezoid(c_1 ... c_Smax)`` with c zero past S_b."""
    rel = np.nan_to_num(curve[:, 1:] / curve[:, :1], nan=0.0)
    return steps - np.trapezoid(rel, axis=1)


def main() -> None:
    model, x, y, smap = lenet_and_data(N_SAVED)
    saved: dict[str, Any] = {"x": x, "y": y, "smap": smap, "checksum": np.array(checksum(model))}
    rows: list[tuple[str, float]] = []

    # region perturbation, black fill
    for patch, steps in ((4, 100), (5, 20)):
        for order in ("morf", "lerf"):
            metric = quantus.RegionPerturbation(patch_size=patch, order=order, regions_evaluation=steps,
                                                perturb_baseline="black", normalise=False, abs=False,
                                                disable_warnings=True)  # fmt: skip
            theirs = _call(metric, model, x, y, smap)
            ours = xk.evaluate.region_perturbation(model, x, smap, target=y, patch_size=patch, steps=steps,
                                                   order=order, baseline="black")  # fmt: skip
            saved[f"region_{order}_p{patch}"] = theirs
            rows.append((f"RegionPerturbation {order} {patch}x{patch}, black ({theirs.shape[1]} steps)",
                         float(np.abs(ours.drops[:, 1:] - theirs).max())))  # fmt: skip

    # region perturbation, Quantus's uniform fill recorded and handed over
    draws: list[np.ndarray] = []

    def recording(arr: np.ndarray, indices: np.ndarray, perturb_baseline: Any, **kw: Any) -> np.ndarray:
        out = qperturb.batch_baseline_replacement_by_indices(
            arr=arr, indices=indices, perturb_baseline=perturb_baseline, **kw
        )
        draws.append(out[np.arange(len(out)), indices[:, 0]].copy())
        return out

    np.random.seed(SEED)  # noqa: NPY002 - Quantus draws from the global generator
    metric = quantus.RegionPerturbation(patch_size=4, order="morf", regions_evaluation=30, perturb_func=recording,
                                        perturb_baseline="uniform", normalise=False, abs=False,
                                        disable_warnings=True)  # fmt: skip
    theirs = _call(metric, model, x, y, smap)
    u = np.stack(draws)  # (steps, B): one value per patch
    saved["region_uniform_draws"] = u
    saved["region_uniform"] = theirs
    first = xk.evaluate.region_perturbation(
        model, x, smap, target=y, patch_size=4, steps=30, baseline="black"
    )
    fill = np.zeros(x.shape)
    for b in range(len(x)):
        for k in range(30):
            fill[b, 0][first.regions[b] == first.order[b, k]] = u[k, b]
    ours = xk.evaluate.region_perturbation(model, x, smap, target=y, patch_size=4, steps=30, baseline=fill)
    rows.append(("RegionPerturbation morf 4x4, Quantus's uniform draws (30 steps)",
                 float(np.abs(ours.drops[:, 1:] - theirs).max())))  # fmt: skip

    # selectivity
    for patch in (4, 5):
        metric = quantus.Selectivity(patch_size=patch, perturb_baseline="black", normalise=False, abs=False,
                                     disable_warnings=True)  # fmt: skip
        theirs = _call(metric, model, x, y, smap)
        ours = xk.evaluate.selectivity(model, x, smap, target=y, patch_size=patch)
        saved[f"selectivity_p{patch}"] = theirs
        rows.append((f"Selectivity {patch}x{patch} ({theirs.shape[1]} patches)",
                     float(np.abs(ours.curve[:, 1:] - theirs).max())))  # fmt: skip

    # IROF: Quantus's SLIC segments, and its scores with a per-image mean fill
    segs = np.stack([quantus.helpers.utils.get_superpixel_segments(np.moveaxis(xi, 0, -1).astype("double"), "slic")
                     for xi in x])  # fmt: skip
    saved["irof_segments"] = segs.astype(np.int16)
    ours = xk.evaluate.irof(model, x, smap, target=y)
    rows.append(("IROF: SLIC segments (pixels differing)", float((ours.regions != segs).sum())))
    per_image_mean = np.broadcast_to(x.mean(axis=(1, 2, 3), keepdims=True), x.shape).astype(np.float64)
    metric = quantus.IROF(perturb_baseline=per_image_mean, normalise=False, abs=False, return_aggregate=False,
                          disable_warnings=True)  # fmt: skip
    theirs = _call(metric, model, x, y, smap)
    saved["irof_own_mean"] = theirs
    rows.append(("IROF, per-image mean fill (Quantus's convention)",
                 float(np.abs(quantus_irof_convention(ours.curve, ours.steps) - theirs).max())))  # fmt: skip
    default = quantus.IROF(normalise=False, abs=False, return_aggregate=False, disable_warnings=True)
    batch = _call(default, model, x, y, smap)
    alone = np.concatenate(
        [_call(default, model, x[i : i + 1], y[i : i + 1], smap[i : i + 1]) for i in range(len(x))]
    )
    saved["irof_default_batch"] = batch
    saved["irof_default_alone"] = alone
    rows.append(("IROF default: batch of 8 vs each sample alone (Quantus against itself)",
                 float(np.abs(batch - alone).max())))  # fmt: skip
    rows.append(("IROF default (batch mean, drifting) vs ours (own mean), Quantus's convention",
                 float(np.abs(quantus_irof_convention(ours.curve, ours.steps) - batch).max())))  # fmt: skip

    print(
        f"quantus {quantus.__version__}, torch {torch.__version__}; LeNet, {len(x)} grey 32x32 shapes images"
    )
    print("| agreement | max abs difference |\n|---|---:|")
    for name, d in rows:
        print(f"| {name} | {d:.2e} |")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **saved)
    print(f"saved {OUT} ({OUT.stat().st_size / 1024:.0f} KB)")


if __name__ == "__main__":
    main()
