"""ModuleTracker on a tiny AlexNet-like model, in torch and Keras: the reference notebook's flows,
exact statistics, custom statistics, the tree, detaching, sampling, storage and flags."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from inspect_models import CLASSIFIER, FEATURES, N_MODULES, N_PARAMS, Kit

from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.inspect import ModuleTracker, read_log


def _x(rng: np.random.Generator, batch: int = 2) -> np.ndarray:
    return rng.normal(size=(batch, 16, 16, 3)).astype(np.float32)


def test_three_forward_passes_record_every_module(
    framework: str, rng: np.random.Generator, tmp_path: Path
) -> None:
    kit = Kit(framework)
    x = _x(rng)
    with ModuleTracker(kit.model, tmp_path) as tracker:
        for _ in range(3):
            kit.forward(x)
        df = tracker.df
    assert len(df) == 3 * 2 * N_MODULES
    assert df["kind"].value_counts().to_dict() == {"input": 3 * N_MODULES, "output": 3 * N_MODULES}
    assert set(df["step"]) == {0}
    per_module = df.groupby(["module", "kind"])["call"].apply(sorted)
    assert len(per_module) == 2 * N_MODULES
    assert all(calls == [0, 1, 2] for calls in per_module)
    assert set(df["module"]) == (
        {"model", "model.features", "model.classifier"}
        | {f"model.features.{n}" for n in FEATURES}
        | {f"model.classifier.{n}" for n in CLASSIFIER}
    )
    assert set(df["tname"]) == {"x.0", "out"}
    first = df[(df["module"] == "model") & (df["kind"] == "input")].iloc[0]
    assert first["shape"] == list(kit.tensor(x).shape)
    assert first["dtype"] == "float32"
    out = df[(df["module"] == "model") & (df["kind"] == "output")]
    assert out["shape"].tolist() == [[2, 5]] * 3
    # call order of the last pass: parents enter before their children, in execution order
    assert tracker.call_order == [
        "model",
        "model.features",
        *[f"model.features.{n}" for n in FEATURES],
        "model.classifier",
        *[f"model.classifier.{n}" for n in CLASSIFIER],
    ]
    events = tracker.call_events
    assert events[0] == ("enter", "model") and events[-1] == ("exit", "model")
    assert events[1:3] == [("enter", "model.features"), ("enter", "model.features.conv0")]


def test_gradient_rows_after_backward(framework: str, rng: np.random.Generator, tmp_path: Path) -> None:
    kit = Kit(framework)
    with ModuleTracker(kit.model, tmp_path) as tracker:
        grads = kit.train_step(tracker, _x(rng, 3))
        df = tracker.df
    weights = df[df["kind"] == "weight"]
    grad_rows = df[df["kind"] == "grad"]
    assert len(weights) == len(grad_rows) == N_PARAMS
    assert not grad_rows["absent"].any()
    assert set(grad_rows["module"]) == {f"model.features.{n}" for n in ("conv0", "conv1", "conv2")} | {
        "model.classifier.fc0",
        "model.classifier.fc1",
    }
    assert sorted(grads) == sorted(f"{m}/{t}" for m, t in zip(grad_rows["module"], grad_rows["tname"]))
    for _, row in grad_rows.iterrows():
        g = grads[f"{row['module']}/{row['tname']}"].astype(np.float64)
        assert row["shape"] == list(g.shape)
        np.testing.assert_allclose(row["mean"], g.mean(), rtol=1e-5, atol=1e-9)
        np.testing.assert_allclose(row["std"], g.std(), rtol=1e-4, atol=1e-9)
        np.testing.assert_allclose([row["min"], row["max"]], [g.min(), g.max()], rtol=1e-6)
        np.testing.assert_allclose(row["norm"], np.linalg.norm(g), rtol=1e-4)
    # each weight row's shape matches its grad row's shape
    merged = weights.merge(grad_rows, on=["module", "tname"], suffixes=("_w", "_g"))
    assert (merged["shape_w"] == merged["shape_g"]).all() and len(merged) == N_PARAMS


def test_missing_gradients_are_recorded_absent(
    framework: str, rng: np.random.Generator, tmp_path: Path
) -> None:
    kit = Kit(framework)
    with ModuleTracker(kit.model, tmp_path) as tracker:
        kit.forward(_x(rng))
        tracker.step()  # no backward / no grads given
        df = tracker.df
    grad_rows = df[df["kind"] == "grad"]
    assert len(grad_rows) == N_PARAMS
    assert grad_rows["absent"].all()
    assert grad_rows["mean"].isna().all()
    assert not tracker.flags


def test_default_stats_match_numpy(framework: str, rng: np.random.Generator, tmp_path: Path) -> None:
    kit = Kit(framework)
    x = _x(rng, 4)
    x[0, :4] = 0.0  # some exact zeros
    with ModuleTracker(kit.model, tmp_path) as tracker:
        kit.forward(x)
        df = tracker.df
    row = df[(df["module"] == "model") & (df["kind"] == "input")].iloc[0]
    ref = x.astype(np.float64)
    np.testing.assert_allclose(row["mean"], ref.mean(), rtol=1e-5)
    np.testing.assert_allclose(row["std"], ref.std(), rtol=1e-5)
    assert row["min"] == pytest.approx(ref.min()) and row["max"] == pytest.approx(ref.max())
    assert row["zero_frac"] == pytest.approx((ref == 0).mean())
    assert row["nonfinite"] == 0
    # dead_units of a ReLU output, against numpy on the layer's output itself
    relu = "model.features.relu2"
    out = df[(df["module"] == relu) & (df["kind"] == "output")].iloc[0]
    if framework == "torch":
        act = kit.model.features[:8](kit.tensor(x)).detach().numpy()
        per_unit = act.transpose(1, 0, 2, 3).reshape(act.shape[1], -1)
    else:
        act = kit.model.get_layer("features")(kit.tensor(x)).numpy()
        per_unit = act.reshape(-1, act.shape[-1]).T
    assert out["dead_units"] == pytest.approx((np.abs(per_unit).max(axis=1) == 0).mean())
    assert out["zero_frac"] == pytest.approx((act == 0).mean())
    np.testing.assert_allclose(out["mean"], act.astype(np.float64).mean(), rtol=1e-5)
    assert row["dead_units"] == 0.0  # inputs get it too: no input channel is all zero


def test_custom_stats_replace_defaults(framework: str, rng: np.random.Generator, tmp_path: Path) -> None:
    kit = Kit(framework)
    x = _x(rng, 3)
    if framework == "torch":

        def out_stats(t):  # type: ignore[no-untyped-def]
            return {"l1": t.abs().sum(), "row_max": t.reshape(t.shape[0], -1).amax(dim=1), "numel": t.numel()}

    else:
        import tensorflow as tf

        def out_stats(t):  # type: ignore[no-untyped-def]
            return {
                "l1": tf.reduce_sum(tf.abs(t)),
                "row_max": tf.reduce_max(tf.reshape(t, [t.shape[0], -1]), axis=1),
                "numel": int(tf.size(t)),
            }

    tracker = ModuleTracker(kit.model, tmp_path, stats={"output": out_stats})

    @tracker.stat("weight")
    def weight_numel(t):  # type: ignore[no-untyped-def]
        return {"numel": int(np.prod(t.shape))}

    kit.forward(x)
    tracker.step()
    tracker.detach()
    df = tracker.df
    outs = df[df["kind"] == "output"]
    assert outs["mean"].isna().all() and outs["zero_frac"].isna().all()
    root = outs[outs["module"] == "model"].iloc[0]
    y = kit.forward(x).astype(np.float64)
    assert root["l1"] == pytest.approx(np.abs(y).sum(), rel=1e-5)
    np.testing.assert_allclose(root["row_max"], y.max(axis=1), rtol=1e-5)
    assert root["numel"] == y.size
    ins = df[df["kind"] == "input"]
    assert ins["mean"].notna().all() and ins["l1"].isna().all()  # inputs keep the defaults
    w = df[df["kind"] == "weight"]
    assert w["mean"].isna().all()
    assert sorted(w["numel"].tolist()) == sorted(int(np.prod(r)) for r in df[df["kind"] == "weight"]["shape"])
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["stats"] == {
        "input": "default",
        "output": "out_stats",
        "weight": "weight_numel",
        "grad": "default",
    }


def test_tree_matches_model(framework: str, tmp_path: Path) -> None:
    kit = Kit(framework)
    tracker = ModuleTracker(kit.model, tmp_path, attach=False)
    tree = tracker.tree
    assert json.loads((tmp_path / "tree.json").read_text()) == tree
    assert tree["name"] == "model" and [c["short"] for c in tree["children"]] == ["features", "classifier"]
    feats, clf = tree["children"]
    assert [c["short"] for c in feats["children"]] == FEATURES
    assert [c["short"] for c in clf["children"]] == CLASSIFIER
    assert feats["children"][0]["name"] == "model.features.conv0"
    conv_cls = "Conv2d" if framework == "torch" else "Conv2D"
    assert feats["children"][0]["class"] == conv_cls
    w_name = "weight" if framework == "torch" else "kernel"
    expected = [4, 3, 3, 3] if framework == "torch" else [3, 3, 3, 4]
    assert feats["children"][0]["params"] == {w_name: expected, "bias": [4]}
    assert "params" not in feats["children"][1] and "children" not in feats["children"][1]


def test_detach_restores_the_model(framework: str, rng: np.random.Generator, tmp_path: Path) -> None:
    kit = Kit(framework)
    x = _x(rng)
    before = kit.forward(x)
    if framework == "torch":
        layers_before = list(kit.model.modules())
    else:
        layers_before = kit.model._flatten_layers()
        calls_before = [type(layer).call for layer in layers_before]
    tracker = ModuleTracker(kit.model, tmp_path)
    during = kit.forward(x)
    tracker.detach()
    after = kit.forward(x)
    np.testing.assert_array_equal(before, during)
    np.testing.assert_array_equal(before, after)
    assert len(tracker.df) == 2 * N_MODULES  # the call after detach recorded nothing
    if framework == "torch":
        assert list(kit.model.modules()) == layers_before
        for m in kit.model.modules():
            assert not m._forward_hooks and not m._forward_pre_hooks
            assert not m._forward_hooks_with_kwargs and not m._forward_pre_hooks_with_kwargs
            assert not m._forward_hooks_always_called and not m._backward_hooks
    else:
        layers_after = kit.model._flatten_layers()
        assert [id(a) for a in layers_after] == [id(b) for b in layers_before]
        for layer, cls_call in zip(layers_after, calls_before):
            assert "call" not in layer.__dict__
            assert layer.call.__func__ is cls_call
    # re-attaching works and detaching twice is harmless
    tracker.attach()
    kit.forward(x)
    tracker.detach()
    tracker.detach()
    assert len(tracker.df) == 4 * N_MODULES


def test_sampling_every_n_steps(framework: str, rng: np.random.Generator, tmp_path: Path) -> None:
    kit = Kit(framework)
    x = _x(rng)
    with ModuleTracker(kit.model, tmp_path, every_n_steps=3) as tracker:
        for _ in range(7):
            kit.train_step(tracker, x)
        assert tracker.current_step == 7
        df = tracker.df
    assert sorted(set(df["step"])) == [0, 3, 6]
    assert len(df) == 3 * (2 * N_MODULES + 2 * N_PARAMS)
    assert set(tracker.latest_df["step"]) == {6}
    assert len(tracker.latest_df) == 2 * N_MODULES + 2 * N_PARAMS


def test_auto_step_ends_a_step_per_forward(framework: str, rng: np.random.Generator, tmp_path: Path) -> None:
    kit = Kit(framework)
    with ModuleTracker(kit.model, tmp_path, every_n_steps=2, auto_step=True, kinds=("output",)) as tracker:
        for _ in range(5):
            kit.forward(_x(rng))
        assert tracker.current_step == 5
    df = tracker.df
    assert sorted(set(df["step"])) == [0, 2, 4] and set(df["kind"]) == {"output"}
    assert len(df) == 3 * N_MODULES


def test_jsonl_lines_and_read_log_round_trip(
    framework: str, rng: np.random.Generator, tmp_path: Path
) -> None:
    kit = Kit(framework)
    x = _x(rng)
    x[0, 0, 0, 0] = np.nan
    with ModuleTracker(kit.model, tmp_path) as tracker:
        for _ in range(2):
            kit.train_step(tracker, x)
    lines = (tmp_path / "stats.jsonl").read_text().splitlines()
    assert len(lines) == len(tracker.df) == 2 * (2 * N_MODULES + 2 * N_PARAMS)
    for line in lines:
        record = json.loads(line, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
        assert isinstance(record, dict) and {"step", "module", "kind", "tname", "flags", "time"} <= set(
            record
        )
    pd.testing.assert_frame_equal(read_log(tmp_path), tracker.df)
    pd.testing.assert_frame_equal(read_log(tmp_path / "stats.jsonl"), tracker.df)
    # a second tracker on the same folder appends
    with ModuleTracker(kit.model, tmp_path) as again:
        kit.forward(x)
    assert len(read_log(tmp_path)) == len(lines) + len(again.df)
    # a crash mid-write leaves a partial last line; the next tracker's rows start on a line of
    # their own (the partial one is cut off), so the whole log stays readable
    with (tmp_path / "stats.jsonl").open("a") as f:
        f.write('{"step": 9, "call": 0, "modu')
    assert len(read_log(tmp_path)) == len(lines) + len(again.df)
    with ModuleTracker(kit.model, tmp_path) as third:
        kit.forward(x)
    assert len(read_log(tmp_path)) == len(lines) + len(again.df) + len(third.df)
    assert (tmp_path / "stats.jsonl").read_text().endswith("\n")


def test_read_log_truncated_and_bad_lines(tmp_path: Path) -> None:
    good = '{"step": 0, "module": "m", "kind": "output", "mean": 1.0}\n'
    (tmp_path / "stats.jsonl").write_text(good + good + '{"step": 1, "mod')
    df = read_log(tmp_path)
    assert len(df) == 2 and df["mean"].tolist() == [1.0, 1.0]
    (tmp_path / "bad.jsonl").write_text(good + "not json\n" + good)
    with pytest.raises(XaikitValueError, match="line 2 of"):
        read_log(tmp_path / "bad.jsonl")
    with pytest.raises(XaikitValueError, match="does not exist"):
        read_log(tmp_path / "missing")
    with pytest.raises(XaikitTypeError, match="path must be"):
        read_log(3)  # type: ignore[arg-type]


def test_dead_relu_is_flagged(framework: str, rng: np.random.Generator, tmp_path: Path) -> None:
    kit = Kit(framework)
    kit.set_biases(-100.0)
    with ModuleTracker(kit.model, tmp_path, kinds=("output",)) as tracker:
        kit.forward(np.abs(_x(rng)) * 0.01)
        df = tracker.df
    dead = {f["module"] for f in tracker.flags if f["flag"] == "dead"}
    assert {
        "model.features.relu0",
        "model.features.relu1",
        "model.features.relu2",
        "model.classifier.relu3",
    } <= dead
    assert "model.features.conv0" not in dead  # conv outputs are -100-ish, not zero
    relu0 = df[df["module"] == "model.features.relu0"].iloc[0]
    assert relu0["flags"] == ["dead"] and relu0["zero_frac"] == 1.0 and relu0["dead_units"] == 1.0
    flag = next(f for f in tracker.flags if f["module"] == "model.features.relu0")
    assert flag == {
        "step": 0,
        "call": 0,
        "module": "model.features.relu0",
        "kind": "output",
        "tname": "out",
        "flag": "dead",
        "value": 1.0,
        "threshold": 0.99,
    }
    written = read_log(tmp_path)
    assert written.loc[written["module"] == "model.features.relu0", "flags"].tolist() == [["dead"]]


def test_nan_inputs_are_flagged(framework: str, rng: np.random.Generator, tmp_path: Path) -> None:
    kit = Kit(framework)
    x = _x(rng)
    x[0, 1, 2, :] = np.nan
    x[1, 0, 0, 0] = np.inf
    with ModuleTracker(kit.model, tmp_path) as tracker:
        kit.forward(x)
        df = tracker.df
    root = df[(df["module"] == "model") & (df["kind"] == "input")].iloc[0]
    assert root["nonfinite"] == 4 and "nonfinite" in root["flags"]
    assert pd.isna(root["mean"])  # NaN statistics are written as null
    flagged = {(f["module"], f["kind"]) for f in tracker.flags if f["flag"] == "nonfinite"}
    assert ("model", "input") in flagged and ("model.features.conv0", "output") in flagged


def test_gradient_norm_flags(framework: str, rng: np.random.Generator, tmp_path: Path) -> None:
    kit = Kit(framework)
    with ModuleTracker(kit.model, tmp_path / "a", explode_threshold=1e-12, vanish_threshold=None) as tracker:
        kit.train_step(tracker, _x(rng))
    assert sorted(f["flag"] for f in tracker.flags) == ["exploding_grad"] * N_PARAMS
    kit.set_biases(-100.0)  # every ReLU dead: no gradient reaches the convs
    with ModuleTracker(kit.model, tmp_path / "b", explode_threshold=None, kinds=("grad",)) as tracker:
        kit.train_step(tracker, np.abs(_x(rng)))
    vanished = {(f["module"], f["tname"]) for f in tracker.flags if f["flag"] == "vanishing_grad"}
    assert {(f"model.features.{n}", "bias") for n in ("conv0", "conv1", "conv2")} <= vanished
    assert ("model.classifier.fc1", "bias") not in vanished  # d(sum out^2)/d bias = 2 * out != 0


def test_one_host_copy_per_step(framework: str, rng: np.random.Generator, tmp_path: Path) -> None:
    kit = Kit(framework)
    tracker = ModuleTracker(kit.model, tmp_path)
    copies: list[int] = []
    real = tracker._insp.to_host

    def counting(parts):  # type: ignore[no-untyped-def]
        copies.append(len(parts))
        return real(parts)

    tracker._insp.to_host = counting
    for _ in range(3):
        kit.train_step(tracker, _x(rng))
    tracker.detach()
    # one transfer per step; a module's output passed on as the next module's input is reduced once
    # distinct activation tensors: the model's input and the 12 leaf outputs (containers pass them on)
    assert copies == [2 * N_PARAMS + 1 + 12] * 3
    df = tracker.df
    inputs = df[df["kind"] == "input"].set_index(["step", "call", "module"])
    outputs = df[df["kind"] == "output"].set_index(["step", "call", "module"])
    conv1_in = inputs.loc[(0, 0, "model.features.conv1")]
    pool0_out = outputs.loc[(0, 0, "model.features.pool0")]
    for col in ("mean", "std", "min", "max", "zero_frac", "dead_units"):
        assert conv1_in[col] == pool0_out[col]


def test_default_log_dir_is_under_the_working_folder(
    framework: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    kit = Kit(framework)
    a = ModuleTracker(kit.model, attach=False)
    b = ModuleTracker(kit.model, attach=False)
    assert a.log_dir.parent == Path("runs/inspect") and a.log_dir != b.log_dir
    assert a.log_dir.name.startswith(type(kit.model).__name__ + "_")
    assert (tmp_path / a.log_dir / "tree.json").is_file()


def test_bad_arguments_raise_clear_errors(framework: str, tmp_path: Path) -> None:
    kit = Kit(framework)
    with pytest.raises(XaikitValueError, match=r"stats must name kinds among .* got 'activation'"):
        ModuleTracker(kit.model, tmp_path, stats={"activation": lambda t: {}})
    with pytest.raises(XaikitTypeError, match=r"stats\['output'\] must be a function"):
        ModuleTracker(kit.model, tmp_path, stats={"output": 3})  # type: ignore[dict-item]
    with pytest.raises(XaikitValueError, match=r"every_n_steps.* must be an int >= 1; got int 0"):
        ModuleTracker(kit.model, tmp_path, every_n_steps=0)
    for bad in (2.5, True, "3"):
        with pytest.raises(XaikitTypeError, match=r"every_n_steps.* must be an int >= 1"):
            ModuleTracker(kit.model, tmp_path, every_n_steps=bad)  # type: ignore[arg-type]
    with pytest.raises(XaikitValueError, match="kinds must name kinds among"):
        ModuleTracker(kit.model, tmp_path, kinds=("output", "gradient"))
    with pytest.raises(XaikitValueError, match="dead_threshold must be"):
        ModuleTracker(kit.model, tmp_path, dead_threshold=1.5)
    with pytest.raises(XaikitValueError, match="vanish_threshold must be"):
        ModuleTracker(kit.model, tmp_path, vanish_threshold=-1.0)
    with pytest.raises(XaikitTypeError, match=r"model must be a torch\.nn\.Module or a Keras"):
        ModuleTracker(np.zeros(3), tmp_path)
    (tmp_path / "file").write_text("")
    with pytest.raises(XaikitValueError, match="log_dir must be a folder"):
        ModuleTracker(kit.model, tmp_path / "file")
    tracker = ModuleTracker(kit.model, tmp_path / "ok")
    with pytest.raises(XaikitValueError, match=r"stat\(\) must name kinds among .* got 'outputs'"):
        tracker.stat("outputs")
    with pytest.raises(XaikitValueError, match="at least one kind"):
        tracker.stat()
    with pytest.raises(XaikitValueError, match="grads must have one entry per variable"):
        tracker.step(grads=[None])
    tracker.stat("output")(lambda t: [1.0])
    with pytest.raises(XaikitTypeError, match=r"'output' statistic function .* must return a dict"):
        kit.forward(np.zeros((1, 16, 16, 3), np.float32))
    tracker.detach()


def test_torch_integer_statistics_are_exact(tmp_path: Path) -> None:
    """Integer tensors are reduced in float64: 2**24 + 1 is not rounded to 2**24."""
    torch = pytest.importorskip("torch")

    class Copy(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return x * 1

    model = Copy()
    with ModuleTracker(model, tmp_path) as tracker:
        model(torch.tensor([2**24 + 1, 1]))
        tracker.step()
    row = tracker.df[tracker.df["kind"] == "output"].iloc[0]
    assert row["max"] == 2**24 + 1 and row["mean"] == (2**24 + 2) / 2 and row["min"] == 1
