"""Every method on a CUDA device (marker ``gpu``: skipped with a reason where there is none).

What must hold on the GPU as on the CPU:

* a method that draws no random numbers gives the CPU's maps (TF32 off; float32 tolerance);
* a method that does (noise, random baselines, masks) draws them from the device's own
  generator, so its maps differ from the CPU's draws: on the device they are reproducible
  (the same seed, the same bits), independent of the chunking (``max_batch``), and, for the
  path methods, complete (the attributions sum to f(x) - f(baseline));
* the maps come back as host arrays, the model stays on its device with its weights, its
  ``requires_grad`` flags and its mode, and no gradient is left on it;
* ``explain_dataset`` on a CUDA model stores ``explain``'s maps.

The CI machine has no GPU; these tests run where one is lent (see docs/benchmarks.md, GPU).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import xaikit as xk  # noqa: E402
from tests.test_model_forms_torch import OPTIONS, images, make_net  # noqa: E402
from xaikit.xai.registry import family, get_method, method_names  # noqa: E402

pytestmark = pytest.mark.gpu

#: the attention methods read transformers' attentions only (tests/test_attention_methods.py)
ALL_METHODS = tuple(m for m in method_names() if family(m) != "transformer")
#: settings at which each seeded method really draws (Guided IG draws only with nsamples > 1;
#: Expected Gradients draws its references from a set apart from x, so no draw is x itself;
#: DeepLiftShap draws only when it takes fewer references than the set holds; KernelSHAP and
#: HSIC at OPTIONS' 4 features take every coalition (14 of 2^4 - 2, and 16 points of a
#: scrambled Sobol net that fill the 16 binary cells whatever the seed), so fewer are asked)
DRAWING: dict[str, dict[str, Any]] = {
    "guided_ig": {"nsamples": 2},
    "expected_gradients": {"baseline": images(6, seed=7)},
    "deepliftshap": {"baselines": images(6, seed=7), "nsamples": 3},
    "kernel_shap": {"nsamples": 10},
    "hsic": {"nsamples": 8},
}
#: chunked against unchunked: float32 rounding of the scores differs with the batch size (cuDNN
#: picks other kernels), and Jansen's estimator of Sobol indices squares differences of nearly
#: equal scores and divides by their variance, which grows it (2e-5 relative seen on an H100,
#: 8e-6 of the map's maximum on a CPU too); the other methods hold 1e-5
CHUNK_RTOL: dict[str, float] = {"sobol": 1e-4}
SEEDED = [m for m in ALL_METHODS if get_method(m).noise]
EXACT = [m for m in ALL_METHODS if not get_method(m).noise]


@pytest.fixture(scope="module", autouse=True)
def no_tf32() -> Any:
    """Full float32 matrix products on the GPU, as on the CPU."""
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


@pytest.fixture(scope="module")
def nets() -> tuple[Any, Any]:
    return make_net(), make_net().cuda()


def explain(model: Any, method: str, **kw: Any) -> np.ndarray:
    opts = {**OPTIONS.get(method, {}), **DRAWING.get(method, {}), **kw}
    opts.setdefault("seed", 0)
    return np.asarray(xk.xai.explain(model, images(), method=method, **opts))


def state(model: Any) -> dict[str, Any]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("method", EXACT)
def test_a_method_without_random_draws_gives_the_cpu_maps(nets: tuple[Any, Any], method: str) -> None:
    cpu, gpu = nets
    before = state(gpu)
    want, got = explain(cpu, method), explain(gpu, method)
    assert isinstance(got, np.ndarray) and got.shape == want.shape
    scale = float(np.abs(want).max())
    assert scale > 0, f"{method}: the CPU map is all zero"
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5 * scale, err_msg=method)
    # the model is where and what it was
    assert all(p.is_cuda for p in gpu.parameters())
    assert not gpu.training
    assert all(p.grad is None and p.requires_grad for p in gpu.parameters())
    after = state(gpu)
    assert all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize("method", SEEDED)
def test_a_seeded_method_is_reproducible_and_chunk_free_on_the_device(
    nets: tuple[Any, Any], method: str
) -> None:
    _, gpu = nets
    a, b = explain(gpu, method), explain(gpu, method)
    np.testing.assert_array_equal(a, b, err_msg=f"{method}: the same seed gave other bits")
    small = explain(gpu, method, max_batch=3)
    scale = float(np.abs(a).max())
    assert scale > 0
    rtol = CHUNK_RTOL.get(method, 1e-5)
    np.testing.assert_allclose(
        small, a, rtol=rtol, atol=rtol / 10 * scale, err_msg=f"{method}: chunked != unchunked"
    )
    other = explain(gpu, method, seed=1)
    assert not np.array_equal(other, a), f"{method}: seed=1 gave seed=0's draws"


@pytest.mark.parametrize("method", ["integrated", "smint", "blur_ig", "expected_gradients"])
def test_path_methods_are_complete_on_the_device(nets: tuple[Any, Any], method: str) -> None:
    _, gpu = nets
    opts = {**OPTIONS.get(method, {}), **DRAWING.get(method, {})}
    if method == "integrated":
        opts["nintegration"] = 200
    if method == "smint":  # unsquared: SmInt's default magnitude=True has no delta
        opts.update(nintegration=200, magnitude=False)
    if method == "blur_ig":
        opts["steps"] = 200
    if method == "expected_gradients":
        opts.update(nsamples=64, baseline=images(8, seed=7))
    maps, delta = xk.xai.explain(gpu, images(), method=method, seed=0, return_delta=True, **opts)
    assert np.isfinite(maps).all()
    total = np.abs(np.asarray(maps)).reshape(len(maps), -1).sum(axis=1)
    # the delta is what the path leaves out; a fine path leaves out a small share
    assert np.all(np.abs(np.asarray(delta)) <= 0.05 * total + 1e-4), (method, delta, total)


def test_explain_dataset_on_a_cuda_model_stores_explain_maps(nets: tuple[Any, Any], tmp_path: Path) -> None:
    _, gpu = nets
    x = np.concatenate([images(), images(seed=1)])
    res = xk.xai.explain_dataset(gpu, x, method="input_x_gradient", out=tmp_path / "store", batch_size=2)
    want = np.asarray(xk.xai.explain(make_net(), x, method="input_x_gradient"))
    got = np.asarray(res.attributions[:])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * float(np.abs(want).max()))
