"""Agreement with captum 0.9 (``FeatureAblation``, ``ShapleyValueSampling``, ``KernelShap``,
``Lime``) on the same feature masks, baselines, targets and -- where captum lets one fix them --
the same perturbations: our orders injected as ShapleyValueSampling's permutation generator, our
coalitions as KernelShap's / Lime's ``perturb_func``. Where both sample, agreement in
distribution over 40 seeds each.

Models: a small CNN with random weights on 3 x 12 x 12 images (float32, and the same weights in
float64), batch 3, one target per sample. Masks: 3 x 3 patches (9 features), an irregular
scatter (7 features), and (B, H, W) masks: three scatters of 7 features each, and one of 9, 7
and 4 features. Baselines: 0, 0.5 and a per-sample array.

Measured max abs differences (attributions up to 2.0):

* feature ablation: 1.4e-6 (float32: captum runs other batches through the convolutions),
  2.7e-15 (float64); tolerances 1e-5 and 1e-12;
* Shapley sampling on the same orders: 5.1e-7 (float32), 1.0e-7 (float64: captum accumulates its
  attributions in float32); tolerances 1e-5 and 1e-6;
* KernelSHAP on the same coalitions: 6.6e-7 (float32), 5.3e-7 (float64), with captum's
  ``inf_weight`` raised from 1e6 to 1e8; tolerance 2e-6 (why: :func:`test_kernel_shap_matches_captum`);
* LIME on the same coalitions and kernel: 6.0e-7 (float32), 6.2e-7 (float64: captum fits in
  float32); tolerance 1e-5. Against scikit-learn's ``Ridge`` in float64: 1.3e-15 (coefficients,
  intercept), 1.1e-16 (weighted R^2); tolerance 1e-12.
* In distribution (40 seeds each, 6 features, values up to 1.0): Shapley sampling means within
  1.7 (ours) and 2.7 (captum) standard errors of the exact values; KernelSHAP means within 1.6
  (ours) and 1.3 (captum) standard errors, our standard errors 2.3x smaller on average.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.agnostic.test_shapley_exact import (
    all_coalitions,
    game_scores,
    one_torch_thread,  # noqa: F401 (its autouse fixture, here too)
    per_feature,
)
from xaikit.xai.agnostic.common import rng_for
from xaikit.xai.agnostic.lime import lime_coalitions
from xaikit.xai.agnostic.shapley import exact_shapley, kernel_coalitions, permutations

torch = pytest.importorskip("torch")
captum_attr = pytest.importorskip("captum.attr")
nn = torch.nn

ROWS, COLS = np.meshgrid(np.arange(12), np.arange(12), indexing="ij")
MASKS: dict[str, np.ndarray] = {
    "patches": (ROWS // 4) * 3 + COLS // 4,  # 9 features
    "irregular": (ROWS * 5 + COLS * 3 + (ROWS * COLS) // 3) % 7,  # 7 scattered features
}
MASKS["per_sample"] = np.stack([MASKS["patches"], MASKS["irregular"], (ROWS // 6) * 2 + COLS // 6])  # 9, 7, 4
MASKS["per_sample_7"] = np.stack(
    [MASKS["irregular"], MASKS["irregular"].T, MASKS["irregular"][::-1]]
)  # 7 each
TARGETS = [0, 3, 1]


def make_cnn(dtype: Any) -> Any:
    """A small CNN with random weights (3 x 12 x 12 images, 4 classes); its scores are O(1)."""
    torch.manual_seed(11)
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.Tanh(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(3), nn.Flatten(), nn.Linear(72, 4),
    )  # fmt: skip
    with torch.no_grad():
        net[-1].weight.mul_(50.0)
    return net.to(dtype).eval()


@pytest.fixture(scope="module", params=["float32", "float64"])
def cnn(request: pytest.FixtureRequest) -> Any:
    return make_cnn(getattr(torch, request.param))


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    return np.random.default_rng(2).normal(size=(3, 3, 12, 12))


def dtype_of(model: Any) -> Any:
    return next(model.parameters()).dtype


def baseline_for(kind: str, shape: tuple[int, ...]) -> Any:
    """0, a number, or a per-sample array (numpy float64)."""
    if kind == "array":
        return np.random.default_rng(3).normal(size=shape)
    return {"zero": 0.0, "number": 0.5}[kind]


def theirs_baseline(base: Any, model: Any) -> Any:
    return torch.as_tensor(base, dtype=dtype_of(model)) if isinstance(base, np.ndarray) else base


def theirs_mask(ids: np.ndarray) -> Any:
    """A (H, W) mask as captum's (1, 1, H, W), a (B, H, W) one as (B, 1, H, W)."""
    t = torch.as_tensor(ids)
    return t[None, None] if t.ndim == 2 else t[:, None]


def ours(model: Any, x: np.ndarray, target: Any, method: str, **kw: Any) -> np.ndarray:
    return xk.xai.explain(
        model, torch.as_tensor(x, dtype=dtype_of(model)), target=target, method=method, **kw
    )


def close(a: np.ndarray, b: Any, model: Any, f32: float, f64: float) -> float:
    """Asserts |a - b| <= the tolerance of the model's dtype; the max abs difference."""
    b = b.detach().double().numpy() if hasattr(b, "detach") else np.asarray(b)
    diff = float(np.abs(np.asarray(a, dtype=np.float64) - b).max())
    tol = f64 if dtype_of(model) == torch.float64 else f32
    assert diff <= tol, (diff, tol)
    return diff


def sample_mask(ids: np.ndarray, b: int) -> np.ndarray:
    return ids if ids.ndim == 2 else ids[b]


# ---- feature ablation ---------------------------------------------------------------------------
@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("baseline", ["zero", "number", "array"])
def test_feature_ablation_matches_captum(cnn: Any, images: np.ndarray, mask: str, baseline: str) -> None:
    ids = MASKS[mask]
    base = baseline_for(baseline, images.shape)
    mine = ours(cnn, images, TARGETS, "feature_ablation", features=ids, baseline=base)
    theirs = captum_attr.FeatureAblation(cnn).attribute(
        torch.as_tensor(images, dtype=dtype_of(cnn)), baselines=theirs_baseline(base, cnn),
        target=torch.tensor(TARGETS), feature_mask=theirs_mask(ids),
    )  # fmt: skip
    assert theirs.dtype == dtype_of(cnn)
    close(mine, theirs, cnn, 1e-5, 1e-12)


# ---- Shapley value sampling on our orders -------------------------------------------------------
def captum_shapley(
    model: Any, x: np.ndarray, target: Any, ids: np.ndarray, base: Any, perms: np.ndarray
) -> Any:
    """captum's ShapleyValueSampling with its permutation generator replaced by ``perms``."""
    sv = captum_attr.ShapleyValueSampling(model)
    F = perms.shape[1]

    def orders(num_features: int, num_samples: int) -> Iterator[list[int]]:
        assert (num_features, num_samples) == (F, len(perms))
        yield from perms.tolist()

    sv.permutation_generator = orders
    return sv.attribute(
        torch.as_tensor(x, dtype=dtype_of(model)), baselines=theirs_baseline(base, model),
        target=torch.as_tensor(target), feature_mask=theirs_mask(ids), n_samples=len(perms),
        perturbations_per_eval=F,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("mask", "antithetic", "baseline"),
    [("patches", False, "number"), ("irregular", True, "array"), ("per_sample_7", True, "array"),
     ("per_sample", False, "array"), ("per_sample", True, "number")],
)  # fmt: skip
def test_shapley_sampling_matches_captum_on_the_same_orders(
    cnn: Any, images: np.ndarray, mask: str, antithetic: bool, baseline: str
) -> None:
    ids = MASKS[mask]
    base = baseline_for(baseline, images.shape)
    n, seed = 6, 13
    mine = ours(cnn, images, TARGETS, "shapley_sampling", features=ids, baseline=base, nsamples=n,
                antithetic=antithetic, seed=seed)  # fmt: skip
    counts = {int(sample_mask(ids, b).max()) + 1 for b in range(len(images))}
    if len(counts) == 1:  # one batched call: every sample has the same orders
        perms = permutations(seed, n, counts.pop(), antithetic)
        close(mine, captum_shapley(cnn, images, TARGETS, ids, base, perms), cnn, 1e-5, 1e-6)
        return
    for b in range(len(images)):  # each sample's orders are drawn for its own number of features
        own = ids[b]
        perms = permutations(seed, n, int(own.max()) + 1, antithetic)
        one = base[b : b + 1] if isinstance(base, np.ndarray) else base
        theirs = captum_shapley(cnn, images[b : b + 1], TARGETS[b : b + 1], own, one, perms)
        close(mine[b : b + 1], theirs, cnn, 1e-5, 1e-6)


# ---- KernelSHAP on our coalitions ---------------------------------------------------------------
def kernel(F: int, s: int) -> float:
    """The Shapley kernel of a coalition of s of F features."""
    return (F - 1) / (math.comb(F, s) * s * (F - s))


def captum_kernel_shap(
    model: Any,
    x1: np.ndarray,
    target: int,
    ids: np.ndarray,
    base: Any,
    z: np.ndarray,
    w: np.ndarray,
    inf: float,
) -> Any:
    """captum's KernelShap on one sample, fed the full and empty coalitions then ``z``; its
    similarity is its own (``inf`` at the ends, 1 elsewhere) when ``w`` is all ones, else the
    Shapley kernel (every coalition enumerated)."""
    ks = captum_attr.KernelShap(model)
    ks.inf_weight = inf
    F = z.shape[1]
    z = z[w > 0]

    def coalitions(original: Any, **kwargs: Any) -> Iterator[Any]:
        yield torch.ones(1, F, dtype=torch.long)
        yield torch.zeros(1, F, dtype=torch.long)
        for row in z:
            yield torch.as_tensor(row[None]).long()

    ks.perturb_func = coalitions
    if not np.all(w == 1.0):

        def shapley_kernel(_: Any, __: Any, sample: Any, **kwargs: Any) -> float:
            s = int(sample.sum())
            return inf if s in (0, F) else kernel(F, s)

        ks.similarity_func = shapley_kernel
    return ks.attribute(
        torch.as_tensor(x1, dtype=dtype_of(model)), baselines=theirs_baseline(base, model), target=target,
        feature_mask=theirs_mask(ids), n_samples=len(z) + 2, perturbations_per_eval=len(z) + 2,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("mask", "nsamples", "paired"),
    [("patches", 40, True), ("irregular", 33, False), ("per_sample", 130, True)],
)
def test_kernel_shap_matches_captum(
    cnn: Any, images: np.ndarray, mask: str, nsamples: int, paired: bool
) -> None:
    """The same coalitions (drawn: weight 1; with nsamples >= 2^F - 2, the 7 and 4 features of
    the per-sample mask: all of them with the Shapley kernel's weights). captum fits an
    unconstrained weighted linear regression with an intercept and approximates the constraints
    phi_0 = f(empty) and sum(phi) = f(x) - f(empty) by a weight ``inf_weight`` on the full and
    empty coalitions; ours solves the constrained problem exactly. The gap falls as
    1 / inf_weight (measured on values up to 1.2: 2e-4 at 1e2, 2e-6 at 1e4, 6e-7 at captum's 1e6,
    1e-7 to 7e-7 at 1e8) until float32 round-off in captum's fit (it casts the coalitions,
    scores and weights to float32, whatever the model's dtype) takes over: 1e-5 at 1e10, 0.5 at
    1e12. So captum runs at 1e8 here, and the tolerance is 2e-6 for both model dtypes."""
    ids = MASKS[mask]
    base = baseline_for("array", images.shape)
    seed = 21
    mine = ours(cnn, images, TARGETS, "kernel_shap", features=ids, baseline=base, nsamples=nsamples,
                paired=paired, seed=seed)  # fmt: skip
    for b in range(len(images)):
        own = sample_mask(ids, b)
        F = int(own.max()) + 1
        z, w = kernel_coalitions(rng_for(seed, "kernel_shap", F), F, nsamples, paired)
        assert np.all(w == 1.0) == (nsamples < 2**F - 2)
        theirs = captum_kernel_shap(cnn, images[b : b + 1], TARGETS[b], own, base[b : b + 1], z, w, 1e8)
        close(mine[b : b + 1], theirs, cnn, 2e-6, 2e-6)


def test_kernel_shap_agreement_grows_with_inf_weight(cnn: Any, images: np.ndarray) -> None:
    """captum's soft constraint leaves a gap to our exact one that closes as its inf_weight
    grows (measured: 8e-3, 1e-4, 4e-7 at 1e2, 1e4, 1e8)."""
    ids, seed, n = MASKS["irregular"], 5, 33
    mine = ours(cnn, images[:1], TARGETS[0], "kernel_shap", features=ids, nsamples=n, seed=seed)
    z, w = kernel_coalitions(rng_for(seed, "kernel_shap", 7), 7, n, True)
    gaps = [
        float(
            np.abs(mine - captum_kernel_shap(cnn, images[:1], TARGETS[0], ids, 0.0, z, w, inf).numpy()).max()
        )
        for inf in (1e2, 1e4, 1e8)
    ]
    assert gaps[0] > 10 * gaps[1] > 10 * gaps[2] and gaps[2] < 2e-6, gaps


# ---- LIME on our coalitions ---------------------------------------------------------------------
def cosine_kernel(width: float) -> Any:
    """exp(-d^2 / (2 width^2)) with d the cosine distance of the binary coalition to all ones
    (captum's similarity_func gets the interpretable sample as its third argument)."""

    def similarity(_: Any, __: Any, sample: Any, **kwargs: Any) -> float:
        z = sample.double().flatten()
        norm = float(torch.sqrt(z.sum()) * math.sqrt(len(z)))
        d = 1.0 - (float(z.sum()) / norm if norm > 0 else 0.0)
        return math.exp(-(d**2) / (2 * width**2))

    return similarity


def captum_lime(
    model: Any,
    x1: np.ndarray,
    target: int,
    ids: np.ndarray,
    base: Any,
    z: np.ndarray,
    width: float,
    alpha: float,
) -> Any:
    from captum._utils.models.linear_model import SkLearnRidge

    def coalitions(original: Any, **kwargs: Any) -> Iterator[Any]:
        for row in z:
            yield torch.as_tensor(row[None]).long()

    lime = captum_attr.Lime(
        model,
        interpretable_model=SkLearnRidge(alpha=alpha),
        similarity_func=cosine_kernel(width),
        perturb_func=coalitions,
    )
    return lime.attribute(
        torch.as_tensor(x1, dtype=dtype_of(model)), baselines=theirs_baseline(base, model), target=target,
        feature_mask=theirs_mask(ids), n_samples=len(z), perturbations_per_eval=len(z),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("mask", "kernel_width", "alpha"),
    [("patches", 0.25, 1.0), ("irregular", 0.75, 0.1), ("per_sample", 0.25, 1.0)],
)
def test_lime_matches_captum(
    cnn: Any, images: np.ndarray, mask: str, kernel_width: float, alpha: float
) -> None:
    ids = MASKS[mask]
    base = baseline_for("number", images.shape)
    n, seed = 120, 8
    mine = ours(cnn, images, TARGETS, "lime", features=ids, baseline=base, nsamples=n, kernel_width=kernel_width,
                alpha=alpha, seed=seed)  # fmt: skip
    for b in range(len(images)):
        own = sample_mask(ids, b)
        F = int(own.max()) + 1
        z = lime_coalitions(rng_for(seed, "lime", F), F, n)
        theirs = captum_lime(cnn, images[b : b + 1], TARGETS[b], own, base, z, kernel_width, alpha)
        close(mine[b : b + 1], theirs, cnn, 1e-5, 1e-5)


def test_lime_fit_matches_sklearn_ridge(images: np.ndarray) -> None:
    """Coefficients, intercept and the weighted R^2 of ``raw=True`` are scikit-learn's
    Ridge(alpha).fit(z, y, sample_weight=w) and its score(z, y, sample_weight=w) (float64)."""
    from sklearn.linear_model import Ridge

    cnn = make_cnn(torch.float64)
    ids = MASKS["per_sample"]
    n, seed, width, alpha = 90, 3, 0.4, 0.5
    res = ours(cnn, images, TARGETS, "lime", features=ids, nsamples=n, kernel_width=width, alpha=alpha, seed=seed,
               raw=True)  # fmt: skip
    sim = cosine_kernel(width)
    for b in range(len(images)):
        own = ids[b]
        F = int(own.max()) + 1
        z = lime_coalitions(rng_for(seed, "lime", F), F, n)
        y = game_scores(cnn, images[b], TARGETS[b], own, 0.0, z)
        w = np.array([sim(None, None, torch.as_tensor(row)) for row in z])
        fit = Ridge(alpha=alpha).fit(z, y, sample_weight=w)
        np.testing.assert_allclose(res.coefficients[b, :F], fit.coef_, rtol=0, atol=1e-12)
        assert np.all(np.isnan(res.coefficients[b, F:]))
        assert abs(res.intercept[b] - fit.intercept_) < 1e-12
        assert abs(res.r2[b] - fit.score(z, y, sample_weight=w)) < 1e-12
        np.testing.assert_allclose(per_feature(res.attributions[b], own), fit.coef_, rtol=0, atol=1e-12)
    assert np.all((res.r2 > 0) & (res.r2 < 1)), res.r2  # a CNN is not linear in its patches


# ---- in distribution, where both sample ---------------------------------------------------------
SMALL = (ROWS // 6) * 3 + COLS // 4  # 6 features


@pytest.fixture(scope="module")
def small_game() -> tuple[Any, np.ndarray, np.ndarray]:
    """The float32 CNN on one image with 6 features, and its exact Shapley values."""
    model = make_cnn(torch.float32)
    x = np.random.default_rng(4).normal(size=(1, 3, 12, 12))
    z = all_coalitions(6)
    table = dict(zip(map(tuple, z.astype(bool)), game_scores(model, x[0], 2, SMALL, 0.0, z)))
    return model, x, exact_shapley(lambda c: table[tuple(c)], 6)


def _mean_se(draws: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    a = np.array(draws)
    return a.mean(0), a.std(0, ddof=1) / np.sqrt(len(a))


def test_shapley_sampling_agrees_with_captum_in_distribution(
    small_game: tuple[Any, np.ndarray, np.ndarray],
) -> None:
    """40 seeds of 3 orders each, ours and captum's own random orders: the two means agree within
    4 standard errors of their difference, and each is within 4 standard errors of the exact
    values (both estimators are unbiased)."""
    model, x, exact = small_game
    mine = [per_feature(ours(model, x, 2, "shapley_sampling", features=SMALL, nsamples=3, seed=s)[0], SMALL)
            for s in range(40)]  # fmt: skip
    sv = captum_attr.ShapleyValueSampling(model)
    theirs = []
    for s in range(40):
        torch.manual_seed(s)
        out = sv.attribute(torch.as_tensor(x, dtype=torch.float32), target=2, feature_mask=theirs_mask(SMALL),
                           n_samples=3, perturbations_per_eval=6)  # fmt: skip
        theirs.append(per_feature(out[0].double().numpy(), SMALL))
    m1, se1 = _mean_se(mine)
    m2, se2 = _mean_se(theirs)
    assert np.all(se1 > 0) and np.all(se2 > 0)
    assert np.all(np.abs(m1 - m2) <= 4 * np.hypot(se1, se2)), (m1 - m2, np.hypot(se1, se2))
    assert np.all(np.abs(m1 - exact) <= 4 * se1), (m1 - exact, se1)
    assert np.all(np.abs(m2 - exact) <= 4 * se2), (m2 - exact, se2)


@pytest.mark.slow  # 80 explanations, 40 of them captum's with a scikit-learn fit each: 7 s
@pytest.mark.filterwarnings(
    "ignore:kernel_shap. the 20 coalitions drawn cannot tell"
)  # some seeds' draws repeat
def test_kernel_shap_and_captum_draws_center_on_exact(small_game: tuple[Any, np.ndarray, np.ndarray]) -> None:
    """40 seeds of 20 drawn coalitions (of 62), ours (paired, exact constraint) and captum's own
    draws (unpaired, soft constraint): both means are within 4 standard errors plus 2% of the
    values' scale of the exact values. KernelSHAP is a ratio estimator, consistent but biased at
    a finite number of coalitions (the bias falls as 1/n); the 2% covers that bias. Our
    estimator varies less (paired coalitions, exact constraint) than captum's."""
    model, x, exact = small_game
    scale = float(np.abs(exact).max())
    mine = [per_feature(ours(model, x, 2, "kernel_shap", features=SMALL, nsamples=20, seed=s)[0], SMALL)
            for s in range(40)]  # fmt: skip
    ks = captum_attr.KernelShap(model)
    theirs = []
    for s in range(40):
        torch.manual_seed(s)
        out = ks.attribute(torch.as_tensor(x, dtype=torch.float32), target=2, feature_mask=theirs_mask(SMALL),
                           n_samples=22, perturbations_per_eval=22)  # fmt: skip
        theirs.append(per_feature(out[0].double().numpy(), SMALL))
    m1, se1 = _mean_se(mine)
    m2, se2 = _mean_se(theirs)
    assert np.all(np.abs(m1 - exact) <= 4 * se1 + 0.02 * scale), (m1 - exact, se1, scale)
    assert np.all(np.abs(m2 - exact) <= 4 * se2 + 0.02 * scale), (m2 - exact, se2, scale)
    assert np.mean(se1) < np.mean(se2), (se1, se2)
