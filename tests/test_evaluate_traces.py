"""Faithfulness traces: fixed samples, logged values equal the one-call functions, a real loop."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.evaluate_models import SIZE, layout, linear, square_weights
from tests.loop_fakes import FakePipeline
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.evaluate._common import spearman
from xaikit.evaluate.traces import DeletionAUC, SaliencyStability
from xaikit.trace.base import Data, System


def _batches(rng: np.random.Generator, n: int = 3, size: int = 4) -> list[dict[str, np.ndarray]]:
    return [
        {
            "x": rng.uniform(size=(size, SIZE, SIZE, 3)).astype(
                np.float32
            ),  # channel-last, as pipelines give
            "y": rng.integers(0, 3, size=size),
        }
        for _ in range(n)
    ]


def _run_epoch(trace: Any, batches: list[dict[str, np.ndarray]], epoch: int) -> Data:
    trace.system = getattr(trace, "system", System())
    trace.system.epoch_idx = epoch
    trace.on_epoch_begin(Data())
    for b in batches:
        trace.on_batch_end(Data(b))
    end = Data()
    trace.on_epoch_end(end)
    return end


@pytest.mark.parametrize(
    ("samples", "expect"),
    [(None, slice(0, 4)), (6, slice(0, 6)), (2, slice(0, 2)), (12, slice(0, 12)), (50, slice(0, 12))],
)
def test_sample_selection(framework: str, rng: np.random.Generator, samples: Any, expect: slice) -> None:
    model = linear(framework, square_weights(rng))
    batches = _batches(rng)
    trace = DeletionAUC(model, samples=samples, steps=4, class_key="y")
    _run_epoch(trace, batches, 1)
    got = trace.collector.get("train")  # System() starts in train mode
    assert got is not None
    every_x = np.concatenate([b["x"] for b in batches])
    np.testing.assert_array_equal(got["x"], every_x[expect])
    np.testing.assert_array_equal(got["y"], np.concatenate([b["y"] for b in batches])[expect])
    # fixed: a later epoch with other batches explains the same samples
    _run_epoch(trace, _batches(rng), 2)
    np.testing.assert_array_equal(trace.collector.get("train")["x"], every_x[expect])


def _model_batches(framework: str, rng: np.random.Generator) -> list[dict[str, np.ndarray]]:
    """Batches in the layout of ``linear``'s model: it has no convolution, so (as the Network
    does) the traces feed it the batch as it comes."""
    return [dict(b, x=layout(framework, b["x"])) for b in _batches(rng)]


def test_deletion_auc_logs_the_one_call_value(framework: str, rng: np.random.Generator) -> None:
    model = linear(framework, square_weights(rng))
    batches = _model_batches(framework, rng)
    trace = DeletionAUC(model, samples=5, steps=8, baseline="zeros", class_key="y")
    logs = _run_epoch(trace, batches, 1).read_logs()
    assert list(logs) == ["deletion_auc"]
    x = np.concatenate([b["x"] for b in batches])[:5]
    y = np.concatenate([b["y"] for b in batches])[:5]
    maps = xk.xai.explain(model, x, target=y, method="vanilla")
    want = xk.evaluate.deletion(model, x, maps, target=y, steps=8, baseline="zeros")
    assert logs["deletion_auc"] == pytest.approx(want.auc_mean, rel=1e-6)
    np.testing.assert_allclose(trace.last_auc, want.auc, rtol=1e-6)
    assert trace.history == [(1, logs["deletion_auc"])]
    # given samples, an IG method with its own baseline
    given = {"x": np.concatenate([b["x"] for b in batches])[:3]}  # already in the model's layout
    ig = DeletionAUC(model, samples=given, method="integrated", nsamples=4, ig_baseline="zeros", steps=4)
    got = _run_epoch(ig, [], 1).read_logs()["deletion_auc"]
    xs = given["x"]
    maps = xk.xai.explain(model, xs, method="integrated", nsamples=4, baseline="zeros")
    assert got == pytest.approx(xk.evaluate.deletion(model, xs, maps, steps=4).auc_mean, rel=1e-6)


def test_deletion_auc_passes_the_rank_through(framework: str, rng: np.random.Generator) -> None:
    model = linear(framework, square_weights(rng))
    xs = layout(framework, np.concatenate([b["x"] for b in _batches(rng)])[:4])
    given = {"x": xs, "y": np.array([1, 2, 1, 2])}  # in the layout of the conv-less model
    maps = xk.xai.explain(model, xs, target=given["y"], method="integrated", nsamples=4, baseline="zeros")
    assert np.any(maps < 0)  # a signed map: "auto" ranks it signed
    logged = {}
    for rank in ("auto", "signed", "magnitude"):
        trace = DeletionAUC(
            model, samples=given, class_key="y", method="integrated", nsamples=4, ig_baseline="zeros",
            steps=4, baseline="zeros", rank=rank,
        )  # fmt: skip
        _run_epoch(trace, [], 1)
        want = xk.evaluate.deletion(model, xs, maps, target=given["y"], steps=4, baseline="zeros", rank=rank)
        np.testing.assert_allclose(trace.last_auc, want.auc, rtol=1e-6)
        logged[rank] = trace.last_auc
    np.testing.assert_array_equal(logged["auto"], logged["signed"])
    assert not np.allclose(logged["signed"], logged["magnitude"])  # the option reaches the curve
    with pytest.raises(
        XaikitValueError, match=r"rank must be one of 'auto', 'signed', 'magnitude'; got 'abs'"
    ):
        DeletionAUC(model, rank="abs")


def test_stability_compares_consecutive_runs(framework: str, rng: np.random.Generator) -> None:
    w = square_weights(rng)
    model = linear(framework, w)
    batches = _model_batches(framework, rng)
    trace = SaliencyStability(model, samples=4, class_key="y")
    assert _run_epoch(trace, batches, 1).read_logs() == {}  # nothing to compare with yet
    assert _run_epoch(trace, batches, 2).read_logs() == {"saliency_stability": pytest.approx(1.0, abs=1e-12)}
    # change the model: the logged value is the Spearman of the two epochs' maps
    w2 = w + rng.normal(scale=0.5, size=w.shape).astype(np.float32)
    if framework == "torch":
        import torch

        with torch.no_grad():
            model[1].weight.copy_(torch.as_tensor(w2.transpose(0, 3, 1, 2).reshape(3, -1)))
    else:
        model.layers[-1].set_weights([w2.reshape(3, -1).T])
    value = _run_epoch(trace, batches, 3).read_logs()["saliency_stability"]
    y = batches[0]["y"]
    before = np.abs(w[y]).sum(axis=-1).reshape(4, -1)
    after = np.abs(w2[y]).sum(axis=-1).reshape(4, -1)
    want = spearman(before, after)
    assert value == pytest.approx(float(want.mean()), abs=1e-6) and value < 0.95
    np.testing.assert_allclose(trace.last_spearman, want, atol=1e-6)
    assert [e for e, _ in trace.history] == [2, 3]


def test_trace_bad_arguments(rng: np.random.Generator) -> None:
    model = linear("torch", square_weights(rng))
    with pytest.raises(XaikitValueError, match=r"samples must be >= 1 when it is an int; got 0"):
        DeletionAUC(model, samples=0)
    with pytest.raises(
        XaikitTypeError, match=r"samples must be None, an int >= 1 or a dict of arrays; got str"
    ):
        SaliencyStability(model, samples="x")
    with pytest.raises(
        XaikitValueError, match=r"samples must hold the key\(s\) \['y'\]; the given samples have keys \['x'\]"
    ):
        DeletionAUC(model, samples={"x": np.zeros((2, SIZE, SIZE, 3))}, class_key="y")
    with pytest.raises(XaikitValueError, match=r"steps must be an int >= 1; got int 0"):
        DeletionAUC(model, steps=0)
    with pytest.raises(XaikitValueError, match=r"baseline must be one of"):
        DeletionAUC(model, baseline="grey")
    with pytest.raises(XaikitValueError, match=r"method must be one of"):
        SaliencyStability(model, method="no_such_method")
    trace = DeletionAUC(model, model_inputs="image")
    with pytest.raises(
        XaikitValueError,
        match=r"the batch has no key\(s\) \['image'\] to collect samples from; it has \['x'\]",
    ):
        trace.on_batch_end(Data({"x": np.zeros((1, SIZE, SIZE, 3))}))


@pytest.mark.slow
def test_traces_in_the_estimator_loop(rng: np.random.Generator) -> None:
    """A torch model trained by a minimal network inside ``xk.Estimator``: both traces log on
    every eval epoch, and stability rises as training settles."""
    import torch

    from tests.evaluate_models import square_mask

    torch.manual_seed(0)
    n = 96
    x = rng.uniform(size=(n, SIZE, SIZE, 3)).astype(np.float32)
    y = (x[:, 2:5, 3:7].mean(axis=(1, 2, 3)) > 0.5).astype(np.int64)  # the label lives in the square
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(SIZE * SIZE * 3, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)

    class TorchNet:
        def __init__(self) -> None:
            self.models = [model]

        def load_epoch(self, mode: str, epoch: int) -> None: ...
        def unload_epoch(self) -> None: ...
        def get_loss_keys(self) -> set[str]:
            return {"ce"}

        def run_step(self, batch: dict[str, np.ndarray], mode: str) -> dict[str, Any]:
            xb = torch.as_tensor(batch["x"]).permute(0, 3, 1, 2)
            yb = torch.as_tensor(batch["y"])
            model.train(mode == "train")
            with torch.set_grad_enabled(mode == "train"):
                out = model(xb)
                loss = torch.nn.functional.cross_entropy(out, yb)
                if mode == "train":
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            return {"y_pred": torch.softmax(out, 1).detach().numpy(), "ce": np.float32(loss.item())}

    traces = [
        DeletionAUC(model, samples=16, class_key="y", steps=8, baseline="mean"),
        SaliencyStability(model, samples=16, class_key="y"),
    ]
    pipeline = FakePipeline(batch_size=16, train={"x": x, "y": y}, eval={"x": x[:32], "y": y[:32]})
    est = xk.Estimator(pipeline=pipeline, network=TorchNet(), epochs=6, traces=traces, log_steps=None)
    est.fit()
    aucs, stab = traces[0].history, traces[1].history
    assert [e for e, _ in aucs] == [1, 2, 3, 4, 5, 6] and [e for e, _ in stab] == [2, 3, 4, 5, 6]
    assert stab[-1][1] > stab[0][1]  # the explanation settles
    hist = est.system.summary.history["eval"]
    assert sorted(hist["deletion_auc"].values()) == sorted(v for _, v in aucs)
    # the trained model looks at the square
    maps = xk.xai.explain(model, x[:16].transpose(0, 3, 1, 2), target=y[:16], method="vanilla")
    assert np.mean(xk.evaluate.localization(maps, square_mask(16))["energy"]) > 12 / 64


def _gallery_module() -> Any:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "gallery" / "evaluate_methods.py"
    spec = importlib.util.spec_from_file_location("evaluate_methods_gallery", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gallery_tables_go_into_the_page_between_markers(tmp_path: Any) -> None:
    module = _gallery_module()
    page = tmp_path / "evaluate.md"
    page.write_text(
        "intro\n<!-- evaluate_methods:table -->\nold\n<!-- /evaluate_methods:table -->\nmiddle\n"
        "<!-- evaluate_methods:layers -->\nold\nold\n<!-- /evaluate_methods:layers -->\nend\n"
    )
    picture = tmp_path / "img" / "grid.png"
    picture.parent.mkdir()
    out = module.write_tables({"table": "| a |\n", "layers": "| b |"}, picture, "auto")
    assert out == page
    assert page.read_text() == (
        "intro\n<!-- evaluate_methods:table -->\n| a |\n<!-- /evaluate_methods:table -->\nmiddle\n"
        "<!-- evaluate_methods:layers -->\n| b |\n<!-- /evaluate_methods:layers -->\nend\n"
    )
    # no page with markers: a file beside the picture
    other = tmp_path / "elsewhere" / "pics" / "grid.png"
    other.parent.mkdir(parents=True)
    out = module.write_tables({"table": "| a |", "layers": "| b |"}, other, "auto")
    assert out == other.with_name("evaluate_table.md") and out.read_text() == "| a |\n\n| b |\n"


@pytest.mark.slow
def test_gallery_script_writes_the_table_and_grid(tmp_path: Any) -> None:
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    picture = tmp_path / "img" / "randomization_grid.png"
    args = ["--out", str(picture), "--n-train", "64", "--epochs", "1", "--samples", "4", "--threads", "1"]
    subprocess.run(
        [sys.executable, "-m", "gallery.evaluate_methods", *args, "--frameworks", "torch"],
        check=True, capture_output=True, cwd=root,
    )  # fmt: skip
    table = (tmp_path / "img" / "evaluate_table.md").read_text()
    for name in ("vanilla", "SmoothGrad", "Integrated Gradients", "SmInt", "random map (chance)"):
        assert f"| {name} |" in table
    assert "| 5 | conv1 |" in table  # the per-layer table of the grid
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
