"""Every model-agnostic method by name, everywhere a method name goes, for torch and Keras: the
``Saliency`` trace's ``methods=`` columns (equal to ``explain``, in an ``Estimator`` run too),
``xk.evaluate`` (deletion by name == deletion of the maps, ``randomization_test``, ``compare``
among other methods, the ``DeletionAUC`` trace), ``explain_dataset`` (equal to ``explain``;
``features=`` as a name or one (H, W) mask, recorded in the store; a per-sample mask refused
before the model is built) and ``xaikit explain --method`` (its help and ``xaikit methods``).
``raw=True`` (LIME's fit) is refused where maps are scored or stored and changes nothing in a
trace's column."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.agnostic.fast_options import FAST
from tests.dataset_models import images, tiny_cnn
from tests.test_trace_xai_saliency import batches, run_epoch, tiny_model
from xaikit.errors import XaikitValueError
from xaikit.evaluate.traces import DeletionAUC
from xaikit.trace.xai import Saliency
from xaikit.xai._engine.display import to_display
from xaikit.xai._engine.seeds import stream_seed

AGNOSTIC = xk.xai.method_names("agnostic")
#: rows per forward chunk everywhere: one chunk for these small calls, and no timing probes of
#: max_batch="auto" (a second or so for each new model)
MB = 128
#: an (H, W) mask of 4 features of the 8 x 8 test images: quadrants
QUADRANTS = np.kron(np.arange(4).reshape(2, 2), np.ones((4, 4), np.int64))


_MODELS: dict[str, Any] = {}


def _model(framework: str) -> Any:
    """The tiny model of the trace tests, one per framework for the whole file: its compiled
    TensorFlow steps are traced once (the randomization test restores its weights bit for bit)."""
    if framework not in _MODELS:
        _MODELS[framework] = tiny_model(framework)
    return _MODELS[framework]


def _feed(framework: str, x: np.ndarray) -> np.ndarray:
    """Channel-last test images in the framework's layout."""
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if framework == "torch" else x


def test_the_family_is_registered_with_small_test_options() -> None:
    assert AGNOSTIC == ("feature_ablation", "shapley_sampling", "kernel_shap", "lime", "sobol", "hsic")
    assert set(FAST) == set(AGNOSTIC)  # the small options of the all-method tests cover the family
    for name in AGNOSTIC:
        record = xk.xai.get_method(name)
        assert (record.family, record.gradients, record.slow, record.result) == (
            "agnostic",
            False,
            True,
            "input",
        )
        assert not record.core and not record.layer and record.noise == (name != "feature_ablation")
        assert {"features", "segments", "baseline"} <= set(record.options)
    for alias, name in {
        "KernelSHAP": "kernel_shap",
        "ablation": "feature_ablation",
        "Shapley": "shapley_sampling",
    }.items():
        assert xk.xai.get_method(alias).name == name


@pytest.mark.parametrize("method", AGNOSTIC)
def test_trace_evaluate_and_dataset_take_the_name(framework: str, method: str, tmp_path: Path) -> None:
    model = _model(framework)
    opts = FAST[method]
    x_last = np.concatenate([b["x"] for b in batches(2)])  # 4 channel-last images
    x = _feed(framework, x_last)
    # the trace's column: explain's attributions of the first 3 samples, summed over channels
    trace = Saliency(
        model,
        "x",
        "y_pred",
        samples=3,
        smoothing=0,
        integrating=0,
        methods={method: opts},
        seed=0,
        max_batch=MB,
    )
    img = run_epoch(trace, batches(2))["saliency"]
    attr = xk.xai.explain(model, x[:3], method=method, seed=0, max_batch=MB, **opts)
    assert attr.shape == x[:3].shape and np.abs(attr).max() > 0
    axis = 1 if framework == "torch" else 3
    want = np.take(to_display(attr, axis), 0, axis=axis)
    got = np.asarray(img[f"{xk.xai.get_method(method).title} saliency"][0]).reshape(want.shape)
    np.testing.assert_allclose(got, want, atol=1e-6)
    # evaluate: deletion by name is deletion of the maps explain gives (same seed and class)
    maps = xk.xai.explain(model, x, target=0, method=method, seed=0, max_batch=MB, **opts)
    by_name = xk.evaluate.deletion(model, x, method, target=0, steps=4, max_batch=MB, method_options=opts)
    np.testing.assert_array_equal(
        by_name.scores, xk.evaluate.deletion(model, x, maps, target=0, steps=4, max_batch=MB).scores
    )
    rt = xk.evaluate.randomization_test(model, x, target=0, method=method, max_batch=MB, **opts)
    assert rt.method == method and len(rt.table) == 2  # conv, dense
    assert np.isfinite(rt.table["spearman_abs"].to_numpy(dtype=float)).all()
    # explain_dataset: one shard, one batch, seeded stream_seed(0, 0, 0), the predicted classes
    res = xk.xai.explain_dataset(
        model, x, method=method, out=str(tmp_path / "s.zarr"), batch_size=4, progress=False, **opts
    )
    want = xk.xai.explain(model, x, method=method, seed=stream_seed(0, 0, 0), max_batch=MB, **opts)
    np.testing.assert_allclose(res.attributions[:], want, rtol=1e-6, atol=1e-7)
    assert res.manifest["method"] == method and res.manifest["options"]["segments"] == 4
    assert res.table["delta"].isna().all() and (res.table["map_status"] == "").all()


def test_compare_ranks_them_among_other_methods(framework: str) -> None:
    model = _model(framework)
    x = _feed(framework, np.concatenate([b["x"] for b in batches(2)]))
    names = ["vanilla", "occlusion", *AGNOSTIC]
    opts = {"occlusion": {"window": 4, "stride": 4}, **FAST}
    res = xk.evaluate.compare(
        model, x, names, metrics=["deletion_auc", "sparseness"], method_options=opts, max_batch=MB
    )
    assert list(res.table["method"]) == names
    assert np.isfinite(res.table[["deletion_auc", "sparseness"]].to_numpy(dtype=float)).all()
    # the maps are explain's for the pinned classes with compare's seed, and their deletion AUC
    # is the standalone metric's
    t = res.table.set_index("method")
    for method in ("kernel_shap", "hsic"):
        maps = xk.xai.explain(
            model, x, target=res.targets, method=method, seed=0, max_batch=MB, **FAST[method]
        )
        np.testing.assert_array_equal(res.maps[method], maps)
        d = xk.evaluate.deletion(model, x, maps, target=res.targets, steps=20, baseline="black", max_batch=MB)
        assert t.loc[method, "deletion_auc"] == pytest.approx(d.auc_mean, abs=1e-12)


def test_the_saliency_trace_in_an_estimator_run() -> None:
    """A one-epoch Estimator run on ``shapes`` with the six methods as columns of the grid: each
    column is explain's attributions of the collected samples, constant on each patch."""
    pytest.importorskip("torch")
    from tests.test_estimator_integration import setup

    pipeline, model, network = setup("torch", n_train=8, n_eval=4, batch_size=4)
    opts = FAST  # 32 x 32 images: 2 x 2 patches of 16 x 16 pixels
    trace = Saliency(
        model, "x", "y_pred", samples=2, smoothing=0, integrating=0, methods=opts, seed=0, max_batch=MB
    )
    seen: dict[str, Any] = {}
    explain_samples = trace.explain

    def spy(samples: Any, title: Any = None) -> Any:
        seen.update(samples)
        return explain_samples(samples, title=title)

    trace.explain = spy  # type: ignore[method-assign]
    xk.Estimator(pipeline, network, epochs=1, traces=[trace], log_steps=None).fit()
    img = trace.images
    assert img.columns[-6:] == [f"{xk.xai.get_method(m).title} saliency" for m in AGNOSTIC]
    x = np.asarray(seen["x"], np.float32)
    axis = 1 if x.shape[1] == 3 else 3
    for m in AGNOSTIC:
        shown = np.asarray(img[f"{xk.xai.get_method(m).title} saliency"][0]).reshape(2, 32, 32)
        attr = xk.xai.explain(model, x, method=m, seed=0, max_batch=MB, **opts[m])
        np.testing.assert_allclose(shown, np.take(to_display(attr, axis), 0, axis=axis), atol=1e-6, err_msg=m)
        assert np.ptp(shown) > 0, m
        patches = shown.reshape(2, 2, 16, 2, 16)  # a 2 x 2 grid of 16 x 16 patches
        np.testing.assert_array_equal(
            patches, np.broadcast_to(patches[:, :, :1, :, :1], patches.shape), err_msg=m
        )


def test_explain_dataset_features_names_and_one_mask(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("skimage")
    model, x = tiny_cnn(), images(6)
    kw: dict[str, Any] = {"batch_size": 3, "progress": False}
    # a name: each image segmented on its own (SLIC here), in every batch
    res = xk.xai.explain_dataset(
        model, x, method="lime", out=tmp_path / "a.zarr", features="slic", nsamples=16, **kw
    )
    assert res.manifest["options"]["features"] == "slic"
    for j, s in enumerate((slice(0, 3), slice(3, 6))):
        want = xk.xai.explain(
            model, x[s], method="lime", features="slic", nsamples=16, seed=stream_seed(0, 0, j), max_batch=MB
        )
        np.testing.assert_array_equal(res.attributions[s], want)
    # one (H, W) mask for every sample: recorded in the manifest by shape, dtype and hash
    res = xk.xai.explain_dataset(
        model, x, method="feature_ablation", out=tmp_path / "b.zarr", features=QUADRANTS, **kw
    )
    stored = res.manifest["options"]["features"]
    assert (
        stored["array"] == [8, 8] and stored["dtype"] == QUADRANTS.dtype.str and len(stored["sha256"]) == 64
    )
    want = xk.xai.explain(model, x, method="feature_ablation", features=QUADRANTS, max_batch=MB)
    np.testing.assert_array_equal(res.attributions[:], want)
    assert len(np.unique(want[0])) <= 4  # four features: four values per sample
    # a nested list is an array too (the CLI's -o features=[[...]] gives one)
    res = xk.xai.explain_dataset(
        model, x, method="feature_ablation", out=tmp_path / "c.zarr", features=QUADRANTS.tolist(), **kw
    )
    np.testing.assert_array_equal(res.attributions[:], want)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"features": np.stack([QUADRANTS] * 6)},
            r"features: explain_dataset gives one array of feature ids to every sample: an integer \(H, W\) "
            r"array for these \(3, 8, 8\) images, .*got shape \(6, 8, 8\), one mask per sample, which "
            r"explain_dataset cannot follow through its batches",
        ),
        (  # a mask per sample of a batch would be applied to every batch: refused too
            {"features": np.stack([QUADRANTS] * 3)},
            r"got shape \(3, 8, 8\), one mask per sample",
        ),
        (
            {"features": QUADRANTS[:4]},
            r"an integer \(H, W\) array for these \(3, 8, 8\) images.*got shape \(4, 8\)$",
        ),
        ({"features": [[0, 1], [2]]}, r"features must be a rectangular integer array of feature ids"),
        (
            {"features": "superpixels"},
            r"features must be one of \('patches', 'slic', 'felzenszwalb', 'quickshift'\)",
        ),
        (
            {"raw": True},
            r"raw=True \(a method's full result: .* LIME's fit\) is not stored by explain_dataset",
        ),
    ],
)
def test_explain_dataset_refuses_before_the_model_is_built(
    tmp_path: Path, options: dict[str, Any], message: str
) -> None:
    built = []

    def factory() -> Any:
        built.append(1)
        return tiny_cnn()

    with pytest.raises(XaikitValueError, match=message):
        xk.xai.explain_dataset(
            factory, images(6), method="lime", out=tmp_path / "r.zarr", batch_size=3, **options
        )
    assert built == [] and not (tmp_path / "r.zarr").exists()


def test_tabular_rows_take_one_column_grouping(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 3).eval()
    x = np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32)
    groups = np.array([0, 0, 1, 1, 2, 2])
    res = xk.xai.explain_dataset(
        model, x, method="kernel_shap", out=tmp_path / "t.zarr", batch_size=5, features=groups, progress=False
    )
    with torch.no_grad():
        w = model.weight.numpy()[res.table["prediction"].to_numpy()]
    # a linear model's exact Shapley value of a group (6 coalitions of 3 groups: all of them)
    want = (w * x).reshape(5, 3, 2).sum(axis=2).repeat(2, axis=1)
    np.testing.assert_allclose(res.attributions[:], want, rtol=1e-4, atol=1e-5)
    with pytest.raises(
        XaikitValueError,
        match=r"an integer \(F,\) array for these rows of 6 columns.*got shape \(5, 6\), one mask per sample",
    ):
        xk.xai.explain_dataset(
            model, x, method="kernel_shap", out=tmp_path / "u.zarr", features=np.stack([groups] * 5)
        )


def test_raw_is_refused_where_maps_are_scored_and_ignored_by_the_trace(framework: str) -> None:
    model = _model(framework)
    x = _feed(framework, np.concatenate([b["x"] for b in batches(2)]))
    opts = {**FAST["lime"], "raw": True}
    fit = xk.xai.explain(model, x, method="lime", max_batch=MB, **opts)  # explain gives the fit
    assert fit.r2.shape == (4,) and fit.attributions.shape == x.shape
    message = r"raw=True asks the method for its full result \(a LimeResult, a CamResult, \.\.\.\), and the evaluations score its maps"
    with pytest.raises(XaikitValueError, match=rf"^method options: {message}"):
        xk.evaluate.deletion(model, x, "lime", steps=4, method_options=opts)
    with pytest.raises(XaikitValueError, match=message):
        xk.evaluate.randomization_test(model, x, method="lime", **opts)
    with pytest.raises(XaikitValueError, match=message):
        xk.evaluate.compare(
            model, x, ["vanilla", "lime"], metrics=["sparseness"], method_options={"lime": opts}
        )
    with pytest.raises(XaikitValueError, match=rf"^DeletionAUC\(method='lime'\): {message}"):
        DeletionAUC(model, method="lime", **opts)
    # a Saliency column is the attributions whatever raw says
    cols = [
        run_epoch(
            Saliency(
                model,
                "x",
                "y_pred",
                samples=3,
                smoothing=0,
                integrating=0,
                methods={"lime": o},
                seed=0,
                max_batch=MB,
            ),
            batches(2),
        )["saliency"]
        for o in (opts, FAST["lime"])
    ]
    np.testing.assert_array_equal(
        np.asarray(cols[0]["LIME saliency"][0]), np.asarray(cols[1]["LIME saliency"][0])
    )


def test_the_cli_explains_with_them_and_lists_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    from xaikit.cli import main

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent))  # --model dataset_models:...

    x = images(4)
    np.save(tmp_path / "x.npy", x)
    argv = [
        "explain",
        "--model",
        "dataset_models:tiny_cnn",
        "--data",
        str(tmp_path / "x.npy"),
        "--grid-size",
        "0",
    ]
    out = tmp_path / "k.zarr"
    assert (
        main([*argv, "--out", str(out), "--method", "KernelSHAP", "-o", "segments=4", "-o", "nsamples=14"])
        == 0
    )
    res = xk.xai.DatasetExplanation.open(out)
    assert res.manifest["method"] == "kernel_shap"
    assert res.manifest["options"] == {"max_batch": 128, "nsamples": 14, "segments": 4}
    want = xk.xai.explain(
        tiny_cnn(), x, method="kernel_shap", segments=4, nsamples=14, seed=stream_seed(0, 0, 0), max_batch=MB
    )
    np.testing.assert_array_equal(res.attributions[:], want)
    # the names of features= are strings on the command line
    out = tmp_path / "f.zarr"
    assert (
        main(
            [
                *argv,
                "--out",
                str(out),
                "--method",
                "feature_ablation",
                "-o",
                "features=patches",
                "-o",
                "segments=16",
            ]
        )
        == 0
    )
    np.testing.assert_array_equal(
        xk.xai.DatasetExplanation.open(out).attributions[:],
        xk.xai.explain(
            tiny_cnn(), x, method="feature_ablation", features="patches", segments=16, max_batch=MB
        ),
    )
    capsys.readouterr()
    with pytest.raises(SystemExit) as bad:  # checked before any framework loads: one line, status 2
        main([*argv, "--out", str(tmp_path / "b.zarr"), "--method", "lime", "-o", "features=slick"])
    assert bad.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("xaikit: error: argument --option: features must be one of ('patches', 'slic', ")
    assert err.count("\n") == 1 and not (tmp_path / "b.zarr").exists()
    # the help lists the family with the titles; xaikit methods lists the options
    with pytest.raises(SystemExit):
        main(["explain", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert (
        "agnostic: feature_ablation (Feature ablation), shapley_sampling (Shapley sampling), kernel_shap "
        "(KernelSHAP), lime (LIME), sobol (Sobol), hsic (HSIC)"
    ) in shown
    assert main(["methods", "lime"]) == 0
    listed = capsys.readouterr().out
    assert listed.startswith("\nagnostic\n  lime  LIME\n")
    assert (
        "options: features, segments=64, baseline=0.0, nsamples, kernel_width=0.25, alpha=1.0, raw=False"
        in listed
    )
    assert "forward only; input-shaped attributions" in listed


def test_degenerate_maps_are_explained_for_the_family() -> None:
    """A zero or constant map of an agnostic method gets the family's cause and fix (it was told
    about gradients and global quantities), and Sobol's and HSIC's indices are not changes of
    the score, so they are not held to its float32 resolution."""
    torch = pytest.importorskip("torch")
    from xaikit.errors import DegenerateMapWarning
    from xaikit.xai.health import forget_warnings, map_kind

    assert map_kind("kernel_shap") == ("attribution", False) and map_kind("lime") == ("attribution", False)
    assert map_kind("sobol") == ("none", False) and map_kind("HSIC") == ("none", False)

    class Blind(torch.nn.Module):
        """Scores that do not depend on the image."""

        def __init__(self) -> None:
            super().__init__()
            self.bias = torch.nn.Parameter(torch.tensor([1.0, -1.0, 0.5]))

        def forward(self, x: Any) -> Any:
            return self.bias.expand(len(x), 3) + 0.0 * x.sum(dim=(1, 2, 3))[:, None]

    x = images(2)
    forget_warnings()
    with pytest.warns(DegenerateMapWarning) as caught:
        attr = xk.xai.explain(Blind(), x, method="kernel_shap", max_batch=MB, **FAST["kernel_shap"])
    assert np.all(attr == 0)
    text = str(caught[0].message)
    assert "2 of 2 maps are exactly 0 everywhere" in text and "gradient" not in text
    assert "switching the features to the baseline does not change the score" in text
    with pytest.warns(DegenerateMapWarning) as caught:
        xk.xai.explain(tiny_cnn(), x, method="feature_ablation", segments=1, max_batch=MB)
    text = str(caught[0].message)
    assert "constant" in text and "one feature covers the whole input (segments=1" in text
