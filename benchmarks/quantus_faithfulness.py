"""Compare ``xk.evaluate.road``, ``infidelity`` and ``faithfulness_correlation`` with Quantus.

Quantus is not a dependency of xaikit: run this in a separate environment with Quantus 0.6 and
torch, with this repository on the path::

    PYTHONPATH=. /tmp/qvenv/bin/python benchmarks/quantus_faithfulness.py [--resnet]

On a seeded torch LeNet (``torch.manual_seed(0)``, 5 classes) and grey 32x32 ``shapes``
images, with the same tie-free maps:

* ROAD: Quantus's ``ROAD`` (MoRF; LeRF by giving it the negated map) with ``noise=0`` and with
  its default noise after ``np.random.seed(SEED)``: our ``road`` draws the same noise from
  ``RandomState(SEED)``. Also the imputed images themselves against Quantus's
  ``noisy_linear_imputation``.
* Infidelity: Quantus's ``Infidelity`` is deterministic (cumulative 4x4 black patches in raster
  order; see ``xaikit.evaluate.infidelity``): we rebuild those perturbations, check them against
  the ones Quantus makes (recorded), and give them to our ``infidelity(normalize=False)``.
* Faithfulness correlation: Quantus's subsets are recorded (its ``np.random.choice`` calls),
  rebuilt from ``RandomState(SEED)`` (B draws of ``choice`` per run, then the B uniforms its
  baseline table draws), and given to ours through ``subsets=``.

Prints the agreement and timings (xaikit vs Quantus, batch 32, median of 3 runs; the machine
is shared with other jobs, so timings are indicative), and saves Quantus's outputs with their
inputs to ``tests/data/quantus_faithfulness.npz`` for the CI test.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import quantus
import torch
from quantus.functions import perturb_func as qperturb

import xaikit as xk
from xaikit.architecture.torch import LeNet
from xaikit.dataset.data import shapes
from xaikit.evaluate.faithfulness import impute

SEED = 7
N_SAVED = 8  # samples saved for the CI test
PERCENTAGES = list(range(1, 100, 2))  # Quantus's default ROAD percentages
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "quantus_faithfulness.npz"


def lenet_and_data(n: int) -> tuple[torch.nn.Module, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    torch.manual_seed(0)
    model = LeNet(input_shape=(1, 32, 32), classes=5).eval()
    _, test = shapes.load_data(n_train=0, n_eval=n, seed=3)
    x = np.ascontiguousarray(
        test["x"].astype(np.float32).mean(axis=3, keepdims=True).transpose(0, 3, 1, 2) / 255.0
    )
    with torch.no_grad():
        y = model(torch.as_tensor(x)).argmax(1).numpy()
    raw = xk.xai.explain(model, x, target=y, method="integrated", nsamples=16, baseline="black").astype(
        np.float32
    )
    rng = np.random.default_rng(0)
    smap = raw.sum(axis=1)
    smap = (smap + 1e-6 * np.abs(smap).max() * rng.random(smap.shape)).astype(np.float32)  # no ties
    return model, x, y, raw, smap


def template_model(n: int) -> tuple[torch.nn.Module, np.ndarray, np.ndarray, np.ndarray]:
    """A linear classifier whose class templates are 5 other (centred) shapes images, the first
    ``n`` images, their predicted classes and tie-free IG maps. The untrained LeNet predicts one
    class whatever ROAD removes (its accuracy curve would be all ones); this one does not."""
    _, test = shapes.load_data(n_train=0, n_eval=n + 5, seed=3)
    xa = np.ascontiguousarray(
        test["x"].astype(np.float32).mean(axis=3, keepdims=True).transpose(0, 3, 1, 2) / 255.0
    )
    t = xa[n:].reshape(5, -1)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(t.shape[1], 5)).eval()
    with torch.no_grad():
        model[1].weight.copy_(torch.as_tensor(t - t.mean(axis=1, keepdims=True)))
        model[1].bias.zero_()
    x = xa[:n]
    with torch.no_grad():
        y = model(torch.as_tensor(x)).argmax(1).numpy()
    smap = xk.xai.explain(model, x, target=y, method="integrated", nsamples=16, baseline="black").sum(axis=1)
    smap = (smap + 1e-6 * np.abs(smap).max() * np.random.default_rng(0).random(smap.shape)).astype(np.float32)
    return model, x, y, smap


def checksum(model: torch.nn.Module) -> float:
    return float(sum(p.detach().double().sum().item() for p in model.parameters()))


def cumulative_patches(x: np.ndarray, patch: int) -> np.ndarray:
    """Quantus's Infidelity perturbations I = x - x_k: 4x4 (``patch``) blocks set to the sample's
    minimum one after another in raster order, cumulatively; (K, B, C, H, W)."""
    b, _, h, w = x.shape
    low = x.reshape(b, -1).min(axis=1)[:, None, None, None]
    xp = x.copy()
    out = []
    for i in range(h // patch):
        for j in range(w // patch):
            xp[:, :, i * patch : (i + 1) * patch, j * patch : (j + 1) * patch] = low
            out.append(x - xp)
    return np.stack(out)


def quantus_subsets(seed: int, n_runs: int, batch: int, n_features: int, size: int) -> np.ndarray:
    """The subsets Quantus's FaithfulnessCorrelation draws after ``np.random.seed(seed)``."""
    rs = np.random.RandomState(seed)
    out = []
    for _ in range(n_runs):
        out.append(np.stack([rs.choice(n_features, size, replace=False) for _ in range(batch)]))
        rs.uniform(0.0, 1.0, size=batch)  # its baseline table draws a "uniform" baseline each call
    return np.stack(out)


def median_time(fn, runs: int = 3) -> float:
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def q_road(model, x, y, a, noise, percentages=PERCENTAGES) -> np.ndarray:
    metric = quantus.ROAD(
        percentages=percentages, noise=noise, normalise=False, abs=False, disable_warnings=True
    )
    out = metric(
        model=model, x_batch=x, y_batch=y, a_batch=a, softmax=False, channel_first=True, device="cpu"
    )
    return np.array([out[p] for p in percentages])


def q_infidelity(model, x, y, a, n_perturb_samples=1) -> np.ndarray:
    metric = quantus.Infidelity(
        perturb_patch_sizes=[4],
        n_perturb_samples=n_perturb_samples,
        normalise=False,
        abs=False,
        disable_warnings=True,
    )
    return np.asarray(
        metric(model=model, x_batch=x, y_batch=y, a_batch=a, softmax=False, channel_first=True, device="cpu")
    )


def q_fc(model, x, y, a, n_runs=100, size=224) -> np.ndarray:
    metric = quantus.FaithfulnessCorrelation(
        nr_runs=n_runs,
        subset_size=size,
        normalise=False,
        abs=False,
        return_aggregate=False,
        disable_warnings=True,
    )
    out = metric(
        model=model, x_batch=x, y_batch=y, a_batch=a, softmax=False, channel_first=True, device="cpu"
    )
    return np.asarray(out, dtype=np.float64)


def agreement() -> dict[str, np.ndarray]:
    model, x, y, raw, smap = lenet_and_data(N_SAVED)
    fr = np.array(PERCENTAGES) / 100.0
    saved: dict[str, np.ndarray] = {
        "x": x,
        "y": y,
        "raw": raw,
        "smap": smap,
        "checksum": np.array(checksum(model)),
    }
    rows = []

    # ROAD, noise 0 and seeded noise, both orders, on the template classifier
    tmodel, tx, ty, tmap = template_model(N_SAVED)
    saved.update(road_weight=tmodel[1].weight.detach().numpy().copy(), road_x=tx, road_y=ty, road_smap=tmap)
    for noise in (0.0, 0.01):
        for order, a in (("morf", tmap), ("lerf", -tmap)):
            np.random.seed(SEED)  # noqa: NPY002 - Quantus draws from the global generator
            theirs = q_road(tmodel, tx, ty, a[:, None], noise)
            ours = xk.evaluate.road(
                tmodel, tx, tmap, target=ty, fractions=fr, order=order, stdev=noise, seed=SEED
            )
            curve = ours.morf if order == "morf" else ours.lerf
            key = f"road_{order}_noise{noise:g}"
            saved[key] = theirs
            rows.append(
                (
                    f"ROAD {order.upper()} accuracy, noise={noise:g} (50 percentages)",
                    np.abs(curve.accuracy - theirs).max(),
                )
            )
    # the imputed images themselves (sample 0, three percentages), noise 0 and seeded
    order0 = np.argsort(-smap[0].ravel(), kind="stable")
    imputed = []
    for noise in (0.0, 0.01):
        for p in (10, 50, 90):
            idx = order0[: int(1024 * p / 100)]
            np.random.seed(SEED)  # noqa: NPY002 - Quantus draws from the global generator
            theirs = qperturb.noisy_linear_imputation(arr=x[0].astype(np.float64), indices=idx, noise=noise)
            ours = x[0].reshape(1, -1).astype(np.float64).copy()
            ours[:, idx] = impute(ours, idx, 32, 32) + noise * np.random.RandomState(SEED).randn(1, len(idx))
            imputed.append(theirs.reshape(32, 32))
            rows.append(
                (
                    f"imputed image, {p} % removed, noise={noise:g}",
                    np.abs(ours.reshape(32, 32) - theirs.reshape(32, 32)).max(),
                )
            )
    saved["imputed"] = np.stack(imputed).astype(np.float64)

    # Infidelity: record Quantus's perturbed inputs, check our rebuild of them, compare values
    recorded = []

    def recording(arr, indices, perturb_baseline, **kw):
        out = qperturb.batch_baseline_replacement_by_indices(
            arr=arr, indices=indices, perturb_baseline=perturb_baseline, **kw
        )
        recorded.append(out.copy())
        return out

    metric = quantus.Infidelity(perturb_patch_sizes=[4], n_perturb_samples=1, normalise=False, abs=False,
                                perturb_func=recording, disable_warnings=True)  # fmt: skip
    theirs = np.asarray(
        metric(
            model=model, x_batch=x, y_batch=y, a_batch=raw, softmax=False, channel_first=True, device="cpu"
        )
    )
    pert = cumulative_patches(x, 4)
    rec = x[None] - np.stack(recorded).reshape(pert.shape)
    rows.append(("Infidelity perturbations: our rebuild vs Quantus's", np.abs(rec - pert).max()))
    ours = xk.evaluate.infidelity(model, x, raw, target=y, perturbation=pert, normalize=False)
    saved["infidelity"] = theirs
    rows.append(("Infidelity (Quantus's perturbations, normalize=False)", np.abs(ours.scores - theirs).max()))

    # Faithfulness correlation: record Quantus's subsets, check our rebuild, compare
    picks = []
    choice = np.random.choice

    def recording_choice(*a, **kw):
        out = choice(*a, **kw)
        picks.append(out)
        return out

    np.random.seed(SEED)  # noqa: NPY002 - Quantus draws from the global generator
    np.random.choice = recording_choice
    try:
        theirs = q_fc(model, x, y, smap[:, None])
    finally:
        np.random.choice = choice
    sub = quantus_subsets(SEED, 100, len(x), 1024, 224)
    rows.append(
        (
            "FaithfulnessCorrelation subsets: our rebuild vs Quantus's (mismatches)",
            float((np.stack(picks).reshape(sub.shape) != sub).sum()),
        )
    )
    ours = xk.evaluate.faithfulness_correlation(model, x, smap, target=y, subsets=sub, baseline="black")
    saved["faithfulness_correlation"] = theirs
    rows.append(("FaithfulnessCorrelation (Quantus's subsets)", np.abs(ours.scores - theirs).max()))

    print(
        f"quantus {quantus.__version__}, torch {torch.__version__}; LeNet, {len(x)} grey 32x32 shapes images"
    )
    print("| agreement | max abs difference |\n|---|---:|")
    for name, d in rows:
        print(f"| {name} | {d:.2e} |")
    return saved


def timings(
    model, x, y, raw, smap, label: str, road_percentages, patch: int, fc_runs: int, runs: int
) -> None:
    """Median seconds of ``runs`` calls, ours and Quantus's, at equal settings."""
    fr = np.array(road_percentages) / 100.0
    rows = []

    def both(name, ours, theirs):
        t_o = median_time(ours, runs)
        try:
            t_q = median_time(theirs, runs)
        except Exception as exc:  # Quantus's ROAD indexes one-channel images only
            name += f" (Quantus fails: {type(exc).__name__}: {str(exc)[:60]})"
            t_q = float("nan")
        rows.append((name, t_o, t_q))

    both(
        f"ROAD MoRF, {len(fr)} fractions, noise 0.01",
        lambda: xk.evaluate.road(model, x, smap, target=y, fractions=fr, stdev=0.01),
        lambda: q_road(model, x, y, smap[:, None], 0.01, road_percentages),
    )
    pert = cumulative_patches(x, patch)
    metric = quantus.Infidelity(
        perturb_patch_sizes=[patch], n_perturb_samples=1, normalise=False, abs=False, disable_warnings=True
    )
    both(
        f"Infidelity, Quantus's {len(pert)} {patch}x{patch} patch perturbations (its n_perturb_samples=1)",
        lambda: xk.evaluate.infidelity(model, x, raw, target=y, perturbation=pert, normalize=False),
        lambda: metric(
            model=model, x_batch=x, y_batch=y, a_batch=raw, softmax=False, channel_first=True, device="cpu"
        ),
    )
    rows.append(
        (
            f"Infidelity, ours gaussian with {len(pert)} perturbations (device noise)",
            median_time(lambda: xk.evaluate.infidelity(model, x, raw, target=y, nsamples=len(pert)), runs),
            float("nan"),
        )
    )
    both(
        f"FaithfulnessCorrelation, {fc_runs} runs of 224",
        lambda: xk.evaluate.faithfulness_correlation(
            model, x, smap, target=y, subset_size=224, nsamples=fc_runs
        ),
        lambda: q_fc(model, x, y, smap[:, None], fc_runs, 224),
    )
    print(
        f"\n{label}, batch {len(x)}, torch CPU ({torch.get_num_threads()} threads; shared machine), median of {runs}:"
    )
    print("| metric | xaikit s | Quantus s | speed-up |\n|---|---:|---:|---:|")
    for name, a, b in rows:
        q = "" if np.isnan(b) else f"{b:.3f}"
        ratio = "" if np.isnan(b) else f"{b / a:.1f}x"
        print(f"| {name} | {a:.3f} | {q} | {ratio} |", flush=True)


def main() -> None:
    saved = agreement()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **saved)
    print(f"saved {OUT} ({OUT.stat().st_size / 1024:.0f} KB)")
    model, x, y, raw, smap = lenet_and_data(32)
    timings(model, x, y, raw, smap, "LeNet", PERCENTAGES, patch=4, fc_runs=100, runs=3)
    if "--resnet" in sys.argv:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from real_models import torch_resnet18

        rng = np.random.default_rng(0)
        xb = rng.random((32, 3, 224, 224), dtype=np.float32)
        model = torch_resnet18(xb[:8]).eval()
        with torch.no_grad():
            yb = model(torch.as_tensor(xb)).argmax(1).numpy()
        rawb = rng.normal(size=xb.shape).astype(np.float32)
        smapb = rawb.sum(axis=1)
        timings(model, xb, yb, rawb, smapb, "ResNet-18 224x224", [10, 50, 90], patch=56, fc_runs=10, runs=1)


if __name__ == "__main__":
    main()
