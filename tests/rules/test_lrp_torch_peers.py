"""LRP on torch models against its peers: zennit 0.5.1 (its ``Gradient`` attributor with the
composites of the same names and its BatchNorm / ResNet canonizers) and captum's ``LRP`` (its
epsilon rule).

Two definition differences are removed in the models compared with zennit, and measured once
in float32 as zennit ships them (``test_resnet18_as_zennit_ships``):

* zennit's canonizers merge a BatchNorm into the convolution and then leave the BatchNorm as
  ``x / sqrt(1 + eps)``, not the identity: its forward pass and scores differ by ``eps / 2``
  per BatchNorm (5e-6 at the default eps 1e-5). The models here have BatchNorm ``eps = 0``.
* zennit's ResNet canonizer turns each residual sum into a module with the ``Norm`` rule,
  ``R_a = a * R / stab(a + b)``; xaikit's convention gives ``a * R / (a + b)`` with no
  stabilizer (the plain gradient of the sum). Where ``a + b`` is small the two differ by
  ``eps / |a + b|`` of that relevance. zennit's sum rule gets a stabilizer of 1e-30 here.

With those, float64 models agree to 8e-8 of the largest relevance (the float32 of the returned
relevance: 6e-8).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.rules.zennit_peer import zennit
from xaikit.backend import Rows
from xaikit.xai.rules import Composite, Epsilon, Norm, composite

torch = pytest.importorskip("torch")
nn = torch.nn

#: xaikit composite name -> zennit composite class name
COMPOSITES = {
    "epsilon_plus_flat": "EpsilonPlusFlat",
    "epsilon_gamma_box": "EpsilonGammaBox",
    "epsilon_alpha2_beta1": "EpsilonAlpha2Beta1",
    "epsilon_plus": "EpsilonPlus",
}
LOW, HIGH = -3.0, 3.0


def vgg() -> Any:
    """A small VGG-style nn.Sequential: conv / BatchNorm / ReLU (in place) / max and average
    pooling / dense."""
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True), nn.AvgPool2d(2),
        nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
        nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 5),
    )  # fmt: skip


def calibrated(model: Any, shape: tuple[int, ...], eps: float | None, dtype: Any) -> Any:
    from xaikit.architecture.torch import calibrate_batchnorm

    calibrate_batchnorm(model, torch.randn(32, *shape))
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and eps is not None:
            m.eps = eps
    return model.to(dtype).eval()


def ours(model: Any, x: Any, name: str, target: Any) -> np.ndarray:
    comp = composite(name, low=LOW, high=HIGH)
    rel, _ = xk.backend.get_backend(model).relevance.lrp_step(Rows(model, [x], torch.as_tensor(target)), comp)
    return rel[0].double().numpy()


def zennits(model: Any, x: Any, name: str, target: Any, canonizer: str, sum_eps: float | None) -> np.ndarray:
    z = zennit()
    from zennit import canonizers, composites, torchvision
    from zennit.attribution import Gradient
    from zennit.layer import Sum
    from zennit.rules import Norm as ZNorm

    canon = (
        canonizers.SequentialMergeBatchNorm() if canonizer == "sequential" else torchvision.ResNetCanonizer()
    )
    kw: dict[str, Any] = {"canonizers": [canon]}
    if sum_eps is not None:
        kw["layer_map"] = [(Sum, ZNorm(stabilizer=sum_eps))]
    if name == "epsilon_gamma_box":
        kw.update(low=LOW, high=HIGH)
    comp = getattr(composites, COMPOSITES[name])(**kw)
    m = copy.deepcopy(model)  # zennit's canonizers write the model (and restore it)
    onehot = torch.eye(10, dtype=x.dtype)[torch.as_tensor(target)]
    with Gradient(m, comp) as attributor:
        _, rel = attributor(x, lambda out: out * onehot[:, : out.shape[1]])
    assert z is not None
    return rel.double().numpy()


def agreement(got: np.ndarray, want: np.ndarray) -> float:
    """max |diff| relative to the largest relevance."""
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.mark.parametrize("name", list(COMPOSITES))
def test_vgg_agrees_with_zennit(name: str) -> None:
    """VGG-style Sequential, BatchNorm merged (canonize=True / SequentialMergeBatchNorm), float64."""
    torch.manual_seed(0)
    model = calibrated(vgg(), (3, 16, 16), 0.0, torch.float64)
    x = torch.randn(4, 3, 16, 16, dtype=torch.float64)
    target = [0, 1, 2, 4]
    got, want = ours(model, x, name, target), zennits(model, x, name, target, "sequential", None)
    assert agreement(got, want) < 1e-6  # measured: 3.2e-8 to 7.9e-8


@pytest.fixture(scope="module")
def resnet() -> Any:
    from xaikit.architecture.torch import ResNet18

    torch.manual_seed(1)
    return calibrated(ResNet18(classes=10), (3, 64, 64), 0.0, torch.float64)


@pytest.mark.parametrize("name", list(COMPOSITES))
def test_resnet18_agrees_with_zennit(name: str, resnet: Any) -> None:
    """xaikit's ResNet-18 (torchvision's module names: zennit's ResNetCanonizer merges its
    BatchNorms and rewrites its residual sums), 64x64, float64."""
    x = torch.randn(2, 3, 64, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    target = [1, 7]
    got = ours(resnet, x, name, target)
    want = zennits(resnet, x, name, target, "resnet", 1e-30)
    assert agreement(got, want) < 1e-6  # measured: 2.9e-8 to 5.8e-8


def test_resnet18_float32_and_as_zennit_ships() -> None:
    """float32: 4e-6 of the largest relevance (measured; 2.3e-6 to 6.6e-6 over the four
    composites: twenty layers of float32 rounding). zennit as it ships (BatchNorm eps 1e-5 left
    in its canonized model, stabilized residual sums): 1.9e-4 (1.1e-4 to 7.4e-4 over the four
    composites; the differences of the module's docstring)."""
    from xaikit.architecture.torch import ResNet18

    torch.manual_seed(3)
    model = calibrated(ResNet18(classes=10), (3, 64, 64), 0.0, torch.float32)
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(4))
    got = ours(model, x, "epsilon_plus_flat", [3, 5])
    assert agreement(got, zennits(model, x, "epsilon_plus_flat", [3, 5], "resnet", 1e-30)) < 1e-5
    shipped = copy.deepcopy(model)
    for m in shipped.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.eps = 1e-5
    got = ours(shipped, x, "epsilon_plus_flat", [3, 5])
    assert agreement(got, zennits(shipped, x, "epsilon_plus_flat", [3, 5], "resnet", None)) < 1e-3


def captum_lrp(model: Any, x: Any, target: Any) -> np.ndarray:
    from captum.attr import LRP

    m = copy.deepcopy(model)  # captum sets a rule attribute on each layer
    return LRP(m).attribute(x, target=torch.as_tensor(target)).detach().double().numpy()


class Flattened(nn.Module):
    """``features``, flattened by a function (captum's LRP has no rule for nn.Flatten), ``head``."""

    def __init__(self, features: Any, head: Any) -> None:
        super().__init__()
        self.features, self.head = features, head

    def forward(self, x: Any) -> Any:
        return self.head(torch.flatten(self.features(x), 1))


def test_captum_epsilon() -> None:
    """captum's LRP: the epsilon rule (its epsilon, 1e-9) on convolutions, dense layers,
    pooling and BatchNorm; xaikit with the same epsilon everywhere (BatchNorm not merged: captum
    gives it the epsilon rule of its own)."""
    from captum.attr._utils.lrp_rules import EpsilonRule

    eps = EpsilonRule().STABILITY_FACTOR
    assert eps == 1e-9
    torch.manual_seed(5)
    features = nn.Sequential(
        nn.Conv2d(3, 6, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 8, 3, padding=1), nn.BatchNorm2d(8),
        nn.ReLU(), nn.AvgPool2d(2),
    )  # fmt: skip
    model = Flattened(features, nn.Sequential(nn.Linear(8 * 3 * 3, 16), nn.ReLU(), nn.Linear(16, 4)))
    model = calibrated(model, (3, 14, 14), None, torch.float64)
    x = torch.randn(3, 3, 14, 14, dtype=torch.float64)
    target = [0, 3, 2]
    comp = Composite(
        {
            "conv": Epsilon(eps),
            "dense": Epsilon(eps),
            "avgpool": Norm(eps),
            "maxpool": Norm(eps),
            "batchnorm": Epsilon(eps),
        },
        canonize=False,
    )
    got = xk.xai.explain(model, x, method="lrp", composite=comp, target=target).astype(np.float64)
    assert agreement(got, captum_lrp(model, x, target)) < 1e-6

    plain = Flattened(nn.Sequential(*features[:4], features[5]), nn.Linear(8 * 6 * 6, 4)).double()
    got = xk.xai.explain(plain, x, method="lrp_epsilon", epsilon=eps, target=target).astype(np.float64)
    assert agreement(got, captum_lrp(plain, x, target)) < 1e-6  # max pooling: gradient vs epsilon 1e-9
