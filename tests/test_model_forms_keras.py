"""Every explanation method x every form of one Keras model: the same maps as the in-memory
Sequential model with the same weights, never an all-zero map where that one has none.

The forms: a Sequential and a functional model built in memory, both saved to ``.keras`` and
loaded, a subclassed ``keras.Model``, ``keras.models.clone_model`` of the loaded Sequential, and
the model exported with ``model.export`` and read back as a ``keras.layers.TFSMLayer`` and as the
``serve`` function of ``tf.saved_model.load``. An exported artifact keeps the model's computation
but not its layers: the gradient, perturbation and model-agnostic methods work on it, the
class-activation maps refuse it with a message that says why and which methods work. Then ``xaikit explain`` on a
loaded ``.keras`` file stores the in-memory model's maps.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

import xaikit as xk  # noqa: E402
from tests.agnostic.fast_options import FAST  # noqa: E402
from xaikit.errors import XaikitTypeError, XaikitValueError  # noqa: E402
from xaikit.xai.registry import family, method_names  # noqa: E402

#: the attention methods read transformers' attentions only (tests/test_attention_methods.py)
ALL_METHODS = tuple(m for m in method_names() if family(m) != "transformer")
CAM_METHODS = method_names("cam")
#: the methods that read the model's layers: refused on an exported model
LAYER_METHODS = (
    *CAM_METHODS,
    "lrp",
    "lrp_epsilon",
    "guided_backprop",
    "deconvnet",
    "deeplift",
    "deepliftshap",
)
#: the methods that need no layer: they run on an exported model too
NO_LAYER = (*method_names("gradient"), *method_names("perturbation"), *method_names("agnostic"))

L = keras.layers
SIZE = 16


def _squares(cell: int = 4) -> list[np.ndarray]:
    """XRAI's candidate regions: the (SIZE/cell)^2 squares of a grid (the Felzenszwalb
    segmentation does not depend on the model; the ranking of the regions does)."""
    masks = []
    for i in range(0, SIZE, cell):
        for j in range(0, SIZE, cell):
            m = np.zeros((SIZE, SIZE), bool)
            m[i : i + cell, j : j + cell] = True
            masks.append(m)
    return masks


#: tiny settings: each call is a few dozen rows at most
OPTIONS: dict[str, dict[str, Any]] = {
    "smoothgrad": {"nsamples": 3},
    "integrated": {"nsamples": 4},
    "smint": {"nsamples": 2, "nintegration": 3},
    "vargrad": {"nsamples": 3},
    "expected_gradients": {"nsamples": 3, "baseline": np.full((2, SIZE, SIZE, 3), 0.5, np.float32)},
    "blur_ig": {"steps": 4},
    "guided_ig": {"steps": 4},
    "xrai": {"steps": 4, "segments": [_squares(), _squares()], "min_pixel_diff": 1},  # 16-pixel squares
    "occlusion": {"window": 4, "stride": 4},
    "rise": {"nsamples": 16, "cell": 4},
    **FAST,  # the model-agnostic methods: forward passes only, so the exported forms run them
}
CAM = {m: {"layer": "c2"} for m in CAM_METHODS}
FORMS = [
    "sequential",
    "functional",
    "sequential_loaded",
    "functional_loaded",
    "subclassed",
    "clone_of_loaded",
    "tfsm_layer",
    "saved_model_serve",
]
EXPORTED = ("tfsm_layer", "saved_model_serve")


def _weights(seed: int = 0) -> list[np.ndarray]:
    """conv 3x3x3x4, conv 3x3x4x6 (named "c2"), dense 6x3, with biases: Keras layouts."""
    rng = np.random.default_rng(seed)
    shapes = [(3, 3, 3, 4), (4,), (3, 3, 4, 6), (6,), (6, 3), (3,)]
    return [(rng.standard_normal(s) * (0.5 if len(s) > 1 else 0.1)).astype(np.float32) for s in shapes]


def _sequential() -> Any:
    return keras.Sequential(
        [
            keras.Input((SIZE, SIZE, 3)),
            L.Conv2D(4, 3, activation="relu", name="c1"),
            L.Conv2D(6, 3, activation="relu", name="c2"),
            L.GlobalAveragePooling2D(name="gap"),
            L.Dense(3, name="head"),
        ]
    )


def _functional() -> Any:
    inp = keras.Input((SIZE, SIZE, 3))
    h = L.Conv2D(4, 3, activation="relu", name="c1")(inp)
    h = L.Conv2D(6, 3, activation="relu", name="c2")(h)
    return keras.Model(inp, L.Dense(3, name="head")(L.GlobalAveragePooling2D(name="gap")(h)))


class Subclassed(keras.Model):
    """The same network as a subclass with a ``call``: no declared inputs, no graph."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = L.Conv2D(4, 3, activation="relu", name="c1")
        self.c2 = L.Conv2D(6, 3, activation="relu", name="c2")
        self.gap = L.GlobalAveragePooling2D(name="gap")
        self.head = L.Dense(3, name="head")

    def call(self, x: Any) -> Any:
        return self.head(self.gap(self.c2(self.c1(x))))


@pytest.fixture(scope="module")
def forms(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each form of the model, all with the weights of :func:`_weights`."""
    root = tmp_path_factory.mktemp("forms")
    w = _weights()
    seq, fun, sub = _sequential(), _functional(), Subclassed()
    sub(np.zeros((1, SIZE, SIZE, 3), np.float32))
    for m in (seq, fun, sub):
        m.set_weights(w)
    seq.save(root / "seq.keras")
    fun.save(root / "fun.keras")
    seq_loaded = keras.models.load_model(root / "seq.keras")
    clone = keras.models.clone_model(seq_loaded)
    clone.set_weights(w)
    seq.export(str(root / "exported"), verbose=False)
    saved = tf.saved_model.load(str(root / "exported"))
    return {
        "sequential": seq,
        "functional": fun,
        "sequential_loaded": seq_loaded,
        "functional_loaded": keras.models.load_model(root / "fun.keras"),
        "subclassed": sub,
        "clone_of_loaded": clone,
        "tfsm_layer": L.TFSMLayer(str(root / "exported"), call_endpoint="serve"),
        "saved_model_serve": saved.serve,
        "_saved": saved,  # keeps the loaded object (and so its function) alive
        "_root": root,
    }


@pytest.fixture(scope="module")
def x() -> np.ndarray:
    return np.random.default_rng(1).random((2, SIZE, SIZE, 3)).astype(np.float32)


_REFERENCE: dict[str, np.ndarray] = {}


def _explain(model: Any, x: np.ndarray, method: str) -> np.ndarray:
    opts = {**OPTIONS.get(method, {}), **CAM.get(method, {})}
    return np.asarray(xk.xai.explain(model, x, method=method, seed=3, max_batch=16, **opts))


def _reference(forms: dict[str, Any], x: np.ndarray, method: str) -> np.ndarray:
    if method not in _REFERENCE:
        _REFERENCE[method] = _explain(forms["sequential"], x, method)
    return _REFERENCE[method]


def test_forms_have_the_same_weights_and_scores(forms: dict[str, Any], x: np.ndarray) -> None:
    ref = np.asarray(forms["sequential"](x))
    assert np.ptp(ref) > 0.01  # the scores differ per class: the maps are not degenerate
    for name in FORMS:
        np.testing.assert_allclose(np.asarray(forms[name](x)), ref, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("method", ALL_METHODS)
def test_every_method_gives_the_in_memory_maps(
    forms: dict[str, Any], x: np.ndarray, method: str, form: str
) -> None:
    ref = _reference(forms, x, method)
    assert np.abs(ref).max() > 0, "the in-memory model's map is all zero: the test would prove nothing"
    model = forms[form]
    if form in EXPORTED and method in LAYER_METHODS:
        with pytest.raises(XaikitTypeError) as err:
            _explain(model, x, method)
        msg = str(err.value)
        assert "no inner layers to read" in msg and "model.export()" in msg
        assert "keras.models.load_model" in msg
        works = msg.rsplit("work on the exported model: ", 1)[1].split(", ")
        assert works == list(NO_LAYER)
        return
    got = _explain(model, x, method)
    assert got.shape == ref.shape
    for b in range(len(x)):  # per sample: never all zero where the in-memory map is not
        assert np.abs(got[b]).max() > 0 or np.abs(ref[b]).max() == 0, f"sample {b} is all zero"
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5 * float(np.abs(ref).max()))


def test_loaded_sequential_gradcam_regression(forms: dict[str, Any], x: np.ndarray) -> None:
    """Issue 25: a loaded Sequential's layer.output is from another build of its graph than
    model.outputs; a sub-model on it gave a score independent of the layer and all-zero maps."""
    loaded = forms["sequential_loaded"]
    res = xk.xai.explain(loaded, x, method="gradcam", layer="c2", raw=True)
    assert res.layer == "c2" and res.maps.max() > 0
    ref = xk.xai.explain(forms["sequential"], x, method="gradcam", layer="c2", raw=True)
    np.testing.assert_allclose(res.maps, ref.maps, rtol=1e-5, atol=1e-7)
    # layer=None finds the same layer in every form that has layers
    for name in ("sequential_loaded", "functional_loaded", "subclassed", "clone_of_loaded"):
        assert xk.xai.explain(forms[name], x[:1], method="gradcam", raw=True).layer == "c2"


def test_saved_model_object_itself_is_refused_with_its_functions(
    forms: dict[str, Any], x: np.ndarray
) -> None:
    with pytest.raises(
        XaikitTypeError, match=r"not callable; pass one of its functions instead, e\.g\. loaded\.serve"
    ):
        xk.xai.explain(forms["_saved"], x, method="vanilla", framework="tf")


def test_model_untouched_after_capture(forms: dict[str, Any], x: np.ndarray) -> None:
    """The CAM step swaps the layer's call only while it runs: the model's layers have no
    instance attribute left, also after an error."""
    for name in ("sequential_loaded", "subclassed"):
        model = forms[name]
        xk.xai.explain(model, x, method="gradcam", layer="c2")
        with pytest.raises(XaikitValueError):
            xk.xai.explain(model, x, method="gradcam", layer="c2", target=[0, 7])
        assert all("call" not in la.__dict__ for la in model.layers), name


class UnnamedLayers(keras.Model):
    """A subclassed model whose layers keep Keras's own names (conv2d_7, ...), not their
    attribute names."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = L.Conv2D(4, 3, activation="relu")
        self.blocks = [L.Conv2D(4, 3, activation="relu"), L.Conv2D(4, 3, activation="relu")]
        self.gap = L.GlobalAveragePooling2D()
        self.head = L.Dense(3)

    @property
    def broken(self) -> Any:
        raise ValueError("a property that fails when read")

    def call(self, x: Any, training: Any = None) -> Any:
        h = self.stem(x)
        for block in self.blocks:
            h = block(h)
        return self.head(self.gap(h))


def test_a_subclassed_models_layer_by_its_attribute_name(x: np.ndarray) -> None:
    """``layer="stem"`` / ``"blocks.0"``: the attribute's layer, as the layer object gives (before,
    only the Keras name worked, although the model-forms table promised attribute names)."""
    keras.utils.set_random_seed(6)
    model = UnnamedLayers()
    model(x)
    for name, obj in (("stem", model.stem), ("blocks.0", model.blocks[0]), ("blocks.1", model.blocks[1])):
        assert obj.name != name
        got = xk.xai.explain(model, x, method="gradcam", layer=name, target=[0, 1])
        want = xk.xai.explain(model, x, method="gradcam", layer=obj, target=[0, 1])
        assert np.abs(want).max() > 0
        np.testing.assert_array_equal(got, want)
    for bad in ("blocks.2", "stem.kernel", "nothing", "broken"):
        with pytest.raises(XaikitValueError, match=rf"layer '{bad}' is not a layer of the model.*attribute"):
            xk.xai.explain(model, x, method="gradcam", layer=bad)


# ---- no silent zeros: a gradient that does not reach is an error ----------------------------------
def test_layer_off_the_path_is_an_error_not_zeros(x: np.ndarray) -> None:
    keras.utils.set_random_seed(5)
    inp = keras.Input((SIZE, SIZE, 3))
    c = L.Conv2D(4, 3, activation="relu", name="side")(inp)
    main = L.Dense(3, name="main")(L.GlobalAveragePooling2D()(L.Conv2D(4, 3, name="trunk")(inp)))
    aux = L.Dense(2, name="aux")(L.GlobalAveragePooling2D()(c))
    model = keras.Model(inp, [main, aux])
    for method in ("gradcam", "layercam", "guided_gradcam"):
        with pytest.raises(
            XaikitValueError, match=r"does not reach layer 'side' of this functional model .*output=0"
        ):
            xk.xai.explain(model, x, method=method, layer="side", output=0)
    # the same layer explains the output it feeds, as a model with that output alone does
    got = xk.xai.explain(model, x, method="layercam", layer="side", output=1, target=[0, 1])
    alone = xk.xai.explain(keras.Model(inp, aux), x, method="layercam", layer="side", target=[0, 1])
    assert np.abs(alone).max() > 0
    np.testing.assert_allclose(got, alone, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("method", ["vanilla", "integrated", "guided_gradcam"])
def test_input_without_gradient_is_an_error_not_zeros(x: np.ndarray, method: str) -> None:
    class Cast(keras.Model):
        """Rounds its input through an integer cast: no gradient reaches the input."""

        def __init__(self) -> None:
            super().__init__()
            self.c2 = L.Conv2D(4, 3, activation="relu", name="c2")
            self.head = L.Dense(3)

        def call(self, x: Any) -> Any:
            x = tf.cast(tf.cast(x * 255, tf.int32), tf.float32) / 255
            return self.head(L.GlobalAveragePooling2D()(self.c2(x)))

    with pytest.raises(
        XaikitValueError,
        match=r"does not reach the model's input of this subclassed Keras model Cast .*integer type.*model_kwargs=",
    ):
        xk.xai.explain(Cast(), x, method=method, **({"layer": "c2"} if method == "guided_gradcam" else {}))


def test_unused_second_input_is_named(x: np.ndarray) -> None:
    img = keras.Input((SIZE, SIZE, 3), name="image")
    extra = keras.Input((2,), name="extra")
    out = L.Dense(3)(L.GlobalAveragePooling2D()(L.Conv2D(4, 3)(img)))
    model = keras.Model([img, extra], L.Add()([out, keras.ops.stop_gradient(L.Dense(3)(extra))]))
    with pytest.raises(
        XaikitValueError, match=r"does not reach model input 1 \('extra'\) of this functional model"
    ):
        xk.xai.explain(model, [x, np.ones((2, 2), np.float32)], method="vanilla")


# ---- shape errors: one readable sentence ----------------------------------------------------------
@pytest.mark.parametrize("method", ["vanilla", "gradcam", "occlusion"])
@pytest.mark.parametrize(
    ("shape", "says"),
    [
        ((2, SIZE, SIZE, 1), "'x' has 1 channel where the model expects 3"),
        ((2, SIZE, SIZE), "read as images without a channel axis"),
    ],
)
def test_shape_errors_are_one_readable_message(
    forms: dict[str, Any], method: str, shape: tuple[int, ...], says: str
) -> None:
    bad = np.random.default_rng(0).random(shape).astype(np.float32)
    with pytest.raises(XaikitValueError) as err:
        xk.xai.explain(forms["sequential_loaded"], bad, method=method)
    msg = str(err.value)
    assert msg.startswith(f"the model could not be called on the model inputs ('x': {shape})")
    assert "the model expects (None, 16, 16, 3) (None: any size)" in msg
    assert says in msg
    for noise in ("File ", "in user code", "Traceback", "Arguments received", "\x1b[", "[1m", "0.0", "\n"):
        assert noise not in msg, (noise, msg)
    assert len(msg) < 700
    assert err.value.__cause__ is not None  # the framework's own error is chained


def test_chunk_error_is_one_line() -> None:
    """A model that fails on a chunk of other than B rows: TF's message on one line."""
    from xaikit.backend import get_backend
    from xaikit.xai._engine.chunks import chunk_error

    bk = get_backend(tf.zeros(1))
    try:
        tf.function(lambda a: tf.matmul(a, tf.ones((3, 2))))(tf.ones((4, 5)))
    except Exception as exc:
        msg = str(chunk_error(exc, 8, 2, bk))
    assert "\n" not in msg and "File " not in msg and "[[{{node" not in msg
    assert "on a chunk of 8 rows" in msg


# ---- traced once per model, shapes and options; no retracing warning ------------------------------
class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_steps_are_traced_once_and_tf_does_not_warn(forms: dict[str, Any], x: np.ndarray) -> None:
    from xaikit.backend import get_backend

    bk = get_backend(forms["sequential"])
    handler = _Records()
    tf_logger = tf.get_logger()
    tf_logger.addHandler(handler)
    try:
        seq = [
            ("vanilla", {}),
            ("smoothgrad", {"nsamples": 3}),
            ("gradcam", {"layer": "c2"}),
            ("layercam", {"layer": "c2"}),
            ("guided_gradcam", {"layer": "c2"}),
            ("eigencam", {"layer": "c2"}),
            ("occlusion", {"window": 4, "stride": 4}),
        ]
        kinds = ("grad", "sweep", "scores", "cam_grad", "cam_acts", "guided")
        counts = []
        for i in range(7):  # fresh models: each is traced anew, none warns
            model = keras.models.load_model(forms["_root"] / "seq.keras")
            for _ in range(2):  # the second round traces nothing
                for method, opts in seq:
                    xk.xai.explain(model, x, method=method, max_batch=8, **opts)
                counts.append({k: bk.traces(model, k) for k in kinds})
            assert counts[-1] == counts[-2], counts[-2:]
            assert counts[-1] == counts[0], (i, counts[-1], counts[0])
    finally:
        tf_logger.removeHandler(handler)
    # one trace per step and input signature: the fused chunk of rows 2 (vanilla) and 8
    # (smoothgrad's 6 rows padded; both without a path: ``noise_chunk``, no plain gradient
    # step); the Grad-CAM step with and without given targets; forward scores of 2 and 8 rows
    assert counts[0] == {"grad": 0, "sweep": 2, "scores": 2, "cam_grad": 2, "cam_acts": 1, "guided": 1}
    retracing = [m for m in handler.messages if "retracing" in m]
    assert not retracing, retracing[0]
    with pytest.raises(XaikitValueError, match="kind must be one of"):
        bk.traces(forms["sequential"], "nope")


# ---- the command line -----------------------------------------------------------------------------
def test_cli_explain_of_a_loaded_keras_file(
    forms: dict[str, Any], x: np.ndarray, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from xaikit.cli import main

    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "maps.zarr"
    argv = ["explain", "--model", str(forms["_root"] / "seq.keras"), "--data", str(tmp_path / "x.npy")]
    argv += ["--method", "gradcam", "--out", str(out), "--grid-size", "0"]
    assert main(argv) == 0, capsys.readouterr().err
    stored = xk.xai.DatasetExplanation.open(out).attributions[:]
    ref = xk.xai.explain(forms["sequential"], x, method="gradcam", seed=0)
    assert stored.max() > 0
    np.testing.assert_allclose(stored, ref, rtol=1e-5, atol=1e-7)
