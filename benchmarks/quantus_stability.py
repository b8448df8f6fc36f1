"""Compare relative stability, continuity and consistency of ``xk.evaluate`` with Quantus 0.6.

Quantus is not a dependency of xaikit: run this script in a separate environment that has
Quantus and torch, with this repository on the path::

    PYTHONPATH=. /tmp/qvenv/bin/python benchmarks/quantus_stability.py

On the recorded seeded torch LeNet (``tests/evaluate_models.py``'s ``seeded_lenet(1,
softmax=False)``: the output is the logits) and grey 32 x 32 ``shapes`` images:

* ``RelativeInputStability`` / ``RelativeOutputStability`` / ``RelativeRepresentationStability``
  (layer ``conv2``): Quantus draws its noise with ``np.random``; its perturbation function is
  wrapped to record every perturbed batch, and the same copies go to ours (``perturbations=``).
  Quantus explains with our ``xk.xai.explain`` (vanilla gradients, input x gradient), so both
  sides see the same maps. Noise uniform in [0, 0.02] and Quantus's default [0.02, 0.2]: no
  copy changes this model's predicted class (it predicts class 4 for every image and copy), so
  Quantus's NaN for a sample with a changed copy and the paper's maximum over the copies that
  keep the class coincide; the scores must agree to 1e-5. The difference is shown on a linear
  model in ``tests/test_evaluate_stability.py``.
* ``Continuity`` (deterministic translations): ``pairs="origin"``, ``absolute=True`` against
  Quantus with ``abs=True, normalise=False``; our default ``pairs="all"`` is recorded beside.
* ``Consistency`` with Quantus's ``sign`` discretisation on maps with repeated sign patterns:
  equal where another sample shares the pattern, Quantus 0 (ours NaN) where none does.

The cases are saved with their inputs to ``tests/data/quantus_stability.npz`` so that
``tests/test_evaluate_stability.py`` checks them in CI without Quantus.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import quantus
import torch
from quantus.functions.perturb_func import batch_uniform_noise

import xaikit as xk
from benchmarks.quantus_robustness import images, recording, xk_explain
from tests.evaluate_models import seeded_lenet

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "quantus_stability.npz"
N_AGREE = 3  # noise samples per case (the file stays small)
B_AGREE = 3
LAYER = "conv2"
STEPS = 8  # continuity's translations


def checksum(model: torch.nn.Module) -> float:
    return float(sum(float(p.detach().double().abs().sum()) for p in model.parameters()))


def relative(model: Any, x: np.ndarray, y: np.ndarray, saved: dict[str, Any]) -> list[tuple[str, float]]:
    ours_fn = {
        "input": xk.evaluate.relative_input_stability,
        "output": xk.evaluate.relative_output_stability,
        "representation": xk.evaluate.relative_representation_stability,
    }
    cases = [
        # name, Quantus class, our kind, method, noise bounds
        ("ris_vanilla_small", quantus.RelativeInputStability, "input", "vanilla", (0.0, 0.02)),
        ("ros_ixg_default", quantus.RelativeOutputStability, "output", "input_x_gradient", (0.02, 0.2)),
        ("rrs_vanilla_small", quantus.RelativeRepresentationStability, "representation", "vanilla", (0.0, 0.02)),
        ("ris_ixg_default", quantus.RelativeInputStability, "input", "input_x_gradient", (0.02, 0.2)),
        ("ros_vanilla_wide", quantus.RelativeOutputStability, "output", "vanilla", (0.1, 0.5)),
    ]  # fmt: skip
    rows = []
    np.random.seed(0)  # noqa: NPY002 - Quantus draws its noise from the global legacy generator
    for name, cls, kind, method, (low, high) in cases:
        store: list[np.ndarray] = []
        extra: dict[str, Any] = {"layer_names": [LAYER]} if kind == "representation" else {}
        metric = cls(
            nr_samples=N_AGREE, perturb_func=recording(batch_uniform_noise, store),
            perturb_func_kwargs={"lower_bound": low, "upper_bound": high}, disable_warnings=True, **extra,
        )  # fmt: skip
        theirs = np.asarray(
            metric(
                model=model, x_batch=x, y_batch=y, a_batch=None, explain_func=xk_explain,
                explain_func_kwargs={"xk_method": method}, channel_first=True, device="cpu",
            ),
            dtype=np.float64,
        )  # fmt: skip
        perturbed = np.stack([s.reshape(x.shape) for s in store]).astype(np.float32)
        layer = {"layer": LAYER} if kind == "representation" else {}
        ours = ours_fn[kind](model, x, method, target=y, perturbations=perturbed, **layer)
        both = ~np.isnan(theirs)
        diff = (
            float(np.max(np.abs(ours.scores[both] - theirs[both]) / np.abs(theirs[both])))
            if both.any()
            else 0.0
        )
        rows.append((f"{cls.__name__} {method} U[{low}, {high}]: {int(both.sum())}/{len(x)} defined in Quantus; "
                     f"ours defined {int(np.isfinite(ours.scores).sum())}", diff))  # fmt: skip
        saved[f"perturbed_{name}"] = perturbed
        saved[f"quantus_{name}"] = theirs
    return rows


def continuity(model: Any, x: np.ndarray, y: np.ndarray, saved: dict[str, Any]) -> list[tuple[str, float]]:
    rows = []
    for method in ("vanilla", "input_x_gradient"):
        metric = quantus.Continuity(nr_steps=STEPS, abs=True, normalise=False, disable_warnings=True)
        theirs = np.asarray(
            metric(
                model=model, x_batch=x, y_batch=y, a_batch=None, explain_func=xk_explain,
                explain_func_kwargs={"xk_method": method}, channel_first=True, device="cpu",
            ),
            dtype=np.float64,
        )  # fmt: skip
        ours = xk.evaluate.continuity(model, x, method, target=y, nsteps=STEPS, pairs="origin", absolute=True)
        rows.append(
            (f"Continuity {method} (pairs='origin', abs)", float(np.max(np.abs(ours.scores / theirs - 1))))
        )
        saved[f"quantus_continuity_{method}"] = theirs
    return rows


def consistency(model: Any, x: np.ndarray, saved: dict[str, Any]) -> list[tuple[str, float]]:
    rng = np.random.default_rng(1)
    patterns = rng.choice([-1.0, 1.0], size=(3, *x.shape[1:]))
    which = np.array([0, 1, 0, 2, 1, 0, 2, 1, 0, 1, 2, 0])[: len(x)]
    maps = (patterns[which] * rng.integers(1, 5, size=(len(x), *x.shape[1:]))).astype(np.int8)
    maps[-1] = rng.choice([-1, 1], size=x.shape[1:])  # a pattern of its own (int8: the file stays small)
    with torch.no_grad():
        y = model(torch.as_tensor(x)).argmax(1).numpy()
    theirs = np.asarray(
        quantus.Consistency(discretise_func=quantus.discretise_func.sign, abs=False, normalise=False,
                            disable_warnings=True)(
            model=model, x_batch=x, y_batch=y, a_batch=maps.astype(np.float32), channel_first=True, device="cpu",
        ),
        dtype=np.float64,
    )  # fmt: skip
    ours = xk.evaluate.consistency(model, x, maps.astype(np.float32), discretize="sign")
    both = np.isfinite(ours.scores)
    saved["consistency_maps"] = maps
    saved["quantus_consistency"] = theirs
    return [
        (
            f"Consistency sign ({int(both.sum())}/{len(x)} shared)",
            float(np.max(np.abs(ours.scores[both] - theirs[both]))),
        )
    ]


def main() -> None:
    torch.set_num_threads(1)
    model = seeded_lenet(1, softmax=False)
    saved: dict[str, Any] = {"checksum": checksum(model)}
    x, _ = images(B_AGREE)
    with torch.no_grad():
        y = model(torch.as_tensor(x)).argmax(1).numpy()
    saved["x"], saved["y"] = x, y
    x12, _ = images(12)
    saved["x12"] = x12
    rows = relative(model, x, y, saved) + continuity(model, x, y, saved) + consistency(model, x12, saved)
    print(f"quantus {quantus.__version__}, torch {torch.__version__}")
    print("| comparison | max relative (stability, continuity) / absolute (consistency) difference |")
    print("|---|---:|")
    for name, diff in rows:
        print(f"| {name} | {diff:.2e} |")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **saved)
    print(f"saved {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
