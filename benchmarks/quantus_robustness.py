"""Compare the robustness metrics and relevance rank accuracy of ``xk.evaluate`` with Quantus 0.6.

Quantus is not a dependency of xaikit: run this script in a separate environment that has
Quantus and torch, with this repository on the path::

    PYTHONPATH=. /tmp/qvenv/bin/python benchmarks/quantus_robustness.py [--resnet | --resnet-only]

On a seeded torch LeNet and ``shapes`` images (grey, 32 x 32):

* Agreement. Quantus draws its noise with ``np.random``; its perturbation function is wrapped to
  record every perturbed batch it made, and the same perturbed inputs are given to our
  ``_from_perturbed`` path. Quantus explains with our ``xk.xai.explain`` (vanilla gradients,
  input x gradient), so both sides see the same maps: the scores must agree to 1e-5.
  ``MaxSensitivity`` / ``AvgSensitivity`` (uniform noise, ``lower_bound=0.2``) and
  ``LocalLipschitzEstimate`` (Gaussian noise, std 0.1) with ``normalise=False``, and
  ``LocalLipschitzEstimate`` with per-sample ``normalise_by_max`` (``normalise_axes``) against
  ``normalise=True``. ``RelevanceRankAccuracy`` on tie-free maps with the object masks.
* Timing, batch 32: Quantus with a plain torch explanation function (one autograd call per
  batch; SmoothGrad stacks its noisy copies in one batch, as captum's NoiseTunnel does) against
  our functions at equal settings (the same number of noise samples, radius, method samples).
  One torch thread; median CPU seconds of the process (and wall seconds) over a few interleaved
  runs: the machine is shared, so the figures are indicative.

The agreement cases are saved with their inputs to ``tests/data/quantus_robustness.npz`` so that
``tests/test_evaluate_robustness.py`` checks them in CI without Quantus.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import quantus
import torch
from quantus.functions.perturb_func import batch_gaussian_noise, batch_uniform_noise

import xaikit as xk
from xaikit.architecture.torch import LeNet
from xaikit.dataset.data import shapes
from xaikit.evaluate.robustness import _from_perturbed

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "quantus_robustness.npz"
N_AGREE = 4  # noise samples per agreement case (the file stays small)
B_AGREE = 3


def lenet() -> torch.nn.Module:
    torch.manual_seed(0)
    return LeNet(input_shape=(1, 32, 32), classes=5).eval()


def checksum(model: torch.nn.Module) -> float:
    return float(sum(float(p.detach().double().abs().sum()) for p in model.parameters()))


def images(n: int) -> tuple[np.ndarray, np.ndarray]:
    _, test = shapes.load_data(n_train=0, n_eval=n, seed=3)
    x = test["x"].astype(np.float32).mean(axis=3, keepdims=True).transpose(0, 3, 1, 2) / 255.0
    return np.ascontiguousarray(x), test["mask"]


def xk_explain(model: Any, inputs: np.ndarray, targets: np.ndarray, **kw: Any) -> np.ndarray:
    """Quantus's explanation function: our explain, so that both sides see the same maps."""
    rows = np.asarray(inputs, dtype=np.float32)
    return np.asarray(xk.xai.explain(model, rows, target=np.asarray(targets), method=kw["xk_method"]))


def recording(fn: Callable[..., np.ndarray], store: list[np.ndarray]) -> Callable[..., np.ndarray]:
    def perturb(arr: np.ndarray, indices: np.ndarray, **kw: Any) -> np.ndarray:
        out = fn(arr=arr, indices=indices, **kw)
        store.append(np.array(out))
        return out

    return perturb


def agreement(
    model: torch.nn.Module, x: np.ndarray, y: np.ndarray, saved: dict[str, Any]
) -> list[tuple[str, float]]:
    per_sample = {"normalise_axes": (1, 2, 3)}
    cases = [
        # name, Quantus class, our kind, method, noise, our normalise, Quantus kwargs
        ("max_vanilla", quantus.MaxSensitivity, "max", "vanilla", batch_uniform_noise, False,
         {"lower_bound": 0.2, "normalise": False}),
        ("avg_ixg", quantus.AvgSensitivity, "avg", "input_x_gradient", batch_uniform_noise, False,
         {"lower_bound": 0.2, "normalise": False}),
        ("lipschitz_ixg", quantus.LocalLipschitzEstimate, "lipschitz", "input_x_gradient",
         batch_gaussian_noise, False, {"perturb_std": 0.1, "normalise": False}),
        ("lipschitz_vanilla_normalised", quantus.LocalLipschitzEstimate, "lipschitz", "vanilla",
         batch_gaussian_noise, True, {"perturb_std": 0.1, "normalise": True, "normalise_func_kwargs": per_sample}),
    ]  # fmt: skip
    rows = []
    np.random.seed(0)  # noqa: NPY002 - Quantus draws its noise from the global legacy generator
    for name, cls, kind, method, noise, normalise, kw in cases:
        store: list[np.ndarray] = []
        metric = cls(nr_samples=N_AGREE, perturb_func=recording(noise, store), disable_warnings=True, **kw)
        theirs = np.asarray(
            metric(
                model=model, x_batch=x, y_batch=y, a_batch=None, explain_func=xk_explain,
                explain_func_kwargs={"xk_method": method}, channel_first=True, device="cpu",
            ),
            dtype=np.float64,
        )  # fmt: skip
        perturbed = np.stack([s.reshape(x.shape) for s in store]).astype(np.float32)
        ours = _from_perturbed(kind, model, x, method, perturbed, target=y, normalize=normalise)
        diff = float(np.max(np.abs(ours - theirs) / np.maximum(np.abs(theirs), 1e-12)))
        rows.append((f"{cls.__name__} {method}{' normalised' if normalise else ''}", diff))
        saved[f"perturbed_{name}"] = perturbed
        saved[f"quantus_{name}"] = theirs
    return rows


def rank_agreement(model: torch.nn.Module, saved: dict[str, Any]) -> list[tuple[str, float]]:
    x, mask = images(8)
    with torch.no_grad():
        y = model(torch.as_tensor(x)).argmax(1).numpy()
    raw = xk.xai.explain(model, x, target=y, method="input_x_gradient")[:, 0]  # signed (B, H, W)
    rng = np.random.default_rng(0)
    raw = (raw + 1e-4 * np.abs(raw).max() * rng.standard_normal(raw.shape)).astype(np.float32)  # no ties
    assert all(len(np.unique(r)) == r.size for r in raw)
    rows = []
    for absolute in (False, True):
        theirs = np.asarray(
            quantus.RelevanceRankAccuracy(abs=absolute, normalise=False, disable_warnings=True)(
                model=model, x_batch=x, y_batch=y, a_batch=raw[:, None], s_batch=mask[:, None].astype(float),
                channel_first=True, device="cpu",
            ),
            dtype=np.float64,
        )  # fmt: skip
        ours = xk.evaluate.relevance_rank_accuracy(raw, mask, absolute=absolute)
        rows.append((f"RelevanceRankAccuracy abs={absolute}", float(np.max(np.abs(ours - theirs)))))
        saved[f"quantus_rank_abs{int(absolute)}"] = theirs
    saved["rank_maps"] = raw
    saved["rank_masks"] = mask
    return rows


def torch_vanilla(model: Any, inputs: np.ndarray, targets: np.ndarray, **kw: Any) -> np.ndarray:
    x = torch.as_tensor(np.asarray(inputs, dtype=np.float32)).requires_grad_(True)
    out = model(x)
    (g,) = torch.autograd.grad(out[torch.arange(len(x)), torch.as_tensor(targets)].sum(), x)
    return g.numpy()


def torch_smoothgrad(model: Any, inputs: np.ndarray, targets: np.ndarray, **kw: Any) -> np.ndarray:
    """SmoothGrad-squared, the noisy copies of the batch stacked in one pass (as NoiseTunnel)."""
    n = kw.get("nsamples", 25)
    x = torch.as_tensor(np.asarray(inputs, dtype=np.float32))
    flat = x.reshape(len(x), -1)
    sigma = (0.15 * (flat.max(1).values - flat.min(1).values)).reshape(-1, *[1] * (x.ndim - 1))
    rows = (x[None] + sigma[None] * torch.randn(n, *x.shape)).reshape(n * len(x), *x.shape[1:])
    rows.requires_grad_(True)
    t = torch.as_tensor(targets).repeat(n)
    (g,) = torch.autograd.grad(model(rows)[torch.arange(len(rows)), t].sum(), rows)
    return (g.reshape(n, *x.shape) ** 2).mean(0).numpy()


def median_times(fns: list[Callable[[], Any]], repeats: int) -> list[tuple[float, float]]:
    """Median (wall, CPU) seconds of each function, the runs interleaved. The machine is shared:
    with one torch thread the CPU time of the process is the steadier measure of the work."""
    times: list[list[tuple[float, float]]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, out in zip(fns, times):
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            out.append((time.perf_counter() - t0, time.process_time() - c0))
    return [(float(np.median([w for w, _ in t])), float(np.median([c for _, c in t]))) for t in times]


def timings(
    model: Any, x: np.ndarray, y: np.ndarray, label: str, settings: list[tuple[str, int, int]]
) -> list[str]:
    lines = []
    for method, n, repeats in settings:
        opts = {"nsamples": 25} if method == "smoothgrad" else None
        explain = torch_smoothgrad if method == "smoothgrad" else torch_vanilla
        for name, cls, ours_fn, kw in (
            ("max-sensitivity", quantus.MaxSensitivity, xk.evaluate.max_sensitivity, {"lower_bound": 0.2}),
            (
                "local Lipschitz",
                quantus.LocalLipschitzEstimate,
                xk.evaluate.local_lipschitz,
                {"perturb_std": 0.1},
            ),
        ):
            metric = cls(nr_samples=n, normalise=False, disable_warnings=True, **kw)
            theirs = functools.partial(
                metric, model=model, x_batch=x, y_batch=y, a_batch=None, explain_func=explain,
                explain_func_kwargs={"nsamples": 25}, channel_first=True, device="cpu", batch_size=len(x),
            )  # fmt: skip
            extra = {"radius": 0.2} if "sensitivity" in name else {"stdev": 0.1}
            ours = functools.partial(
                ours_fn, model, x, method, target=y, nsamples=n, method_options=opts, **extra
            )
            ours()  # warm-up (chunk-size probe)
            (w_ours, c_ours), (w_q, c_q) = median_times([ours, theirs], repeats)
            lines.append(
                f"| {label} | {name} | {method} | {n} | {c_ours:.2f} | {c_q:.2f} | {c_q / c_ours:.1f}x "
                f"| {w_ours:.2f} | {w_q:.2f} |"
            )
            print(lines[-1], flush=True)
    return lines


def main() -> None:
    torch.set_num_threads(1)  # the machine is shared: one thread, CPU time measured
    model = lenet()
    saved: dict[str, Any] = {"checksum": checksum(model)}
    x3, _ = images(B_AGREE)
    with torch.no_grad():
        y3 = model(torch.as_tensor(x3)).argmax(1).numpy()
    saved["x"], saved["y"] = x3, y3
    rows = agreement(model, x3, y3, saved) + rank_agreement(model, saved)
    print(f"quantus {quantus.__version__}, torch {torch.__version__}")
    print("| comparison | max relative (robustness) / absolute (rank) difference |")
    print("|---|---:|")
    for name, diff in rows:
        print(f"| {name} | {diff:.2e} |")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **saved)
    print(f"saved {OUT} ({OUT.stat().st_size} bytes)")
    if "--no-timing" in sys.argv:
        return
    x32, _ = images(32)
    with torch.no_grad():
        y32 = model(torch.as_tensor(x32)).argmax(1).numpy()
    print("\n| model | metric | method | noise samples | xaikit CPU s | Quantus CPU s | speed-up (CPU) "
          "| xaikit wall s | Quantus wall s |")  # fmt: skip
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    if "--resnet-only" not in sys.argv:
        timings(model, x32, y32, "LeNet 32x32, B=32", [("vanilla", 50, 3), ("smoothgrad", 5, 3)])
    if "--resnet" in sys.argv or "--resnet-only" in sys.argv:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from real_models import torch_resnet18

        rng = np.random.default_rng(0)
        x224 = rng.random((32, 3, 224, 224), dtype=np.float32)
        net = torch_resnet18(x224[:8]).eval()
        with torch.no_grad():
            y224 = net(torch.as_tensor(x224)).argmax(1).numpy()
        timings(net, x224, y224, "ResNet-18 224x224, B=32", [("vanilla", 3, 1)])


if __name__ == "__main__":
    main()
