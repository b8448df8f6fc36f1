"""Compare ``xk.evaluate.effective_complexity``, ``mst_c``, ``non_sensitivity`` and
``input_invariance`` with Quantus, and save Quantus's outputs for the CI test.

Quantus is not a dependency of xaikit: run this in a separate environment with Quantus 0.6 and
torch, this repository on the path::

    PYTHONPATH=. /tmp/qvenv/bin/python benchmarks/quantus_axiomatic.py [--main-mst-c PATH]

On the recorded seeded torch LeNet (1 channel, 5 classes, logits; ``tests/data/lenet_seed0.npz``)
and grey 32 x 32 ``shapes`` images, explained by our ``xk.xai.explain`` (vanilla gradients,
input x gradient) so that both sides see the same maps:

* ``EffectiveComplexity`` (0.6): its defaults (the maps divided by the *batch's* largest
  magnitude), per-sample normalisation (``normalise_axes``, our ``normalize=True``) and
  ``normalise=False`` with ``eps=1e-3`` (our ``normalize=False``).
* ``MSTC`` (Quantus's main branch only: pass the file with ``--main-mst-c``, e.g. from
  ``git show HEAD:quantus/metrics/complexity/mst_c.py``): on the maps, and on two blobs of 25
  pixels 11 columns apart, where its k-nearest-neighbour graph (k=20) falls apart and the gap is
  left out of the tree (the paper's tree spans it).
* ``NonSensitivity`` (0.6, ``features_in_step=1``, ``softmax=False``: its default ``True`` scores
  the softmax of the model's output, ours the output as the model returns it): with the ``"black"`` baseline and per-sample
  normalisation, and with the ``"uniform"`` baseline, its draws recorded by wrapping its perturb
  function and handed to ours as an explicit baseline. The known case of its group bug: a 2 x 2
  image, a model that reads the bottom row, attributions on the top row, ``features_in_step=4``.
* ``InputInvariance`` (0.6, ``input_shift=-1``): Quantus explains the shifted copy of the model
  through the same wrapped explanation function, which records the maps; ours must give the same
  verdicts and the same largest map differences. Quantus's default shift leaves the first value
  of every sample unshifted (its ``perturb_batch`` drops the first index), so the agreement runs
  give it a perturb function that shifts every value (the paper's input); its default run is
  recorded too, the known difference (vanilla gradients are then "not invariant").

Writes ``tests/data/quantus_axiomatic.npz`` that ``tests/test_evaluate_axiomatic.py`` checks
against without Quantus.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import quantus
import torch
from quantus.functions.perturb_func import batch_baseline_replacement_by_indices

import xaikit as xk
from tests.evaluate_models import seeded_lenet
from xaikit.dataset.data import shapes

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "quantus_axiomatic.npz"
B = 3


def images(n: int) -> tuple[np.ndarray, np.ndarray]:
    _, test = shapes.load_data(n_train=0, n_eval=max(n, 8), seed=3)
    x = test["x"][:n].astype(np.float32).mean(axis=3, keepdims=True).transpose(0, 3, 1, 2) / 255.0
    return np.ascontiguousarray(x), test["mask"][:n]


def recording_explain(store: list[np.ndarray]) -> Any:
    def explain(model: Any, inputs: np.ndarray, targets: np.ndarray, **kw: Any) -> np.ndarray:
        rows = np.asarray(inputs, dtype=np.float32)
        out = np.asarray(xk.xai.explain(model, rows, target=np.asarray(targets), method=kw["xk_method"]))
        store.append(out)
        return out

    return explain


def recording_perturb(store: list[np.ndarray]) -> Any:
    def perturb(arr: np.ndarray, indices: np.ndarray, **kw: Any) -> np.ndarray:
        out = batch_baseline_replacement_by_indices(arr=arr, indices=indices, **kw)
        store.append(out[np.arange(len(out))[:, None], indices].copy())
        return out

    return perturb


def q_call(
    metric: Any, model: Any, x: np.ndarray, y: np.ndarray, a: np.ndarray | None, **kw: Any
) -> np.ndarray:
    out = metric(model=model, x_batch=x, y_batch=y, a_batch=a, channel_first=True, device="cpu", **kw)
    return np.asarray(out, dtype=np.float64)


def effective(model: Any, x: np.ndarray, y: np.ndarray, maps: np.ndarray, saved: dict[str, Any]) -> None:
    per_sample = {"normalise_axes": (1, 2, 3)}
    cases = {
        "ec_default": ({}, {}),
        "ec_per_sample": ({"normalise_func_kwargs": per_sample}, {}),
        "ec_raw": ({"normalise": False, "eps": 1e-3}, {"normalize": False, "eps": 1e-3}),
    }
    scaled = maps.copy()
    scaled[0] *= 1e-6  # Quantus's default divides by the batch's largest magnitude: sample 0 sinks below eps
    saved["ec_scaled_maps"] = scaled
    for name, (theirs_kw, ours_kw) in cases.items():
        theirs = q_call(
            quantus.EffectiveComplexity(disable_warnings=True, **theirs_kw), model, x, y, maps.copy()
        )
        ours = xk.evaluate.effective_complexity(maps, **ours_kw).scores
        saved[f"quantus_{name}"] = theirs
        print(f"EffectiveComplexity {name}: quantus {theirs.tolist()} ours {ours.tolist()}")
    theirs = q_call(quantus.EffectiveComplexity(disable_warnings=True), model, x, y, scaled.copy())
    saved["quantus_ec_scaled"] = theirs
    ours = xk.evaluate.effective_complexity(scaled).scores
    print(f"EffectiveComplexity, sample 0 scaled by 1e-6: quantus {theirs.tolist()} ours {ours.tolist()}")


def two_blobs() -> np.ndarray:
    a = np.zeros((1, 1, 8, 24))
    a[0, 0, 0:5, 0:5] = 1.0
    a[0, 0, 0:5, 16:21] = 1.0
    return a


def mst(
    path: str | None, model: Any, x: np.ndarray, y: np.ndarray, maps: np.ndarray, saved: dict[str, Any]
) -> None:
    if path is None:
        print("MSTC: skipped (pass --main-mst-c PATH, the file of Quantus's main branch)")
        return
    import quantus.helpers.warn as warn

    for hook in ("warn_mst_c_invalid", "warn_disconnected_graph"):  # absent from 0.6's helpers
        if not hasattr(warn, hook):
            setattr(warn, hook, lambda *a, **k: None)
    spec = importlib.util.spec_from_file_location("quantus_main_mst_c", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    for name, a in (("mst_maps", maps), ("mst_blobs", two_blobs())):
        xa = x if a is maps else np.zeros(a.shape, np.float32)
        ya = y if a is maps else np.zeros(1, np.int64)
        theirs = q_call(module.MSTC(disable_warnings=True), None, xa, ya, a.copy())
        ours = xk.evaluate.mst_c(a).scores
        saved[f"quantus_{name}"] = theirs
        print(f"MSTC {name}: quantus {theirs.tolist()} ours {ours.tolist()}")


class BottomRow(torch.nn.Module):
    """f(x) = the sum of the bottom row of a 2 x 2 image (one output)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :, 1, :].sum(dim=(1, 2))[:, None]


def non_sensitivity(
    model: Any, x: np.ndarray, y: np.ndarray, maps: np.ndarray, saved: dict[str, Any]
) -> None:
    per_sample = {"normalise_axes": (1, 2, 3)}
    theirs = q_call(
        quantus.NonSensitivity(disable_warnings=True, normalise_func_kwargs=per_sample), model, x, y, maps.copy(),
        softmax=False,
    )  # fmt: skip
    ours = xk.evaluate.non_sensitivity(model, x, maps, target=y)
    saved["quantus_ns_black"] = theirs
    print(f"NonSensitivity black: quantus {theirs.tolist()} ours {ours.scores.tolist()}")
    store: list[np.ndarray] = []
    np.random.seed(0)  # noqa: NPY002 - Quantus draws its baseline from the global legacy generator
    metric = quantus.NonSensitivity(
        disable_warnings=True, normalise_func_kwargs=per_sample, perturb_baseline="uniform",
        perturb_func=recording_perturb(store),
    )  # fmt: skip
    theirs = q_call(metric, model, x, y, maps.copy(), softmax=False)
    draws = np.concatenate(store, axis=1).reshape(x.shape).astype(np.float32)  # step j: feature j
    ours = xk.evaluate.non_sensitivity(model, x, maps, target=y, baseline=draws)
    saved["quantus_ns_uniform"] = theirs
    saved["ns_uniform_draws"] = draws
    print(f"NonSensitivity uniform: quantus {theirs.tolist()} ours {ours.scores.tolist()}")
    # the known case: Quantus 0.6 with features_in_step=4 (one group of all four pixels)
    xs = np.array([[[[1.0, 2.0], [3.0, 4.0]]]], dtype=np.float32)
    a = np.array([[[[10.0, 10.0], [0.0, 0.0]]]], dtype=np.float32)
    theirs = q_call(
        quantus.NonSensitivity(disable_warnings=True, normalise=False, features_in_step=4),
        BottomRow().eval(), xs, np.array([0]), a.copy(), softmax=False,
    )  # fmt: skip
    saved["quantus_ns_bottom_row_step4"] = theirs
    ours = xk.evaluate.non_sensitivity(BottomRow(), xs, a, target=0, features_in_step=4)
    print(
        f"NonSensitivity bottom row, features_in_step=4: quantus {theirs.tolist()} ours {ours.scores.tolist()}"
    )


def shift_all(arr: np.ndarray, input_shift: float, **kw: Any) -> np.ndarray:
    """Every value of one sample shifted (Quantus's default ``perturb_batch`` passes
    ``indices[i][1:]`` and so leaves each sample's first value unshifted)."""
    return arr + np.float32(input_shift)


def invariance(model: Any, x: np.ndarray, y: np.ndarray, saved: dict[str, Any]) -> None:
    cases = (
        ("vanilla", {"perturb_func": shift_all}),
        ("input_x_gradient", {"perturb_func": shift_all}),
        ("vanilla_default", {}),  # the known difference: one value per sample not shifted
    )
    for name, kw in cases:
        method = name.removesuffix("_default")
        store: list[np.ndarray] = []
        theirs = q_call(
            quantus.InputInvariance(disable_warnings=True, **kw), model, x, y, None,
            explain_func=recording_explain(store), explain_func_kwargs={"xk_method": method},
        )  # fmt: skip
        original, shifted = store
        theirs_max = np.abs(original - shifted).reshape(len(x), -1).max(axis=1)
        ours = xk.evaluate.input_invariance(model, x, method, target=y)
        saved[f"quantus_ii_{name}"] = theirs
        saved[f"quantus_ii_{name}_max_abs"] = theirs_max
        print(
            f"InputInvariance {name}: quantus {theirs.tolist()} (max |diff| {theirs_max.tolist()}) "
            f"ours {ours.invariant.tolist()} (max |diff| {ours.max_abs.tolist()})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--main-mst-c", default=None, help="Quantus main branch's mst_c.py")
    args = parser.parse_args()
    model = seeded_lenet(1, softmax=False)
    x, _ = images(B)
    with torch.no_grad():
        y = model(torch.as_tensor(x)).argmax(1).numpy()
    saved: dict[str, Any] = {"x": x, "y": y}
    print(f"quantus {quantus.__version__}, torch {torch.__version__}, {B} samples")
    for method in ("vanilla", "input_x_gradient"):
        maps = np.asarray(xk.xai.explain(model, x, target=y, method=method), dtype=np.float32)
        saved[f"maps_{method}"] = maps
    maps = saved["maps_input_x_gradient"]
    effective(model, x, y, maps, saved)
    mst(args.main_mst_c, model, x, y, maps, saved)
    non_sensitivity(model, x, y, maps, saved)
    invariance(model, x, y, saved)
    np.savez_compressed(OUT, **saved)
    print(f"wrote {OUT} ({OUT.stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
