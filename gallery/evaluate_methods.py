"""Which explanation can you trust? Score four saliency methods on a LeNet trained on ``shapes``.

Trains xaikit's LeNet on the bundled ``shapes`` images in PyTorch (a plain optimizer loop) and
in Keras (compile + fit), then scores vanilla gradients, SmoothGrad, Integrated Gradients and
SmInt on held-out images with ``xk.evaluate``: deletion and insertion AUC, pointing game and
energy inside the ground-truth object mask, and the model-parameter randomization test. A
random map is scored too, as the chance level.

Writes the randomization grid of the torch model (PNG) and the tables (markdown, into
``docs/evaluate.md`` between its ``evaluate_methods`` markers when the picture goes to
``docs/img``).

Usage: python -m gallery.evaluate_methods [--out docs/img/randomization_grid.png] [--n-train 6000]
    [--epochs 8] [--samples 24] [--frameworks torch,tf] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

import xaikit as xk
from xaikit.dataset.data import shapes

METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "vanilla": ("vanilla", {}),
    "SmoothGrad": ("smoothgrad", {"nsamples": 16}),
    "Integrated Gradients": ("integrated", {"nsamples": 32, "baseline": "black"}),
    "SmInt": ("smint", {"nsamples": 8, "nintegration": 16, "baseline": "black"}),
}


def load(n_train: int, n_eval: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    train, test = shapes.load_data(n_train=n_train, n_eval=n_eval, seed=0)
    out = []
    for ds in (train, test):
        x = ds["x"].astype(np.float32)
        low, high = x.min(axis=(1, 2, 3), keepdims=True), x.max(axis=(1, 2, 3), keepdims=True)
        x = (x - low) / np.maximum(high - low, 1e-6)  # each image min-max scaled to [0, 1]
        out.append({"x": x, "y": ds["y"].astype(np.int64), "mask": ds["mask"]})
    return out[0], out[1]


def train_torch(train: dict[str, np.ndarray], test: dict[str, np.ndarray], epochs: int, seed: int = 0) -> Any:
    import torch

    from xaikit.architecture.torch import LeNet

    torch.manual_seed(seed)
    model = LeNet(input_shape=(3, 32, 32), classes=len(shapes.label_mapping), softmax=False)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.as_tensor(train["x"]).permute(0, 3, 1, 2).contiguous()
    y = torch.as_tensor(train["y"])
    gen = torch.Generator().manual_seed(seed)
    xt = np.ascontiguousarray(test["x"].transpose(0, 3, 1, 2))
    for epoch in range(epochs):
        model.train()
        for idx in torch.randperm(len(x), generator=gen).split(64):
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        print(
            f"  torch epoch {epoch + 1}: held-out accuracy {accuracy(model, xt, test['y']):.3f}", flush=True
        )
    model.softmax = True  # explain and score class probabilities, as the reference's LeNet returns
    return model


def train_keras(train: dict[str, np.ndarray], test: dict[str, np.ndarray], epochs: int, seed: int = 0) -> Any:
    import tensorflow as tf

    from xaikit.architecture.tensorflow import LeNet

    tf.keras.utils.set_random_seed(seed)
    model = LeNet(input_shape=(32, 32, 3), classes=len(shapes.label_mapping))
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(
        train["x"], train["y"], batch_size=64, epochs=epochs, verbose=2, shuffle=True,
        validation_data=(test["x"], test["y"]),
    )  # fmt: skip
    return model


def accuracy(model: Any, x: np.ndarray, y: np.ndarray) -> float:
    from xaikit.backend import get_backend

    bk = get_backend(model)
    with bk.inference(model):
        out = bk.to_numpy(bk.forward(model, [bk.as_tensor(x, bk.model_device(model))]))
    return float((out.argmax(axis=1) == y).mean())


def score(model: Any, x: np.ndarray, mask: np.ndarray, seed: int = 0) -> list[dict[str, Any]]:
    """One table row per method (plus a random control) for one trained model."""
    rows = []
    rng = np.random.default_rng(seed)
    for label, (method, opts) in [*METHODS.items(), ("random map (chance)", ("random", {}))]:
        t0 = time.perf_counter()
        if method == "random":
            maps = rng.random((len(x), *mask.shape[1:]))
            rand_rho = rand_ssim = float("nan")
        else:
            maps = xk.xai.explain(model, x, method=method, seed=seed, **opts)
            rt = xk.evaluate.randomization_test(model, x[:8], method=method, seed=seed, method_options=opts)
            rand_rho = float(rt.table["spearman_abs"].iloc[-1])
            rand_ssim = float(rt.table["ssim"].iloc[-1])
        # plain gradients are sensitivities (their sign says which way a small change moves the
        # score, not what a pixel contributes): ranked by magnitude; attributions (IG) by sign, and
        # by magnitude too, since the order changes the verdict
        orders = {"vanilla": ["magnitude"], "integrated": ["signed", "magnitude"]}.get(method, ["auto"])
        for rank in orders:
            dele = xk.evaluate.deletion(model, x, maps, steps=16, baseline="black", rank=rank)
            dele_blur = xk.evaluate.deletion(model, x, maps, steps=16, baseline="blur", rank=rank)
            ins = xk.evaluate.insertion(model, x, maps, steps=16, baseline="blur", rank=rank)
            loc = xk.evaluate.localization(maps, mask)
            rows.append(
                {
                    "method": label,
                    "pixel order": dele.rank,
                    "deletion AUC, black ↓": dele.auc_mean,
                    "deletion AUC, blur ↓": dele_blur.auc_mean,
                    "insertion AUC ↑": ins.auc_mean,
                    "pointing game ↑": float(loc["pointing"].mean()),
                    "energy in mask ↑": float(np.nanmean(loc["energy"])),
                    "randomized: ρ abs ↓": rand_rho,
                    "randomized: SSIM ↓": rand_ssim,
                    "seconds": time.perf_counter() - t0,
                }
            )
    return rows


def markdown(tables: dict[str, list[dict[str, Any]]], notes: dict[str, str]) -> str:
    cols = [
        "pixel order",
        "deletion AUC, black ↓",
        "deletion AUC, blur ↓",
        "insertion AUC ↑",
        "pointing game ↑",
        "energy in mask ↑",
        "randomized: ρ abs ↓",
        "randomized: SSIM ↓",
    ]
    lines = []
    for framework, rows in tables.items():
        lines.append(f"**{framework}** ({notes[framework]})")
        lines.append("")
        lines.append("| method | " + " | ".join(cols) + " |")
        lines.append("|---|---|" + "---:|" * (len(cols) - 1))
        for row in rows:
            cells = [
                row[c] if isinstance(row[c], str) else "–" if np.isnan(row[c]) else f"{row[c]:.3f}"
                for c in cols
            ]
            lines.append(f"| {row['method']} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


DOCS = Path(__file__).resolve().parent.parent / "docs"
MARKERS = ("table", "layers")


def write_tables(tables: dict[str, str], picture: Path, target: str) -> Path:
    """Put the generated tables into the docs page (between ``<!-- evaluate_methods:NAME -->``
    and ``<!-- /evaluate_methods:NAME -->``) when the picture goes to that page's ``img/``
    folder, else into ``evaluate_table.md`` beside the picture (or into ``target``)."""
    page = picture.resolve().parent.parent / "evaluate.md"
    if (
        target == "auto"
        and page.exists()
        and all(f"<!-- evaluate_methods:{m} -->" in page.read_text() for m in MARKERS)
    ):
        text = page.read_text()
        for name in MARKERS:
            head, tail = f"<!-- evaluate_methods:{name} -->", f"<!-- /evaluate_methods:{name} -->"
            before, rest = text.split(head, 1)
            _, after = rest.split(tail, 1)
            text = f"{before}{head}\n{tables[name].strip()}\n{tail}{after}"
        path = page
    else:
        path = picture.with_name("evaluate_table.md") if target == "auto" else Path(target)
        text = "\n\n".join(tables[m].strip() for m in MARKERS) + "\n"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--out", default=str(DOCS / "img" / "randomization_grid.png"), help="the grid picture"
    )
    parser.add_argument(
        "--table",
        default="auto",
        help="where the tables go ('auto': into docs/evaluate.md when --out is in docs/img, else "
        "evaluate_table.md beside the picture)",
    )
    parser.add_argument("--n-train", type=int, default=6000)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--samples", type=int, default=24, help="held-out images scored")
    parser.add_argument("--frameworks", default="torch,tf")
    parser.add_argument(
        "--threads", type=int, default=0, help="intra-op threads (0: the frameworks' default)"
    )
    args = parser.parse_args(argv)
    frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
        if "tf" in frameworks:
            import tensorflow as tf

            tf.config.threading.set_intra_op_parallelism_threads(args.threads)
            tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    picture = Path(args.out)
    picture.parent.mkdir(parents=True, exist_ok=True)
    train, test = load(args.n_train, max(args.samples, 500))
    x, mask = test["x"][: args.samples], test["mask"][: args.samples]
    tables, notes = {}, {}
    layer_rows: list[str] = []
    for framework in frameworks:
        t0 = time.perf_counter()
        if framework == "torch":
            model = train_torch(train, test, args.epochs)
            xs = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
            x_all = np.ascontiguousarray(test["x"].transpose(0, 3, 1, 2))
            name = "PyTorch LeNet"
        else:
            model = train_keras(train, test, args.epochs)
            xs, x_all = x, test["x"]
            name = "Keras LeNet"
        acc = accuracy(model, x_all, test["y"])
        trained = time.perf_counter() - t0
        tables[name] = score(model, xs, mask)
        notes[name] = f"held-out accuracy {acc:.1%}, {args.samples} images scored"
        scored = time.perf_counter() - t0 - trained
        print(f"{name}: accuracy {acc:.3f}, trained in {trained:.0f} s, scored in {scored:.0f} s")
        for row in tables[name]:
            print("   ", {k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()})
        if framework == "torch" or not layer_rows:
            rt = xk.evaluate.randomization_test(model, xs[:4], method="vanilla")
            rt.paint_figure(save_path=picture, dpi=80, cell_size=1.3)  # the grid + a caption on ρ
            print(rt.table.to_string())
            layer_rows = [
                f"| step | layer randomized (cascading, {name}) | Spearman of abs maps | "
                "Spearman of signed maps | SSIM |",
                "|---:|---|---:|---:|---:|",
            ]
            for r in rt.table.itertuples():
                layer_rows.append(
                    f"| {r.step} | {r.layer} | {r.spearman_abs:.3f} | {r.spearman:.3f} | {r.ssim:.3f} |"
                )
            if rt.baseline is not None:
                m = rt.baseline.mean
                layer_rows.append(
                    f"| baseline | two independently randomized copies (seeds {rt.baseline.seeds}) | "
                    f"{m['spearman_abs']:.3f} | {m['spearman']:.3f} | {m['ssim']:.3f} |"
                )
    path = write_tables(
        {"table": markdown(tables, notes), "layers": "\n".join(layer_rows)}, picture, args.table
    )
    print(f"tables written to {path}")
    return path


if __name__ == "__main__":
    main()
