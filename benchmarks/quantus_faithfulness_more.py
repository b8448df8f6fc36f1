"""Compare ``xk.evaluate.sensitivity_n``, ``faithfulness_estimate``, ``monotonicity``,
``monotonicity_correlation`` and ``sufficiency`` with Quantus 0.6.

Quantus is not a dependency of xaikit: run this in a separate environment with Quantus 0.6 and
torch, with this repository on the path::

    PYTHONPATH=. /tmp/qvenv/bin/python benchmarks/quantus_faithfulness_more.py

On the seeded torch LeNet and grey 32x32 ``shapes`` images of ``quantus_faithfulness.py``
(tie-free IG maps; logits on both sides, Quantus's ``softmax=False``):

* FaithfulnessEstimate: deterministic; compared directly (groups of 16 and of 1 pixel).
* SensitivityN: Quantus removes the pixels cumulatively in decreasing order of attribution and
  correlates across the batch (see ``xaikit.evaluate.sensitivity_n``); its cumulative subsets are
  given to ours through ``subsets=`` and its curve is rebuilt from our score drops.
* Monotonicity: Quantus's perturbed inputs are recorded: it never puts x's pixels back (every
  input it scores is the baseline), so it returns True everywhere; ours is shown beside it.
* MonotonicityCorrelation: its uniform draws are recorded (``np.random.uniform``) and given to
  ours through ``values=``.
* Sufficiency: on the linear template classifier of ``quantus_faithfulness.py`` (LeNet predicts
  one class); equal where a sample has a neighbour, Quantus 0 where ours is NaN.

Saves Quantus's outputs with their inputs to ``tests/data/quantus_faithfulness_more.npz`` and
prints the agreement and timings (indicative: shared machine).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import quantus
import torch
from quantus.functions import perturb_func as qperturb
from quantus_faithfulness import checksum, lenet_and_data, median_time, template_model

import xaikit as xk

N_SAVED = 8
STEP = 16  # pixels per group / step on both sides
N_MAX = 0.8  # SensitivityN's n_max_percentage
MC_SAMPLES = 5  # MonotonicityCorrelation's nr_samples
SEED = 7
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "quantus_faithfulness_more.npz"


def _q(metric, model, x, y, a, **kw):
    return metric(
        model=model, x_batch=x, y_batch=y, a_batch=a, softmax=False, channel_first=True, device="cpu", **kw
    )


def cumulative_subsets(smap: np.ndarray, step: int, steps: int) -> list[np.ndarray]:
    """SensitivityN's removals as our ``subsets``: size k * step holds the top k * step pixels
    (draw 0) and, as the second draw a correlation needs, the bottom k * step pixels."""
    order = np.argsort(-smap.reshape(len(smap), -1), axis=1, kind="stable")
    return [np.stack([order[:, : k * step], order[:, ::-1][:, : k * step]]) for k in range(1, steps + 1)]


def quantus_sensitivity_curve(deltas0: np.ndarray, smap: np.ndarray, step: int) -> np.ndarray:
    """Quantus's SensitivityN output from the score drops of the cumulative removals (B, K): per
    step k, the Pearson correlation across samples between the drop and the k-th step's
    attribution."""
    flat = smap.reshape(len(smap), -1)
    order = np.argsort(-flat, axis=1, kind="stable")
    k = deltas0.shape[1]
    step_sums = np.stack(
        [np.take_along_axis(flat, order[:, i * step : (i + 1) * step], axis=1).sum(axis=1) for i in range(k)],
        axis=1,
    )
    a, b = (
        deltas0.T - deltas0.T.mean(axis=1, keepdims=True),
        step_sums.T - step_sums.T.mean(axis=1, keepdims=True),
    )
    return (a * b).sum(axis=1) / np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))


def agreement() -> dict[str, np.ndarray]:
    model, x, y, _, smap = lenet_and_data(N_SAVED)
    saved: dict[str, np.ndarray] = {"x": x, "y": y, "smap": smap, "checksum": np.array(checksum(model))}
    rows = []

    for step in (STEP, 1):
        theirs = np.asarray(
            _q(quantus.FaithfulnessEstimate(features_in_step=step, normalise=False, abs=False, disable_warnings=True),
               model, x, y, smap[:, None])
        )  # fmt: skip
        ours = xk.evaluate.faithfulness_estimate(model, x, smap, target=y, features_in_step=step)
        saved[f"faithfulness_estimate_step{step}"] = theirs
        rows.append((f"FaithfulnessEstimate, features_in_step={step}", np.abs(ours.scores - theirs).max()))

    steps = int(N_MAX * 1024 // STEP)
    ours = xk.evaluate.sensitivity_n(model, x, smap, target=y, subsets=cumulative_subsets(smap, STEP, steps))
    rebuilt = quantus_sensitivity_curve(ours.deltas[:, :, 0], smap, STEP)
    for aggregate in (False, True):  # its default return_aggregate=True: the mean of the curve
        theirs = np.asarray(
            _q(quantus.SensitivityN(features_in_step=STEP, n_max_percentage=N_MAX, normalise=False, abs=False,
                                    return_aggregate=aggregate, disable_warnings=True), model, x, y, smap[:, None])
        ).reshape(-1)  # fmt: skip
        saved[f"sensitivity_n{'_aggregate' if aggregate else ''}"] = theirs
        mine = np.array([rebuilt.mean()]) if aggregate else rebuilt
        rows.append(
            (f"SensitivityN {'mean' if aggregate else 'curve'} ({steps} steps) rebuilt from our score drops",
             np.abs(mine - theirs).max())
        )  # fmt: skip

    recorded = []

    def recording(arr, indices, perturb_baseline, **kw):
        out = qperturb.batch_baseline_replacement_by_indices(
            arr=arr, indices=indices, perturb_baseline=perturb_baseline, **kw
        )
        recorded.append(out.copy())
        return out

    theirs = np.asarray(
        _q(quantus.Monotonicity(features_in_step=STEP, normalise=False, abs=False, perturb_func=recording,
                                disable_warnings=True), model, x, y, smap[:, None])
    )  # fmt: skip
    low = x.reshape(len(x), -1).min(axis=1)[:, None]
    rows.append(
        ("Monotonicity: Quantus's inputs minus the black baseline", np.abs(np.stack(recorded) - low).max())
    )
    ours = xk.evaluate.monotonicity(model, x, smap, target=y, features_in_step=STEP)
    saved["monotonicity"] = theirs.astype(bool)
    rows.append(
        (
            "Monotonicity: Quantus True / ours monotone, of 8",
            f"{int(theirs.sum())} / {int(ours.monotone.sum())}",
        )
    )

    draws = []
    uniform = np.random.uniform

    def recording_uniform(*a, **kw):
        out = uniform(*a, **kw)
        draws.append(np.asarray(out).copy())
        return out

    np.random.seed(SEED)  # noqa: NPY002 - Quantus draws from the global generator
    np.random.uniform = recording_uniform
    try:
        theirs = np.asarray(
            _q(quantus.MonotonicityCorrelation(features_in_step=STEP, nr_samples=MC_SAMPLES, normalise=False,
                                               abs=True, disable_warnings=True), model, x, y, smap[:, None])
        )  # fmt: skip
    finally:
        np.random.uniform = uniform
    values = np.stack(draws).reshape(1024 // STEP, MC_SAMPLES, len(x))
    ours = xk.evaluate.monotonicity_correlation(
        model, x, smap, target=y, features_in_step=STEP, values=values
    )
    saved["monotonicity_correlation"] = theirs
    saved["mc_values"] = values.astype(np.float32)
    rows.append(("MonotonicityCorrelation (Quantus's draws)", np.abs(ours.scores - theirs).max()))

    tmodel, tx, ty, tmap = template_model(N_SAVED)
    saved.update(t_weight=tmodel[1].weight.detach().numpy().copy(), t_x=tx, t_smap=tmap)
    for threshold in (0.6, 0.3):
        theirs = np.asarray(
            _q(quantus.Sufficiency(threshold=threshold, disable_warnings=True), tmodel, tx, ty, tmap[:, None])
        )
        ours = xk.evaluate.sufficiency(tmodel, tx, tmap, threshold=threshold)
        saved[f"sufficiency_{threshold:g}"] = theirs
        has = ~np.isnan(ours.scores)
        rows.append(
            (
                f"Sufficiency threshold={threshold:g}: |diff| where ours has a neighbour ({int(has.sum())}/8); "
                f"Quantus where ours is NaN",
                f"{np.abs(ours.scores[has] - theirs[has]).max() if has.any() else 0:.2e}; {theirs[~has].tolist()}",
            )
        )

    print(
        f"quantus {quantus.__version__}, torch {torch.__version__}; LeNet, {len(x)} grey 32x32 shapes images"
    )
    print("| agreement | max abs difference |\n|---|---:|")
    for name, d in rows:
        print(f"| {name} | {d if isinstance(d, str) else f'{d:.2e}'} |")
    return saved


def timings(runs: int = 3) -> None:
    model, x, y, _, smap = lenet_and_data(32)
    a = smap[:, None]
    steps = int(N_MAX * 1024 // STEP)
    pairs = [
        ("FaithfulnessEstimate, 64 groups of 16",
         lambda: xk.evaluate.faithfulness_estimate(model, x, smap, target=y, features_in_step=STEP),
         lambda: _q(quantus.FaithfulnessEstimate(features_in_step=STEP, normalise=False, abs=False,
                                                 disable_warnings=True), model, x, y, a)),
        (f"SensitivityN, {steps} sizes (ours: 2 subsets each; Quantus: 1 cumulative removal)",
         lambda: xk.evaluate.sensitivity_n(model, x, smap, target=y, features_in_step=STEP, nsamples=2),
         lambda: _q(quantus.SensitivityN(features_in_step=STEP, normalise=False, abs=False, disable_warnings=True),
                    model, x, y, a)),
        ("Monotonicity, 64 steps of 16",
         lambda: xk.evaluate.monotonicity(model, x, smap, target=y, features_in_step=STEP),
         lambda: _q(quantus.Monotonicity(features_in_step=STEP, normalise=False, abs=False, disable_warnings=True),
                    model, x, y, a)),
        (f"MonotonicityCorrelation, 64 groups x {MC_SAMPLES} draws",
         lambda: xk.evaluate.monotonicity_correlation(model, x, smap, target=y, features_in_step=STEP,
                                                      nsamples=MC_SAMPLES),
         lambda: _q(quantus.MonotonicityCorrelation(features_in_step=STEP, nr_samples=MC_SAMPLES, normalise=False,
                                                    disable_warnings=True), model, x, y, a)),
        ("Sufficiency",
         lambda: xk.evaluate.sufficiency(model, x, smap),
         lambda: _q(quantus.Sufficiency(disable_warnings=True), model, x, y, a)),
    ]  # fmt: skip
    print(
        f"\nLeNet, batch {len(x)}, torch CPU ({torch.get_num_threads()} threads; shared machine), median of {runs}:"
    )
    print("| metric | xaikit s | Quantus s | speed-up |\n|---|---:|---:|---:|")
    for name, ours, theirs in pairs:
        t_o, t_q = median_time(ours, runs), median_time(theirs, runs)
        print(f"| {name} | {t_o:.3f} | {t_q:.3f} | {t_q / t_o:.1f}x |", flush=True)


def main() -> None:
    saved = agreement()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **saved)
    print(f"saved {OUT} ({OUT.stat().st_size / 1024:.0f} KB)")
    if "--no-timings" not in sys.argv:
        timings()


if __name__ == "__main__":
    main()
