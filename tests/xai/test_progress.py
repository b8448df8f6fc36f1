"""Progress of the slow methods (``explain(..., progress=)``) and the shared helper
(``xaikit.xai._engine.progress``, also explain_dataset's): the exact plain lines under a fake clock,
tqdm on a terminal, nothing with ``progress=False``, and nothing from a quick ``progress=None``
call or from an auto bar inside another bar."""

from __future__ import annotations

import io
import re
import sys
from typing import Any

import numpy as np
import pytest

import xaikit as xk
from tests.xai.models import images, model_for
from xaikit.errors import DegenerateMapWarning, XaikitTypeError
from xaikit.xai._engine import progress as _progress
from xaikit.xai._engine.progress import Progress, for_method

SIZE = 12  # tests.xai.models' CNN: 12 x 12 images, 5 classes, a last conv of 8 channels


class FakeClock:
    """Seconds that advance by ``step`` at every reading."""

    def __init__(self, step: float) -> None:
        self.t, self.step = 0.0, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_every_interval_and_at_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_progress, "now", FakeClock(2.0))  # made at t=2, then 4, 6, ...
    out = io.StringIO()
    with Progress(100, 0, True, every=5.0, desc="demo", unit="rows", stream=out) as bar:
        for _ in range(10):
            bar.update(10)  # at t = 4, 6, ..., 22: a line once 5 s have passed since the last
    assert out.getvalue().splitlines() == [
        "demo: 30/100 rows (30%), 5.0 rows/s, ETA 14 s",  # t = 8: 6 s after the start, 30 rows
        "demo: 60/100 rows (60%), 5.0 rows/s, ETA 8 s",  # t = 14
        "demo: 90/100 rows (90%), 5.0 rows/s, ETA 2 s",  # t = 20
        "demo: 100/100 rows (100%), 5.0 rows/s, ETA 0 s",  # t = 22: the end, always
    ]


def test_counts_never_go_back_and_delay_holds_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_progress, "now", FakeClock(1.0))
    out = io.StringIO()
    bar = Progress(10, 0, True, every=0.0, desc="d", stream=out)
    bar.advance_to(6)
    bar.advance_to(2)  # a chunk redone after an out-of-memory halving: not counted twice
    bar.advance_to(6)
    bar.advance_to(99)  # clipped at the total
    bar.close()
    assert [line.split(",")[0] for line in out.getvalue().splitlines()] == [
        "d: 6/10 rows (60%)",
        "d: 10/10 rows (100%)",
    ]
    held = io.StringIO()
    with Progress(10, 0, True, every=0.0, delay=30.0, stream=held) as late:
        late.update(10)  # done at t = 2 s, before the 30 s delay: never shown
    assert held.getvalue() == ""
    silent = io.StringIO()
    with Progress(10, 0, False, every=0.0, stream=silent) as off:
        off.update(10)
        off.say("not shown")
    assert silent.getvalue() == "" and off.done == 10


def test_auto_bar_is_quiet_inside_another_and_checks_its_argument() -> None:
    def enabled(progress: bool | None) -> bool:
        with for_method(progress, 10, "rise", stream=io.StringIO()) as bar:
            return bar.enabled

    with Progress(5, 0, True, stream=io.StringIO()):
        assert not enabled(None)  # explain_dataset's bar reports already
    with Progress(5, 0, False, stream=io.StringIO()):
        assert not enabled(None)  # explain_dataset(progress=False): silent
        assert enabled(True)  # asked for explicitly
    assert enabled(None) and _progress._open == 0
    with for_method(None, 10, "rise") as auto, for_method(True, 10, "rise") as shown:
        assert auto.delay == _progress.AUTO_DELAY and shown.delay == 0.0
    with pytest.raises(XaikitTypeError, match=r"progress must be None .* True or False; got str 'yes'"):
        for_method("yes", 10, "rise")  # type: ignore[arg-type]


def _expected_rows(method: str, batch: int) -> dict[str, int]:
    """The units of each bar of ``method`` on ``batch`` 12 x 12 images with the options below."""
    windows = len(range(0, SIZE - 4 + 1, 4))  # occlusion window 4, stride 4: 3 x 3 windows
    return {
        "occlusion": {"occlusion": batch * (1 + windows * windows)},
        "rise": {"rise": batch * 40},
        "scorecam": {"scorecam": batch * 8},
        "guided_ig": {"guided_ig": batch * 6},
        "xrai": {"xrai (IG sweep)": batch * 2 * 4, "xrai (regions)": batch},
    }[method]


OPTIONS: dict[str, dict[str, Any]] = {
    "occlusion": {"window": 4, "stride": 4},
    "rise": {"nsamples": 40},
    "scorecam": {},
    "guided_ig": {"steps": 6},
    "xrai": {"steps": 4},  # + segments: four quadrants per image (Felzenszwalb costs seconds)
}


def _quadrants(batch: int) -> list[list[np.ndarray]]:
    half = SIZE // 2
    masks = []
    for y in (0, half):
        for x in (0, half):
            m = np.zeros((SIZE, SIZE), dtype=bool)
            m[y : y + half, x : x + half] = True
            masks.append(m)
    return [masks] * batch


@pytest.mark.parametrize("method", list(OPTIONS))
def test_slow_methods_report_rows_and_nothing_when_off(
    method: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    model, layout = model_for("torch", seed=1)
    x = layout(images(rng, batch=3))
    kw = {**OPTIONS[method], "max_batch": 8}
    if method == "xrai":
        kw["segments"] = _quadrants(3)
    if method == "xrai":  # each quadrant, dilated by XRAI's radius 5, covers the 12x12 image
        with pytest.warns(DegenerateMapWarning, match="constant"):
            quiet = xk.xai.explain(model, x, method=method, progress=False, **kw)
    else:
        quiet = xk.xai.explain(model, x, method=method, progress=False, **kw)
    assert capsys.readouterr().err == ""
    auto = xk.xai.explain(model, x, method=method, **kw)  # default None: a quick call stays silent
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(_progress, "EVERY", 0.0)  # a line per chunk (stderr is no terminal here)
    shown = xk.xai.explain(model, x, method=method, progress=True, **kw)
    lines = capsys.readouterr().err.splitlines()
    np.testing.assert_array_equal(shown, quiet)  # reporting changes nothing
    np.testing.assert_array_equal(auto, quiet)
    pattern = re.compile(r"^(.+): (\d+)/(\d+) (rows|images) \((\d+)%\), [\d.]+ \4/s, ETA \d+ s$")
    parsed = [pattern.match(line) for line in lines]
    assert all(parsed), lines
    expected = _expected_rows(method, 3)
    by_bar: dict[str, list[int]] = {}
    for m in parsed:
        assert m is not None
        assert int(m[3]) == expected[m[1]], (m[0], expected)
        by_bar.setdefault(m[1], []).append(int(m[2]))
    assert list(by_bar) == list(expected)  # every bar, in order (XRAI: the sweep, then the regions)
    for name, done in by_bar.items():
        assert done == sorted(set(done)) and done[-1] == expected[name], (name, done)
    if method in ("occlusion", "rise", "scorecam"):  # forward chunks of at most 8 rows
        assert len(by_bar[method]) == -(-expected[method] // 8)


def test_terminal_gets_a_tqdm_bar(rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    model, layout = model_for("torch", seed=1)
    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    xk.xai.explain(
        model, layout(images(rng, batch=2)), method="rise", nsamples=40, max_batch=8, progress=True
    )
    text = tty.getvalue()
    assert "\r" in text and "rise: 100%" in text and "80/80" in text, text
    assert not re.search(r"rows/s, ETA \d+ s\n", text)  # no plain lines on a terminal


def test_explain_rejects_a_bad_progress(rng: np.random.Generator) -> None:
    model, layout = model_for("torch", seed=1)
    with pytest.raises(XaikitTypeError, match="progress must be None"):
        xk.xai.explain(model, layout(images(rng, batch=1)), method="rise", progress=1)
