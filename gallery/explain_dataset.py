"""explain_dataset on ``shapes``: the most and the least confident samples read back from the store.

Trains a LeNet briefly on the bundled data, explains 64 evaluation images with SmoothGrad into a
temporary Zarr store with :func:`xaikit.xai.explain_dataset`, opens the store again and paints
the grids that ``xaikit explain`` writes into ``OUT/grids/`` (the same function) side by side:
``docs/img/dataset_grids.png``.

    python -m gallery.explain_dataset [--framework torch|tf] [--out PATH] [--epochs 3] [--n-train 3000]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # also `python gallery/<script>.py`

import xaikit as xk
from gallery._common import out_path, parser, train_lenet
from xaikit.files import atomic_path
from xaikit.op.numpyop import Minmax
from xaikit.xai.dataset._grids import dataset_grid, pick_samples
from xaikit.xai.dataset._sources import as_source
from xaikit.xai.registry import title as method_title

PICTURE = "dataset_grids.png"


def main(argv: list[str] | None = None) -> str:
    p = parser(__doc__.splitlines()[0], PICTURE)
    p.set_defaults(epochs=3, n_train=3000)
    p.add_argument("--n", type=int, default=64, help="evaluation images explained")
    p.add_argument("--show", type=int, default=5, help="rows of each grid")
    p.add_argument("--nsamples", type=int, default=8, help="SmoothGrad's noisy samples")
    args = p.parse_args(argv)
    out = out_path(args, PICTURE)
    # batches of 32, 3 short epochs: 37 of the 64 right, so that both grids have something to show
    model, data = train_lenet(args.framework, args.epochs, args.n_train, batch_size=32)
    # the images as the LeNet was trained on them (min-max scaled each); channel-last, which
    # explain moves for the channel-first torch LeNet
    x = Minmax("x").forward_batch([data["x"][: args.n]], np.random.default_rng(0))[0]
    y = data["y"][: args.n]
    with tempfile.TemporaryDirectory(prefix="xaikit-gallery-") as tmp:
        store = Path(tmp) / "shapes.zarr"
        xk.xai.explain_dataset(
            model,
            x,
            method="smoothgrad",
            out=store,
            batch_size=32,
            labels=y,
            classes=sorted(
                xk.dataset.data.shapes.label_mapping, key=xk.dataset.data.shapes.label_mapping.get
            ),
            progress=False,
            nsamples=args.nsamples,
        )
        result = xk.xai.DatasetExplanation.open(store)  # read back, as a later session would
        table = result.table
        picks = pick_samples(table, args.show)
        panels = []
        for name in ("most_confident", "least_confident"):
            title = f"{method_title('smoothgrad')}: {name.replace('_', ' ')}"
            grid = dataset_grid(result, as_source(x, labels=y), picks[name], title, table)
            assert grid is not None  # images
            panels.append(grid.paint_numpy(dpi=args.dpi)[0])
    height = max(panel.shape[0] for panel in panels)
    white = lambda h, w: np.full((h, w, 3), 255, np.uint8)  # noqa: E731
    panels = [np.concatenate([a, white(height - a.shape[0], a.shape[1])]) for a in panels]
    with atomic_path(out) as tmp:
        Image.fromarray(np.concatenate([panels[0], white(height, 16), panels[1]], axis=1)).save(tmp, "PNG")
    wrong = int((table["label"] != table["prediction"]).sum())
    print(f"wrote {out} ({len(table)} samples, {wrong} predicted wrong, score {table['score'].min():.2f}..)")
    return out


if __name__ == "__main__":
    main()
