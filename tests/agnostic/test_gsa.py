"""Sobol and HSIC attributions against their papers' definitions, on analytic models.

xplique (the reference implementation) cannot be installed beside our TensorFlow, so:

* Sobol (Fel et al., 2021): a model linear in the blend values of independent features,
  f = sum_i c_i s_i u_i (s_i the sum of the input over feature i, baseline 0, u_i ~ U(0, 1)),
  has the total indices S_Ti = (c_i s_i)^2 / sum_j (c_j s_j)^2 exactly; a product of two
  features has S_T = 4/7 each and first-order 3/7 each. Our design is the replicated design of
  Xplique's ``ReplicatedSampler`` and our Jansen estimator equals an independent
  reimplementation of Xplique's ``JansenEstimator`` formula on it.
* HSIC (Novello et al., 2022): :func:`hsic_scores` equals tr(K H L H) / (n - 1)^2 computed with
  explicit n x n Dirac and Gaussian kernel matrices; on an additive model the map orders the
  features by effect and gives the features the model ignores ~0.

Tolerances are stated where they are used, with the errors measured on this machine.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import xaikit as xk  # noqa: E402
from xaikit.errors import DegenerateMapWarning, XaikitTypeError, XaikitValueError  # noqa: E402
from xaikit.xai.agnostic.features import patch_ids  # noqa: E402
from xaikit.xai.agnostic.sensitivity import hsic_scores, jansen, sobol_design  # noqa: E402


class Regions(torch.nn.Module):
    """s_i = the sum of the input over region i (all channels); ``"linear"``: sum_i c_i s_i,
    ``"product"``: s_0 * s_1. Counts its forward calls."""

    def __init__(self, ids: np.ndarray, c: Any, kind: str = "linear") -> None:
        super().__init__()
        c = np.asarray(c, dtype=np.float32)
        onehot = (ids[None] == np.arange(len(c))[:, None, None]).astype(np.float32)
        self.register_buffer("onehot", torch.as_tensor(onehot))
        self.register_buffer("c", torch.as_tensor(c))
        self.kind = kind
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        s = torch.einsum("bchw,fhw->bf", x, self.onehot)
        if self.kind == "linear":
            return (s * self.c).sum(1, keepdim=True)
        return (s[:, 0] * s[:, 1])[:, None]


def region_sums(x: np.ndarray, ids: np.ndarray, features: int) -> np.ndarray:
    """(B, F) float64 sums of a (B, C, H, W) batch over each region of ``ids`` (H, W)."""
    return np.stack([x.astype(np.float64)[:, :, ids == i].sum(axis=(1, 2)) for i in range(features)], 1)


def per_feature(a: np.ndarray, ids: np.ndarray, features: int) -> np.ndarray:
    """(B, F) the value of a (B, C, H, W) map on each region, checking it is constant there
    (every pixel and every channel)."""
    out = np.empty((a.shape[0], features))
    for i in range(features):
        vals = a[:, :, ids == i].reshape(a.shape[0], -1)
        np.testing.assert_array_equal(vals, vals[:, :1].repeat(vals.shape[1], axis=1))
        out[:, i] = vals[:, 0]
    return out


IDS4 = patch_ids((8, 8), 4)  # four 4x4 quadrants


@pytest.fixture
def quad_x() -> np.ndarray:
    return np.random.default_rng(0).uniform(0.5, 1.5, (2, 3, 8, 8)).astype(np.float32)


def _sobol(model: Any, x: np.ndarray, n: int, seed: int = 0, **kw: Any) -> np.ndarray:
    return xk.xai.explain(
        model, x, target=0, method="sobol", features="patches", segments=4, nsamples=n, seed=seed, **kw
    )


# ---- Sobol ------------------------------------------------------------------------------------
#: |estimate - exact| of a total index on the linear model with N = 1024 designs: measured at most
#: 8.7e-4 over seeds 0-4 (scrambled Sobol: the error falls about as 1/N); 3e-3 leaves room for
#: other seeds and kernels without letting a wrong normalization (a factor of N/(N-1) is 1e-3 of
#: the index, a ddof slip much more at small N, a wrong estimator O(0.1)) through
TOL_1024 = 3e-3


def test_sobol_linear_model_has_the_exact_total_indices(quad_x: np.ndarray) -> None:
    c = np.array([1.0, -2.0, 0.0, 3.0])
    model = Regions(IDS4, c)
    cs2 = (c * region_sums(quad_x, IDS4, 4)) ** 2
    exact = cs2 / cs2.sum(axis=1, keepdims=True)
    got = per_feature(_sobol(model, quad_x, 1024), IDS4, 4)
    np.testing.assert_allclose(got, exact, atol=TOL_1024)
    # the ignored region: f(A_j) = f(C_2j) bit for bit (its weight is 0), so its index is 0
    assert np.all(got[:, 2] == 0.0)
    assert got.min() >= 0.0


def test_sobol_converges_to_the_exact_indices(quad_x: np.ndarray) -> None:
    """Mean over seeds 0-3 of the largest error: measured 0.16 (N=16), 5.7e-3 (N=128),
    6.8e-4 (N=1024); each step of 8x in N must cut it at least 4x."""
    c = np.array([1.0, -2.0, 0.5, 3.0])
    model = Regions(IDS4, c)
    cs2 = (c * region_sums(quad_x, IDS4, 4)) ** 2
    exact = cs2 / cs2.sum(axis=1, keepdims=True)
    err = []
    for n in (16, 128, 1024):
        err.append(
            np.mean(
                [np.abs(per_feature(_sobol(model, quad_x, n, s), IDS4, 4) - exact).max() for s in range(4)]
            )
        )
    assert err[1] < err[0] / 4 and err[2] < err[1] / 4, err
    assert err[2] < TOL_1024 / 2, err


def test_sobol_interaction_total_index_exceeds_first_order(quad_x: np.ndarray) -> None:
    """f = (s_0 u_0)(s_1 u_1): Var = s^2 (1/9 - 1/16), S_T = 4/7 and S_1 = 3/7 for both; the total
    indices add up to 8/7 > 1 (the interaction is counted in both)."""
    model = Regions(IDS4, [1.0, 1.0, 1.0, 1.0], kind="product")
    n, seed = 1024, 5
    got = per_feature(_sobol(model, quad_x, n, seed), IDS4, 4)
    # the map is Jansen's estimator on the model's scores of our design's rows, sample by sample
    design = sobol_design(seed, 4, n)
    for b in range(len(quad_x)):
        s = region_sums(quad_x[b : b + 1], IDS4, 4)[0]
        scores = (s[0] * design[:, 0]) * (s[1] * design[:, 1])
        np.testing.assert_allclose(got[b], jansen(scores, 4, n), rtol=1e-5, atol=1e-7)
        # first-order (Saltelli 2010) from the same rows: f(B) (f(C_i) - f(A)) / Var, C_i = A with u_i of B
        fa, fb, fc = scores[:n], scores[n : 2 * n], scores[2 * n :].reshape(4, n)
        first = (fb[None] * (fc - fa[None])).mean(axis=1) / np.var(fa, ddof=1)
        np.testing.assert_allclose(first[:2], 3 / 7, atol=0.02)
    np.testing.assert_allclose(got[:, :2], 4 / 7, atol=0.01)  # measured within 3.2e-3 (seeds 0-5)
    assert np.all(got[:, :2] > 3 / 7 + 0.1)
    assert np.all(got[:, :2].sum(axis=1) > 1.1)
    assert np.all(got[:, 2:] == 0.0)


def xplique_replicated_design(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Xplique's ``ReplicatedSampler.build_replicated_design`` and sampler output, in numpy:
    C = (A repeated d times) * (1 - eye) + (B repeated) * eye, "(i b) d", after A and B."""
    d = a.shape[1]
    eye = np.eye(d)[:, None, :]
    c = np.repeat(a[None], d, axis=0) * (1 - eye) + np.repeat(b[None], d, axis=0) * eye
    return np.concatenate([a, b, c.reshape(-1, d)])


def xplique_jansen(outputs: np.ndarray, nb_design: int, nb_dim: int) -> np.ndarray:
    """Xplique's ``JansenEstimator.__call__`` in float64 numpy: a = outputs[:N], c = outputs[2N:]
    as (D, N); sum_j (a_j - c_ij)^2 / (2 N max(var_ddof1(a), 1e-12))."""
    a = outputs[:nb_design]
    c = outputs[2 * nb_design :].reshape(nb_dim, nb_design)
    var_a = np.sum((a - a.mean()) ** 2) / max(nb_design - 1.0, 1.0)
    var_a = max(var_a, 1e-12)
    return np.sum((a[None, :] - c) ** 2, axis=-1) / (2.0 * nb_design * var_a)


@pytest.mark.parametrize(("features", "n", "seed"), [(5, 64, 3), (1, 8, 0), (12, 32, 7)])
def test_design_and_jansen_are_xplique_s(features: int, n: int, seed: int) -> None:
    design = sobol_design(seed, features, n)
    assert design.shape == (n * (features + 2), features)
    assert design.min() >= 0.0 and design.max() < 1.0
    a, b = design[:n], design[n : 2 * n]
    np.testing.assert_array_equal(design, xplique_replicated_design(a, b))
    assert sobol_design(seed, features, n).tobytes() == design.tobytes()  # seeded
    assert not np.array_equal(sobol_design(seed + 1, features, n), design)
    u = np.pad(design, ((0, 0), (0, max(0, 4 - features))))
    scores = np.sin(3 * u[:, 0]) + u[:, 1] * u[:, 2] ** 2 + np.exp(u[:, 3])  # features 4+ ignored
    ours = jansen(scores, features, n)
    np.testing.assert_allclose(ours, xplique_jansen(scores, n, features), rtol=1e-12, atol=1e-15)
    if features > 4:
        assert np.all(ours[4:] == 0.0)
    # constant scores: Xplique's EPS floor gives 0/EPS = 0; ours says 0 without dividing
    flat = np.full(len(scores), 2.5)
    np.testing.assert_array_equal(jansen(flat, features, n), xplique_jansen(flat, n, features))


def _conv(seed: int = 0) -> Any:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.Tanh(), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 3)
    )


@pytest.mark.parametrize(("method", "segments", "n"), [("sobol", 4, 16), ("hsic", 16, 64)])
def test_seeded_and_chunking_invariant(method: str, segments: int, n: int) -> None:
    """Same seed: the same map; another seed: another map (HSIC with 16 features, as 2^16 > n:
    with 2^F <= n its design is every coalition, whatever the seed); one row per forward pass
    (max_batch=1) gives the map of the automatic chunking; a sample alone gets its map in the
    batch."""
    model = _conv()
    x = np.random.default_rng(1).normal(size=(2, 3, 8, 8)).astype(np.float32)
    kw = {"target": [0, 2], "method": method, "features": "patches", "segments": segments, "nsamples": n}
    a = xk.xai.explain(model, x, seed=4, **kw)
    assert a.shape == x.shape and np.all(a >= 0) and a.max() > 0
    np.testing.assert_array_equal(xk.xai.explain(model, x, seed=4, **kw), a)
    other = xk.xai.explain(model, x, seed=5, **kw)
    assert np.abs(other - a).max() > 1e-2 * a.max()
    one = xk.xai.explain(model, x, seed=4, max_batch=1, **kw)
    np.testing.assert_allclose(one, a, rtol=1e-5, atol=1e-7 * a.max())
    alone = xk.xai.explain(model, x[1:2], seed=4, **{**kw, "target": 2})
    np.testing.assert_allclose(alone[0], a[1], rtol=1e-5, atol=1e-7 * a.max())


def test_sobol_nsamples_must_be_a_power_of_two() -> None:
    model = Regions(IDS4, [1.0, 2.0, 3.0, 4.0])
    x = np.ones((1, 3, 8, 8), np.float32)
    with pytest.raises(
        XaikitValueError, match=r"nsamples of sobol .*must be a power of two \(8, 16, 32, \.\.\.\); got 24"
    ):
        _sobol(model, x, 24)
    with pytest.raises(XaikitValueError, match=r"nsamples must be an int >= 2; got int 1"):
        _sobol(model, x, 1)
    with pytest.raises(XaikitTypeError, match=r"nsamples must be an int .*got float 32\.0"):
        _sobol(model, x, 32.0)  # type: ignore[arg-type]
    assert model.calls == 0  # refused before any forward pass
    assert per_feature(_sobol(model, x, 2), IDS4, 4).shape == (1, 4)  # 2 is a power of two


def test_sobol_samples_with_different_feature_counts() -> None:
    """Tabular rows with a per-sample grouping (3 and 5 groups): each sample gets the exact
    indices of its own groups (its design padded in the batch), the same as alone."""
    w = np.array([1.0, 2.0, -1.0, 0.5, 3.0, 0.0, 1.5, -2.0], np.float32)
    lin = torch.nn.Linear(8, 1, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.as_tensor(w[None]))
    x = np.random.default_rng(2).uniform(0.5, 2.0, (2, 8)).astype(np.float32)
    groups = np.array([[7, 7, 7, 3, 3, 3, -1, -1], [0, 1, 1, 2, 3, 3, 4, 4]])
    got = xk.xai.explain(lin, x, target=0, method="sobol", features=groups, nsamples=1024, seed=2)
    for b in range(2):
        ids = np.unique(groups[b], return_inverse=True)[1]
        eff = np.bincount(ids, weights=w * x[b]) ** 2
        exact = (eff / eff.sum())[ids]
        np.testing.assert_allclose(got[b], exact, atol=TOL_1024)
        alone = xk.xai.explain(
            lin, x[b : b + 1], target=0, method="sobol", features=groups[b], nsamples=1024, seed=2
        )
        np.testing.assert_allclose(alone[0], got[b], rtol=1e-6, atol=1e-9)


# ---- HSIC -------------------------------------------------------------------------------------
def brute_hsic(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """tr(K_i H L H) / (n - 1)^2 with explicit matrices: K_i[a, b] = [z_ai = z_bi],
    L[a, b] = exp(-(y_a - y_b)^2 / (2 w^2)), w = the median of |y_a - y_b| over the pairs a < b."""
    n = len(y)
    w = float(np.median([abs(y[a] - y[b]) for a, b in itertools.combinations(range(n), 2)]))
    if w == 0:
        return np.zeros(z.shape[1])
    L = np.array([[np.exp(-((y[a] - y[b]) ** 2) / (2 * w * w)) for b in range(n)] for a in range(n)])
    H = np.eye(n) - np.ones((n, n)) / n
    out = []
    for i in range(z.shape[1]):
        K = np.array([[1.0 if z[a, i] == z[b, i] else 0.0 for b in range(n)] for a in range(n)])
        out.append(np.trace(K @ H @ L @ H) / (n - 1) ** 2)
    return np.array(out)


@pytest.mark.parametrize("case", ["continuous", "ties", "dependent"])
def test_hsic_scores_equal_the_kernel_matrix_definition(case: str) -> None:
    rng = np.random.default_rng({"continuous": 0, "ties": 1, "dependent": 2}[case])
    n, F = 48, 5
    z = (rng.random((n, F)) < 0.5).astype(np.float64)
    y = {
        "continuous": rng.normal(size=n),
        "ties": rng.integers(0, 3, n).astype(np.float64),  # few values: many zero distances
        "dependent": 2 * z[:, 0] - z[:, 1] + 0.1 * rng.normal(size=n),
    }[case]
    ours, ref = hsic_scores(z, y), brute_hsic(z, y)
    assert np.all(ref >= -1e-15)
    np.testing.assert_allclose(ours, ref, rtol=1e-10, atol=1e-14)
    if case == "dependent":  # the features the score depends on come first
        assert ours[0] > ours[1] > ours[2:].max() and ours[0] > 10 * ours[2:].max()


def test_hsic_scores_of_constant_scores_are_zero() -> None:
    z = (np.random.default_rng(3).random((20, 4)) < 0.5).astype(np.float64)
    np.testing.assert_array_equal(hsic_scores(z, np.full(20, 1.7)), np.zeros(4))
    np.testing.assert_array_equal(brute_hsic(z, np.full(20, 1.7)), np.zeros(4))
    # more than half the pairs tied: the median distance is 0, no bandwidth, zeros (said so)
    y = np.r_[np.zeros(18), 1.0, 2.0]
    np.testing.assert_array_equal(hsic_scores(z, y), np.zeros(4))


IDS9 = patch_ids((9, 9), 9)  # nine 3x3 cells
EFFECTS9 = np.array([1.0, 2.0, 4.0, 8.0, 0.0, 16.0, 0.5, 3.0, 6.0])


def test_hsic_additive_model_orders_features_by_effect() -> None:
    """Nine features, 1536 coalitions: the rounded scrambled Sobol points are every one of the 2^9
    coalitions three times (the map does not depend on the seed). The map equals hsic_scores on
    that full factorial design, the ignored feature gets 0 (to 1e-12 of the largest: the design
    is balanced and orthogonal) and the order is the order of the effects."""
    x = np.ones((1, 1, 9, 9), np.float32)
    model = Regions(IDS9, EFFECTS9 / 9.0)  # s_i = 9: effect of feature i = EFFECTS9[i]
    got = per_feature(
        xk.xai.explain(model, x, target=0, method="hsic", features="patches", segments=9, seed=0), IDS9, 9
    )[0]
    z = np.tile(np.array(list(itertools.product((0.0, 1.0), repeat=9))), (3, 1))
    np.testing.assert_allclose(got, hsic_scores(z, z @ EFFECTS9), rtol=1e-5, atol=1e-9 * got.max())
    assert abs(got[4]) < 1e-12 * got.max()
    np.testing.assert_array_equal(np.argsort(got), np.argsort(EFFECTS9))
    again = xk.xai.explain(model, x, target=0, method="hsic", features="patches", segments=9, seed=11)
    np.testing.assert_allclose(per_feature(again, IDS9, 9)[0], got, rtol=1e-6, atol=1e-9 * got.max())


def test_hsic_ignored_features_are_near_zero_on_sampled_coalitions() -> None:
    """Sixteen features (2^16 > 1536: the coalitions are a sample): the two ignored features'
    HSIC, measured at most 3.2e-3 of the largest over seeds 0-5, stays below 1e-2 of it
    (the biased estimator's O(1/n) floor); the large effects keep their order."""
    ids = patch_ids((8, 8), 16)
    eff = np.array([1, 2, 0, 3, 4, 5, 6, 7, 0, 8, 9, 10, 11, 12, 13, 14], dtype=np.float64)
    model = Regions(ids, eff / 4.0)
    x = np.ones((1, 1, 8, 8), np.float32)
    for seed in (0, 1, 2):
        a = xk.xai.explain(model, x, target=0, method="hsic", features="patches", segments=16, seed=seed)
        got = per_feature(a, ids, 16)[0]
        assert got[[2, 8]].max() < 1e-2 * got.max(), (seed, got[[2, 8]] / got.max())
        big = eff >= 3
        np.testing.assert_array_equal(np.argsort(got[big]), np.argsort(eff[big]))


@pytest.mark.parametrize("method", ["sobol", "hsic"])
def test_a_constant_model_gets_zeros(method: str) -> None:
    class Constant(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.sum(dim=(1, 2, 3))[:, None] * 0.0 + 1.0

    x = np.random.default_rng(0).random((2, 3, 8, 8)).astype(np.float32)
    with pytest.warns(DegenerateMapWarning, match="zero"):
        a = xk.xai.explain(Constant(), x, target=0, method=method, segments=4, nsamples=16)
    np.testing.assert_array_equal(a, np.zeros_like(x))


def test_hsic_nsamples_is_checked() -> None:
    model = Regions(IDS4, [1.0, 2.0, 3.0, 4.0])
    x = np.ones((1, 3, 8, 8), np.float32)
    with pytest.raises(XaikitValueError, match=r"nsamples must be an int >= 2; got int 1"):
        xk.xai.explain(model, x, target=0, method="hsic", segments=4, nsamples=1)
    with pytest.raises(XaikitTypeError, match=r"nsamples must be an int >= 2; got str '64'"):
        xk.xai.explain(model, x, target=0, method="hsic", segments=4, nsamples="64")
    assert model.calls == 0
