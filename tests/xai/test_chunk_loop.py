"""The engine's one chunk loop, :func:`~xaikit.xai._engine.chunks.run_chunks`, and its four callers
under out-of-memory errors: the gradient sweep (halves and starts again from its first row, so
its result is that of a call at the halved size), forward-only scoring and the clean logits
(halve and go on at the failed chunk), the CAM chunks; an out-of-memory error at one row is
raised, a model's other errors keep their messages, and no other module halves a chunk."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.xai.models import cnn, cnn_weights, images, to_channel_first
from xaikit.errors import XaikitError, XaikitValueError
from xaikit.xai._engine.chunks import forward_scores, run_chunks
from xaikit.xai._engine.inputs import prepare
from xaikit.xai._engine.targets import logits, pin
from xaikit.xai.cam.maps import chunked

torch = pytest.importorskip("torch")


# ---- the loop itself, with a stand-in backend --------------------------------------------------
class _OOM(RuntimeError):
    pass


class _Bk:
    """What run_chunks uses of a backend: is_oom and empty_cache (counted)."""

    def __init__(self) -> None:
        self.freed: list[Any] = []

    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, _OOM)

    def empty_cache(self, device: Any) -> None:
        self.freed.append(device)


def _rows_step(calls: list[tuple[int, int]], fails: Any) -> Any:
    def step(r0: int, r1: int, size: int) -> np.ndarray:
        calls.append((r0, r1))
        if fails(r0, r1, len(calls)):
            raise _OOM(f"out of memory ({r1 - r0} rows)")
        return np.arange(r0, r1)

    return step


def test_an_oom_halves_and_goes_on_at_the_failed_row() -> None:
    bk, calls, told = _Bk(), [], []
    step = _rows_step(calls, lambda r0, r1, k: r1 - r0 > 3)
    done = run_chunks(bk, "dev", 10, 8, step, on_halve=told.append)
    assert calls == [(0, 8), (0, 4), (0, 2), (2, 4), (4, 6), (6, 8), (8, 10)]
    assert np.array_equal(np.concatenate(done.results), np.arange(10))
    assert done.sizes == [2, 2, 2, 2, 2] and done.size == 2 and told == [4, 2]
    assert bk.freed == ["dev", "dev"]
    # an OOM after chunks that ran: those are kept, the failed chunk's rows are redone
    calls.clear()
    done = run_chunks(bk, "dev", 10, 4, _rows_step(calls, lambda r0, r1, k: k == 2))
    assert calls == [(0, 4), (4, 8), (4, 6), (6, 8), (8, 10)]
    assert done.sizes == [4, 2, 2, 2] and np.array_equal(np.concatenate(done.results), np.arange(10))


def test_restart_drops_the_results_and_starts_again_from_row_0() -> None:
    bk, calls, told = _Bk(), [], []
    step = _rows_step(calls, lambda r0, r1, k: k == 3)
    done = run_chunks(bk, None, 12, 4, step, restart=True, on_halve=told.append)
    assert calls == [(0, 4), (4, 8), (8, 12)] + [(r, r + 2) for r in range(0, 12, 2)]
    assert done.sizes == [2] * 6 and told == [2]  # the rows before the failure are not kept
    assert np.array_equal(np.concatenate(done.results), np.arange(12))


def test_halving_skips_sizes_that_would_not_shrink_the_failed_chunk() -> None:
    # 3 rows at size 1024: 512 ... 4 would run the same 3 rows again; 2 is the first that helps
    bk, calls, told = _Bk(), [], []
    done = run_chunks(
        bk, None, 3, 1024, _rows_step(calls, lambda r0, r1, k: r1 - r0 > 2), on_halve=told.append
    )
    assert calls == [(0, 3), (0, 2), (2, 3)] and told == [2] and done.size == 2 and len(bk.freed) == 1
    # with chunk ends of its own (the sweep aligns them), the ends decide
    calls.clear()
    done = run_chunks(
        bk, None, 16, 12, _rows_step(calls, lambda r0, r1, k: r1 - r0 > 4), end=lambda r0, s: r0 + s // 4 * 4
    )
    assert calls == [(0, 12), (0, 4), (4, 8), (8, 12), (12, 16)] and done.size == 6


def test_an_oom_at_one_row_is_raised_and_other_errors_keep_theirs() -> None:
    bk, calls = _Bk(), []
    with pytest.raises(_OOM, match=r"out of memory \(1 rows\)"):
        run_chunks(bk, None, 5, 4, _rows_step(calls, lambda r0, r1, k: True))
    assert calls == [(0, 4), (0, 2), (0, 1)]
    seen: list[tuple[int, int, int]] = []

    def mapped(exc: Exception, r0: int, r1: int, size: int) -> Exception:
        seen.append((r0, r1, size))
        return XaikitValueError(f"chunk [{r0}, {r1}) failed: {exc}")

    def bad(r0: int, r1: int, size: int) -> None:
        raise ValueError("bad rows") if r0 else XaikitError("a checked error")

    with pytest.raises(XaikitError, match="a checked error"):  # passes through, not mapped
        run_chunks(bk, None, 5, 2, bad, error=mapped)
    assert seen == []
    with pytest.raises(XaikitValueError, match=r"chunk \[2, 4\) failed: bad rows") as info:
        run_chunks(bk, None, 5, 2, lambda r0, r1, s: None if r0 == 0 else bad(r0, r1, s), error=mapped)
    assert seen == [(2, 4, 2)] and isinstance(info.value.__cause__, ValueError)
    with pytest.raises(ValueError, match="bad rows"):  # no mapping: as it is
        run_chunks(bk, None, 5, 2, lambda r0, r1, s: None if r0 == 0 else bad(r0, r1, s))
    assert bk.freed == [None, None]


# ---- the four callers, with a torch model that runs out of memory ----------------------------
class _Flaky(torch.nn.Module):
    """A CNN that raises torch's out-of-memory error when ``fails(rows, grad, calls)`` says so
    (``calls``: this pass's number among the passes with the same grad mode, from 1); ``seen``
    records (rows, grad) of every pass."""

    def __init__(self, fails: Any) -> None:
        super().__init__()
        self.inner = cnn("torch", cnn_weights())
        self.fails = fails
        self.seen: list[tuple[int, bool]] = []
        self.first_rows: list[Any] = []

    def forward(self, x: Any) -> Any:
        grad = torch.is_grad_enabled()
        rows = int(x.shape[0])
        self.seen.append((rows, grad))
        self.first_rows.append(x[:1].detach().clone())
        if self.fails(rows, grad, sum(1 for _, g in self.seen if g == grad)):
            raise torch.OutOfMemoryError(f"CUDA out of memory (fake: {rows} rows)")
        return self.inner(x)


def _x(batch: int = 4) -> np.ndarray:
    return to_channel_first(images(np.random.default_rng(0), batch=batch))


def test_the_sweep_starts_again_and_equals_a_call_at_the_halved_size() -> None:
    x = _x()
    opts = {"method": "integrated", "nsamples": 6, "baseline": "zeros"}
    flaky = _Flaky(lambda rows, grad, k: grad and k == 3)  # the third chunk of rows fails once
    got = xk.xai.explain(flaky, x, max_batch=8, **opts)
    grad_rows = [rows for rows, grad in flaky.seen if grad]
    assert grad_rows == [8, 8, 8, 4, 4, 4, 4, 4, 4]  # 24 rows; after the failure all again at 4
    grad_firsts = [r for r, (_, grad) in zip(flaky.first_rows, flaky.seen) if grad]
    assert torch.equal(grad_firsts[3], grad_firsts[0])  # it started again from row 0
    want = xk.xai.explain(flaky.inner, x, max_batch=4, **opts)
    assert np.array_equal(got, want)  # exactly the call at the halved size
    assert not np.array_equal(want, xk.xai.explain(flaky.inner, x, max_batch=8, **opts))


def _scores_rows(x: Any, calls: list[int]) -> Any:
    B = int(x.shape[0])

    def rows_fn(r0: int, r1: int) -> tuple[list[Any], Any]:
        calls.append(r0)
        r = torch.arange(r0, r1)
        scale = (1.0 + 0.25 * (r // B)).float().reshape(-1, 1, 1, 1)
        return [x[r % B] * scale], (r * 3) % 5

    return rows_fn


def test_forward_scores_halve_and_go_on_with_the_same_values() -> None:
    x = torch.as_tensor(_x())
    flaky = _Flaky(lambda rows, grad, k: k == 2)  # the second chunk fails once
    bk = xk.backend.get_backend(flaky)
    want_pred: list[np.ndarray] = []
    want = forward_scores(bk, flaky.inner, _scores_rows(x, []), 20, 20, predicted=want_pred)
    calls: list[int] = []
    sizes: list[int] = []
    pred: list[np.ndarray] = []
    got = forward_scores(bk, flaky, _scores_rows(x, calls), 20, 8, sizes=sizes, predicted=pred, batch=4)
    assert calls == [0, 8, 8, 12, 16] and sizes == [8, 4, 4, 4]  # the failed rows redone at 4
    np.testing.assert_allclose(bk.to_numpy(got), bk.to_numpy(want), rtol=1e-6, atol=1e-6)
    assert np.array_equal(np.concatenate(pred), np.concatenate(want_pred))


def test_logits_halve_and_go_on_with_the_same_values() -> None:
    x = _x(7)
    flaky = _Flaky(lambda rows, grad, k: rows > 3)
    bk = xk.backend.get_backend(flaky)
    inp = prepare(bk, flaky, [x], ["x"])
    got = bk.to_numpy(logits(inp, 0))
    with torch.no_grad():
        want = flaky.inner(torch.as_tensor(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert flaky.seen[0] == (7, False) and max(r for r, _ in flaky.seen[1:]) <= 4
    # and through explain: the pinned classes are the clean predictions
    pinned = pin(inp, None)
    assert np.array_equal(pinned.host_targets(bk), want.argmax(axis=1))


@pytest.mark.parametrize("method", ["gradcam", "gradcam++", "eigencam"])
def test_cam_chunks_halve_and_give_the_same_maps(method: str) -> None:
    x = _x(6)
    flaky = _Flaky(lambda rows, grad, k: rows > 2)
    want = xk.xai.explain(flaky.inner, x, method=method, max_batch=8, target=1)
    got = xk.xai.explain(flaky, x, method=method, max_batch=8, target=1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert any(rows > 2 for rows, _ in flaky.seen)  # it did run out of memory
    acts = xk.xai.cam.layer_activations(flaky, x, max_batch=8)
    np.testing.assert_allclose(acts.maps, xk.xai.cam.layer_activations(flaky.inner, x).maps, rtol=1e-6)


def test_cam_chunks_keep_tuple_results() -> None:
    x = _x(5)
    flaky = _Flaky(lambda rows, grad, k: rows > 2)
    bk = xk.backend.get_backend(flaky)
    inp = prepare(bk, flaky, [x], ["x"])
    sizes: list[int] = []

    def step(rows: list[Any], tg: Any, kw: Any) -> tuple[np.ndarray, np.ndarray]:
        out = bk.to_numpy(inp.model(rows[0]))
        sizes.append(len(out))
        return out, out.sum(axis=1)

    a, s = chunked(inp, None, 4, step)
    with torch.no_grad():
        want = flaky.inner(torch.as_tensor(x)).numpy()
    np.testing.assert_allclose(a, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(s, want.sum(axis=1), rtol=1e-6, atol=1e-6)
    assert sizes == [2, 2, 1]


def _always_oom() -> _Flaky:
    return _Flaky(lambda rows, grad, k: True)


def test_an_oom_at_one_row_is_raised_by_every_caller() -> None:
    x = _x()
    flaky = _always_oom()
    with pytest.raises(torch.OutOfMemoryError, match=r"fake: 1 rows"):  # logits, through pin
        xk.xai.explain(flaky, x, method="vanilla")
    bk = xk.backend.get_backend(flaky)
    with pytest.raises(torch.OutOfMemoryError, match=r"fake: 1 rows"):
        forward_scores(bk, flaky, _scores_rows(torch.as_tensor(x), []), 8, 4, batch=4)
    inp = prepare(bk, flaky, [x], ["x"])
    with pytest.raises(torch.OutOfMemoryError, match=r"fake: 1 rows"):
        chunked(inp, None, 4, lambda rows, tg, kw: bk.to_numpy(inp.model(rows[0])))
    rows = [r for r, _ in flaky.seen]
    assert rows[:3] == [4, 2, 1]  # halved down to 1 row, then raised
    grads = _Flaky(lambda rows, grad, k: grad)  # the sweep's gradient rows only
    with pytest.raises(torch.OutOfMemoryError, match=r"fake: 1 rows"):
        xk.xai.explain(grads, x, method="smoothgrad", nsamples=2, max_batch=8)
    assert [r for r, g in grads.seen if g] == [8, 4, 2, 1]


class _Strict(torch.nn.Module):
    """A CNN that raises ValueError on ``bad(rows)`` (e.g. a model that binds per-sample values)."""

    def __init__(self, bad: Any) -> None:
        super().__init__()
        self.inner = cnn("torch", cnn_weights())
        self.bad = bad

    def forward(self, x: Any) -> Any:
        if self.bad(int(x.shape[0])):
            raise ValueError(f"cannot take {int(x.shape[0])} rows")
        return self.inner(x)


def test_a_model_error_keeps_its_message() -> None:
    x = _x()
    off_batch = _Strict(lambda rows: rows != 4)
    bk = xk.backend.get_backend(off_batch)
    chunk_msg = r"the model ran on the 4 samples but raised ValueError on a chunk of 8 rows.*model_kwargs"
    with pytest.raises(XaikitValueError, match=chunk_msg):  # forward scores
        forward_scores(bk, off_batch, _scores_rows(torch.as_tensor(x), []), 16, 8, batch=4)
    with pytest.raises(XaikitValueError, match=chunk_msg):  # the sweep
        xk.xai.explain(off_batch, x, method="smoothgrad", nsamples=2, max_batch=8)
    never = _Strict(lambda rows: True)
    call_msg = (
        r"the model could not be called on the model inputs.*The model raised ValueError: cannot take 4"
    )
    with pytest.raises(XaikitValueError, match=call_msg):  # logits
        logits(prepare(bk, never, [x], ["x"]), 0)
    # CAM: the first chunk says the model cannot take x, a later one names the chunk
    for model, msg in [
        (never, call_msg.replace("4", "3")),
        (_Strict(lambda rows: rows == 1), r"ran on the 4 samples but raised ValueError on a chunk of 1 rows"),
    ]:
        inp = prepare(bk, model, [x], ["x"])
        with pytest.raises(XaikitValueError, match=msg):
            chunked(inp, None, 3, lambda rows, tg, kw, m=model: bk.to_numpy(m(rows[0])))


def test_run_chunks_is_the_only_chunk_loop_that_halves() -> None:
    root = Path(xk.__file__).parent
    allowed = {Path("xai/_engine/chunks.py"), Path("xai/_engine/plan.py")}
    found = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if path.relative_to(root) not in allowed
        and path.relative_to(root).parts[0] != "backend"
        and re.search(r"\bis_oom\(", path.read_text(encoding="utf-8"))
    ]
    assert found == []
