"""How many samples the Shapley estimators need: their error against the exact Shapley values of
a small game, against the number of model evaluations per sample.

The game: a LeNet trained on the bundled ``shapes`` data (logits), a few held-out images, each
cut into 10 patches (a 2 x 5 grid, passed as ``features=``), baseline 0. With 10 features the
exact Shapley values come from all 2^10 coalitions (``xaikit.xai.agnostic.shapley.exact_shapley``
on the model's scores, computed here directly with torch, not through the methods' engine).
Shapley sampling (plain and antithetic), KernelSHAP and LIME then run through
``xk.xai.explain`` at growing budgets, over several seeds; the picture shows the relative L2
error ``|phi - phi_exact| / |phi_exact|`` (mean over images and seeds, band: 10th to 90th
percentile) and the efficiency gap ``|sum(phi) - (f(x) - f(baseline))| / |phi_exact|_1`` (the
sum's miss, in units of the attributions' size: f(x) - f(baseline) itself may be near 0).
LIME estimates the coefficients of its own weighted linear surrogate, not Shapley values: its
error is shown to say how far apart the two are, not as a convergence.

Writes ``docs/img/agnostic_convergence.png`` and prints the table of ``docs/agnostic.md``.

    python -m gallery.agnostic_convergence [--out PATH] [--epochs 6] [--n-train 6000]
        [--images 4] [--seeds 5] [--max-evals 1001]
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # also `python gallery/<script>.py`

import xaikit as xk
from gallery._common import model_layout, out_path, parser, pick_samples, train_lenet
from xaikit.summary import Summary, ValWithError
from xaikit.xai.agnostic.shapley import exact_shapley

#: the patch grid of the game: 2 rows x 5 columns of a 32 x 32 image
GRID = (2, 5)
F = GRID[0] * GRID[1]
#: model evaluations per sample of the picture (1 + 10 n: whole orders of Shapley sampling)
BUDGETS = (11, 21, 31, 51, 101, 201, 301, 501, 1001)
#: the budgets of the printed table
TABLE = (31, 101, 301, 1001)

#: (label, method, options at a budget of E evaluations per sample: explain's options)
METHODS: list[tuple[str, str, Callable[[int], dict[str, Any]]]] = [
    ("Shapley sampling", "shapley_sampling", lambda e: {"nsamples": (e - 1) // F}),
    (
        "Shapley sampling, antithetic",
        "shapley_sampling",
        lambda e: {"nsamples": (e - 1) // F, "antithetic": True},
    ),
    ("KernelSHAP", "kernel_shap", lambda e: {"nsamples": e - 2}),
    ("LIME (not a Shapley estimator)", "lime", lambda e: {"nsamples": e}),
]


def patch_grid(size: int = 32) -> np.ndarray:
    """(size, size) feature ids: GRID[0] x GRID[1] patches, row-major."""
    rows = np.arange(size) * GRID[0] // size
    cols = np.arange(size) * GRID[1] // size
    return rows[:, None] * GRID[1] + cols[None, :]


def exact_values(
    model: Any, x: np.ndarray, targets: np.ndarray, ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The exact Shapley values (B, F) of each image's game v(S) = score(x with the patches
    outside S at 0), and each game's f(x) - f(baseline) (B,)."""
    import torch

    bits = (np.arange(2**F)[:, None] >> np.arange(F)[None, :]) & 1  # (2^F, F), coalition k = bits of k
    masks = bits[:, ids].astype(np.float32)[:, None]  # (2^F, 1, H, W)
    phi, gain = np.zeros((len(x), F)), np.zeros(len(x))
    for b in range(len(x)):
        with torch.no_grad():
            scores = model(torch.from_numpy(x[b][None] * masks))[:, int(targets[b])].double().numpy()
        phi[b] = exact_shapley(lambda z, s=scores: s[int(z @ (1 << np.arange(F)))], F)
        gain[b] = scores[-1] - scores[0]
    return phi, gain


def per_feature(attr: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """(B, F) feature values of (B, C, H, W) attributions (every pixel of a feature holds it)."""
    first = [int(np.flatnonzero(ids.ravel() == f)[0]) for f in range(F)]
    return attr[:, 0].reshape(len(attr), -1)[:, first]


def measure(
    model: Any, x: np.ndarray, targets: np.ndarray, ids: np.ndarray, budgets: tuple[int, ...], seeds: int
) -> dict[str, dict[int, tuple[np.ndarray, np.ndarray]]]:
    """``{label: {budget: (relative L2 errors, efficiency gaps)}}``, one value per image and seed."""
    exact, gain = exact_values(model, x, targets, ids)
    norm, size = np.linalg.norm(exact, axis=1), np.abs(exact).sum(axis=1)
    for b in range(len(x)):
        print(f"  game {b}: f(x) - f(0) = {gain[b]:.3f}, |phi|_1 = {size[b]:.3f}, |phi|_2 = {norm[b]:.3f}")
    out: dict[str, dict[int, tuple[np.ndarray, np.ndarray]]] = {}
    for label, method, opts in [*METHODS, ("KernelSHAP, every coalition", "kernel_shap", lambda e: {})]:
        every = label.endswith("every coalition")
        found: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for e in (2**F,) if every else budgets:
            options = {"nsamples": 2**F - 2} if every else opts(e)
            errs, gaps = [], []
            for seed in range(1 if every else seeds):
                attr = xk.xai.explain(
                    model, x, targets, method=method, features=ids, seed=seed, progress=False, **options
                )
                phi = per_feature(np.asarray(attr, dtype=np.float64), ids)
                errs.append(np.linalg.norm(phi - exact, axis=1) / norm)
                gaps.append(np.abs(phi.sum(axis=1) - gain) / size)
            found[e] = (np.concatenate(errs), np.concatenate(gaps))
        out[label] = found
        print(f"  {label}: done", flush=True)
    return out


def summaries(results: dict[str, dict[int, tuple[np.ndarray, np.ndarray]]]) -> list[Summary]:
    """One history per method (the budget as the step): error and efficiency gap, mean with the
    10th-90th percentile band; the gap floored at 1e-16 (a log axis; 0 to rounding)."""
    out = []
    for label, found in results.items():
        if label.endswith("every coalition"):
            continue
        s = Summary(label)
        for e, (errs, gaps) in found.items():
            s.write("train", "relative L2 error", e, ValWithError(*_band(errs)))
            s.write("train", "efficiency gap", e, ValWithError(*_band(np.maximum(gaps, 1e-16))))
        out.append(s)
    guide = Summary("1 / sqrt(evaluations)")  # the Monte Carlo rate, through Shapley sampling's first point
    first = next(iter(results["Shapley sampling"].items()))
    for e in results["Shapley sampling"]:
        guide.write("train", "relative L2 error", e, float(first[1][0].mean()) * np.sqrt(first[0] / e))
    return [*out, guide]


def _band(values: np.ndarray) -> tuple[float, float, float]:
    return float(np.percentile(values, 10)), float(values.mean()), float(np.percentile(values, 90))


def table(results: dict[str, dict[int, tuple[np.ndarray, np.ndarray]]], budgets: tuple[int, ...]) -> str:
    """The markdown table of the page: mean relative L2 error at each budget, largest gap."""
    shown = [e for e in TABLE if e in budgets] or list(budgets)
    head = "| method | " + " | ".join(f"{e} evaluations" for e in shown) + " | efficiency gap (largest) |"
    lines = [head, "|---|" + "---:|" * (len(shown) + 1)]
    for label, found in results.items():
        if label.endswith("every coalition"):
            errs, gaps = found[2**F]
            cells = [f"{errs.mean():.1e} at {2**F}"] + [""] * (len(shown) - 1)
        else:
            cells = [f"{found[e][0].mean():.3f}" for e in shown]
            gaps = np.concatenate([g for _, g in found.values()])
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {gaps.max():.1e} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    p = parser(__doc__.splitlines()[0], "agnostic_convergence.png")
    p.add_argument("--images", type=int, default=4, help="held-out images (one game each)")
    p.add_argument("--seeds", type=int, default=5, help="seeds per budget")
    p.add_argument("--max-evals", type=int, default=BUDGETS[-1], help="the largest budget")
    args = p.parse_args(argv)
    out = out_path(args, "agnostic_convergence.png")
    model, data = train_lenet("torch", epochs=args.epochs, n_train=args.n_train, logits=True)
    model.eval()
    x = model_layout("torch", data["x"][pick_samples(data, args.images)])
    ids = patch_grid(x.shape[-1])
    import torch

    with torch.no_grad():
        targets = model(torch.from_numpy(x)).argmax(dim=1).numpy()
    budgets = tuple(e for e in BUDGETS if e <= args.max_evals)
    print(f"{F} patches, {len(x)} images, {args.seeds} seeds, budgets {budgets}:", flush=True)
    results = measure(model, x, targets, ids, budgets, args.seeds)
    fig = xk.viz.plot_history(
        summaries(results),
        metrics=["relative L2 error", "efficiency gap"],
        title=f"LeNet on shapes, {F} patches: error against the exact Shapley values "
        f"({len(x)} images x {args.seeds} seeds)",
    )
    for ax in fig.axes:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("model evaluations per sample")
    guide = fig.axes[0].get_lines()[-1]  # the 1/sqrt line: a thin grey guide, not a method
    guide.set(color="0.5", linestyle=":", marker="")
    fig.axes[0].legend(fontsize=8)
    xk.viz.save_figure(fig, out, dpi=args.dpi)
    print(table(results, budgets))
    print(f"wrote {out}")
    return out


if __name__ == "__main__":
    main()
