"""The Saliency trace and its SampleCollector: columns, fixed samples, fused calls, seeds, errors."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.trace.base import Data, System
from xaikit.trace.xai import Saliency, SampleCollector

MAPPING = {"circle": 0, "square": 1, "triangle": 2}


def tiny_model(framework: str, channels: int = 3, size: int = 8, classes: int = 3):
    if framework == "torch":
        import torch

        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Conv2d(channels, 4, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Flatten(),
            torch.nn.Linear(4 * size * size, classes),
        )
    import keras

    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [
            keras.Input((size, size, channels)),
            keras.layers.Conv2D(4, 3, padding="same", activation="relu"),
            keras.layers.Flatten(),
            keras.layers.Dense(classes),
        ]
    )


def predict(model, framework: str, x: np.ndarray) -> np.ndarray:
    if framework == "torch":
        import torch

        with torch.no_grad():
            return model(torch.as_tensor(np.moveaxis(x, -1, 1).copy())).numpy().argmax(-1)
    return np.asarray(model(x)).argmax(-1)


def batches(n_batches: int, bs: int = 2, size: int = 8, channels: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    out = []
    for b in range(n_batches):
        out.append(
            {
                "x": rng.random((bs, size, size, channels), dtype=np.float32),
                "y": (np.arange(bs) + b * bs) % 3,
                "idx": np.arange(b * bs, (b + 1) * bs),
            }
        )
    return out


def run_epoch(trace, data_batches, mode: str = "eval") -> Data:
    if not hasattr(trace, "system"):
        trace.system = System()
    trace.system.mode = mode
    for batch in data_batches:
        trace.on_batch_end(Data(batch))
    data = Data()
    trace.on_epoch_end(data)
    return data


# ---- SampleCollector ------------------------------------------------------------------------------
def test_collector_first_batch_int_and_dict():
    bs = batches(3)
    first = SampleCollector(None, keys=["idx"])
    for b in bs:
        first.collect("eval", b)
    assert first.finish("eval")["idx"].tolist() == [0, 1]

    n = SampleCollector(3, keys=["idx", "y"])
    for b in bs:
        n.collect("eval", b)
    got = n.finish("eval")
    assert got["idx"].tolist() == [0, 1, 2] and got["y"].tolist() == [0, 1, 2]
    # frozen after the first finish; other modes collect on their own
    n.collect("eval", batches(1, seed=5)[0] | {"idx": np.array([7, 8])})
    assert n.finish("eval")["idx"].tolist() == [0, 1, 2]
    assert n.get("test") is None
    n.collect("test", {"idx": np.array([5, 6]), "y": np.array([1, 1])})
    assert n.finish("test")["idx"].tolist() == [5, 6]

    fixed = SampleCollector({"idx": [4, 5]}, keys=["idx"])
    assert not fixed.wants("eval") and fixed.finish("eval")["idx"].tolist() == [4, 5]
    # pickles with its state
    again = pickle.loads(pickle.dumps(n))
    assert again.get("eval")["idx"].tolist() == [0, 1, 2]


def test_collector_keeps_only_what_it_needs():
    c = SampleCollector(1, keys=["x"])
    c.collect("eval", {"x": np.zeros((4, 2)), "big": np.zeros((4, 1000))})
    assert c.finish("eval")["x"].shape == (1, 2)
    assert not c.wants("eval")


@pytest.mark.parametrize(
    "samples, err, match",
    [
        ("five", XaikitTypeError, "samples must be None, an int"),
        (1.5, XaikitTypeError, "samples must be None, an int"),
        (True, XaikitTypeError, "samples must be None"),
        (0, XaikitValueError, "samples must be >= 1"),
        ({}, XaikitValueError, "at least one key"),
        ({"x": np.zeros((2, 3)), "y": np.zeros(3)}, XaikitValueError, "same batch size"),
    ],
)
def test_collector_bad_samples(samples, err, match):
    with pytest.raises(err, match=match):
        SampleCollector(samples)


def test_collector_missing_key():
    with pytest.raises(XaikitValueError, match=r"samples must hold the key\(s\) \['x'\]"):
        SampleCollector({"y": [1]}, keys=["x"])
    c = SampleCollector(None, keys=["x"])
    with pytest.raises(XaikitValueError, match=r"no key\(s\) \['x'\]"):
        c.collect("eval", {"y": np.zeros(2)})


# ---- Saliency -------------------------------------------------------------------------------------
def test_columns_labels_and_predictions(framework):
    model = tiny_model(framework)
    trace = Saliency(
        model, "x", "y_pred", class_key="y", label_mapping=MAPPING, samples=3, smoothing=2, integrating=(4, 2)
    )
    bs = batches(3)
    data = run_epoch(trace, bs)
    img = data["saliency"]
    assert img is trace.images
    assert img.columns == [
        "y",
        "y_pred",
        "x",
        "x saliency",
        "saliency",
        "Smoothed saliency",
        "Integrated saliency",
        "SmInt saliency",
    ]
    assert img.batch_sizes == [3]
    names = {v: k for k, v in MAPPING.items()}
    assert img["y"][0] == ["circle", "square", "triangle"]
    x3 = np.concatenate([b["x"] for b in bs])[:3]
    pred = predict(model, framework, x3)
    wrong = pred != np.arange(3)
    assert img["y_pred"][0] == [names[int(c)] + (" ✗" if w else "") for c, w in zip(pred, wrong)]
    assert [img.text_color("y_pred", r) for r in range(3)] == ["red" if w else None for w in wrong]
    assert img.figure_title == "saliency: eval epoch 0"
    np.testing.assert_allclose(img["x"][0], x3)
    for col in ("saliency", "Smoothed saliency", "Integrated saliency", "SmInt saliency"):
        mask = np.asarray(img[col][0])
        assert mask.shape[:3] == (3, 8, 8)  # channel-last like the image, whatever the framework
        assert mask.min() >= 0 and mask.max() <= 1 and mask.max() > 0.5
    # overlay = best mask (SmInt) over the image
    from xaikit.viz import overlay

    expected = overlay(x3, np.asarray(img["SmInt saliency"][0]), smooth=1.0)  # auto: max(1, side / 32)
    np.testing.assert_allclose(np.asarray(img["x saliency"][0]), expected, atol=1e-6)
    assert img._cmaps["SmInt saliency"].name == "inferno"  # masks: inferno
    fig = img.paint_figure(dpi=20)
    bars = {a.get_label().rsplit(":", 1)[0] for a in fig.axes if a.get_label().startswith("colorbar:")}
    assert bars == {
        f"colorbar:{c}" for c in ("saliency", "Smoothed saliency", "Integrated saliency", "SmInt saliency")
    }


def test_dropped_columns_and_overlay_choice(framework):
    model = tiny_model(framework)
    only = Saliency(model, "x", "y_pred", samples=2, smoothing=0, integrating=0)
    img = run_epoch(only, batches(1))["saliency"]
    assert img.columns == ["y_pred", "x", "x saliency", "saliency"]
    from xaikit.viz import overlay

    np.testing.assert_allclose(
        np.asarray(img["x saliency"][0]),
        overlay(batches(1)[0]["x"], np.asarray(img["saliency"][0]), smooth=1.0),
        atol=1e-6,
    )
    raw = Saliency(model, "x", "y_pred", samples=2, smoothing=0, integrating=0, overlay_smooth=0)
    img = run_epoch(raw, batches(1))["saliency"]
    np.testing.assert_allclose(  # overlay_smooth=0: the raw mask under the heat map
        np.asarray(img["x saliency"][0]),
        overlay(batches(1)[0]["x"], np.asarray(img["saliency"][0])),
        atol=1e-6,
    )
    with pytest.raises(XaikitValueError, match=r"overlay_smooth must be a number >= 0; got float -0.5"):
        Saliency(model, "x", "y_pred", overlay_smooth=-0.5)
    smooth = Saliency(model, "x", "y_pred", samples=2, smoothing=2, integrating=3, outputs="sal")
    assert (smooth.n_integration, smooth.n_smint) == (3, 2)
    img = run_epoch(smooth, batches(1))["sal"]
    assert img.columns == ["y_pred", "x", "x sal", "sal", "Smoothed sal", "Integrated sal", "SmInt sal"]
    no_smint = Saliency(model, "x", "y_pred", samples=2, smoothing=2, integrating=(3, 0))
    img = run_epoch(no_smint, batches(1))["saliency"]
    assert img.columns[-1] == "Integrated saliency"
    # overlay= picks the mask under the heat map
    for choice, column in (("smoothed", "Smoothed sal"), ("saliency", "sal"), ("smint", "SmInt sal")):
        chosen = Saliency(
            model, "x", "y_pred", samples=2, smoothing=2, integrating=3, outputs="sal", overlay=choice
        )
        img = run_epoch(chosen, batches(1))["sal"]
        np.testing.assert_allclose(
            np.asarray(img["x sal"][0]),
            overlay(batches(1)[0]["x"], np.asarray(img[column][0]), smooth=1.0),
            atol=1e-6,
        )
    with pytest.raises(
        XaikitValueError,
        match=r"overlay must be None, one of \['integrated', 'saliency'.*or one of methods \[\]",
    ):
        Saliency(model, "x", "y_pred", overlay="gradcam")
    with pytest.raises(
        XaikitValueError, match=r"overlay='smint' needs that mask.*computed: \['saliency', 'smoothed'\]"
    ):
        Saliency(model, "x", "y_pred", integrating=0, overlay="smint")


def test_wrong_predictions_are_red_and_marked_in_the_painted_grid(framework):
    model = tiny_model(framework)
    x = batches(1, bs=4)[0]["x"]
    pred = predict(model, framework, x)
    labels = pred.copy()
    labels[[1, 3]] = (pred[[1, 3]] + 1) % 3  # rows 1 and 3 are wrong
    trace = Saliency(
        model, "x", "y_pred", class_key="y", samples={"x": x, "y": labels}, smoothing=0, integrating=0
    )
    img = trace.explain({"x": x, "y": labels}, title="epoch 7")
    fig = img.paint_figure(dpi=20)
    for row in range(4):
        (text,) = [t for a in fig.axes if a.get_label() == f"cell:y_pred:{row}" for t in a.texts]
        is_wrong = row in (1, 3)
        assert text.get_text().endswith("✗") is is_wrong
        assert (text.get_color() == "red") is is_wrong
        (label,) = [t for a in fig.axes if a.get_label() == f"cell:y:{row}" for t in a.texts]
        assert label.get_color() != "red" and "✗" not in label.get_text()
    assert fig.get_suptitle() == "epoch 7"
    # without a label nothing is marked
    plain = Saliency(model, "x", "y_pred", samples={"x": x}, smoothing=0, integrating=0).explain({"x": x})
    assert all(plain.text_color("y_pred", r) is None for r in range(4)) and plain.figure_title is None


def test_saliency_time_is_logged_on_the_line_of_its_epoch(framework, monkeypatch, capsys):
    """A fake slow explainer advances a fake clock by 7 s: the eval line of the epoch the trace ran
    in says so, the other epoch has no such value, and the summary records it at that step."""
    import re
    import time

    from loop_fakes import FakeNetwork, FakePipeline, blobs

    import xaikit as xk
    from xaikit.schedule import RepeatScheduler

    clock = [1000.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])

    def slow_masks(samples):
        clock[0] += 7.0
        n = len(samples["x"])
        return {"y_pred": np.zeros(n, np.int64)}, {"": [np.zeros((n, 4), np.float32)]}

    trace = Saliency(
        tiny_model(framework), "x", "y_pred", class_key="y", samples=4, smoothing=0, integrating=0
    )
    trace.masks = slow_masks
    pipe = FakePipeline(train=blobs(16), eval=blobs(8, seed=1))
    est = xk.Estimator(pipe, FakeNetwork(), epochs=2, traces=[RepeatScheduler([trace, None])], log_steps=100)
    summary = est.fit()
    evals = [line for line in capsys.readouterr().out.splitlines() if line.startswith("xaikit-Eval")]
    assert re.fullmatch(
        r"xaikit-Eval: step: 2; epoch: 1; ce: [\d.]+; epoch_time\(sec\): 0\.0; saliency_time\(sec\): 7\.0;",
        evals[0],
    )
    assert "saliency_time" not in evals[1]
    assert summary.history["eval"]["saliency_time(sec)"] == {2: 7.0}
    assert trace.images.figure_title == "saliency: eval epoch 1"


def test_single_channel_is_grey_and_same_samples_each_epoch(framework):
    model = tiny_model(framework, channels=1)
    trace = Saliency(model, "x", "y_pred", class_key="y", samples=None, smoothing=2, integrating=0)
    first = run_epoch(trace, batches(2, channels=1, seed=1))["saliency"]
    assert first._cmaps["x"].name == "gray"
    assert first.batch_sizes == [2]  # samples=None: the first batch only
    later = run_epoch(trace, batches(2, channels=1, seed=9))["saliency"]  # new data: ignored
    np.testing.assert_array_equal(np.asarray(first["x"][0]), np.asarray(later["x"][0]))
    # seeded: the same model gives exactly the same masks
    np.testing.assert_array_equal(
        np.asarray(first["Smoothed saliency"][0]), np.asarray(later["Smoothed saliency"][0])
    )


def test_dict_samples_and_one_run_per_column(framework, monkeypatch):
    """Given samples are explained as given; each column is one run of its method (the core
    ones with the trace's settings), all on one prepared input and one pinning."""
    import xaikit.trace.xai.saliency as module

    model = tiny_model(framework)
    fixed = batches(1, bs=4, seed=3)[0]
    trace = Saliency(model, "x", "y_pred", class_key="y", samples=fixed, smoothing=2, integrating=(3, 2))
    calls, pins, prepares = [], [], []
    for name, log in (("run", calls), ("pin", pins), ("prepare", prepares)):
        original = getattr(module, name)

        def spy(*a, _orig=original, _log=log, **k):
            out = _orig(*a, **k)
            _log.append((a, k, out))
            return out

        monkeypatch.setattr(module, name, spy)
    img = run_epoch(trace, batches(2))["saliency"]  # the batches are not used
    keys = ("nsamples", "nintegration", "stdev_spread")
    got = [(a[0].name, a[1].batch, {k: a[3][k] for k in keys if k in a[3]}) for a, _, _ in calls]
    assert got == [  # each method gets the options it reads, no others
        ("vanilla", 4, {}),
        ("smoothgrad", 4, {"nsamples": 2, "stdev_spread": 0.15}),
        ("integrated", 4, {"nsamples": 3}),
        ("smint", 4, {"nsamples": 2, "nintegration": 3, "stdev_spread": 0.15}),
    ]
    assert len(prepares) == 1 and len(pins) == 1  # one upload, one forward pass for the classes
    inp, pinned = prepares[0][2], pins[0][2]
    assert all(a[1] is inp and a[2] is pinned for a, _, _ in calls)
    np.testing.assert_allclose(np.asarray(img["x"][0]), fixed["x"])
    assert img["y"][0] == ["0", "1", "2", "0"]  # no label_mapping: numbers as text


def test_nothing_seen_writes_nothing():
    import torch

    trace = Saliency(torch.nn.Linear(2, 2), "x", "y_pred")
    trace.system = System()
    trace.system.mode = "eval"
    data = Data()
    trace.on_epoch_end(data)
    assert "saliency" not in data and trace.images is None


def test_bad_arguments():
    import torch

    m = torch.nn.Linear(2, 2)
    with pytest.raises(XaikitTypeError, match="samples must be None, an int"):
        Saliency(m, "x", "y_pred", samples="all")
    with pytest.raises(XaikitValueError, match="samples must be >= 1"):
        Saliency(m, "x", "y_pred", samples=-2)
    with pytest.raises(XaikitValueError, match=r"samples must hold the key\(s\) \['x'\]"):
        Saliency(m, "x", "y_pred", samples={"image": np.zeros((2, 2))})
    with pytest.raises(XaikitValueError, match="smoothing must be an int >= 0"):
        Saliency(m, "x", "y_pred", smoothing=-1)
    with pytest.raises(XaikitTypeError, match="integrating must be an int or"):
        Saliency(m, "x", "y_pred", integrating=(1, 2, 3))
    with pytest.raises(XaikitValueError, match="integrating values must be >= 0"):
        Saliency(m, "x", "y_pred", integrating=(-1, 2))
    with pytest.raises(XaikitTypeError, match="label_mapping must be a dict"):
        Saliency(m, "x", "y_pred", label_mapping=["a", "b"])
    trace = Saliency(m, "image", "y_pred")
    trace.system = System()
    trace.system.mode = "eval"
    with pytest.raises(XaikitValueError, match=r"key\(s\) \['image'\].*not in the batch"):
        trace.on_batch_end(Data({"x": np.zeros((2, 2), np.float32)}))


def test_trace_wiring():
    import torch

    t = Saliency(torch.nn.Linear(2, 2), ["x"], "y_pred", class_key="y", outputs="sal", mode="test")
    assert t.inputs == ["y", "x"] and t.outputs == ["sal", "sal_time(sec)"] and t.mode == {"test"}
    assert Saliency(torch.nn.Linear(2, 2), "x", "p").mode == {"eval", "test"}


def test_tutorial_flow_without_traces(framework, tmp_path):
    """The XAI tutorial without traces: SmInt masks of a batch, mapped names, a saved grid."""
    from xaikit.backend import squeeze, to_number, to_tensor
    from xaikit.viz import ImgData
    from xaikit.xai import SaliencyNet

    model = tiny_model(framework)
    batch = batches(1, bs=3, seed=4)[0]
    x = batch["x"] if framework == "tf" else np.moveaxis(batch["x"], -1, 1)
    tensors = to_tensor({"x": x, "y": batch["y"]}, framework)
    net = SaliencyNet(model=model, model_inputs="x", model_outputs="y_pred", seed=0)
    images = net.get_smoothed_masks(batch=tensors, nsamples=6, nintegration=100)
    names = {v: k for k, v in MAPPING.items()}
    y = np.array([names[c] for c in to_number(squeeze(tensors["y"])).tolist()])
    y_pred = np.array([names[int(c)] for c in to_number(squeeze(images["y_pred"]))])
    assert list(y_pred) == [names[int(c)] for c in predict(model, framework, batch["x"])]
    grid = ImgData(colormap="inferno", y=y, y_pred=y_pred, x=tensors["x"], saliency=images["saliency"])
    fig = grid.paint_figure(save_path=tmp_path / "t08a_saliency.png")
    assert (tmp_path / "t08a_saliency.png").read_bytes()[:4] == b"\x89PNG"
    assert len([ax for ax in fig.axes if ax.get_label().startswith("cell:saliency:")]) == 3
    # the same call through the trace gives the same SmInt mask (same seed, same engine)
    trace = Saliency(model, "x", "y_pred", samples={"x": batch["x"]}, smoothing=0, integrating=(100, 6))
    img = run_epoch(trace, [])["saliency"]
    mask = to_number(images["saliency"])
    mask = mask if framework == "tf" else np.moveaxis(mask, 1, -1)
    np.testing.assert_allclose(np.asarray(img["SmInt saliency"][0]).reshape(mask.shape), mask, atol=1e-5)


def test_smoothed_column_is_smoothgrad_not_vanilla(framework):
    """The "Smoothed" column is SaliencyNet's SmoothGrad of the samples for the trace's seed and
    noise level, and differs from the vanilla column."""
    from xaikit.backend import to_number
    from xaikit.xai import SaliencyNet

    model = tiny_model(framework)
    x = batches(1, bs=3, seed=5)[0]["x"]
    trace = Saliency(
        model, "x", "y_pred", samples={"x": x}, smoothing=8, integrating=0, seed=3, stdev_spread=0.3
    )
    img = run_epoch(trace, [])["saliency"]
    assert img.columns[-2:] == ["saliency", "Smoothed saliency"]

    def channel_last(res):
        m = to_number(res["saliency"]).astype(np.float32)
        return m if framework == "tf" else np.moveaxis(m, 1, -1)

    model_x = x if framework == "tf" else np.ascontiguousarray(np.moveaxis(x, -1, 1))
    net = SaliencyNet(model=model, model_inputs="x", model_outputs="y_pred", seed=3)
    smooth = channel_last(net.get_smoothed_masks({"x": model_x}, stdev_spread=0.3, nsamples=8))
    vanilla = channel_last(net.get_masks({"x": model_x}))
    smoothed_col = np.asarray(img["Smoothed saliency"][0]).reshape(smooth.shape)
    vanilla_col = np.asarray(img["saliency"][0]).reshape(vanilla.shape)
    np.testing.assert_allclose(smoothed_col, smooth, atol=1e-5)
    np.testing.assert_allclose(vanilla_col, vanilla, atol=1e-5)
    assert np.abs(smoothed_col - vanilla_col).max() > 0.05
    other_seed = SaliencyNet(model=model, model_inputs="x", model_outputs="y_pred", seed=4)
    assert (
        np.abs(
            channel_last(other_seed.get_smoothed_masks({"x": model_x}, stdev_spread=0.3, nsamples=8)) - smooth
        ).max()
        > 1e-3
    )


class _RegionModel:
    """Class 0 scores the sum of pixels in rows 0-3, columns 5-7 (an off-centre, non-square
    region); class 1 a constant. The vanilla mask must be exactly that region."""

    @staticmethod
    def make(framework: str):
        if framework == "torch":
            import torch

            class Region(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.conv = torch.nn.Conv2d(3, 1, 1, bias=False)
                    torch.nn.init.ones_(self.conv.weight)

                def forward(self, x):
                    s = self.conv(x)[:, 0, 0:4, 5:8].sum(dim=(1, 2))
                    return torch.stack([s, torch.full_like(s, -1e3)], dim=-1)

            return Region()
        import keras

        inp = keras.Input((8, 8, 3))
        s = keras.layers.Lambda(lambda t: keras.ops.sum(t[:, 0:4, 5:8, :], axis=(1, 2, 3)))(inp)
        out = keras.layers.Lambda(lambda v: keras.ops.stack([v, v * 0.0 - 1e3], axis=-1))(s)
        return keras.Model(inp, out)


def test_masks_are_aligned_with_the_image(framework):
    """Layout check: channel-last numpy samples for a channel-first torch model come back as
    masks on the right pixels (no transposition), in every column and in the overlay."""
    model = _RegionModel.make(framework)
    rng = np.random.default_rng(0)
    x = rng.random((2, 8, 8, 3), dtype=np.float32) + 0.5
    trace = Saliency(model, "x", "y_pred", samples={"x": x}, smoothing=0, integrating=0)
    img = run_epoch(trace, [])["saliency"]
    mask = np.asarray(img["saliency"][0]).reshape(2, 8, 8)
    region = np.zeros((8, 8), bool)
    region[0:4, 5:8] = True
    for m in mask:
        assert m[region].min() > 0.99 and m[~region].max() == 0.0
    over = np.asarray(img["x saliency"][0])
    from xaikit.viz import overlay

    np.testing.assert_allclose(over, overlay(x, mask, smooth=1.0), atol=1e-6)


class _Counted:
    """A torch CNN that counts its forward calls and rows."""

    @staticmethod
    def make():
        import torch

        class Counted(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.net = tiny_model("torch")
                self.calls = 0
                self.rows = 0

            def forward(self, x):
                self.calls += 1
                self.rows += int(x.shape[0])
                return self.net(x)

        return Counted()


def test_one_forward_pass_pins_the_classes_of_every_column():
    """Per epoch the trace runs the model once for the classes, then once per column (each
    column's fused rows fit one chunk here): 1 + 4 core + RISE + occlusion = 7 forward calls.
    The same columns as separate SaliencyNet / explain calls (the trace before) cost 12: each
    SaliencyNet call pins its own classes (a pass of the batch, 4 in all) and each explain call
    checks the given classes on one row (2 more)."""
    import xaikit as xk

    model = _Counted.make()
    x = batches(1, bs=3, seed=2)[0]["x"]
    methods = {"rise": {"nsamples": 8}, "occlusion": {"window": 4, "stride": 4}}
    trace = Saliency(
        model,
        "x",
        "y_pred",
        samples={"x": x},
        smoothing=2,
        integrating=(3, 2),
        methods=methods,
        max_batch=512,
    )
    for _ in range(2):  # every epoch the same
        model.calls = model.rows = 0
        run_epoch(trace, [])
        assert model.calls == 7
        # rows: the classes 3, vanilla 3, SmoothGrad 3 x 2, IG 3 x 3, SmInt 3 x 2 x 3, RISE 3 x 8,
        # occlusion 3 x (1 + 4 windows)
        assert model.rows == 3 + 3 + 6 + 9 + 18 + 24 + 15

    model.calls = model.rows = 0
    feed = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    net = xk.xai.SaliencyNet(model, "x", "y_pred", seed=0, max_batch=512)
    net.get_masks({"x": feed})
    net.get_smoothed_masks({"x": feed}, nsamples=2)
    net.get_integrated_masks({"x": feed}, nsamples=3)
    pred = net.get_smoothed_masks({"x": feed}, nsamples=2, nintegration=3)["y_pred"]
    for name, options in methods.items():
        xk.xai.explain(model, feed, target=pred, method=name, seed=0, max_batch=512, **options)
    assert model.calls == 12 and model.rows == 3 + 3 + 6 + 9 + 18 + 24 + 15 + 3 * 3 + 2


def test_columns_are_bit_equal_to_separate_calls(framework):
    """Every column of the one-pinning trace holds exactly the masks of the separate calls:
    SaliencyNet's display masks for the core columns, explain's attributions (as display masks)
    for methods=, a gradient CAM and an input-shaped method among them."""
    import xaikit as xk
    from xaikit.xai.internal import to_display

    model = tiny_model(framework)
    x = batches(1, bs=3, seed=4)[0]["x"]
    feed = x if framework == "tf" else np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    axis = 3 if framework == "tf" else 1
    methods = {"gradcam": {}, "input_x_gradient": {}, "rise": {"nsamples": 8}}
    trace = Saliency(
        model, "x", "y_pred", samples={"x": x}, smoothing=2, integrating=(3, 2), methods=methods, seed=5,
        max_batch=64,
    )  # fmt: skip
    img = run_epoch(trace, [])["saliency"]
    net = xk.xai.SaliencyNet(model, "x", "y_pred", seed=5, max_batch=64)
    separate = {
        "saliency": net.get_masks({"x": feed}),
        "Smoothed saliency": net.get_smoothed_masks({"x": feed}, nsamples=2),
        "Integrated saliency": net.get_integrated_masks({"x": feed}, nsamples=3),
        "SmInt saliency": net.get_smoothed_masks({"x": feed}, nsamples=2, nintegration=3),
    }
    for column, res in separate.items():
        want = res["saliency"] if framework == "tf" else np.moveaxis(res["saliency"], 1, -1)
        np.testing.assert_array_equal(np.asarray(img[column][0]).reshape(want.shape), want, err_msg=column)
    pred = separate["saliency"]["y_pred"]
    assert img["y_pred"][0] == [str(int(p)) for p in pred]
    for name, options in methods.items():
        raw = xk.xai.explain(model, feed, target=pred, method=name, seed=5, max_batch=64, **options)
        if raw.shape == feed.shape:
            want = to_display(raw, axis)
            want = want if framework == "tf" else np.moveaxis(want, 1, -1)
        else:
            want = to_display(raw, None, percentile=100.0)
        title = xk.xai.get_method(name).title
        got = np.asarray(img[f"{title} saliency"][0]).reshape(want.shape)
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_the_trace_pickles_and_gives_the_same_masks_after():
    """Traces pickle without ``system`` (docs/traces.md); the Saliency trace used to keep the
    framework's backend (a module inside), which does not pickle."""
    model = tiny_model("torch")
    x = batches(1, bs=2, seed=6)[0]["x"]
    trace = Saliency(
        model, "x", "y_pred", samples={"x": x}, smoothing=2, integrating=0, methods={"rise": {"nsamples": 4}}
    )
    again = pickle.loads(pickle.dumps(trace))
    assert [c.method.name for c in again.columns] == ["vanilla", "smoothgrad", "rise"]
    first, second = run_epoch(trace, [])["saliency"], run_epoch(again, [])["saliency"]
    for column in ("saliency", "Smoothed saliency", "RISE saliency"):
        np.testing.assert_array_equal(np.asarray(first[column][0]), np.asarray(second[column][0]))
