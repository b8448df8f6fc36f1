"""LRP on torch models (``xaikit/backend/torch/lrp.py``): each rule against its definition written
out in numpy (:mod:`tests.rules.lrp_reference`) on dense, convolution (strided, padded, grouped,
depthwise, transposed, 1-D, 3-D, reflect and asymmetric "same" padding), pooling and BatchNorm
layers; conservation; in-place operations; the model left as it was; refusals.

Models run in float64 so that the only error left is the float32 of the returned relevance:
tolerances are 1e-6 of the largest relevance (float32 resolution is 6e-8).
Peers (zennit, captum): ``test_lrp_torch_peers.py``.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.rules import lrp_reference as ref
from xaikit.backend import Rows
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.xai.rules import (
    AlphaBeta,
    Composite,
    Epsilon,
    Flat,
    Gamma,
    Gradient,
    Norm,
    WSquare,
    ZBox,
    Zero,
    ZPlus,
    composite,
)

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

#: (id, rule, the reference's options)
RULES = [
    ("epsilon", Epsilon(0.25), {"eps": 0.25}),
    ("epsilon0", Zero(), {"eps": 0.0}),
    ("zplus", ZPlus(), {}),
    ("alpha2beta1", AlphaBeta(2.0, 1.0), {"alpha": 2.0, "beta": 1.0}),
    ("alpha1beta0", AlphaBeta(1.0, 0.0), {"alpha": 1.0, "beta": 0.0}),
    ("gamma", Gamma(0.25), {"gamma": 0.25}),
    ("zbox", ZBox(-2.5, 3.0), {"low": -2.5, "high": 3.0}),
    ("flat", Flat(), {}),
    ("wsquare", WSquare(), {}),
]
KIND = {"epsilon0": "epsilon", "alpha2beta1": "alpha_beta", "alpha1beta0": "alpha_beta"}


def lrp(model: Any, x: Any, comp: Any, target: Any) -> np.ndarray:
    """The backend's relevance of the first input, as float64 numpy."""
    bk = xk.backend.get_backend(model)
    tg = torch.as_tensor(target, dtype=torch.long)
    rel, _ = bk.relevance.lrp_step(Rows(model, [x], tg), comp)
    assert rel[0].dtype == torch.float32 and rel[0].shape == x.shape
    return rel[0].double().numpy()


def readout_relevance(model: Any, upto: int, x: Any, target: Any) -> tuple[np.ndarray, np.ndarray]:
    """The output of ``model[:upto]`` and its relevance when the readout ``model[-1]`` (no bias,
    the gradient rule) explains ``target``: ``R = out * W_read[target]``."""
    with torch.no_grad():
        out = model[:upto](x)
    w = model[-1].weight.detach()[torch.as_tensor(target)].reshape(out.shape)
    return out.numpy(), (out * w).numpy()


def assert_close(got: np.ndarray, want: np.ndarray, rel: float = 1e-6) -> None:
    scale = float(np.abs(want).max())
    assert scale > 0
    err = float(np.abs(got - want).max())
    assert err <= rel * scale, f"max |diff| {err:.3g} > {rel:g} x max |reference| {scale:.3g}"


def opts_of(name: str, opts: dict[str, Any], shape: tuple[int, ...]) -> dict[str, Any]:
    """The reference's options, bounds as arrays of one sample's shape."""
    out = dict(opts)
    out.setdefault("eps", 1e-6)
    for key in ("low", "high"):
        if key in out:
            out[key] = np.full(shape, out[key])
    return out


def signed(rng: np.random.Generator, shape: tuple[int, ...], positive: bool) -> Any:
    x = rng.normal(size=shape)
    return torch.as_tensor(np.abs(x) if positive else x)


# ---- 1. each rule in its matrix form ------------------------------------------------------------
@pytest.mark.parametrize("positive", [False, True], ids=["signed", "nonneg"])
@pytest.mark.parametrize("name,rule,opts", RULES, ids=[r[0] for r in RULES])
def test_rule_on_dense(
    name: str, rule: Any, opts: dict[str, Any], positive: bool, rng: np.random.Generator
) -> None:
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(6, 5), nn.Linear(5, 3, bias=False)).double()
    x = signed(rng, (4, 6), positive)
    target = [0, 2, 1, 2]
    got = lrp(model, x, Composite(names={"0": rule, "1": Gradient()}), target)
    _, r = readout_relevance(model, 1, x, target)
    w, b = (p.detach().numpy() for p in model[0].parameters())
    o = opts_of(name, opts, (6,))
    want = np.stack([ref.rule(KIND.get(name, name), x[i].numpy(), w, b, r[i], **o) for i in range(4)])
    assert_close(got, want)


def conv_model(bn: bool) -> Any:
    torch.manual_seed(2)
    layers = [nn.Conv2d(3, 4, 3, stride=2, padding=1)]
    if bn:
        norm = nn.BatchNorm2d(4)
        with torch.no_grad():
            norm.running_mean.uniform_(-1, 1)
            norm.running_var.uniform_(0.3, 2)
            norm.weight.uniform_(-1.5, 1.5)  # negative scales flip W+ and W-
            norm.bias.uniform_(-1, 1)
        layers.append(norm)
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(4 * 4 * 4, 3, bias=False)).double().eval()


@pytest.mark.parametrize("positive", [False, True], ids=["signed", "nonneg"])
@pytest.mark.parametrize("bn", [False, True], ids=["conv", "conv+bn_merged"])
@pytest.mark.parametrize("name,rule,opts", RULES, ids=[r[0] for r in RULES])
def test_rule_on_conv(
    name: str, rule: Any, opts: dict[str, Any], bn: bool, positive: bool, rng: np.random.Generator
) -> None:
    """A 3x3 convolution with stride 2 and padding 1, unfolded into its receptive fields in
    numpy; with a BatchNorm merged: the rule with W' = W a, b' = b a + c. Inputs with negative
    values and without (zplus, alpha-beta and gamma take a shorter path then)."""
    model = conv_model(bn)
    x = signed(rng, (2, 3, 7, 7), positive)
    target = [1, 2]
    if name == "zbox":  # one bound per channel
        rule = ZBox((-1.0, -2.0, -1.5), (1.0, 2.5, 1.5))
        opts = {"low": np.array([-1.0, -2.0, -1.5])[:, None, None] * np.ones((3, 7, 7)),
                "high": np.array([1.0, 2.5, 1.5])[:, None, None] * np.ones((3, 7, 7))}  # fmt: skip
    readout = str(len(model) - 1)
    got = lrp(model, x, Composite(names={"0": rule, readout: Gradient()}), target)
    _, r = readout_relevance(model, len(model) - 2, x, target)
    w, b = (p.detach().numpy() for p in model[0].parameters())
    if bn:
        norm = model[1]
        a = (norm.weight / torch.sqrt(norm.running_var + norm.eps)).detach().numpy()
        c = (
            (norm.bias - norm.running_mean * norm.weight / torch.sqrt(norm.running_var + norm.eps))
            .detach()
            .numpy()
        )
        w, b = w * a[:, None, None, None], b * a + c
    o = dict(opts)
    o.setdefault("eps", 1e-6)
    want = np.stack(
        [ref.conv_rule(KIND.get(name, name), x[i].numpy(), w, b, r[i], 2, 1, **dict(o)) for i in range(2)]
    )
    assert_close(got, want)


def linear_map(module: Any, shape: tuple[int, ...]) -> np.ndarray:
    """The matrix (outputs x inputs) of a module without its bias, from the basis images."""
    n = int(np.prod(shape))
    with torch.no_grad():
        out = module(torch.eye(n, dtype=torch.float64).reshape(n, *shape))
    return out.reshape(n, -1).T.numpy()


CONVS = {
    "grouped": (lambda: nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2), (4, 6, 6)),
    "depthwise": (lambda: nn.Conv2d(4, 4, 3, padding=1, groups=4), (4, 5, 5)),
    "depthwise_x2": (lambda: nn.Conv2d(4, 8, 3, padding=1, groups=4), (4, 5, 5)),
    "dilated_1d": (lambda: nn.Conv1d(3, 4, 3, stride=2, padding=2, dilation=2), (3, 11)),
    "conv3d": (lambda: nn.Conv3d(2, 3, 3, padding=1), (2, 4, 4, 4)),
    "transposed": (lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1), (4, 4, 4)),
    "transposed_grouped": (lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, groups=2), (4, 3, 3)),
    "same_even_kernel": (lambda: nn.Conv2d(3, 4, 4, padding="same"), (3, 5, 5)),
}


@pytest.mark.filterwarnings(
    "ignore:Using padding='same' with even kernel:UserWarning"
)  # torch's, on the model
@pytest.mark.parametrize("bn", [False, True], ids=["alone", "bn_merged"])
@pytest.mark.parametrize("conv", list(CONVS))
@pytest.mark.parametrize("name,rule,opts", RULES, ids=[r[0] for r in RULES])
def test_rule_on_conv_forms(
    name: str, rule: Any, opts: dict[str, Any], conv: str, bn: bool, rng: np.random.Generator
) -> None:
    """Every convolution is a linear map whose matrix holds one weight (or 0) per entry: the
    rule on that matrix (built from basis images) is the rule on the convolution."""
    torch.manual_seed(3)
    make, shape = CONVS[conv]
    layer = make().double()
    with torch.no_grad():
        out_shape = layer(torch.zeros(1, *shape, dtype=torch.float64)).shape[1:]
    layers = [layer]
    if bn:
        norm = {3: nn.BatchNorm1d, 4: nn.BatchNorm2d, 5: nn.BatchNorm3d}[len(out_shape) + 1](out_shape[0])
        with torch.no_grad():
            norm.running_mean.uniform_(-1, 1)
            norm.running_var.uniform_(0.3, 2)
            norm.weight.uniform_(-1.5, 1.5)
            norm.bias.uniform_(-1, 1)
        layers.append(norm)
    n_out = int(np.prod(out_shape))
    model = nn.Sequential(*layers, nn.Flatten(), nn.Linear(n_out, 3, bias=False)).double().eval()
    x = signed(rng, (2, *shape), False)
    target = [0, 2]
    got = lrp(model, x, Composite(names={"0": rule, str(len(model) - 1): Gradient()}), target)
    _, r = readout_relevance(model, len(layers), x, target)
    nobias = copy.deepcopy(layer)
    nobias.bias = None
    m = linear_map(nobias, shape)
    ones_w = copy.deepcopy(nobias)
    with torch.no_grad():
        ones_w.weight.fill_(1.0)
    conn = linear_map(ones_w, shape)
    spatial = int(np.prod(out_shape[1:]))
    b = np.repeat(layer.bias.detach().numpy(), spatial)
    if bn:
        a = (norm.weight / torch.sqrt(norm.running_var + norm.eps)).detach().numpy()
        c = (
            (norm.bias - norm.running_mean * norm.weight / torch.sqrt(norm.running_var + norm.eps))
            .detach()
            .numpy()
        )
        m, b = m * np.repeat(a, spatial)[:, None], b * np.repeat(a, spatial) + np.repeat(c, spatial)
    o = opts_of(name, opts, (int(np.prod(shape)),))
    want = np.stack(
        [
            ref.rule(KIND.get(name, name), x[i].numpy().ravel(), m, b, r[i].ravel(), conn=conn, **o)
            for i in range(2)
        ]
    ).reshape(got.shape)
    assert_close(got, want)


@pytest.mark.parametrize("name,rule,opts", RULES, ids=[r[0] for r in RULES])
def test_rule_on_reflect_padding(
    name: str, rule: Any, opts: dict[str, Any], rng: np.random.Generator
) -> None:
    """``padding_mode="reflect"``: the rule on the padded input (a convolution without padding),
    each padded copy's relevance added back to the pixel it copies."""
    torch.manual_seed(4)
    layer = nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect").double()
    model = nn.Sequential(layer, nn.Flatten(), nn.Linear(4 * 5 * 5, 3, bias=False)).double()
    x = signed(rng, (2, 3, 5, 5), False)
    target = [2, 0]
    got = lrp(model, x, Composite(names={"0": rule, "2": Gradient()}), target)
    _, r = readout_relevance(model, 1, x, target)
    pad = linear_map(lambda t: F.pad(t, (1, 1, 1, 1), mode="reflect"), (3, 5, 5))  # 0/1 copies
    valid = nn.Conv2d(3, 4, 3, bias=False).double()
    with torch.no_grad():
        valid.weight.copy_(layer.weight)
    m = linear_map(valid, (3, 7, 7))
    ones_w = copy.deepcopy(valid)
    with torch.no_grad():
        ones_w.weight.fill_(1.0)
    conn = linear_map(ones_w, (3, 7, 7))
    b = np.repeat(layer.bias.detach().numpy(), 25)
    o = opts_of(name, opts, (3 * 7 * 7,))
    want = np.stack(
        [
            pad.T
            @ ref.rule(KIND.get(name, name), pad @ x[i].numpy().ravel(), m, b, r[i].ravel(), conn=conn, **o)
            for i in range(2)
        ]
    ).reshape(got.shape)
    assert_close(got, want)


@pytest.mark.parametrize("eps", [1e-6, 0.5])
@pytest.mark.parametrize("pool", ["avg2", "adaptive1", "max2"])
def test_norm_on_pooling(pool: str, eps: float, rng: np.random.Generator) -> None:
    """norm: ``R_x = x * T(R / stab(y))``, T the pooling's transpose (average: 1/4 of each 2x2
    window; max: the window's argmax)."""
    layer = {"avg2": nn.AvgPool2d(2), "adaptive1": nn.AdaptiveAvgPool2d(1), "max2": nn.MaxPool2d(2)}[pool]
    side = 1 if pool == "adaptive1" else 2
    torch.manual_seed(5)
    model = nn.Sequential(layer, nn.Flatten(), nn.Linear(3 * side * side, 2, bias=False)).double()
    x = signed(rng, (2, 3, 4, 4), False)
    target = [1, 0]
    kind = "maxpool" if pool == "max2" else "avgpool"
    got = lrp(model, x, Composite({kind: Norm(eps)}, names={"2": Gradient()}), target)
    y, r = readout_relevance(model, 1, x, target)
    s = r / ref.stab(y, eps)
    xn = x.numpy()
    k = 4 // side
    if pool == "max2":
        win = xn.reshape(2, 3, side, k, side, k)
        hit = win == win.max(axis=(3, 5), keepdims=True)
        want = (hit * xn.reshape(win.shape) * s[:, :, :, None, :, None]).reshape(xn.shape)
    else:
        want = xn * np.repeat(np.repeat(s, k, axis=2), k, axis=3) / (k * k)
    assert_close(got, want)


@pytest.mark.parametrize(
    "act",
    [nn.SiLU(), nn.Tanh(), nn.ELU(), nn.GELU(), nn.Hardswish(), nn.Sigmoid(), nn.ReLU6(inplace=True),
     nn.LeakyReLU(0.1, inplace=True), nn.ReLU(), nn.Softplus()],
    ids=lambda m: type(m).__name__ + ("_inplace" if getattr(m, "inplace", False) else ""),
)  # fmt: skip
def test_pass_on_activations(act: Any, rng: np.random.Generator) -> None:
    """pass: the activation's input gets its output's relevance unchanged (``g * y / x``)."""
    torch.manual_seed(6)
    model = nn.Sequential(act, nn.Flatten(), nn.Linear(12, 2, bias=False)).double()
    x = signed(rng, (3, 3, 2, 2), False) * 4
    target = [0, 1, 1]
    got = lrp(model, x, Composite(names={"2": Gradient()}), target)
    _, r = readout_relevance(model, 1, x, target)
    assert_close(got, r)


@pytest.mark.parametrize("canonize", [False, True])
def test_batchnorm_unmerged_passes(canonize: bool, rng: np.random.Generator) -> None:
    """A BatchNorm that is not merged (canonize=False, or nothing to merge into: it reads the
    input) passes relevance unchanged; canonize=False after a convolution: the convolution's rule
    on the BatchNorm's output relevance."""
    torch.manual_seed(7)
    norm = nn.BatchNorm2d(3)
    with torch.no_grad():
        norm.running_mean.uniform_(-1, 1)
        norm.running_var.uniform_(0.3, 2)
        norm.bias.uniform_(-1, 1)
    model = nn.Sequential(norm, nn.Flatten(), nn.Linear(3 * 4 * 4, 2, bias=False)).double().eval()
    x = signed(rng, (2, 3, 4, 4), False)
    got = lrp(model, x, Composite(names={"2": Gradient()}, canonize=canonize), [0, 1])
    _, r = readout_relevance(model, 1, x, [0, 1])
    assert_close(got, r)

    model = conv_model(bn=True)
    x = signed(rng, (2, 3, 7, 7), False)
    got = lrp(model, x, Composite(names={"0": ZPlus(), "3": Gradient()}, canonize=False), [1, 2])
    _, r = readout_relevance(model, 2, x, [1, 2])  # the BatchNorm's output relevance = its input's
    w, b = (p.detach().numpy() for p in model[0].parameters())
    want = np.stack([ref.conv_rule("zplus", x[i].numpy(), w, b, r[i], 2, 1, eps=1e-6) for i in range(2)])
    assert_close(got, want)


def test_batchnorm1d_merged_into_dense(rng: np.random.Generator) -> None:
    torch.manual_seed(8)
    norm = nn.BatchNorm1d(5)
    with torch.no_grad():
        norm.running_mean.uniform_(-1, 1)
        norm.running_var.uniform_(0.3, 2)
        norm.weight.uniform_(-1.5, 1.5)
    model = nn.Sequential(nn.Linear(6, 5), norm, nn.Linear(5, 3, bias=False)).double().eval()
    x = signed(rng, (4, 6), False)
    got = lrp(model, x, Composite(names={"0": Gamma(0.5), "2": Gradient()}), [0, 1, 2, 0])
    _, r = readout_relevance(model, 2, x, [0, 1, 2, 0])
    a = (norm.weight / torch.sqrt(norm.running_var + norm.eps)).detach().numpy()
    c = (norm.bias - norm.running_mean * torch.as_tensor(a)).detach().numpy()
    w, b = (p.detach().numpy() for p in model[0].parameters())
    want = np.stack(
        [ref.rule("gamma", x[i].numpy(), w * a[:, None], b * a + c, r[i], gamma=0.5) for i in range(4)]
    )
    assert_close(got, want)


# ---- 2. conservation ----------------------------------------------------------------------------
class Residual(nn.Module):
    """conv -> ReLU -> maxpool, a residual block summed functionally, average pooling, dense."""

    def __init__(self, bias: bool) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 3, padding=1, bias=bias)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(6, 6, 3, padding=1, bias=bias)
        self.avg = nn.AdaptiveAvgPool2d(2)
        self.fc = nn.Linear(24, 4, bias=bias)

    def forward(self, x: Any) -> Any:
        a = self.pool(self.relu(self.conv1(x)))
        a = self.relu(self.conv2(a) + a)
        return self.fc(torch.flatten(self.avg(a), 1))


@pytest.mark.parametrize("comp", ["lrp0", "epsilon_tiny", "epsilon_plus", "epsilon_alpha2_beta1"])
def test_conservation_without_bias(comp: str, rng: np.random.Generator) -> None:
    """A bias-free ReLU network: the input's relevance sums to the target score (residual sums
    and max pooling need no rule); stabilizers of 1e-12 (the default 1e-6 keeps ``eps / |z|``
    of each layer's relevance: 3e-5 of a score of 0.04)."""
    torch.manual_seed(9)
    model = Residual(bias=False).double().eval()
    x = signed(rng, (3, 3, 8, 8), False)
    target = [0, 3, 1]
    rules = {
        "lrp0": Composite({"conv": Zero(), "dense": Zero(), "avgpool": Norm(0.0)}),
        "epsilon_tiny": Composite({"conv": Epsilon(1e-9), "dense": Epsilon(1e-9), "avgpool": Norm(1e-9)}),
        "epsilon_plus": Composite({"conv": ZPlus(1e-12), "dense": Epsilon(1e-12), "avgpool": Norm(1e-12)}),
        "epsilon_alpha2_beta1": Composite(
            {"conv": AlphaBeta(2.0, 1.0, 1e-12), "dense": Epsilon(1e-12), "avgpool": Norm(1e-12)}
        ),
    }[comp]
    got = lrp(model, x, rules, target)
    with torch.no_grad():
        score = model(x)[range(3), target].numpy()
    np.testing.assert_allclose(got.reshape(3, -1).sum(1), score, rtol=1e-5)
    if comp == "lrp0":  # LRP-0 of a ReLU network is gradient x input
        xg = x.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(model(xg)[range(3), target].sum(), xg)
        assert_close(got, (x * g).numpy())


def test_epsilon_with_bias_loses_the_documented_share(rng: np.random.Generator) -> None:
    """With biases, each epsilon layer keeps ``sum R_in = sum R_out * (z - b) / stab(z)``: the
    bias's share and the stabilizer's are not passed down."""
    torch.manual_seed(10)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3)).double()
    x = signed(rng, (4, 6), False)
    target = [0, 1, 2, 1]
    eps = 0.1
    got = lrp(model, x, Composite({"dense": Epsilon(eps)}), target).sum(1)
    w1, b1, w2, b2 = (p.detach().numpy() for p in model.parameters())
    for i in range(4):
        h = w1 @ x[i].numpy() + b1
        a = np.maximum(h, 0)
        z = w2 @ a + b2
        r = np.zeros(3)
        r[target[i]] = z[target[i]]
        r_a = a * (w2.T @ (r / ref.stab(z, eps)))
        kept_top = float((r * (z - b2) / ref.stab(z, eps)).sum())
        assert abs(r_a.sum() - kept_top) <= 1e-12 * abs(kept_top)
        want = float((r_a * (h - b1) / ref.stab(h, eps)).sum())  # r_a = R_h: the ReLU passes it
        assert abs(got[i] - want) <= 1e-6 * abs(want)
        assert abs(want - z[target[i]]) > 1e-3  # the loss is real


# ---- in-place operations --------------------------------------------------------------------------
class InPlace(nn.Module):
    """A block whose tensors are changed in place after the hooked layers wrote them."""

    def __init__(self, inplace: bool) -> None:
        super().__init__()
        self.inplace = inplace
        self.conv1 = nn.Conv2d(3, 6, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(6)
        self.relu = nn.ReLU(inplace=inplace)
        self.conv2 = nn.Conv2d(6, 6, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(6)
        self.leaky = nn.LeakyReLU(0.2, inplace=inplace)
        self.conv3 = nn.Conv2d(6, 4, 3, padding=1)
        self.relu6 = nn.ReLU6(inplace=inplace)
        self.fc = nn.Linear(4 * 6 * 6, 3)

    def forward(self, x: Any) -> Any:
        a = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(a))
        if self.inplace:
            y += a  # in place on a merged layer's output
        else:
            y = y + a
        y = self.leaky(y)
        z = self.conv3(y)
        z = F.relu(z, inplace=self.inplace)  # functional, in place on a hooked output
        z = self.relu6(z)
        return self.fc(torch.flatten(z, 1))


@pytest.mark.parametrize(
    "comp", ["epsilon_plus_flat", "epsilon_gamma_box", "epsilon_alpha2_beta1", "epsilon"]
)
def test_inplace_operations_change_nothing(comp: str, rng: np.random.Generator) -> None:
    torch.manual_seed(11)
    out_of_place = InPlace(inplace=False).double().eval()
    for m in out_of_place.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2)
    inplace = copy.deepcopy(out_of_place)
    for m in inplace.modules():
        if hasattr(m, "inplace"):
            m.inplace = True
    x = signed(rng, (2, 3, 6, 6), False)
    c = composite(comp, low=-3.0, high=3.0)
    want = lrp(out_of_place, x, c, [0, 2])
    got = lrp(inplace, x, c, [0, 2])
    assert_close(got, want, 1e-7)


# ---- 5. the model unchanged, refusals, name maps, chunks, explain ---------------------------------
def hooks_of(model: Any) -> list[int]:
    return [
        len(getattr(m, key))
        for m in model.modules()
        for key in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
    ]


def snapshot(model: Any) -> tuple[dict[str, Any], list[bool], list[int]]:
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return state, [m.training for m in model.modules()], hooks_of(model)


def assert_unchanged(model: Any, before: tuple[dict[str, Any], list[bool], list[int]]) -> None:
    state, flags, hooks = before
    after = model.state_dict()
    assert list(after) == list(state)
    for k, v in state.items():
        assert torch.equal(after[k], v), k
        assert after[k].dtype == v.dtype
    assert [m.training for m in model.modules()] == flags
    assert hooks_of(model) == hooks and not any(hooks)
    assert all(p.grad is None for p in model.parameters())


def test_model_unchanged_after_every_call(rng: np.random.Generator) -> None:
    torch.manual_seed(12)
    model = InPlace(inplace=True)
    model.train()  # BatchNorm in training mode would update its statistics
    model.bn2.eval()  # a mixed state must come back mixed
    before = snapshot(model)
    x = rng.normal(size=(3, 3, 6, 6)).astype(np.float32)
    for name in ("epsilon_plus_flat", "epsilon_gamma_box", "epsilon_alpha2_beta1", "epsilon_plus", "epsilon"):
        xk.xai.explain(model, x, method="lrp", composite=name)
        assert_unchanged(model, before)
    xk.xai.explain(model, x, method="lrp_epsilon", canonize=False)
    assert_unchanged(model, before)
    bad = Composite({"conv": ZPlus()}, names={"conv3": Flat()})
    with pytest.raises(XaikitValueError, match=r"layer 'conv3' has the 'flat' rule.*not a model input"):
        xk.xai.explain(model, x, method="lrp", composite=bad)
    assert_unchanged(model, before)


class Failing(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.act = nn.SiLU(inplace=True)

    def forward(self, x: Any) -> Any:
        self.act(self.bn(self.conv(x)))
        raise RuntimeError("the model failed after its layers ran")


def test_model_unchanged_when_the_model_raises() -> None:
    model = Failing().train()
    before = snapshot(model)
    bk = xk.backend.get_backend(model)
    with pytest.raises(RuntimeError, match="failed after its layers ran"):
        bk.relevance.lrp_step(
            Rows(model, [torch.zeros(2, 3, 5, 5)], torch.zeros(2, dtype=torch.long)), composite()
        )
    assert_unchanged(model, before)


@pytest.mark.parametrize("rule", [Flat(), WSquare(), ZBox(-1.0, 1.0)], ids=["flat", "wsquare", "zbox"])
def test_input_rules_only_on_the_input_layer(rule: Any) -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 3), nn.Flatten(), nn.Linear(16, 2))
    bk = xk.backend.get_backend(model)
    with pytest.raises(
        XaikitValueError, match=rf"layer '2' has the '{rule.kind}' rule.*is not a model input"
    ):
        bk.relevance.lrp_step(
            Rows(model, [torch.randn(2, 3, 6, 6)], torch.zeros(2, dtype=torch.long)),
            Composite(names={"2": rule}),
        )
    # the same rule on the layer that reads the input is fine
    rel, _ = bk.relevance.lrp_step(
        Rows(model, [torch.randn(2, 3, 6, 6)], torch.zeros(2, dtype=torch.long)), Composite(names={"0": rule})
    )
    assert torch.isfinite(rel[0]).all()


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel:UserWarning")
@pytest.mark.parametrize("composite_name", ["epsilon_plus_flat", "epsilon_gamma_box", "wsquare"])
def test_input_rule_through_zero_padding_equals_same_padding(composite_name: str) -> None:
    """An input rule (flat, w-square, z^B) on a convolution that reads its input through
    nn.ZeroPad2d layers (two here, with a merged BatchNorm after the convolution) counts the
    padding as no input: the relevance equals, bit for bit, that of the same weights with
    padding="same" (a 4 x 4 kernel: 1 before, 2 after). A padding with another value than 0 is
    no zero padding and is refused as before."""
    torch.manual_seed(5)

    def build(explicit: bool) -> Any:
        pre = [nn.ZeroPad2d((0, 1, 0, 1)), nn.ZeroPad2d(1)] if explicit else []
        bn = nn.BatchNorm2d(4)
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        conv = nn.Conv2d(3, 4, 4, padding=0 if explicit else "same")
        head = [nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        return nn.Sequential(nn.Sequential(*pre), conv, bn, *head, nn.Linear(4, 3)).eval()

    padded, same = build(True), build(False)
    same.load_state_dict(padded.state_dict())
    x = torch.rand(2, 3, 8, 8) * 2 - 1
    kw: dict[str, Any] = {"target": [0, 2], "method": "lrp"}
    comp: Any = composite_name
    if composite_name == "epsilon_gamma_box":
        kw.update(low=-1.0, high=1.0)
    if composite_name == "wsquare":
        comp = Composite({"conv": ZPlus(), "dense": Epsilon()}, names={"1": WSquare()})
    want = xk.xai.explain(same, x, composite=comp, **kw)
    got = xk.xai.explain(padded, x, composite=comp, **kw)
    assert float(np.abs(want).max()) > 0
    np.testing.assert_array_equal(got, want)
    ones = nn.Sequential(nn.ConstantPad2d(1, 1.0), *list(padded)[1:]).eval()
    with pytest.raises(
        XaikitValueError, match=r"first layer the 'flat' rule.*'1', reads the output of another"
    ):
        xk.xai.explain(ones, x, target=[0, 2], method="lrp")


def test_name_map_rule_applies_to_that_layer_only(rng: np.random.Generator) -> None:
    torch.manual_seed(13)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3)).double()
    x = signed(rng, (4, 6), False)
    target = [0, 1, 2, 1]
    got = lrp(model, x, Composite({"dense": Zero()}, names={"2": Epsilon(0.5)}), target)
    w1, b1, w2, b2 = (p.detach().numpy() for p in model.parameters())
    want = []
    for i in range(4):
        h = w1 @ x[i].numpy() + b1
        a = np.maximum(h, 0)
        z = w2 @ a + b2
        r = np.zeros(3)
        r[target[i]] = z[target[i]]
        r_a = ref.rule("epsilon", a, w2, b2, r, eps=0.5)
        want.append(ref.rule("epsilon", x[i].numpy(), w1, b1, r_a, eps=0.0))
    assert_close(got, np.stack(want))


def quiet(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` with torch's deprecation notices of TorchScript silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return fn(*args)


def test_refusals() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(16, 2))
    x = np.zeros((2, 3, 4, 4), np.float32)
    with pytest.raises(XaikitValueError, match="TorchScript"):
        xk.xai.explain(quiet(torch.jit.script, model), x, method="lrp")
    with pytest.raises(XaikitTypeError, match=r"torch\.export"):
        exported = torch.export.export(model, (torch.zeros(2, 3, 4, 4),)).module()
        xk.xai.explain(exported, x, method="lrp")
    with pytest.raises(XaikitValueError, match=r"composite names \['nope'\] are not modules"):
        xk.xai.explain(model, x, method="lrp", composite=Composite(names={"nope": ZPlus()}))
    with pytest.raises(
        XaikitValueError, match=r"layer '1' \(ReLU, kind 'activation'\) cannot take the 'zplus' rule"
    ):
        xk.xai.explain(model, x, method="lrp", composite=Composite(names={"1": ZPlus()}))
    with pytest.raises(XaikitValueError, match=r"names\['2'\]: layer '2' is a Flatten"):
        xk.xai.explain(model, x, method="lrp", composite=Composite(names={"2": ZPlus()}))
    with pytest.raises(XaikitValueError, match=r"zbox rule of layer '0': low has 2 values .* 3 channels"):
        xk.xai.explain(model, x, method="lrp", composite=Composite(names={"0": ZBox((0.0, 1.0), 1.0)}))

    class Functional(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(2, 48))

        def forward(self, t: Any) -> Any:
            return F.linear(torch.flatten(t, 1), self.w)

    with pytest.raises(XaikitValueError, match=r"forward pass .* called none"):
        xk.xai.explain(Functional(), x, method="lrp")


def test_torch_compile_is_explained_through_its_eager_module(rng: np.random.Generator) -> None:
    torch.manual_seed(14)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(16, 2)).double()
    compiled = quiet(torch.compile, model)  # never called: its eager _orig_mod runs
    x = signed(rng, (2, 3, 4, 4), False)
    want = lrp(model, x, Composite(names={"0": Gamma(0.5)}), [0, 1])
    for key in ("_orig_mod.0", "0"):
        assert_close(lrp(compiled, x, Composite(names={key: Gamma(0.5)}), [0, 1]), want, 1e-7)
    assert not any(hooks_of(model))


def test_chunks_layouts_and_explain(rng: np.random.Generator) -> None:
    torch.manual_seed(15)
    model = nn.Sequential(
        nn.Conv2d(3, 6, 3, padding=1),
        nn.BatchNorm2d(6),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(6 * 4 * 4, 4),
    ).eval()
    x = rng.normal(size=(5, 3, 8, 8)).astype(np.float32)
    for method, opts in (
        ("lrp", {"composite": "epsilon_gamma_box"}),
        ("lrp", {}),
        ("lrp_epsilon", {"epsilon": 0.01}),
    ):
        whole = xk.xai.explain(model, x, method=method, **opts)
        chunks = xk.xai.explain(model, x, method=method, max_batch=2, **opts)
        assert whole.shape == x.shape and whole.dtype == np.float32
        np.testing.assert_allclose(chunks, whole, rtol=1e-6, atol=1e-7 * float(np.abs(whole).max()))
        last = xk.xai.explain(
            model, x.transpose(0, 2, 3, 1), method=method, **opts
        )  # channels last in, last out
        assert last.shape == (5, 8, 8, 3)
        np.testing.assert_allclose(
            last, whole.transpose(0, 2, 3, 1), rtol=1e-6, atol=1e-7 * float(np.abs(whole).max())
        )
    # lrp_epsilon with epsilon 0 is gradient x input (a ReLU network, BatchNorm merged or not)
    for canonize in (True, False):
        lrp0 = xk.xai.explain(model, x, method="lrp_epsilon", epsilon=0.0, canonize=canonize)
        ixg = xk.xai.explain(model, x, method="input_x_gradient")
        np.testing.assert_allclose(lrp0, ixg, rtol=1e-4, atol=1e-6 * float(np.abs(ixg).max()))


def test_two_inputs_share_the_score(rng: np.random.Generator) -> None:
    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Conv2d(3, 4, 3, bias=False)
            self.b = nn.Linear(5, 16, bias=False)
            self.fc = nn.Linear(16, 3, bias=False)

        def forward(self, img: Any, vec: Any) -> Any:
            return self.fc(F.relu(torch.flatten(self.a(img), 1) + self.b(vec)))

    torch.manual_seed(16)
    model = Two().double()
    xs = [signed(rng, (3, 3, 4, 4), False), signed(rng, (3, 5), False)]
    bk = xk.backend.get_backend(model)
    tg = torch.tensor([0, 1, 2])
    rel, score = bk.relevance.lrp_step(Rows(model, xs, tg), Composite({"conv": Zero(), "dense": Zero()}))
    assert [tuple(r.shape) for r in rel] == [(3, 3, 4, 4), (3, 5)]
    total = rel[0].double().sum((1, 2, 3)) + rel[1].double().sum(1)
    np.testing.assert_allclose(total.numpy(), score.double().numpy(), rtol=1e-5)


class ReluBeforeNorm(nn.Module):
    """conv -> ReLU -> BatchNorm: the BatchNorm normalizes the ReLU's output, not the
    convolution's, even when the ReLU runs in place on the convolution's output tensor."""

    def __init__(self, inplace: bool) -> None:
        super().__init__()
        self.inplace = inplace
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(16, 2)

    def forward(self, x: Any) -> Any:
        return self.fc(torch.flatten(self.bn(F.relu(self.conv(x), inplace=self.inplace)), 1))


def test_no_merge_across_an_inplace_change(rng: np.random.Generator) -> None:
    torch.manual_seed(17)
    out_of_place = ReluBeforeNorm(inplace=False).double().eval()
    with torch.no_grad():
        out_of_place.bn.running_mean.uniform_(-1, 1)
    inplace = copy.deepcopy(out_of_place)
    inplace.inplace = True
    x = signed(rng, (2, 3, 4, 4), False)
    c = composite("epsilon_plus")
    assert_close(lrp(inplace, x, c, [0, 1]), lrp(out_of_place, x, c, [0, 1]), 1e-7)


def test_fx_graph_module_and_bfloat16(rng: np.random.Generator) -> None:
    """A torch.fx.symbolic_trace module calls its leaf modules: the same relevance. A bfloat16
    model: rules in float32 on its bfloat16 activations, float32 relevance close to the float32
    model's (bfloat16 keeps 8 bits of each activation)."""
    torch.manual_seed(18)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(128, 5),
    ).eval()
    x = rng.random((3, 3, 8, 8)).astype(np.float32)
    opts = {"composite": "epsilon_gamma_box", "low": 0.0, "high": 1.0, "target": [0, 1, 2]}
    want = xk.xai.explain(model, x, method="lrp", **opts)
    np.testing.assert_array_equal(
        xk.xai.explain(torch.fx.symbolic_trace(model), x, method="lrp", **opts), want
    )
    half = xk.xai.explain(copy.deepcopy(model).to(torch.bfloat16), x, method="lrp", **opts)
    assert half.dtype == np.float32
    assert np.linalg.norm(half - want) <= 0.2 * np.linalg.norm(want)


class _StdConv2d(nn.Conv2d):
    """A weight-standardized convolution (the pattern of BiT / timm's StdConv2d)."""

    def forward(self, x: Any) -> Any:
        w = self.weight - self.weight.mean((1, 2, 3), keepdim=True)
        w = w / (w.std((1, 2, 3), keepdim=True) + 1e-6)
        return torch.nn.functional.conv2d(x, w, self.bias, self.stride, self.padding)


class _LoRALinear(nn.Linear):
    """A dense layer with a low-rank adapter added to its weight in forward."""

    def __init__(self, i: int, o: int) -> None:
        super().__init__(i, o, bias=False)
        self.a = nn.Parameter(torch.randn(2, i, dtype=torch.float64))
        self.b = nn.Parameter(torch.randn(o, 2, dtype=torch.float64))

    def forward(self, x: Any) -> Any:
        return torch.nn.functional.linear(x, self.weight + self.b @ self.a)


class _LoggingConv2d(nn.Conv2d):
    """Its own forward, computing exactly the convolution of its weights."""

    def forward(self, x: Any) -> Any:
        return super().forward(x) * 1.0


def test_a_layer_computing_with_other_weights_is_refused_not_explained_with_its_weight(
    rng: np.random.Generator,
) -> None:
    # LRP-0 used module.weight: on a weight-standardized conv or a LoRA layer it was 90-99 % of
    # the largest value off gradient x input, with no word
    torch.manual_seed(0)
    x = rng.normal(size=(2, 3, 6, 6))
    for conv, dense, bad in [
        (_StdConv2d(3, 4, 3, padding=1, bias=False), nn.Linear(144, 3, bias=False), "0"),
        (nn.Conv2d(3, 4, 3, padding=1, bias=False), _LoRALinear(144, 3), "3"),
    ]:
        model = nn.Sequential(conv, nn.ReLU(), nn.Flatten(), dense).double().eval()
        for method, opts in [("lrp_epsilon", {"epsilon": 0.0}), ("lrp", {})]:
            with pytest.raises(
                XaikitValueError, match=rf"layer '{bad}' is a _\w+, a subclass of .* own forward"
            ):
                xk.xai.explain(model, x, target=1, method=method, **opts)
        # the way out the message gives: that layer's plain gradient
        comp = composite("epsilon", epsilon=0.0).with_names({bad: Gradient()})
        rel = xk.xai.explain(model, x, target=1, method="lrp", composite=comp)
        xt = torch.tensor(x, requires_grad=True)
        model(xt)[:, 1].sum().backward()
        gxi = (xt.grad * xt).detach().numpy()
        np.testing.assert_allclose(rel, gxi, atol=1e-6 * np.abs(gxi).max())
    # a subclass whose forward computes the layer's own operator is explained as the layer
    plain = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(144, 3)).double()
    own = copy.deepcopy(plain)
    own[0].__class__ = _LoggingConv2d
    np.testing.assert_array_equal(
        xk.xai.explain(own.eval(), x, target=1, method="lrp"),
        xk.xai.explain(plain.eval(), x, target=1, method="lrp"),
    )


def _hooked_net() -> Any:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1, bias=False),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(144, 3, bias=False),
    ).double()
    with torch.no_grad():
        model[1].running_mean.uniform_(-1, 1)
        model[1].running_var.uniform_(0.5, 2)
    return model.eval()


def _grad_x_input(model: Any, x: np.ndarray, target: int) -> np.ndarray:
    xt = torch.tensor(x, requires_grad=True)
    model(xt)[:, target].sum().backward()
    return (xt.grad * xt).detach().numpy()


def test_a_forward_hook_that_changes_a_layer_output_is_refused_not_ignored(rng: np.random.Generator) -> None:
    # the rules computed with the layer's weights and took no notice of the hook: a hook scaling
    # the last layer's output by 1/4 (temperature) gave the unhooked model's map, 3x zennit's
    x = rng.normal(size=(2, 3, 6, 6))
    for index, name in [(0, "Conv2d"), (4, "Linear")]:
        model = _hooked_net()
        model[index].register_forward_hook(lambda _m, _a, out: out / 4.0)
        for method, opts in [("lrp_epsilon", {"epsilon": 0.0}), ("lrp", {})]:
            with pytest.raises(
                XaikitValueError,
                match=rf"layer '{index}' is a {name}, whose forward hooks can change its output",
            ):
                xk.xai.explain(model, x, target=1, method=method, **opts)
        # the way out the message gives: that layer's plain gradient (LRP-0 elsewhere: grad x input)
        comp = composite("epsilon", epsilon=0.0).with_names({str(index): Gradient()})
        rel = xk.xai.explain(model, x, target=1, method="lrp", composite=comp)
        gxi = _grad_x_input(model, x, 1)
        np.testing.assert_allclose(rel, gxi, atol=1e-6 * np.abs(gxi).max())


def test_a_global_forward_hook_that_changes_outputs_is_refused() -> None:
    x = np.random.default_rng(1).normal(size=(1, 3, 6, 6))
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda m, _a, out: out * 2.0 if isinstance(m, nn.Linear) else None
    )
    try:
        with pytest.raises(XaikitValueError, match="layer '4' is a Linear, whose forward hooks"):
            xk.xai.explain(_hooked_net(), x, target=0, method="lrp_epsilon", epsilon=0.0)
    finally:
        handle.remove()


def test_hooks_that_only_read_leave_the_lrp_maps_bit_identical(rng: np.random.Generator) -> None:
    # an inspection hook (xk.inspect's tracker, a user's logger) must not change a map or be refused
    x = rng.normal(size=(2, 3, 6, 6))
    seen: list[tuple[int, ...]] = []
    plain = {m: xk.xai.explain(_hooked_net(), x, target=2, method=m) for m in ("lrp", "lrp_epsilon")}
    model = _hooked_net()
    for i in (0, 1, 4):  # the conv, the BatchNorm merged into it, the dense layer
        model[i].register_forward_hook(lambda _m, _a, out: seen.append(tuple(out.shape)))
    model[1].register_forward_hook(lambda _m, _a, out: out * 1.0)  # returns an equal tensor
    for method, want in plain.items():
        np.testing.assert_array_equal(xk.xai.explain(model, x, target=2, method=method), want)
    assert seen and (2, 4, 6, 6) in seen


def test_a_batchnorm_hook_that_changes_its_output_is_refused_unless_not_merged(
    rng: np.random.Generator,
) -> None:
    # the BatchNorm was merged into the convolution from its running statistics: a hook tripling
    # its output left the map as if there were none (0.67 of grad x input off, LRP-0)
    x = rng.normal(size=(2, 3, 6, 6))
    model = _hooked_net()
    model[1].register_forward_hook(lambda _m, _a, out: out * 3.0)
    with pytest.raises(
        XaikitValueError, match=r"layer '1' is a BatchNorm2d, .* merges it into '0'.*canonize=False"
    ):
        xk.xai.explain(model, x, target=0, method="lrp_epsilon", epsilon=0.0)
    # not merged, the BatchNorm's own rule reads the output the hook returns
    hooked = xk.xai.explain(model, x, target=0, method="lrp_epsilon", epsilon=0.0, canonize=False)
    unhooked = xk.xai.explain(_hooked_net(), x, target=0, method="lrp_epsilon", epsilon=0.0, canonize=False)
    assert np.isfinite(hooked).all() and not np.allclose(hooked, unhooked)


def test_preset_options_with_a_composite_object_are_refused_not_ignored() -> None:
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 3)).eval()
    x = np.ones((1, 1, 4, 4), np.float32)
    for key, value in [("epsilon", 0.0), ("gamma", 0.1), ("low", 0.0)]:
        with pytest.raises(XaikitValueError, match=rf"Composite\(...\) and \['{key}'\].*ignored"):
            xk.xai.explain(model, x, target=0, method="lrp", composite=composite("epsilon"), **{key: value})


def test_alpha_beta_in_float32_after_relu_does_not_cancel() -> None:
    # the negative part's denominator was z - W+ x: on a depthwise block where W- x is small
    # the float32 difference cancelled, 4.6e-3 of the largest relevance off float64 (zennit's
    # float32: 2e-6)
    torch.manual_seed(0)
    x = torch.rand(4, 3, 16, 16)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6(),
        nn.Conv2d(16, 16, 3, 1, 1, groups=16, bias=False), nn.BatchNorm2d(16), nn.ReLU6(),
        nn.Conv2d(16, 24, 1, bias=False), nn.BatchNorm2d(24), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(24, 5),
    )  # fmt: skip
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for bn in model.modules():
            if isinstance(bn, nn.BatchNorm2d):
                bn.running_mean.copy_(torch.randn(bn.num_features, generator=g) * 0.1)
                bn.running_var.copy_(torch.rand(bn.num_features, generator=g) + 0.5)
                bn.weight.copy_(torch.rand(bn.num_features, generator=g) + 0.5)
                bn.bias.copy_(torch.randn(bn.num_features, generator=g) * 0.1)
    model.eval()
    f32 = xk.xai.explain(model, x, method="lrp", composite="epsilon_alpha2_beta1", target=0)
    f64 = xk.xai.explain(
        copy.deepcopy(model).double(), x.double(), method="lrp", composite="epsilon_alpha2_beta1", target=0
    )
    assert np.abs(f32 - f64).max() < 1e-4 * np.abs(f64).max()


@pytest.mark.filterwarnings("ignore::xaikit.errors.DegenerateMapWarning")  # flat on a dense layer: constant
@pytest.mark.parametrize("first", [Flat(), WSquare(), ZBox(0.0, 1.0)], ids=["flat", "wsquare", "zbox"])
def test_input_rule_through_a_flatten_equals_the_flat_input(first: Any, rng: np.random.Generator) -> None:
    # an MLP on images (Flatten -> Linear) was refused by the default composite: the first layer
    # read a reshape of the input, not the input
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(32, 3)).eval()
    assert xk.xai.explain(mlp, rng.uniform(size=(1, 2, 4, 4)), method="lrp", target=0).shape == (1, 2, 4, 4)
    comp = Composite({"dense": Epsilon(0.01)}, first={"dense": first})
    torch.manual_seed(0)
    x = rng.uniform(size=(3, 2, 4, 4))
    head = [nn.Linear(32, 8), nn.ReLU(), nn.Linear(8, 3)]
    image = nn.Sequential(nn.Flatten(), *head).double().eval()
    flat = nn.Sequential(*head).double().eval()
    ours = xk.xai.explain(image, x, target=1, method="lrp", composite=comp)
    want = xk.xai.explain(flat, x.reshape(3, -1), target=1, method="lrp", composite=comp)
    np.testing.assert_array_equal(ours, want.reshape(x.shape))
    # a zero padding, then a flatten: the padding counts as no input (its weights dropped)
    padded = nn.Sequential(
        nn.ZeroPad2d(1), nn.Flatten(), nn.Linear(72, 8), nn.ReLU(), nn.Linear(8, 3)
    ).double()
    inside = torch.zeros(1, 2, 6, 6, dtype=torch.bool)
    inside[:, :, 1:5, 1:5] = True
    cut = nn.Sequential(nn.Linear(32, 8), nn.ReLU(), nn.Linear(8, 3)).double()
    with torch.no_grad():
        cut[0].weight.copy_(padded[2].weight[:, inside.flatten()])
        cut[0].bias.copy_(padded[2].bias)
        cut[2].load_state_dict(padded[4].state_dict())
    ours = xk.xai.explain(padded.eval(), x, target=1, method="lrp", composite=comp)
    want = xk.xai.explain(cut.eval(), x.reshape(3, -1), target=1, method="lrp", composite=comp)
    np.testing.assert_allclose(ours, want.reshape(x.shape), rtol=1e-6, atol=1e-7 * np.abs(want).max())


def test_the_first_rule_goes_to_the_layer_that_reads_the_input_whatever_the_definition_order(
    rng: np.random.Generator,
) -> None:
    # the first rule went to the first conv/dense in named_modules() order: a head defined before
    # the stem got 'flat' and the call was refused
    class HeadFirst(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = nn.Linear(4, 3)
            self.stem = nn.Conv2d(2, 4, 3, padding=1)

        def forward(self, x: Any) -> Any:
            return self.head(torch.relu(self.stem(x)).mean((2, 3)))

    class StemFirst(HeadFirst):
        def __init__(self) -> None:
            nn.Module.__init__(self)
            self.stem = nn.Conv2d(2, 4, 3, padding=1)
            self.head = nn.Linear(4, 3)

    torch.manual_seed(0)
    head_first = HeadFirst().double().eval()
    stem_first = StemFirst().double().eval()
    stem_first.load_state_dict(head_first.state_dict())
    x = rng.uniform(size=(2, 2, 6, 6))
    np.testing.assert_array_equal(
        xk.xai.explain(head_first, x, target=1, method="lrp"),
        xk.xai.explain(stem_first, x, target=1, method="lrp"),
    )

    # no layer reads the input (a normalization inside forward): an input rule is refused, naming
    # the layer listed first
    class Normalized(StemFirst):
        def forward(self, x: Any) -> Any:
            return super().forward((x - 0.5) / 0.25)

    norm = Normalized().double().eval()
    with pytest.raises(XaikitValueError, match=r"first layer the 'flat' rule.*'stem'"):
        xk.xai.explain(norm, x, target=1, method="lrp")
    assert xk.xai.explain(norm, x, target=1, method="lrp", composite="epsilon_plus").shape == x.shape


def test_first_rule_edge_cases_found_in_review(rng: np.random.Generator) -> None:
    class Net(nn.Module):  # the head defined before the stem; the input normalized or not
        def __init__(self, normalize: bool, stem: Any = None) -> None:
            super().__init__()
            self.head = nn.Linear(4, 3)
            self.stem = stem if stem is not None else nn.Conv2d(2, 4, 3, padding=1)
            self.normalize = normalize

        def forward(self, x: Any) -> Any:
            x = (x - 0.5) / 0.25 if self.normalize else x
            return self.head(torch.relu(self.stem(x)).mean((2, 3)))

    torch.manual_seed(0)
    x = rng.uniform(size=(2, 2, 6, 6))
    # a names= rule on the stem (here the way out of a refused subclass) is not taken for "no layer
    # reads the input"
    model = Net(False).double().eval()
    comp = composite("epsilon_plus_flat").with_names({"stem": Epsilon(0.0)})
    assert np.isfinite(xk.xai.explain(model, x, target=1, method="lrp", composite=comp)).all()
    # a first rule that is not an input rule still reaches the first layer that runs when the
    # input is normalized inside forward: equal to that rule everywhere
    norm = Net(True).double().eval()
    custom = Composite({"conv": ZPlus(), "dense": Epsilon(0.0)}, first={"conv": Epsilon(0.0)})
    want = xk.xai.explain(
        norm, x, target=1, method="lrp", composite=Composite({"conv": Zero(), "dense": Zero()})
    )
    np.testing.assert_allclose(
        xk.xai.explain(norm, x, target=1, method="lrp", composite=custom), want, atol=1e-12
    )


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_subclass_computing_the_layer_itself_is_explained_in_half_precision(dtype: str) -> None:
    # the own-forward check held a half-precision layer to float32's 1e-5 and refused it
    class Same(nn.Conv2d):
        def forward(self, x: Any) -> Any:
            return super().forward(x)

    torch.manual_seed(0)
    own = nn.Sequential(Same(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 3))
    plain = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 3))
    plain.load_state_dict(own.state_dict())
    x = torch.rand(2, 3, 6, 6)
    half = getattr(torch, dtype)
    got = xk.xai.explain(own.to(half).eval(), x, target=1, method="lrp")
    np.testing.assert_array_equal(got, xk.xai.explain(plain.to(half).eval(), x, target=1, method="lrp"))


def test_input_rule_through_an_unsqueeze_equals_the_unsqueezed_input(rng: np.random.Generator) -> None:
    # a 1-D signal model that adds the channel axis itself (x.unsqueeze(1) -> Conv1d) was refused
    class Signal(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.fc = nn.Conv1d(1, 4, 3, padding=1), nn.Linear(4, 3)

        def forward(self, x: Any) -> Any:
            return self.fc(torch.relu(self.conv(x.unsqueeze(1))).mean(2))

    class Channels(Signal):
        def forward(self, x: Any) -> Any:
            return self.fc(torch.relu(self.conv(x)).mean(2))

    torch.manual_seed(0)
    signal = Signal().double().eval()
    channels = Channels().double().eval()
    channels.load_state_dict(signal.state_dict())
    x = rng.normal(size=(2, 16))
    for comp in ("epsilon_plus_flat", Composite({"conv": ZPlus()}, first={"conv": WSquare()})):
        got = xk.xai.explain(signal, x, target=1, method="lrp", composite=comp)
        want = xk.xai.explain(channels, x[:, None], target=1, method="lrp", composite=comp)
        np.testing.assert_array_equal(got, want[:, 0])
