"""The rest of Quantus 0.6's localisation metrics (issue 31): attribution localisation, top-k
intersection, relevance mass accuracy, the localization AUC and Focus (with its mosaics): known
answers, sklearn's AUC, Quantus 0.6's recorded scores, both frameworks, bad input refused."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import xaikit as xk
from tests.evaluate_models import CHANNELS, SIZE, layout, linear, seeded_lenet, square_weights, weights_of
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.evaluate.registry import METRICS

DATA = Path(__file__).parent / "data" / "quantus_localization.npz"
BACKENDS = {b.strip() for b in os.environ.get("XAIKIT_TEST_BACKENDS", "torch,tf").split(",") if b.strip()}
needs_torch = pytest.mark.skipif("torch" not in BACKENDS, reason="torch is not in XAIKIT_TEST_BACKENDS")
ev = xk.evaluate
MASK_SCORES = {
    "attribution_localisation": ev.attribution_localisation,
    "top_k_intersection": ev.top_k_intersection,
    "relevance_mass_accuracy": ev.relevance_mass_accuracy,
    "localization_auc": ev.localization_auc,
}


def _mask(batch: int = 2, size: int = 6) -> np.ndarray:
    m = np.zeros((batch, size, size), dtype=bool)
    m[0, 1:3, 1:4] = True  # 6 pixels
    m[1:, 2:6, 0:2] = True  # 8 pixels
    return m


# ------------------------------------------------------------------------------- known answers
def test_a_map_equal_to_the_mask_scores_1_and_its_complement_0() -> None:
    mask = _mask()
    exact, complement = mask.astype(float), (~mask).astype(float)
    for name, fn in MASK_SCORES.items():
        kw = {"k": 6} if name == "top_k_intersection" else {}
        assert fn(exact, mask, **kw).tolist() == [1.0, 1.0], name
        assert fn(complement, mask, **kw).tolist() == [0.0, 0.0], name
    # the weighted ratio is 1 at chance (an even map) and S_tot / S_in for the exact map
    np.testing.assert_allclose(
        ev.attribution_localisation(np.ones((2, 6, 6)), mask, weighted=True), [1.0, 1.0]
    )
    np.testing.assert_allclose(ev.attribution_localisation(exact, mask, weighted=True), [36 / 6, 36 / 8])
    # top-k with k beyond the mask: the mask's pixels rank first, the rest of the k are outside
    np.testing.assert_allclose(ev.top_k_intersection(exact, mask, k=12), [6 / 12, 8 / 12])
    np.testing.assert_allclose(ev.top_k_intersection(exact, mask, k=6, concept_influence=True), [6.0, 36 / 8])


def test_attribution_localisation_counts_positive_relevance_only_and_max_size() -> None:
    mask = _mask()
    sal = np.zeros((2, 6, 6))
    sal[:, 2, 1] = 3.0  # inside both masks
    sal[:, 0, 5] = 1.0  # outside
    sal[:, 5, 5] = -10.0  # negative: not relevance for the object, ignored (absolute=False)
    np.testing.assert_allclose(ev.attribution_localisation(sal, mask), [0.75, 0.75])
    np.testing.assert_allclose(ev.attribution_localisation(sal, mask, absolute=True), [3 / 14, 3 / 14])
    # sample 1's mask covers 8 / 36 = 0.22 of the image: above max_size 0.2, NaN
    out = ev.attribution_localisation(sal, mask, max_size=0.2)
    assert out[0] == 0.75 and np.isnan(out[1])
    assert np.isnan(ev.attribution_localisation(-np.ones((2, 6, 6)), mask)).all()  # no positive relevance
    assert np.isnan(ev.attribution_localisation(sal, np.zeros((2, 6, 6), bool))).all()  # empty masks


def test_top_k_shares_ties_in_proportion() -> None:
    mask = _mask()
    # a constant map: every order of the ties is as likely, the share is the mask's share of the image
    np.testing.assert_allclose(ev.top_k_intersection(np.ones((2, 6, 6)), mask, k=5), [6 / 36, 8 / 36])
    sal = np.zeros((1, 4, 4))
    sal[0, 0, 0], sal[0, 3, 3], sal[0, 0, 1], sal[0, 3, 2] = 4.0, 3.0, 2.0, 2.0  # 2 tied for the 3rd place
    gt = np.zeros((1, 4, 4), dtype=bool)
    gt[0, :2, :2] = True
    assert ev.top_k_intersection(sal, gt, k=3).tolist() == [(1 + 0.5) / 3]
    assert ev.top_k_intersection(sal, gt, k=4).tolist() == [2 / 4]
    # k=None: Quantus's 1000 of 224 x 224 pixels scaled: 20 of 32 x 32
    big = np.random.default_rng(1).random((1, 32, 32))
    gt32 = np.zeros((1, 32, 32), bool)
    gt32[0, :8] = True
    assert ev.top_k_intersection(big, gt32).tolist() == ev.top_k_intersection(big, gt32, k=20).tolist()


def test_localization_auc_equals_sklearn_with_ties() -> None:
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(3)
    sal = rng.integers(0, 5, size=(6, 7, 9)).astype(float)  # many ties
    mask = rng.random((6, 7, 9)) < rng.uniform(0.05, 0.9, size=(6, 1, 1))
    ours = ev.localization_auc(sal, mask)
    ref = [roc_auc_score(mask[i].ravel(), sal[i].ravel()) for i in range(6)]
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-15)
    signed = rng.normal(size=(6, 7, 9))
    ref_signed = [roc_auc_score(mask[i].ravel(), signed[i].ravel()) for i in range(6)]
    np.testing.assert_allclose(ev.localization_auc(signed, mask, absolute=False), ref_signed, atol=1e-15)
    assert ev.localization_auc(np.ones((6, 7, 9)), mask).tolist() == [0.5] * 6  # ties count one half
    one_class = np.zeros((2, 7, 9), bool)
    one_class[1] = True  # empty, then full: AUC undefined
    assert np.isnan(ev.localization_auc(sal[:2], one_class)).all()


def test_relevance_mass_accuracy_is_the_localization_energy() -> None:
    rng = np.random.default_rng(4)
    sal, mask = rng.normal(size=(5, 3, 8, 8)), rng.random((5, 8, 8)) < 0.3
    for absolute in (True, False):
        np.testing.assert_array_equal(
            ev.relevance_mass_accuracy(sal, mask, absolute=absolute),
            ev.localization(sal, mask, absolute=absolute)["energy"],
        )
    # paper vs Quantus on a signed map: +1 on the 4 mask pixels, -0.25 on the 12 others.
    # Ours: all positive relevance is inside (1.0); Quantus sums the signs: 4 / (4 - 3) = 4.0
    sal = np.full((1, 4, 4), -0.25)
    gt = np.zeros((1, 4, 4), dtype=bool)
    gt[0, :2, :2] = True
    sal[gt] = 1.0
    assert ev.relevance_mass_accuracy(sal, gt, absolute=False).tolist() == [1.0]
    assert (sal * gt).sum() / sal.sum() == 4.0  # Quantus 0.6's RelevanceMassAccuracy(abs=False)


# ------------------------------------------------------------------------------------- Focus
def _old_quantus_focus(a: np.ndarray, flags: np.ndarray) -> np.ndarray:
    """Quantus <= 0.5.3's Focus (its quadrant_* slices on (C, H, W), before the batched rewrite
    of commit cab2b6b8): its "top right" is rows H/2: x columns :W/2, the bottom left."""
    out = []
    for ai, c in zip(a, flags, strict=True):
        h, w = ai.shape[1] // 2, ai.shape[2] // 2
        quads = [ai[:, :h, :w], ai[:, h:, :w], ai[:, :h, w:], ai[:, h:, w:]]
        target = sum(q[q > 0].sum() for q, on in zip(quads, c, strict=True) if on)
        out.append(target / ai[ai > 0].sum())
    return np.array(out)


def test_focus_on_known_maps_and_a_non_square_mosaic() -> None:
    flags = np.array([[1, 1, 0, 0], [0, 0, 1, 1], [1, 0, 0, 1]])
    sal = np.zeros((3, 8, 8))
    sal[:, :4, :] = 1.0  # the top half
    np.testing.assert_allclose(ev.focus(None, sal, sal, quadrants=flags).scores, [1.0, 0.0, 0.5])
    sal[:, 4:, :] = -5.0  # negative relevance does not count
    np.testing.assert_allclose(ev.focus(None, sal, sal, quadrants=flags).scores, [1.0, 0.0, 0.5])
    np.testing.assert_allclose(
        ev.focus(None, sal, sal, quadrants=flags, absolute=True).scores, [1 / 6, 5 / 6, 0.5]
    )
    assert np.isnan(ev.focus(None, sal, -np.ones((3, 8, 8)), quadrants=flags).scores).all()
    # 32 x 48 mosaics (quadrants of 16 rows x 24 columns); relevance in the top-right quadrant, the
    # one flagged, and (sample 1) half as much in the bottom-left one
    wide = np.zeros((2, 1, 32, 48))
    wide[:, 0, :16, 24:] = 1.0
    wide[1, 0, 16:, :24] = 0.5
    q = np.array([[0, 1, 0, 0], [0, 1, 0, 0]])
    np.testing.assert_allclose(ev.focus(None, wide, wide, quadrants=q).scores, [1.0, 2 / 3])
    # Quantus <= 0.5.3 read the bottom-left quadrant for "top right" (height and width swapped)
    np.testing.assert_allclose(_old_quantus_focus(wide, q), [0.0, 1 / 3])
    # Quantus 0.6 reads the quadrants as the paper does (recorded: benchmarks/quantus_localization.py)
    with np.load(DATA) as data:
        np.testing.assert_allclose(data["q_focus_wide"], [1.0, 2 / 3], atol=1e-5)
        np.testing.assert_array_equal(data["wide"], wide.astype(np.float32))


def test_make_mosaics_places_the_images_it_says_and_is_seeded() -> None:
    rng = np.random.default_rng(5)
    imgs = rng.random((12, 6, 6, 3)).astype(np.float32)  # channel last
    y = np.array([0, 1, 2] * 4)
    m = ev.make_mosaics(imgs, y, target_class=1, n=5, seed=7)
    assert m.x.shape == (5, 12, 12, 3) and m.quadrants.shape == (5, 4) and m.target.tolist() == [1] * 5
    for i in range(5):
        tiles = [m.x[i, :6, :6], m.x[i, :6, 6:], m.x[i, 6:, :6], m.x[i, 6:, 6:]]
        for q in range(4):
            np.testing.assert_array_equal(tiles[q], imgs[m.indices[i, q]])
        np.testing.assert_array_equal(m.quadrants[i], (y[m.indices[i]] == 1).astype(int))
        assert len(set(m.indices[i].tolist())) == 4
    assert m.quadrants.sum(axis=1).tolist() == [2] * 5
    again = ev.make_mosaics(imgs, y, target_class=1, n=5, seed=7)
    np.testing.assert_array_equal(again.x, m.x)
    assert not np.array_equal(ev.make_mosaics(imgs, y, target_class=1, n=5, seed=8).indices, m.indices)
    # the same mosaics channel-first and without channels
    first = ev.make_mosaics(np.ascontiguousarray(imgs.transpose(0, 3, 1, 2)), y, target_class=1, n=5, seed=7)
    np.testing.assert_array_equal(first.x, m.x.transpose(0, 3, 1, 2))
    plain = ev.make_mosaics(imgs[..., 0], y, target_class=1, n=5, seed=7)
    np.testing.assert_array_equal(plain.x, m.x[..., 0])
    one = ev.make_mosaics(imgs, y, target_class=2, per_mosaic=1, seed=0)
    assert one.quadrants.sum(axis=1).tolist() == [1] * 4  # n=None: one per target image


def _focus_case(framework: str):
    w = square_weights(np.random.default_rng(0))
    w[0] = np.random.default_rng(1).normal(size=w[0].shape)  # signed weights everywhere
    images = np.random.default_rng(2).random((8, SIZE // 2, SIZE // 2, CHANNELS)).astype(np.float32)
    labels = np.array([0, 1, 2, 0, 1, 2, 0, 1])
    # a numpy (8, 4, 4, 3) batch is ambiguous to make_mosaics (both end axes short, none of size 1):
    # tile each channel as (B, H, W) images (the draws do not depend on the layout)
    per_channel = [
        ev.make_mosaics(images[..., c], labels, target_class=0, n=4, seed=3) for c in range(CHANNELS)
    ]
    mos = per_channel[0]._replace(x=np.stack([m.x for m in per_channel], axis=-1))
    return w, mos, linear(framework, w)


def _expected_focus(g: np.ndarray, flags: np.ndarray) -> np.ndarray:
    pos = np.maximum(g, 0.0)
    h, w = g.shape[0] // 2, g.shape[1] // 2
    quads = [pos[:h, :w], pos[:h, w:], pos[h:, :w], pos[h:, w:]]
    return np.array([sum(q.sum() for q, on in zip(quads, c, strict=True) if on) / pos.sum() for c in flags])


def test_focus_explains_linear_models_exactly_in_each_framework(framework: str) -> None:
    """Vanilla gradients of f_0 = <w_0, x> are w_0 on every mosaic: Focus is the positive part of
    the channel-summed w_0 in the flagged quadrants (signed), or of sum |w_0| (absolute)."""
    w, mos, model = _focus_case(framework)
    x = layout(framework, mos.x)
    before = weights_of(framework, model)
    r = ev.focus(model, x, "vanilla", target=mos.target, quadrants=mos.quadrants)
    np.testing.assert_allclose(r.scores, _expected_focus(w[0].sum(-1), mos.quadrants), rtol=1e-5)
    assert r.targets.tolist() == [0] * 4 and r.mean == pytest.approx(float(r.scores.mean()))
    a = ev.focus(model, x, "vanilla", target=0, quadrants=mos.quadrants, absolute=True)
    np.testing.assert_allclose(a.scores, _expected_focus(np.abs(w[0]).sum(-1), mos.quadrants), rtol=1e-5)
    one = ev.focus(model, x, "vanilla", target=0, quadrants=mos.quadrants, max_batch=1)
    np.testing.assert_allclose(one.scores, r.scores, rtol=1e-6)
    s1 = ev.focus(
        model, x, "smoothgrad", target=0, quadrants=mos.quadrants, seed=4, method_options={"nsamples": 3}
    )
    s2 = ev.focus(
        model, x, "smoothgrad", target=0, quadrants=mos.quadrants, seed=4, method_options={"nsamples": 3}
    )
    np.testing.assert_array_equal(s1.scores, s2.scores)
    for old, new in zip(before, weights_of(framework, model), strict=True):
        np.testing.assert_array_equal(old, new)


def test_focus_torch_equals_keras_on_the_same_weights() -> None:
    if not {"torch", "tf"} <= BACKENDS:
        pytest.skip("needs both frameworks")
    scores = {}
    for framework in ("torch", "tf"):
        _, mos, model = _focus_case(framework)
        scores[framework] = ev.focus(
            model, layout(framework, mos.x), "input_x_gradient", target=0, quadrants=mos.quadrants
        ).scores
    np.testing.assert_allclose(scores["torch"], scores["tf"], rtol=1e-5)


# ------------------------------------------------------------------------------ Quantus 0.6
def test_agreement_with_quantus_on_the_recorded_maps() -> None:
    with np.load(DATA) as data:
        d = {k: data[k] for k in data.files}
    maps, mask, tied = d["maps"], d["mask"], d["tied"]
    np.testing.assert_allclose(ev.attribution_localisation(maps, mask), d["q_al"], atol=1e-5)
    for k in (20, 100):
        np.testing.assert_allclose(ev.top_k_intersection(maps, mask, k=k), d[f"q_tki_{k}"], atol=1e-12)
    np.testing.assert_allclose(
        ev.top_k_intersection(maps, mask, k=20, concept_influence=True), d["q_tki_ci"], atol=1e-12
    )
    np.testing.assert_allclose(ev.localization_auc(maps, mask), d["q_auc"], atol=1e-12)
    np.testing.assert_allclose(ev.localization_auc(tied, mask), d["q_auc_tied"], atol=1e-12)
    np.testing.assert_allclose(ev.relevance_mass_accuracy(maps, mask), d["q_rma"], atol=1e-12)
    focus = ev.focus(None, d["mosaics"], d["focus_maps"], quadrants=d["quadrants"]).scores
    np.testing.assert_allclose(focus, d["q_focus_maps"], atol=1e-5)
    # where the definitions differ (docs/evaluate.md): Quantus's weighted ratio multiplies by
    # |mask| / x_batch[2:].size (6 of the 8 samples x 1024 pixels), ours divides by |mask| / 1024
    size = mask.reshape(len(mask), -1).sum(axis=1)
    np.testing.assert_allclose(d["q_al_weighted"], d["q_al"] * size / (6 * 1024), rtol=1e-6)
    np.testing.assert_allclose(
        ev.attribution_localisation(maps, mask, weighted=True), d["q_al"] * 1024 / size, rtol=1e-6
    )
    # on signed maps Quantus's mass accuracy sums the signs (values outside [0, 1]); ours the positive part
    signed = d["signed"]
    np.testing.assert_allclose(
        d["q_rma_signed"], (signed * mask).sum(axis=(1, 2)) / signed.sum(axis=(1, 2)), rtol=1e-6
    )
    assert (
        np.all(ev.relevance_mass_accuracy(signed, mask, absolute=False) >= 0) and d["q_rma_signed"].min() < 0
    )


@needs_torch
def test_focus_explanation_path_agrees_with_quantus() -> None:
    model = seeded_lenet(1)
    with np.load(DATA) as data:
        d = {k: data[k] for k in data.files}
    checksum = float(sum(p.detach().double().sum().item() for p in model.parameters()))
    assert checksum == pytest.approx(float(d["checksum"]), rel=1e-9)
    r = ev.focus(model, d["mosaics"], "vanilla", target=d["mosaic_target"], quadrants=d["quadrants"])
    np.testing.assert_allclose(r.scores, d["q_focus_explain"], atol=1e-5)


# ---------------------------------------------------------------------------- compare, registry
@needs_torch
def test_compare_runs_the_mask_metrics_by_name() -> None:
    w = square_weights(np.random.default_rng(0))
    model = linear("torch", w)
    x = layout("torch", np.random.default_rng(1).random((3, SIZE, SIZE, CHANNELS)).astype(np.float32))
    mask = _mask(3, SIZE)
    names = list(MASK_SCORES)
    res = ev.compare(
        model, x, ["input_x_gradient"], mask=mask, target=0, metrics=[*names, "localization_energy"]
    )
    maps = np.abs(np.asarray(xk.xai.explain(model, x, target=0, method="input_x_gradient"))).sum(axis=1)
    row = res.table.iloc[0]
    assert row["attribution_localisation"] == pytest.approx(
        np.nanmean(ev.attribution_localisation(maps, mask, weighted=True)), rel=1e-6
    )
    assert row["top_k_intersection"] == pytest.approx(np.nanmean(ev.top_k_intersection(maps, mask)), rel=1e-6)
    assert row["localization_auc"] == pytest.approx(np.nanmean(ev.localization_auc(maps, mask)), rel=1e-6)
    assert row["relevance_mass_accuracy"] == row["localization_energy"]
    for name in names:
        m = METRICS[name]
        assert m.family == "localization" and m.needs_mask and not m.re_explains and not m.cheap
    assert "focus" not in METRICS  # mosaics are no input of compare: standalone


# ------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda s, m: ev.top_k_intersection(s, m, k=0), XaikitValueError, r"k \(the number of top pixels; the map has 36\) must be"),
        (lambda s, m: ev.top_k_intersection(s, m, k=37), XaikitValueError, r"k \(the number of top pixels; the map has 36\)"),
        (lambda s, m: ev.top_k_intersection(s, m, k=2.5), XaikitTypeError, r"k \(the number of top pixels"),
        (lambda s, m: ev.top_k_intersection(s, m, concept_influence=1), XaikitTypeError, r"concept_influence must be True or False; got int"),
        (lambda s, m: ev.attribution_localisation(s, m, max_size=0), XaikitValueError, r"max_size \(a share of the image\)"),
        (lambda s, m: ev.attribution_localisation(s, m, max_size=1.5), XaikitValueError, r"max_size \(a share of the image\)"),
        (lambda s, m: ev.attribution_localisation(s, m, weighted="yes"), XaikitTypeError, r"weighted must be True or False; got str"),
        (lambda s, m: ev.localization_auc(s, m, absolute=None), XaikitTypeError, r"absolute must be True or False"),
        (lambda s, m: ev.relevance_mass_accuracy(s, m * 2), XaikitValueError, r"mask must hold booleans or 0/1 values"),
        (lambda s, m: ev.localization_auc(s[:1], m), XaikitValueError, r"saliency and mask must have the same batch size"),
        (lambda s, m: ev.top_k_intersection(s, m, K=3), XaikitTypeError, r"top_k_intersection\(\) has no option 'K'"),
    ],
)  # fmt: skip
def test_bad_mask_metric_options_are_refused_by_name(call, error, message) -> None:
    with pytest.raises(error, match=message):
        call(np.random.default_rng(0).random((2, 6, 6)), _mask().astype(int))


def test_bad_focus_and_mosaic_input_is_refused_by_name() -> None:
    sal = np.ones((2, 8, 8))
    with pytest.raises(XaikitValueError, match=r"focus needs quadrants="):
        ev.focus(None, sal, sal)
    with pytest.raises(
        XaikitValueError, match=r"quadrants must have shape \(2, 4\).*got ndarray of shape \(2, 3\)"
    ):
        ev.focus(None, sal, sal, quadrants=np.ones((2, 3)))
    with pytest.raises(XaikitValueError, match=r"quadrants must hold 0/1 values; got values \[0, 2\]"):
        ev.focus(None, sal, sal, quadrants=[[0, 2, 0, 0], [0, 0, 0, 0]])
    with pytest.raises(XaikitValueError, match=r"even height and width"):
        ev.focus(None, np.ones((2, 7, 8)), np.ones((2, 7, 8)), quadrants=np.ones((2, 4)))
    with pytest.raises(XaikitValueError, match=r"saliency must have shape \(2, 8, 8\)"):
        ev.focus(None, sal, np.ones((2, 4, 4)), quadrants=np.ones((2, 4)))
    with pytest.raises(XaikitValueError, match=r"saliency='vanilla' is a method name: pass model= and x="):
        ev.focus(None, sal, "vanilla", quadrants=np.ones((2, 4)))
    with pytest.raises(XaikitTypeError, match=r"absolute must be True or False"):
        ev.focus(None, sal, sal, quadrants=np.ones((2, 4)), absolute="no")
    imgs, y = np.zeros((4, 6, 6)), np.array([0, 0, 1, 2])
    with pytest.raises(
        XaikitValueError, match=r"at least 2 images of target_class=2 and 2 of other classes; y has 1 and 3"
    ):
        ev.make_mosaics(imgs, y, target_class=2)
    with pytest.raises(XaikitValueError, match=r"per_mosaic \(target-class images per mosaic\)"):
        ev.make_mosaics(imgs, y, target_class=0, per_mosaic=4)
    with pytest.raises(XaikitValueError, match=r"y must hold one integer class per image, shape \(4,\)"):
        ev.make_mosaics(imgs, y[:3], target_class=0)
    with pytest.raises(XaikitValueError, match=r"y must hold one integer class per image"):
        ev.make_mosaics(imgs, np.eye(4), target_class=0)
    with pytest.raises(XaikitValueError, match=r"n \(the number of mosaics\)"):
        ev.make_mosaics(imgs, y, target_class=0, n=0)
