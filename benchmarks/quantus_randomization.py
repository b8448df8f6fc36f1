"""Compare xaikit's random-logit, eMPRT and sMPRT with Quantus 0.6, and save Quantus's outputs.

Quantus is not a dependency of xaikit. Run this script in a separate environment that has
Quantus and torch, with this repository on the path::

    PYTHONPATH=. /tmp/qvenv/bin/python benchmarks/quantus_randomization.py [--no-save] [--resnet]

Model: a seeded, untrained torch LeNet (``torch.manual_seed(0)``, ``LeNet((1, 32, 32), 5,
softmax=False)``) on grey ``shapes`` images. Both tools explain with the same signed input
gradient (Quantus's ``explain_func`` and, for sMPRT, ``quantus.explain`` are replaced by a plain
torch gradient that also records every call), so the maps are the same:

* RandomLogit: Quantus's other classes (its ``np.random.seed(seed)`` draw) are recorded and
  compared with ours (``seed=42``); the scores with ``similarity_func=correlation_spearman``,
  ``abs=True, normalise=False`` against our ``similarity="spearman"`` (exact, end to end), and
  Quantus's default SSIM (batch-normalised, flattened 1-D SSIM) is saved for the test to check
  with a callable similarity.
* EfficientMPRT (defaults): our complexity (:func:`discrete_entropy`) on Quantus's recorded maps
  against Quantus's per-sample complexities and scores (exact); the end-to-end scores in
  distribution (Quantus re-draws weights with ``reset_parameters``, we with our own recipe).
* SmoothMPRT: our similarity on Quantus's recorded denoised maps against its per-layer scores
  (exact), our denoised map on Quantus's recorded noisy copies against its map (exact).

The outputs go to ``tests/data/quantus_randomization.npz`` (checked by
``tests/test_evaluate_randomization_more.py`` without Quantus). Timings: batch 32, median of
``REPEATS`` runs, on a shared 2-core CPU (other jobs ran beside it: the figures are noisy).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import quantus  # noqa: E402
import torch  # noqa: E402

import xaikit as xk  # noqa: E402
from xaikit.architecture.torch import LeNet  # noqa: E402
from xaikit.dataset.data import shapes  # noqa: E402
from xaikit.evaluate.mprt_variants import complexity_rise  # noqa: E402

REPEATS = 3
CALLS: list[dict[str, Any]] = []
RECORD = {"on": True}  # off while timing: the copies would slow Quantus down


def lenet() -> torch.nn.Module:
    torch.manual_seed(0)
    return LeNet(input_shape=(1, 32, 32), classes=5, softmax=False).eval()


def checksum(model: torch.nn.Module) -> float:
    return float(sum(p.detach().double().abs().sum().item() for p in model.parameters()))


def images(n: int) -> np.ndarray:
    _, test = shapes.load_data(n_train=0, n_eval=n, seed=3)
    return np.ascontiguousarray(
        test["x"].astype(np.float32).mean(axis=3, keepdims=True).transpose(0, 3, 1, 2) / 255.0
    )


def gradient(model: Any, inputs: Any, targets: Any, **_: Any) -> np.ndarray:
    """The signed input gradient of the target logits (xaikit's "vanilla"), recorded."""
    x = torch.as_tensor(np.asarray(inputs), dtype=torch.float32).requires_grad_(True)
    t = torch.as_tensor(np.asarray(targets), dtype=torch.int64)
    out = model(x)
    (g,) = torch.autograd.grad(out[torch.arange(len(x)), t].sum(), x)
    a = g.numpy()
    if RECORD["on"]:
        CALLS.append(
            {"model": id(model), "x": np.asarray(inputs).copy(), "y": t.numpy().copy(), "a": a.copy()}
        )
    return a


def _kwargs(model: Any, x: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    return {"model": model, "x_batch": x, "y_batch": y, "channel_first": True, "device": "cpu",
            "explain_func": gradient}  # fmt: skip


def paired(ours: Any, theirs: Any, repeats: int = REPEATS) -> tuple[float, float]:
    """Median seconds of ``repeats`` calls of each tool, the tools alternating (so that both see
    the same load on the shared machine), after one untimed warm-up call of each (xaikit probes a
    chunk size once per model and input shape)."""
    ours(), theirs()
    a, b = [], []
    for _ in range(repeats):
        for fn, times in ((ours, a), (theirs, b)):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(a), statistics.median(b)


def agreement(save: bool) -> dict[str, Any]:
    model = lenet()
    x = images(4)
    with torch.no_grad():
        y = model(torch.as_tensor(x)).argmax(1).numpy()
    data: dict[str, Any] = {"x": x, "y": y, "checksum": checksum(model)}
    kw = _kwargs(model, x, y)

    # --- RandomLogit
    CALLS.clear()
    q_ssim = np.asarray(quantus.RandomLogit(num_classes=5, seed=42, disable_warnings=True)(**kw))
    data["rl_a"], data["rl_a_other"], data["rl_other"] = CALLS[0]["a"], CALLS[1]["a"], CALLS[1]["y"]
    data["rl_ssim"] = q_ssim
    CALLS.clear()
    q_sp = quantus.RandomLogit(
        num_classes=5, seed=42, similarity_func=quantus.similarity_func.correlation_spearman, abs=True,
        normalise=False, disable_warnings=True,
    )(**kw)  # fmt: skip
    data["rl_spearman"] = np.asarray(q_sp)
    ours = xk.evaluate.random_logit(
        model, x, "vanilla", target=y, num_classes=5, seed=42, similarity="spearman"
    )
    print("random logit: other classes equal:", bool((ours.others == data["rl_other"]).all()))
    print(f"  spearman scores max |diff| {np.abs(ours.scores - data['rl_spearman']).max():.2e}")
    print(f"  maps max |diff| {np.abs(ours.maps_other - data['rl_a_other']).max():.2e}")

    # --- EfficientMPRT
    CALLS.clear()
    em = quantus.EfficientMPRT(disable_warnings=True)
    q_em = np.asarray(em(**kw))
    data["em_orig"], data["em_rand"] = CALLS[-2]["a"], CALLS[-1]["a"]
    assert CALLS[-2]["model"] == id(model) and CALLS[-1]["model"] != id(model)
    layers = list(em.explanation_scores_by_layer)
    data["em_h_orig"] = np.asarray(em.explanation_scores_by_layer["orig"])
    data["em_h_rand"] = np.asarray(em.explanation_scores_by_layer[layers[-1]])
    data["em_scores"] = q_em
    scores, h0, h1 = complexity_rise(data["em_orig"], data["em_rand"], 100)
    print(
        f"eMPRT: complexities max |diff| {max(np.abs(h0 - data['em_h_orig']).max(), np.abs(h1 - data['em_h_rand']).max()):.2e}"
    )
    print(f"  scores max |diff| {np.abs(scores - q_em).max():.2e}")

    # --- SmoothMPRT (nr_samples small to keep the saved file small)
    n = 6
    CALLS.clear()
    real = quantus.explain
    quantus.explain = gradient
    try:
        np.random.seed(0)  # noqa: NPY002 (Quantus draws its noise from numpy's global state)
        sm = quantus.SmoothMPRT(nr_samples=n, disable_warnings=True)
        q_sm = sm(model=model, x_batch=x, y_batch=y, channel_first=True, device="cpu", explain_func=gradient)
    finally:
        quantus.explain = real
    groups = [CALLS[i : i + n] for i in range(0, len(CALLS), n)]

    def smooth(group: list[dict[str, Any]]) -> np.ndarray:
        acc = None
        for c in group:  # Quantus's own float32 accumulation
            acc = c["a"] / n if acc is None else acc + c["a"] / n
        assert acc is not None
        return acc

    maps = [smooth(g) for g in groups]  # a_batch, original, then one per layer
    names = [k for k in q_sm if k != "original"]
    data["sm_noisy"] = np.concatenate([c["x"] for c in groups[1]]).astype(np.float32)
    data["sm_orig"] = maps[1]
    data["sm_ref"] = maps[0]
    data["sm_layers"] = np.stack(maps[2:])
    data["sm_scores"] = np.stack([np.asarray(q_sm[k]) for k in names])
    data["sm_names"] = np.asarray(names)
    data["sm_n"] = n
    from xaikit.evaluate.randomization import similarity_tables

    _, per = similarity_tables({"original": maps[0], **dict(zip(names, maps[2:]))}, (32, 32), len(x), 1, 1)
    ours_sm = per["spearman_abs"].to_numpy().reshape(len(names), len(x))
    print(f"sMPRT: per-layer spearman max |diff| {np.abs(ours_sm - data['sm_scores']).max():.2e}")
    if save:
        out = ROOT / "tests" / "data" / "quantus_randomization.npz"
        out.parent.mkdir(exist_ok=True)
        np.savez_compressed(out, **data)
        print(f"saved {out} ({out.stat().st_size / 1024:.0f} KB)")
    return data


def distribution(seeds: int = 5) -> None:
    """eMPRT end to end, batch 32, over several seeds: means of both tools."""
    model = lenet()
    x = images(32)
    with torch.no_grad():
        y = model(torch.as_tensor(x)).argmax(1).numpy()
    q, o = [], []
    for s in range(seeds):
        em = quantus.EfficientMPRT(seed=s, disable_warnings=True)
        q.append(
            np.mean(
                em(model=model, x_batch=x, y_batch=y, channel_first=True, device="cpu", explain_func=gradient)
            )
        )
        o.append(xk.evaluate.efficient_mprt(model, x, "vanilla", target=y, seed=s).mean)
    print(f"eMPRT mean score over {seeds} seeds x 32 samples: Quantus {np.mean(q):.4f} (sd over seeds {np.std(q):.4f}), "
          f"xaikit {np.mean(o):.4f} (sd {np.std(o):.4f})")  # fmt: skip


def timings(model: torch.nn.Module, x: np.ndarray, label: str, nsamples: int, repeats: int = REPEATS) -> None:
    """Both tools at equal settings (Quantus's defaults, the same gradient); sMPRT is skipped
    when ``nsamples`` is 0."""
    with torch.no_grad():
        y = model(torch.as_tensor(x)).argmax(1).numpy()
    classes = int(model(torch.as_tensor(x[:1])).shape[1])
    kw = _kwargs(model, x, y)
    rows = []
    to, tq = paired(
        lambda: xk.evaluate.random_logit(model, x, "vanilla", target=y),
        lambda: quantus.RandomLogit(num_classes=classes, disable_warnings=True)(**kw),
        repeats,
    )
    rows.append(("random_logit", to, tq))
    to, tq = paired(
        lambda: xk.evaluate.efficient_mprt(model, x, "vanilla", target=y),
        lambda: quantus.EfficientMPRT(disable_warnings=True)(**kw),
        repeats,
    )
    rows.append(("efficient_mprt", to, tq))
    if nsamples:
        real = quantus.explain
        quantus.explain = gradient
        try:
            to, tq = paired(
                lambda: xk.evaluate.smooth_mprt(model, x, "vanilla", target=y, nsamples=nsamples),
                lambda: quantus.SmoothMPRT(nr_samples=nsamples, disable_warnings=True)(**kw),
                repeats,
            )
        finally:
            quantus.explain = real
        rows.append((f"smooth_mprt (nsamples={nsamples})", to, tq))
    _table(label, x, rows, repeats)


def _table(label: str, x: np.ndarray, rows: list[tuple[str, float, float]], repeats: int) -> None:
    print(f"\n{label}, batch {len(x)}, median of {repeats}, shared 2-core CPU")
    print("| metric | xaikit s | Quantus s | speed-up |\n|---|---:|---:|---:|")
    for name, a, b in rows:
        print(f"| {name} | {a:.3f} | {b:.3f} | {b / a:.1f}x |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--resnet", action="store_true", help="also time a 224x224 ResNet-18")
    parser.add_argument("--no-timing", action="store_true")
    parser.add_argument("--timing-only", action="store_true")
    parser.add_argument("--nsamples", type=int, default=50, help="sMPRT copies on the LeNet (0: skip)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    print(f"quantus {quantus.__version__}, torch {torch.__version__}")
    if not args.timing_only:
        agreement(not args.no_save)
        distribution()
    RECORD["on"] = False
    if not args.no_timing:
        timings(lenet(), images(32), "LeNet 32x32", args.nsamples)
    if args.resnet:
        from tests.real_models import (
            IMAGENET_MEAN,
            IMAGENET_STD,
            channel_first,
            normalize,
            pictures,
            torch_resnet18,
        )

        pixels, _ = pictures(32)
        x = channel_first(normalize(pixels, IMAGENET_MEAN, IMAGENET_STD))
        model = torch_resnet18(x[:8]).eval()
        timings(model, x, "ResNet-18 224x224", 0, repeats=2)  # sMPRT: 62 layer steps, too slow here


if __name__ == "__main__":
    main()
