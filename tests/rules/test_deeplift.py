"""DeepLIFT (Rescale rule) and DeepLiftShap: summation-to-delta, exact values on a model computed
by hand, agreement with captum where captum is right (and where it is not: issues #1104, #1082
and the overlapping-window max pooling, shown against a known answer), torch == Keras on the
same weights, the model left as it was, chunking, and bad options; ReLUs written as a threshold,
clamp or maximum (ruled), forms refused (a TorchScript part, a tf.function), and the warning for
attributions that do not add up (an activation no rule reaches)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

import xaikit as xk
from xaikit.errors import XaikitTypeError, XaikitValueError

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional


def _relative(delta: np.ndarray, change: np.ndarray) -> float:
    """The largest |delta| relative to the largest |f(x) - f(baseline)| of the batch."""
    return float(np.max(np.abs(delta)) / np.max(np.abs(change)))


# ---- models --------------------------------------------------------------------------------------
class TorchCNN(nn.Module):
    """ReLU -> max pooling directly (captum's #1104 case), a functional in-place ReLU and a
    tanh; (B, 3, 12, 12) -> 3 classes with an overlapping second max pool (2, stride 1), or
    (B, 3, 14, 14) without (``overlap=False``)."""

    def __init__(self, overlap: bool = True) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3)
        self.relu1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(4, 5, 3)
        self.pool2 = nn.MaxPool2d(2, stride=1 if overlap else 2)
        self.size = 12 if overlap else 14
        self.fc1 = nn.Linear(20, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x: Any) -> Any:
        x = self.pool1(self.relu1(self.conv1(x)))
        x = self.pool2(F.relu(self.conv2(x), inplace=True))
        return self.fc2(torch.tanh(self.fc1(x.flatten(1))))


def keras_cnn(torch_model: TorchCNN, dtype: str = "float32") -> Any:
    """TorchCNN in Keras (channel-last), its weights copied."""
    keras = pytest.importorskip("keras")
    layers = keras.layers
    size, stride = torch_model.size, torch_model.pool2.stride
    model = keras.Sequential(
        [
            keras.Input((size, size, 3), dtype=dtype),
            layers.Conv2D(4, 3, activation="relu", dtype=dtype),
            layers.MaxPooling2D(2, dtype=dtype),
            layers.Conv2D(5, 3, dtype=dtype),
            layers.ReLU(dtype=dtype),
            layers.MaxPooling2D(2, strides=stride, dtype=dtype),
            layers.Flatten(dtype=dtype),
            layers.Dense(8, activation="tanh", dtype=dtype),
            layers.Dense(3, dtype=dtype),
        ]
    )
    t = {k: v.detach().numpy() for k, v in torch_model.state_dict().items()}
    conv = [la for la in model.layers if isinstance(la, layers.Conv2D)]
    dense = [la for la in model.layers if isinstance(la, layers.Dense)]
    conv[0].set_weights([t["conv1.weight"].transpose(2, 3, 1, 0), t["conv1.bias"]])
    conv[1].set_weights([t["conv2.weight"].transpose(2, 3, 1, 0), t["conv2.bias"]])
    # torch flattens (C, H, W), Keras (H, W, C)
    w1 = t["fc1.weight"].reshape(8, 5, 2, 2).transpose(0, 2, 3, 1).reshape(8, 20)
    dense[0].set_weights([w1.T, t["fc1.bias"]])
    dense[1].set_weights([t["fc2.weight"].T, t["fc2.bias"]])
    return model


def cnn(framework: str, overlap: bool = True) -> Any:
    torch.manual_seed(0)
    model = TorchCNN(overlap).eval()
    return model if framework == "torch" else keras_cnn(model)


def images(framework: str, rng: np.random.Generator, n: int = 4, size: int = 12) -> np.ndarray:
    x = rng.normal(size=(n, 3, size, size)).astype(np.float32)
    return x if framework == "torch" else x.transpose(0, 2, 3, 1).copy()


def scores(framework: str, model: Any, x: np.ndarray) -> np.ndarray:
    if framework == "torch":
        with torch.no_grad():
            return model(torch.as_tensor(x, dtype=torch.float32)).numpy().astype(np.float64)
    return np.asarray(model(x, training=False), dtype=np.float64)


# ---- the analytic model: Dense -> ReLU -> overlapping max pooling -> Dense ------------------------
D, H, K, S = 3, 6, 3, 1  # inputs, hidden units, pool window and stride: P = 4 overlapping windows
P = (H - K) // S + 1


def _analytic_weights() -> tuple[np.ndarray, ...]:
    g = np.random.default_rng(7)
    return g.normal(size=(H, D)), g.normal(size=H) * 0.5, g.normal(size=(2, P)), g.normal(size=2)


def analytic_deeplift(x: np.ndarray, x0: np.ndarray, target: int) -> np.ndarray:
    """DeepLIFT of v . maxpool(relu(W x + c)) + d by hand, float64: the max rule routes each
    window's ``max(p, p0) - p0`` through x's argmax and ``p - max(p, p0)`` through the
    baseline's (accumulated where windows overlap); the ReLU's Rescale multiplier divides the
    contribution reaching each hidden unit by ``z - z0``."""
    w, c, v, _ = _analytic_weights()
    out = np.zeros_like(x)
    for b in range(len(x)):
        z, z0 = w @ x[b] + c, w @ x0[b] + c
        a, a0 = np.maximum(z, 0), np.maximum(z0, 0)
        reach = np.zeros(H)  # the contribution reaching each hidden unit's output
        for j in range(P):
            window = np.arange(j * S, j * S + K)
            ix, i0 = window[np.argmax(a[window])], window[np.argmax(a0[window])]
            top = max(a[ix], a0[i0])
            reach[ix] += v[target, j] * (top - a0[i0])
            reach[i0] += v[target, j] * (a[ix] - top)
        out[b] = (x[b] - x0[b]) * ((reach / (z - z0)) @ w)
    return out


class TorchAnalytic(nn.Module):
    def __init__(self, separate: bool = False) -> None:
        super().__init__()
        w, c, v, d = (torch.tensor(a, dtype=torch.float32) for a in _analytic_weights())
        self.dense = nn.Linear(D, H)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool1d(K, S)
        self.out = nn.Linear(P, 2)
        with torch.no_grad():
            self.dense.weight.copy_(w)
            self.dense.bias.copy_(c)
            self.out.weight.copy_(v)
            self.out.bias.copy_(d)
        self.separate = separate  # a no-op between ReLU and pool (captum's #1104 needs it)

    def forward(self, x: Any) -> Any:
        a = self.relu(self.dense(x))
        if self.separate:
            a = a * 1.0
        return self.out(self.pool(a[:, None, :])[:, 0, :])


def analytic_model(framework: str) -> Any:
    if framework == "torch":
        return TorchAnalytic().eval()
    keras = pytest.importorskip("keras")
    w, c, v, d = (a.astype(np.float32) for a in _analytic_weights())
    model = keras.Sequential(
        [
            keras.Input((D,)),
            keras.layers.Dense(H, activation="relu"),
            keras.layers.Reshape((H, 1)),
            keras.layers.MaxPooling1D(K, S),
            keras.layers.Flatten(),
            keras.layers.Dense(2),
        ]
    )
    model.layers[0].set_weights([w.T, c])
    model.layers[4].set_weights([v.T, d])
    return model


def analytic_points() -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(11)
    return g.normal(size=(5, D)).astype(np.float32), g.normal(size=(5, D)).astype(np.float32)


# ---- summation-to-delta ----------------------------------------------------------------------------
@pytest.mark.parametrize("baseline", ["zeros", "black", "blur", "array"])
def test_summation_to_delta_on_relu_nets_with_max_pooling(
    framework: str, rng: np.random.Generator, baseline: str
) -> None:
    model, x = cnn(framework), images(framework, rng)
    base: Any = 0.3 * images(framework, np.random.default_rng(1), 1)[0] if baseline == "array" else baseline
    attr, delta = xk.xai.explain(
        model, x, target=[0, 1, 2, 0], method="deeplift", baseline=base, return_delta=True
    )
    from xaikit.xai._engine.baselines import baseline_values

    x0 = baseline_values(x, base, 1 if framework == "torch" else 3).astype(np.float32)
    f, f0 = scores(framework, model, x), scores(framework, model, x0)
    change = f[np.arange(4), [0, 1, 2, 0]] - f0[np.arange(4), [0, 1, 2, 0]]
    assert attr.shape == x.shape and attr.dtype == np.float32
    # the delta is what explain says it is, and it is float rounding only
    np.testing.assert_allclose(delta, attr.reshape(4, -1).sum(axis=1, dtype=np.float64) - change, atol=1e-6)
    assert _relative(delta, change) < 1e-5
    # not the gradient times the difference: the rules changed the backward pass
    grads = xk.xai.explain(model, x, target=[0, 1, 2, 0], method="vanilla")
    assert np.max(np.abs(grads * (x - x0) - attr)) > 1e-2


def test_deepliftshap_delta_is_against_the_mean_of_the_references(
    framework: str, rng: np.random.Generator
) -> None:
    model, x = cnn(framework), images(framework, rng, 3)
    refs = images(framework, np.random.default_rng(2), 5)
    attr, delta = xk.xai.explain(model, x, target=1, method="deepliftshap", baselines=refs, return_delta=True)
    change = scores(framework, model, x)[:, 1] - scores(framework, model, refs)[:, 1].mean()
    np.testing.assert_allclose(attr.reshape(3, -1).sum(axis=1, dtype=np.float64), change, atol=1e-5)
    assert _relative(delta, change) < 1e-5
    # the mean of DeepLIFT against each reference (all 5: nsamples not given, 5 <= 100)
    each = [xk.xai.explain(model, x, target=1, method="deeplift", baseline=r) for r in refs]
    np.testing.assert_allclose(attr, np.mean(each, axis=0), atol=1e-6)


# ---- exact values ----------------------------------------------------------------------------------
def test_exact_values_on_a_model_computed_by_hand(framework: str) -> None:
    x, x0 = analytic_points()
    model = analytic_model(framework)
    for target in (0, 1):
        ours = xk.xai.explain(model, x, target=target, method="deeplift", baseline=x0)
        np.testing.assert_allclose(
            ours, analytic_deeplift(x.astype(np.float64), x0.astype(np.float64), target), atol=1e-5
        )
    # the hand computation itself sums to the score change (the rules' summation-to-delta)
    f, f0 = scores(framework, model, x), scores(framework, model, x0)
    np.testing.assert_allclose(
        analytic_deeplift(x.astype(np.float64), x0.astype(np.float64), 1).sum(axis=1),
        f[:, 1] - f0[:, 1],
        atol=1e-5,
    )


def test_near_ties_of_a_constant_baseline_route_by_position(framework: str) -> None:
    """A constant baseline's activations come out of the kernels a few ulp apart (differently
    for another chunk size or framework); values within 1e-5 of a window's maximum count as
    tied, and the baseline's share goes to the window's first position, whatever the ulp."""
    c = np.float32(0.1623523)
    base = np.full((1, 4, 4), c, dtype=np.float32)
    base[0, 1, 1] = np.nextafter(c, np.float32(1))  # one ulp above the rest of its window
    x = np.zeros((1, 1, 4, 4), dtype=np.float32)
    x[0, 0, 2, 3] = 1.0  # one window above the baseline, three below it
    if framework == "torch":
        model = nn.Sequential(nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4, 1))
        with torch.no_grad():
            model[2].weight.fill_(1.0)
        arrays = (x, base, np.full_like(base, c))
    else:
        keras = pytest.importorskip("keras")
        model = keras.Sequential(
            [
                keras.Input((4, 4, 1)),
                keras.layers.MaxPooling2D(2),
                keras.layers.Flatten(),
                keras.layers.Dense(1),
            ]
        )
        model.layers[-1].set_weights([np.ones((4, 1), np.float32), np.zeros(1, np.float32)])
        arrays = tuple(
            a.reshape(a.shape[0], 4, 4, 1) if a.ndim == 4 else a.reshape(4, 4, 1)
            for a in (x, base, np.full_like(base, c))
        )
    xs, near, exact = arrays
    a_near, delta = xk.xai.explain(model, xs, target=0, method="deeplift", baseline=near, return_delta=True)
    a_exact = xk.xai.explain(model, xs, target=0, method="deeplift", baseline=exact)
    a_near, a_exact = a_near.reshape(4, 4), a_exact.reshape(4, 4)
    np.testing.assert_allclose(a_near, a_exact, atol=1e-6)
    for i, j in ((0, 0), (0, 2), (2, 0)):  # windows below the baseline: -c at their first position
        assert a_near[i, j] == pytest.approx(-c, abs=1e-6)
    assert a_near[2, 3] == pytest.approx(1 - c, abs=1e-6) and a_near[1, 1] == 0.0
    assert np.count_nonzero(a_near) == 4 and abs(float(delta[0])) < 1e-6


# ---- captum ----------------------------------------------------------------------------------------
class CaptumSafe(nn.Module):
    """Each nonlinearity its own nn module, used once, none feeding another directly, max
    pooling without overlap: the models captum's DeepLift handles."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(4, 5, 3)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(80, 8)
        self.act = nn.Sigmoid()
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x: Any) -> Any:
        x = self.pool(self.conv2(self.relu1(self.conv1(x))))
        return self.fc2(self.act(self.fc1(x.flatten(1))))


def test_agrees_with_captum_deeplift_and_deepliftshap(rng: np.random.Generator) -> None:
    captum_attr = pytest.importorskip("captum.attr")
    torch.manual_seed(3)
    model = CaptumSafe().eval()
    x = rng.normal(size=(4, 3, 12, 12)).astype(np.float32)
    base = 0.5 * rng.normal(size=(4, 3, 12, 12)).astype(np.float32)
    refs = rng.normal(size=(6, 3, 12, 12)).astype(np.float32)
    target = [0, 1, 2, 1]
    ours = xk.xai.explain(model, x, target=target, method="deeplift", baseline=base)
    theirs = captum_attr.DeepLift(model).attribute(
        torch.tensor(x), torch.tensor(base), target=torch.tensor(target)
    )
    scale = np.abs(ours).max()
    np.testing.assert_allclose(ours, theirs.detach().numpy(), atol=1e-5 * scale)
    shap = xk.xai.explain(model, x, target=target, method="deepliftshap", baselines=refs)
    theirs = captum_attr.DeepLiftShap(model).attribute(
        torch.tensor(x), torch.tensor(refs), target=torch.tensor(target)
    )
    np.testing.assert_allclose(shap, theirs.detach().numpy(), atol=1e-5 * np.abs(shap).max())


def _captum_deeplift(model: Any, x: np.ndarray, x0: np.ndarray, target: int) -> tuple[np.ndarray, np.ndarray]:
    captum_attr = pytest.importorskip("captum.attr")
    a, delta = captum_attr.DeepLift(model).attribute(
        torch.tensor(x), torch.tensor(x0), target=target, return_convergence_delta=True
    )
    return a.detach().numpy(), delta.detach().numpy()


def test_captum_is_wrong_on_a_relu_feeding_max_pooling_issue_1104(rng: np.random.Generator) -> None:
    """captum 0.9's hooks read a module's output gradient before the next module's hook has
    rescaled it: a ReLU feeding a MaxPool (TorchCNN's first block) gets the plain gradient of
    the pooling. The same weights with a no-op ``* 1.0`` between them are the known answer."""

    class Separated(TorchCNN):
        def forward(self, x: Any) -> Any:  # the same function; the ReLU no longer feeds the pool
            x = self.pool1(self.relu1(self.conv1(x)) * 1.0)
            x = self.pool2(F.relu(self.conv2(x)) * 1.0)
            return self.fc2(torch.tanh(self.fc1(x.flatten(1))))

    torch.manual_seed(0)
    model = TorchCNN().eval()
    known_model = Separated().eval()
    known_model.load_state_dict(model.state_dict())
    x = rng.normal(size=(4, 3, 12, 12)).astype(np.float32)
    x0 = 0.3 * rng.normal(size=(4, 3, 12, 12)).astype(np.float32)
    ours = xk.xai.explain(model, x, target=0, method="deeplift", baseline=x0)
    ours_known = xk.xai.explain(known_model, x, target=0, method="deeplift", baseline=x0)
    np.testing.assert_array_equal(ours, ours_known)  # a no-op changes nothing of ours

    # captum on the first block alone (no overlapping pool, no functional ReLU: only #1104)
    class Block(nn.Module):
        def __init__(self, separate: bool) -> None:
            super().__init__()
            self.conv1, self.relu1, self.pool1 = model.conv1, nn.ReLU(), nn.MaxPool2d(2)
            self.fc = nn.Linear(100, 3)
            with torch.no_grad():
                self.fc.weight.copy_(torch.linspace(-1, 1, 300).reshape(3, 100))
            self.separate = separate

        def forward(self, x: Any) -> Any:
            a = self.relu1(self.conv1(x))
            return self.fc(self.pool1(a * 1.0 if self.separate else a).flatten(1))

    adjacent, separated = Block(False).eval(), Block(True).eval()
    theirs, their_delta = _captum_deeplift(adjacent, x, x0, 0)
    known, known_delta = _captum_deeplift(separated, x, x0, 0)
    ours = xk.xai.explain(adjacent, x, target=0, method="deeplift", baseline=x0)
    scale = np.abs(known).max()
    np.testing.assert_allclose(ours, known, atol=1e-5 * scale)  # ours: the known answer
    assert np.abs(known_delta).max() < 1e-4  # captum is right once the ReLU does not feed the pool
    assert np.abs(theirs - known).max() > 1e-2 * scale  # and wrong when it does
    assert np.abs(their_delta).max() > 1e-2


def test_captum_loses_the_routed_change_of_overlapping_max_pooling() -> None:
    """captum's max rule un-pools with ``max_unpool``, which writes instead of adding: an input
    that is the argmax of several overlapping windows keeps one window's share. The known answer
    is the hand computation of the analytic model (pool window 3, stride 1)."""
    x, x0 = analytic_points()
    model = TorchAnalytic(separate=True).eval()  # no ReLU feeding the pool: only the overlap
    known = analytic_deeplift(x.astype(np.float64), x0.astype(np.float64), 1)
    theirs, their_delta = _captum_deeplift(model, x, x0, 1)
    ours, delta = xk.xai.explain(model, x, target=1, method="deeplift", baseline=x0, return_delta=True)
    np.testing.assert_allclose(ours, known, atol=1e-5)
    assert np.abs(delta).max() < 1e-5
    assert np.abs(theirs - known).max() > 1e-2
    assert np.abs(their_delta).max() > 1e-2


def test_captum_misses_functional_and_per_call_relus_issue_1082(rng: np.random.Generator) -> None:
    """captum hooks nn.ReLU modules registered on the model: ``F.relu`` in a forward, or a
    ``nn.ReLU()`` made inside it (#1082), keeps its plain gradient there. Ours rescales it: the
    same attributions as the model with registered modules, and summation-to-delta."""

    class Functional(CaptumSafe):
        def forward(self, x: Any) -> Any:
            x = self.pool(self.conv2(F.relu(self.conv1(x))))
            return self.fc2(self.act(self.fc1(x.flatten(1))))

    class PerCall(CaptumSafe):
        def forward(self, x: Any) -> Any:
            x = self.pool(self.conv2(nn.ReLU()(self.conv1(x))))
            return self.fc2(self.act(self.fc1(x.flatten(1))))

    torch.manual_seed(3)
    registered = CaptumSafe().eval()
    x = rng.normal(size=(3, 3, 12, 12)).astype(np.float32)
    x0 = 0.5 * rng.normal(size=(3, 3, 12, 12)).astype(np.float32)
    known, _ = _captum_deeplift(registered, x, x0, 2)
    scale = np.abs(known).max()
    for cls in (Functional, PerCall):
        model = cls().eval()
        model.load_state_dict(registered.state_dict())
        theirs, their_delta = _captum_deeplift(model, x, x0, 2)
        ours, delta = xk.xai.explain(model, x, target=2, method="deeplift", baseline=x0, return_delta=True)
        np.testing.assert_allclose(ours, known, atol=1e-5 * scale)
        f = scores("torch", model, x)[:, 2] - scores("torch", model, x0)[:, 2]
        assert _relative(delta, f) < 1e-5
        assert np.abs(theirs - known).max() > 1e-2 * scale
        assert _relative(their_delta, f) > 1e-2


def test_a_torch_export_program_equals_its_eager_model(rng: np.random.Generator) -> None:
    """The module of a torch.export program calls the aten ops (aten.relu, aten.max_pool2d...),
    which the mode rescales as it does the functions of the eager model."""
    torch.manual_seed(0)
    model = TorchCNN().eval()
    x = images("torch", rng)
    program = torch.export.export(model, (torch.tensor(x),), dynamic_shapes=({0: torch.export.Dim("batch")},))
    eager, delta = xk.xai.explain(model, x, target=1, method="deeplift", baseline="blur", return_delta=True)
    exported = xk.xai.explain(program.module(), x, target=1, method="deeplift", baseline="blur")
    np.testing.assert_allclose(exported, eager, rtol=0, atol=1e-6 * np.abs(eager).max())
    assert np.abs(delta).max() < 1e-5


def test_a_torchscript_part_of_a_python_model_is_refused(rng: np.random.Generator) -> None:
    """A scripted block runs its ReLU and max pooling without the mode's rules (their plain
    gradients): the map missed f(x) - f(baseline) by 8 % of the score and came back without a
    word. The model holding it is refused, naming the submodule; an exported part is seen."""
    import warnings

    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2))
    with warnings.catch_warnings():  # torch's deprecation notice of TorchScript
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(block)
    model = torch.nn.Sequential(scripted, torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 3)).eval()
    x = images("torch", rng)
    for method in ("deeplift", "deepliftshap"):
        with pytest.raises(
            XaikitTypeError, match=r"DeepLIFT .*submodule '0' of the model is a TorchScript module"
        ):
            xk.xai.explain(model, x, target=1, method=method)
    # a torch.compile part is seen: dynamo keeps the mode (the same map as the eager model)
    compiled = torch.nn.Sequential(torch.compile(block, backend="eager"), *list(model)[1:]).eval()
    eager = torch.nn.Sequential(block, *list(model)[1:]).eval()
    with warnings.catch_warnings():  # dynamo's own notices while it traces the mode
        warnings.simplefilter("ignore")
        got, delta = xk.xai.explain(compiled, x, target=1, method="deeplift", return_delta=True)
    np.testing.assert_allclose(
        got, xk.xai.explain(eager, x, target=1, method="deeplift"), rtol=1e-6, atol=1e-9
    )
    assert np.abs(delta).max() < 1e-5


def test_a_keras_activation_out_of_reach_is_refused() -> None:
    """A tf.nn.relu inside a custom layer's call gets no rule: its plain gradient made the
    attributions miss f(x) - f(baseline), with no word unless the delta was asked for. The
    traced forward is searched for such activation ops, and the error names them."""
    keras = pytest.importorskip("keras")
    tf = pytest.importorskip("tensorflow")

    class ReluInCall(keras.layers.Layer):
        def __init__(self, **kw: Any) -> None:
            super().__init__(**kw)
            self.conv = keras.layers.Conv2D(4, 3, padding="same")

        def call(self, x: Any) -> Any:
            return tf.nn.relu(self.conv(x))

    keras.utils.set_random_seed(0)
    inp = keras.Input((8, 8, 3))
    h = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(ReluInCall(name="custom")(inp))
    model = keras.Model(inp, keras.layers.Dense(2)(keras.layers.Flatten()(keras.layers.MaxPooling2D()(h))))
    x = np.random.default_rng(0).normal(size=(2, 8, 8, 3)).astype(np.float32)
    for method in ("deeplift", "deepliftshap"):
        with pytest.raises(
            XaikitValueError, match=r"DeepLIFT .*1 activation op\(s\) .*'[^']*custom[^']*/Relu'"
        ):
            xk.xai.explain(model, x, target=0, method=method)
    # the same network built of layers: every activation has its rule, the delta is round-off
    inp = keras.Input((8, 8, 3))
    h = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inp)
    h = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(h)
    layered = keras.Model(inp, keras.layers.Dense(2)(keras.layers.Flatten()(keras.layers.MaxPooling2D()(h))))
    _, delta = xk.xai.explain(layered, x, target=0, method="deeplift", return_delta=True)
    assert np.abs(delta).max() < 1e-4


def test_a_tf_function_is_refused_by_name() -> None:
    """tf.function(model) has no layers to give the rules to, and its ops run in a graph of their
    own, out of the search for unreached activations: the map was Input x Gradient (a delta of
    2.6-9 times the score change), returned without a word. Refused as LRP refuses it."""
    keras = pytest.importorskip("keras")
    tf = pytest.importorskip("tensorflow")
    model = cnn("tf")
    x = images("tf", np.random.default_rng(0), 2)
    for method in ("deeplift", "deepliftshap"):
        with pytest.raises(
            XaikitTypeError,
            match=r"DeepLIFT \(deeplift, deepliftshap\) needs a Keras model with layers .*got a TensorFlow "
            r"function .*Pass the Keras model itself .*for tf\.function\(model\), pass model",
        ):
            xk.xai.explain(tf.function(model), x, target=0, method=method, framework="tf")
    assert isinstance(model, keras.Model)  # the model itself runs (with its rules)
    _, delta = xk.xai.explain(model, x, target=0, method="deeplift", return_delta=True)
    assert np.abs(delta).max() < 1e-5


class Activated(nn.Module):
    """conv -> ``act`` -> linear, (B, 3, 8, 8) -> 3 classes: the activation as the model writes it."""

    def __init__(self, act: Any) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.act = act
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4 * 6 * 6, 3)

    def forward(self, x: Any) -> Any:
        return self.fc(self.act(self.conv(x)).flatten(1))


def _clamp_(z: Any) -> Any:
    return z.clone().clamp_(min=0)


#: ReLUs written otherwise that have a rule: the same map as nn.ReLU, adding up
RULED_RELUS = {
    "Threshold": lambda: nn.Threshold(0.0, 0.0),
    "Threshold_inplace": lambda: nn.Threshold(0.0, 0.0, inplace=True),
    "clamp": lambda: lambda z: z.clamp(min=0),
    "clamp_": lambda: _clamp_,
    "torch.clip": lambda: lambda z: torch.clip(z, 0.0),
    "maximum": lambda: lambda z: torch.maximum(z, torch.zeros(())),
}


@pytest.mark.parametrize("name", sorted(RULED_RELUS))
def test_relus_written_as_threshold_clamp_or_maximum_get_the_relu_rule(name: str) -> None:
    """nn.Threshold(0, 0), z.clamp(min=0) and torch.maximum(z, 0) are ReLUs: their calls passed the
    plain gradient (a delta of 5-43 % of the score change, without a word); now rescaled."""
    import warnings

    x = images("torch", np.random.default_rng(3), 3, 8)
    relu = xk.xai.explain(Activated(nn.ReLU()), x, method="deeplift")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for method in ("deeplift", "deepliftshap"):
            got, delta = xk.xai.explain(Activated(RULED_RELUS[name]()), x, method=method, return_delta=True)
            assert np.abs(delta).max() < 1e-5
        got = xk.xai.explain(Activated(RULED_RELUS[name]()), x, method="deeplift")
    np.testing.assert_allclose(got, relu, rtol=0, atol=1e-6 * np.abs(relu).max())


def test_a_threshold_and_a_clamp_that_are_not_relus_add_up() -> None:
    import warnings

    x = images("torch", np.random.default_rng(3), 3, 8)
    for act in (nn.Threshold(0.1, -0.5), lambda z: torch.clamp(z, -0.2, 0.3), lambda z: z.clamp_max(0.1)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            _, delta = xk.xai.explain(Activated(act), x, method="deepliftshap", return_delta=True)
        assert np.abs(delta).max() < 1e-5


def _script_relu() -> Any:
    import warnings

    def act(z: torch.Tensor) -> torch.Tensor:
        return torch.relu(z)

    with warnings.catch_warnings():  # torch's deprecation notice of TorchScript
        warnings.simplefilter("ignore")
        return torch.jit.script(act)


#: activations the rules cannot see: the map is partly the plain gradient
UNRULED = {
    "TorchScript function": _script_relu,
    "torch.where": lambda: lambda z: torch.where(z > 0, z, 0.0),
    "clamp at an input-dependent bound": lambda: lambda z: torch.clamp(z, min=z.mean(1, keepdim=True)),
}


@pytest.mark.parametrize("name", sorted(UNRULED))
def test_an_activation_without_a_rule_is_warned_about(name: str) -> None:
    """A TorchScript function, a torch.where ReLU or a clamp whose bound comes from the input run
    without a rule: the attributions missed f(x) - f(baseline) by up to 43 % without a word. The
    runner's completeness check warns (once per model and method); the map still comes back."""
    import warnings

    x = images("torch", np.random.default_rng(3), 3, 8)
    model = Activated(UNRULED[name]()).eval()
    for method, gap in (
        ("deeplift", r"f\(x\) - f\(baseline\)"),
        ("deepliftshap", r"f\(x\) - mean f\(references\)"),
    ):
        with pytest.warns(
            xk.IncompleteMapWarning,
            match=rf"\({method}\): the attributions do not add up to {gap} for [1-3] of 3 samples "
            r"\(\|delta\| up to [\d.]+ % .*operation of the model without a DeepLIFT rule.*TorchScript function"
            r".*Fix: write ReLUs as nn\.ReLU / torch\.relu",
        ):
            attr, delta = xk.xai.explain(model, x, method=method, return_delta=True)
        assert attr.shape == x.shape and np.abs(delta).max() > 1e-3
        with warnings.catch_warnings():  # shown once per model and method
            warnings.simplefilter("error")
            xk.xai.explain(model, x, method=method)


def test_relu_models_are_not_warned_about(rng: np.random.Generator) -> None:
    """ReLU modules and torch.relu calls: complete to float rounding, no warning (not even for a
    score that does not change: a sample that is its own baseline, within the rounding floor)."""
    import warnings

    x = images("torch", np.random.default_rng(3), 3, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for act in (nn.ReLU(), torch.relu, nn.ReLU(inplace=True)):
            for method in ("deeplift", "deepliftshap"):
                xk.xai.explain(Activated(act), x, method=method)
        xk.xai.explain(cnn("torch"), images("torch", rng), target=1, method="deeplift", baseline="blur")
        warnings.simplefilter("ignore", xk.DegenerateMapWarning)  # the maps of x against x are 0
        xk.xai.explain(
            cnn("torch"), images("torch", rng), target=1, method="deeplift", baseline=images("torch", rng)[0]
        )


def test_a_keras_relu_written_as_a_maximum_in_a_lambda_is_warned_about() -> None:
    """keras.ops.maximum(z, 0) inside a Lambda (tf.maximum, tf.where, tf.clip_by_value alike) is
    no op the search for unreached activations knows: it kept its plain gradient (a delta of
    2.6-16 times the score change) without a word. The completeness check warns."""
    import warnings

    keras = pytest.importorskip("keras")
    layers = keras.layers
    x = np.random.default_rng(1).random((3, 16, 16, 3)).astype(np.float32)

    def model(act: Any) -> Any:
        keras.utils.set_random_seed(0)
        m = keras.Sequential(
            [
                keras.Input((16, 16, 3)),
                layers.Conv2D(4, 3),
                act,
                layers.MaxPooling2D(2),
                layers.Flatten(),
                layers.Dense(3),
            ]
        )
        m.layers[0].bias.assign(np.random.default_rng(2).normal(0, 0.3, 4).astype(np.float32))
        return m

    with pytest.warns(
        xk.IncompleteMapWarning,
        match=r"DeepLIFT \(deeplift\): the attributions do not add up .* inside a Lambda or custom layer's call "
        r"\(keras\.ops\.maximum.*Fix: compute ReLUs as a ReLU activation or layer",
    ):
        xk.xai.explain(model(layers.Lambda(lambda z: keras.ops.maximum(z, 0.0))), x, method="deeplift")
    with warnings.catch_warnings():  # the same model with a ReLU layer adds up
        warnings.simplefilter("error")
        _, delta = xk.xai.explain(model(layers.ReLU()), x, method="deeplift", return_delta=True)
    assert np.abs(delta).max() < 1e-5


# ---- torch == Keras --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("overlap", [False, True])
def test_torch_equals_keras_on_the_same_weights(rng: np.random.Generator, dtype: str, overlap: bool) -> None:
    """Equal to float64 rounding; in float32 to 5e-4 of the largest attribution: a multiplier
    (y - y0) / (x - x0) with a small x - x0 carries the frameworks' different float32 rounding
    of the convolutions (up to 1.1e-4 of the largest, measured). With overlapping max pooling the
    baselines are not constant (see :func:`test_near_ties_of_a_constant_baseline_route_by_position`)."""
    pytest.importorskip("keras")
    torch.manual_seed(0)
    tm = TorchCNN(overlap).eval().to(getattr(torch, dtype))
    km = keras_cnn(tm, dtype)
    size = tm.size
    x = rng.normal(size=(4, 3, size, size)).astype(dtype)
    refs = rng.normal(size=(3, 3, size, size)).astype(dtype)
    last = x.transpose(0, 2, 3, 1).copy()
    tol = 1e-12 if dtype == "float64" else 5e-4
    for method, options, kopts in (
        (
            "deeplift",
            {"baseline": "blur" if overlap else "black"},
            {"baseline": "blur" if overlap else "black"},
        ),
        ("deepliftshap", {"baselines": refs}, {"baselines": refs.transpose(0, 2, 3, 1).copy()}),
    ):
        a_t, d_t = xk.xai.explain(tm, x, target=[0, 1, 2, 0], method=method, return_delta=True, **options)
        a_k, d_k = xk.xai.explain(km, last, target=[0, 1, 2, 0], method=method, return_delta=True, **kopts)
        assert a_t.dtype == a_k.dtype == np.dtype(dtype)
        np.testing.assert_allclose(a_t.transpose(0, 2, 3, 1), a_k, rtol=0, atol=tol * np.abs(a_t).max())
        assert np.abs(d_t).max() < 1e-10 + 1e-5 * (dtype == "float32")
        assert np.abs(d_k).max() < 1e-10 + 1e-5 * (dtype == "float32")


# ---- the model is left as it was -------------------------------------------------------------------
def _torch_state(model: Any) -> tuple[Any, ...]:
    tensors = {k: v.detach().clone() for k, v in model.state_dict().items()}
    hooks = [
        (m.training, dict(m._forward_hooks), dict(m._forward_pre_hooks), dict(m._backward_hooks))
        for m in model.modules()
    ]
    return tensors, hooks


def _same_torch_state(a: tuple[Any, ...], b: tuple[Any, ...]) -> None:
    assert a[0].keys() == b[0].keys()
    for k in a[0]:
        assert torch.equal(a[0][k], b[0][k]), k
    assert a[1] == b[1]
    assert torch._C._len_torch_function_stack() == 0  # no DeepLIFT mode left behind


def test_torch_model_unchanged_also_when_it_raises(rng: np.random.Generator) -> None:
    class Boom(TorchCNN):
        def forward(self, x: Any) -> Any:
            out = super().forward(x)
            if x.shape[0] > 2:  # the 2n rows of DeepLIFT, after every rule ran
                raise RuntimeError("boom on the doubled batch")
            return out

    torch.manual_seed(0)
    model = TorchCNN().train()  # a model left in training mode stays there
    model.add_module("bn", nn.BatchNorm1d(3))
    before = _torch_state(model)
    xk.xai.explain(model, images("torch", rng, 2), target=0, method="deeplift")
    xk.xai.explain(model, images("torch", rng, 2), target=0, method="deepliftshap")
    _same_torch_state(before, _torch_state(model))
    boom = Boom().eval()
    before = _torch_state(boom)
    with pytest.raises(XaikitValueError, match="boom on the doubled batch"):
        xk.xai.explain(boom, images("torch", rng, 2), target=0, method="deeplift")
    _same_torch_state(before, _torch_state(boom))


def test_keras_model_unchanged_also_when_it_raises(rng: np.random.Generator) -> None:
    keras = pytest.importorskip("keras")

    class Boom(keras.layers.Layer):
        def call(self, x: Any) -> Any:
            if x.shape[0] is not None and x.shape[0] > 2:  # the 2n rows of DeepLIFT
                raise RuntimeError("boom on the doubled batch")
            return x

    def state(model: Any) -> list[Any]:
        return [
            (la.__dict__.get("call"), getattr(la, "activation", None), [w.copy() for w in la.get_weights()])
            for la in model.layers
        ]

    def same(a: list[Any], b: list[Any]) -> None:
        for (call_a, act_a, w_a), (call_b, act_b, w_b) in zip(a, b):
            assert call_a is call_b and act_a is act_b
            for u, v in zip(w_a, w_b):
                np.testing.assert_array_equal(u, v)

    model = cnn("tf")
    before = state(model)
    xk.xai.explain(model, images("tf", rng, 2), target=0, method="deeplift")
    same(before, state(model))
    boom = keras.Sequential([keras.Input((12, 12, 3)), *model.layers[:-1], Boom(), model.layers[-1]])
    before = state(boom)
    with pytest.raises(XaikitValueError, match="boom on the doubled batch"):
        xk.xai.explain(boom, images("tf", rng, 2), target=0, method="deeplift")
    same(before, state(boom))


# ---- chunking, seeds, model_kwargs -----------------------------------------------------------------
@pytest.mark.parametrize("overlap", [False, True])
def test_chunked_equals_unchunked(framework: str, rng: np.random.Generator, overlap: bool) -> None:
    model = cnn(framework, overlap)
    size = 12 if overlap else 14
    x = images(framework, rng, 5, size)
    refs = images(framework, np.random.default_rng(4), 4, size)
    # constant baselines only without overlapping pools (see the near-ties test)
    bases = ["blur", x[0] * 0.5] if overlap else ["zeros", "black", "mean"]
    runs = [("deeplift", {"baseline": b}) for b in bases] + [("deepliftshap", {"baselines": refs})]
    for method, options in runs:
        whole = xk.xai.explain(model, x, target=1, method=method, **options)
        for max_batch in (1, 2, 7):  # one pair per chunk (2 rows), 1 pair, 3 pairs (a short tail)
            chunked = xk.xai.explain(model, x, target=1, method=method, max_batch=max_batch, **options)
            np.testing.assert_allclose(chunked, whole, rtol=0, atol=1e-5 * np.abs(whole).max())


def test_deepliftshap_draws_are_seeded_and_without_repeats(rng: np.random.Generator) -> None:
    from xaikit.xai.rules.deeplift import DEFAULT_REFERENCES

    assert DEFAULT_REFERENCES == 100
    model, x = cnn("torch"), images("torch", rng, 3)
    refs = images("torch", np.random.default_rng(5), 6)
    one = xk.xai.explain(model, x, target=0, method="deepliftshap", baselines=refs, nsamples=3, seed=1)
    again = xk.xai.explain(
        model, x, target=0, method="deepliftshap", baselines=refs, nsamples=3, seed=1, max_batch=2
    )
    other = xk.xai.explain(model, x, target=0, method="deepliftshap", baselines=refs, nsamples=3, seed=2)
    np.testing.assert_allclose(one, again, atol=1e-6 * np.abs(one).max())
    assert np.abs(one - other).max() > 1e-3
    # each sample's attribution is the mean over 3 distinct references of DeepLIFT against each
    each = np.stack([xk.xai.explain(model, x, target=0, method="deeplift", baseline=r) for r in refs])
    for b in range(3):
        found = [
            set(c)
            for c in itertools.combinations(range(6), 3)
            if np.allclose(each[list(c), b].mean(axis=0), one[b], atol=1e-6 * np.abs(one).max())
        ]
        assert len(found) == 1
    # nsamples = N: every reference, whatever the seed
    every = xk.xai.explain(model, x, target=0, method="deepliftshap", baselines=refs, nsamples=6, seed=9)
    np.testing.assert_allclose(every, each.mean(axis=0), atol=1e-6 * np.abs(every).max())


def test_a_reference_set_in_either_layout(rng: np.random.Generator) -> None:
    """Images passed channel-last to a channel-first torch model are moved to it; the reference
    set may come in the caller's layout or already in the model's."""
    model = cnn("torch")
    x = images("tf", rng, 2)  # channel-last: moved to the model's layout
    refs = images("tf", np.random.default_rng(6), 3)
    last = xk.xai.explain(model, x, target=0, method="deepliftshap", baselines=refs)
    first = xk.xai.explain(model, x, target=0, method="deepliftshap", baselines=refs.transpose(0, 3, 1, 2))
    assert last.shape == x.shape
    np.testing.assert_array_equal(last, first)
    direct = xk.xai.explain(
        model, x.transpose(0, 3, 1, 2), target=0, method="deepliftshap", baselines=refs.transpose(0, 3, 1, 2)
    )
    np.testing.assert_allclose(last, direct.transpose(0, 2, 3, 1), atol=1e-7)


def test_per_sample_model_kwargs_follow_the_baseline_rows(rng: np.random.Generator) -> None:
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = TorchCNN()

        def forward(self, x: Any, scale: Any) -> Any:
            return self.net(x * scale[:, None, None, None])

    torch.manual_seed(0)
    model = Scaled().eval()
    x = images("torch", rng, 3)
    scale = torch.tensor([0.5, 1.0, 2.0])
    attr, delta = xk.xai.explain(
        model,
        x,
        target=1,
        method="deeplift",
        baseline="zeros",
        model_kwargs={"scale": scale},
        return_delta=True,
    )
    for b in range(3):  # each sample alone, its scale bound
        one = xk.xai.explain(model.net, x[b : b + 1] * float(scale[b]), target=1, method="deeplift")
        np.testing.assert_allclose(attr[b], one[0], atol=1e-5 * np.abs(one).max())
    assert np.abs(delta).max() < 1e-5


# ---- bad options ------------------------------------------------------------------------------------
def test_bad_options_are_refused_with_clear_messages(rng: np.random.Generator) -> None:
    model, x = cnn("torch"), images("torch", rng, 2)
    refs = images("torch", rng, 3)
    cases = [
        ({"method": "deeplift", "baseline": "uniform"}, XaikitValueError, r"baseline must be one of 'zeros', 'black', 'mean', 'blur' or an array; got 'uniform'"),
        ({"method": "deeplift", "baseline": None}, XaikitValueError, r"baseline must be one of 'zeros'.*got None"),
        ({"method": "deeplift", "baseline": np.zeros((2, 5))}, XaikitValueError, r"baseline for input 'x' must broadcast to the input's shape \(2, 3, 12, 12\)"),
        ({"method": "deeplift", "baselines": refs}, XaikitTypeError, r"unknown option\(s\) \['baselines'\]; its options are baseline"),
        ({"method": "deepliftshap", "baselines": "zeros"}, XaikitTypeError, r"baselines of deepliftshap must be an array of reference samples \(N, \.\.\.\)"),
        ({"method": "deepliftshap", "baselines": refs[:, :2]}, XaikitValueError, r"baselines of deepliftshap must be reference samples shaped \(N, 3, 12, 12\)"),
        ({"method": "deepliftshap", "baselines": np.full((2, 3, 12, 12), np.nan)}, XaikitValueError, r"baselines of deepliftshap holds NaN"),
        ({"method": "deepliftshap", "baselines": refs, "nsamples": 0}, XaikitValueError, r"nsamples must be an int >= 1; got int 0"),
        ({"method": "deepliftshap", "baselines": refs, "nsamples": 2.5}, XaikitTypeError, r"nsamples must be an int >= 1; got float 2.5"),
        ({"method": "deepliftshap", "baselines": refs, "nsamples": 4}, XaikitValueError, r"nsamples of deepliftshap must be at most the number of reference samples \(3\)"),
        ({"method": "deeplift", "max_batch": 0}, XaikitValueError, r"max_batch"),
    ]  # fmt: skip
    for options, kind, message in cases:
        with pytest.raises(kind, match=message):
            xk.xai.explain(model, x, target=0, **options)


def test_records() -> None:
    from xaikit.xai import registry

    dl, shap = registry.get_method("DeepLIFT"), registry.get_method("deep_lift_shap")
    assert (dl.name, dl.family, dl.delta, dl.noise) == ("deeplift", "rules", True, False)
    assert (shap.name, shap.family, shap.delta, shap.noise) == ("deepliftshap", "rules", True, True)
    assert dict(dl.options) == {"baseline": "zeros"}
    assert dict(shap.options) == {"baselines": None, "nsamples": None}
    assert registry.canonical("deepshap") == "deepliftshap"
