"""The auto chunk plan: fixed at a model's first call per input shape, so seeded results are
bit-identical from the first call on; per-call ``max_batch``; the channel-layout move."""

from __future__ import annotations

import numpy as np
import pytest

import xaikit as xk
from tests.xai.models import cnn, cnn_weights, images, to_channel_first
from xaikit.xai._engine import plan as chunk_plan


def _net(model):
    return xk.xai.SaliencyNet(model, model_inputs="x", model_outputs="y_pred", seed=0)


def _spy_probe(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    """The (size, layout) candidates the plan's probe times, recorded as it times them."""
    probed: list[tuple[int, str]] = []
    real = chunk_plan.ChunkPlan.probe

    def spy(self, measure, timed):
        def timed_spy(size, layout):
            probed.append((size, layout))
            return timed(size, layout)

        return real(self, measure, timed_spy)

    monkeypatch.setattr(chunk_plan.ChunkPlan, "probe", spy)
    return probed


def test_first_call_equals_later_calls_when_the_probe_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job big enough to probe sizes/layouts (torch, CPU) gives the same bits on its first
    call as on later ones: the probe runs on throw-away rows, then the fixed plan computes."""
    model = cnn("torch", cnn_weights())
    x = to_channel_first(images(np.random.default_rng(1), batch=8))
    probed = _spy_probe(monkeypatch)
    net = _net(model)
    kwargs = {"nsamples": 8, "nintegration": 128}  # 8 x 8 x 128 = 8,192 rows: probes
    first = net.get_smoothed_masks({"x": x}, raw=True, **kwargs)["saliency"]
    assert probed, "the probe did not run: the test no longer covers it"
    chosen = chunk_plan._TUNED[model]
    for _ in range(2):
        again = net.get_smoothed_masks({"x": x}, raw=True, **kwargs)["saliency"]
        assert np.array_equal(first, again)
    # probed once (a warm-up, then each of the 4 candidates twice), then reused
    assert chunk_plan._TUNED[model] == chosen and len(probed) == 9 and len(set(probed)) == 4
    # the chunk sizes the job ran at are the plan's, not the candidates'
    assert set(net.last_chunks[:-1]) == {chosen[next(iter(chosen))][0]}


def test_compiled_step_times_its_size_and_twice_it_with_the_same_bits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A big enough TF job times its default size and twice it (each traced in a warm-up, then
    best of two), keeps one of them, and its first call gives the same bits as later ones."""
    model = cnn("tf", cnn_weights())
    x = images(np.random.default_rng(1), batch=8)
    probed = _spy_probe(monkeypatch)
    net = _net(model)
    kwargs = {"nsamples": 8, "nintegration": 128}  # 8,192 rows: enough for 2.5 x (768 + 2 x 768)
    first = net.get_smoothed_masks({"x": x}, raw=True, **kwargs)["saliency"]
    sizes = sorted({size for size, _ in probed})
    assert sizes == [256, 512] and len(probed) == 6  # a traced warm-up of each, then two timings
    (chosen,) = chunk_plan._TUNED[model].values()
    assert chosen[0] in sizes
    for _ in range(2):
        assert np.array_equal(first, net.get_smoothed_masks({"x": x}, raw=True, **kwargs)["saliency"])
    assert len(probed) == 6 and set(net.last_chunks[:-1]) == {chosen[0]}


def test_pick_keeps_the_smallest_candidate_close_to_the_fastest() -> None:
    rates = {(128, "contiguous"): 90.0, (128, "channels_last"): 100.0, (256, "channels_last"): 104.0}
    assert chunk_plan.pick(rates) == (128, "channels_last")  # 256 only 4% faster: not worth it
    rates[(256, "channels_last")] = 120.0
    assert chunk_plan.pick(rates) == (256, "channels_last")
    assert chunk_plan.pick({(64, "a"): 1.0}) == (64, "a")


def test_small_job_first_then_big_then_small_again() -> None:
    """The plan is fixed by the first call whatever its size: a later big job cannot change
    what a small job computes."""
    model = cnn("torch", cnn_weights())
    x = to_channel_first(images(np.random.default_rng(2), batch=4))
    net = _net(model)
    small = net.get_integrated_masks({"x": x}, nsamples=16, raw=True)["saliency"]
    net.get_smoothed_masks({"x": x}, nsamples=16, nintegration=128, raw=True)
    assert np.array_equal(small, net.get_integrated_masks({"x": x}, nsamples=16, raw=True)["saliency"])


def test_max_batch_per_call(framework: str) -> None:
    model = cnn(framework, cnn_weights())
    x = images(np.random.default_rng(3), batch=4)
    x = to_channel_first(x) if framework == "torch" else x
    net = xk.xai.SaliencyNet(model, model_inputs="x", model_outputs="y_pred", seed=0, max_batch=64)
    want = net.get_integrated_masks({"x": x}, nsamples=8, raw=True)["saliency"]
    assert net.last_chunks == [32]
    got = net.get_integrated_masks({"x": x}, nsamples=8, raw=True, max_batch=4)["saliency"]
    assert net.last_chunks == [4] * 8 and net.max_batch == 64
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    net.get_masks({"x": x}, max_batch=2)
    assert net.last_chunks == [2, 2]
    net.get_smoothed_masks({"x": x}, nsamples=3, max_batch=5)
    assert max(net.last_chunks) <= 5
    with pytest.raises(
        xk.errors.XaikitValueError, match=r"max_batch must be 'auto' or an int >= 1; got int 0"
    ):
        net.get_masks({"x": x}, max_batch=0)


def test_channel_last_batch_for_a_torch_cnn_is_moved_and_moved_back() -> None:
    """A pipeline-style (B, H, W, C) batch explains a channel-first torch CNN; the masks come
    back in the caller's layout and equal the channel-first call's."""
    model = cnn("torch", cnn_weights())
    x_last = images(np.random.default_rng(4), batch=3)
    x_first = to_channel_first(x_last)
    want = xk.xai.explain(model, x_first, method="integrated", nsamples=8)
    got = xk.xai.explain(model, x_last, method="integrated", nsamples=8)
    assert got.shape == x_last.shape
    np.testing.assert_allclose(got, np.moveaxis(want, 1, -1), rtol=1e-5, atol=1e-7)
    net = _net(model)
    display = net.get_masks({"x": x_last})["saliency"]
    assert display.shape == (3, 12, 12, 1)
    curve = xk.evaluate.deletion(model, x_last, got, steps=4)
    np.testing.assert_allclose(curve.auc, xk.evaluate.deletion(model, x_first, want, steps=4).auc, rtol=1e-6)


def test_grayscale_batch_without_channel_axis_gets_a_hint() -> None:
    import torch

    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.Flatten(), torch.nn.Linear(2 * 6 * 6, 3))
    x = np.random.default_rng(5).random((2, 8, 8), dtype=np.float32)
    with pytest.raises(
        xk.errors.XaikitValueError, match=r"grayscale images without a channel axis.*x\[:, None\]"
    ):
        xk.xai.explain(model, x, method="vanilla")
    assert xk.xai.explain(model, x[:, None], method="vanilla").shape == (2, 1, 8, 8)


@pytest.mark.parametrize("bad", [0, -2])
def test_nintegration_zero_or_negative_is_an_error(framework: str, bad: int) -> None:
    model = cnn(framework, cnn_weights())
    x = images(np.random.default_rng(6), batch=2)
    x = to_channel_first(x) if framework == "torch" else x
    with pytest.raises(xk.errors.XaikitValueError, match=rf"nintegration must be an int >= 1; got int {bad}"):
        _net(model).get_smoothed_masks({"x": x}, nsamples=2, nintegration=bad)
