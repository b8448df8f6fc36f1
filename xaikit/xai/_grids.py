"""PNG grids of a dataset explanation: the first samples, the most and the least confident
(by the stored ``score``), each row the image, its display mask and the prediction."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from xaikit.layout import channel_axis_of
from xaikit.xai._display import to_display
from xaikit.xai._sources import Source


def _pick(table: Any, n: int) -> dict[str, np.ndarray]:
    index = table["index"].to_numpy()
    order = np.argsort(table["score"].to_numpy(), kind="stable")
    return {
        "first": index[:n],
        "most_confident": index[order[::-1][:n]],
        "least_confident": index[order[:n]],
    }


def save_grids(result: Any, source: Source, folder: str | os.PathLike[str], n: int = 8) -> list[Path]:
    """Write ``first.png``, ``most_confident.png`` and ``least_confident.png`` into ``folder``
    (``n`` samples each, committed samples only); returns the paths."""
    from xaikit.viz import ImgData

    table = result.table
    if len(table) == 0:
        return []
    paths = []
    by_index = table.set_index("index")
    for name, idx in _pick(table, n).items():
        x = np.concatenate([source.get(int(i), int(i) + 1).x for i in idx])
        if x.ndim not in (3, 4):  # not images: no grid
            return []
        raw = np.asarray(result.attributions.get_orthogonal_selection((idx,)))
        axis = channel_axis_of(raw.shape, prefer_first=x.ndim == 4 and channel_axis_of(x.shape, True) == 1)
        mask = to_display(raw, axis)
        if mask.ndim == 4:
            mask = mask[:, 0] if axis == 1 else mask[..., 0]
        rows = by_index.loc[idx]
        text = [f"#{i} pred {p} ({s:.2f})" for i, p, s in zip(idx, rows["prediction"], rows["score"])]
        grid = ImgData(
            {"sample": text, "image": x, "saliency": mask},
            colormaps={"saliency": "inferno"},
            vranges={"saliency": (0.0, 1.0)},
            figure_title=f"{result.manifest['method']}: {name.replace('_', ' ')}",
        )
        path = Path(folder) / f"{name}.png"
        grid.paint_figure(save_path=path, dpi=72)
        paths.append(path)
    return paths
