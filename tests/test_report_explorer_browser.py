"""The Dataset explorer in headless Chromium (as tests/test_report_browser.py: Playwright with the
system browser; skipped without it, failed on CI). At 10,000 samples it records the page's size,
build time, the time from navigation to the painted scatter (``data-ready``) and the click
latency to the detail panel, and prints them; they are asserted only loosely. With
``XAIKIT_UPDATE_DOCS_IMG=1`` the explorer's screenshot is copied to ``docs/img/dataset_explorer.png``.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from tests.analysis_fixtures import make_analysed_store
from tests.test_report_browser import Watched, browser  # noqa: F401  (the browser fixture)
from xaikit.viz import report

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[1]


def _ready(w: Watched) -> float:
    """Seconds from navigation to the explorer's first full paint (its ``data-ready``)."""
    start = time.perf_counter()
    w.page.goto(w.page_path.as_uri(), wait_until="commit")
    w.page.wait_for_selector('[data-explorer][data-ready="1"]', state="attached", timeout=60_000)
    return time.perf_counter() - start


def _open(browser, page_path: Path, width: int = 1400, height: int = 1000) -> tuple[Watched, float]:  # noqa: F811
    w = Watched(browser, width, height)
    w.page_path = page_path  # type: ignore[attr-defined]
    return w, _ready(w)


def _canvas_point(w: Watched, index: int) -> tuple[float, float]:
    box = w.page.locator("canvas.scatter").bounding_box()
    assert box is not None
    at = w.page.evaluate(f"window.xkExplorer.e0.at({index})")
    assert at is not None
    return box["x"] + at[0], box["y"] + at[1]


def _click_sample(w: Watched, index: int) -> float:
    """Click sample ``index``'s point; seconds until the detail panel shows it."""
    x, y = _canvas_point(w, index)
    start = time.perf_counter()
    w.page.mouse.click(x, y)
    _until(lambda: w.page.get_attribute("aside.detail", "data-index") == str(index))
    return time.perf_counter() - start


@pytest.fixture(scope="module")
def small_explorer(tmp_path_factory):
    return report(make_analysed_store(tmp_path_factory.mktemp("ex") / "store", 150))


def _until(condition, timeout: float = 5.0) -> None:
    """Poll ``condition`` (a Python callable) until true (page.wait_for_function's string form
    is an eval, which the page's CSP forbids)."""
    end = time.perf_counter() + timeout
    while not condition():
        assert time.perf_counter() < end, "timed out"
        time.sleep(0.005)


def _assert_apart(page) -> None:
    """The thumbnails drawn do not overlap: any two centres are a thumbnail's side apart."""
    side = page.evaluate("window.xkExplorer.e0.thumbSide")
    centres = np.array(page.evaluate("window.xkExplorer.e0.placed().map(i => window.xkExplorer.e0.at(i))"))
    assert len(centres) > 1
    gap = np.abs(centres[:, None] - centres[None]).max(axis=2) + np.eye(len(centres)) * 1e9
    assert gap.min() >= side, gap.min()


def test_explorer_paints_and_shows_a_sample(browser, small_explorer):  # noqa: F811
    w, _ = _open(browser, small_explorer)
    page = w.page
    assert w.errors == [] and w.network(small_explorer) == []
    page.locator(".explorer").scroll_into_view_if_needed()
    placed = page.evaluate("window.xkExplorer.e0.placed()")
    assert len(placed) > 20  # thumbnails for a non-overlapping subset
    assert int(page.get_attribute("canvas.scatter", "data-thumbs")) == len(placed)
    _assert_apart(page)
    # scroll to zoom in at the centre: the points move apart, the thumbnails still do not overlap
    box = page.locator("canvas.scatter").bounding_box()
    assert box is not None
    before = page.evaluate(f"window.xkExplorer.e0.at({placed[0]})")
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.wheel(0, -400)
    page.wait_for_timeout(30)
    assert page.get_attribute("canvas.scatter", "data-thumbs") == "0"  # dots only while it moves
    _until(lambda: page.get_attribute("canvas.scatter", "data-thumbs") != "0")
    after = page.evaluate(f"window.xkExplorer.e0.at({placed[0]})")
    assert after != before
    _assert_apart(page)
    page.click("button.xk-reset")
    page.wait_for_timeout(100)
    assert page.evaluate(f"window.xkExplorer.e0.at({placed[0]})") == pytest.approx(before)
    placed = page.evaluate("window.xkExplorer.e0.placed()")
    # hover a thumbnail: the tooltip names the sample
    target = placed[3]
    x, y = _canvas_point(w, target)
    page.mouse.move(x, y)
    assert page.is_visible("#tip") and page.inner_text("#tip").startswith(f"sample {target} · class ")
    # click it: the detail panel shows its index, class names, and paints its image and map
    _click_sample(w, target)
    detail = page.locator("aside.detail")
    assert detail.is_visible() and detail.locator(".detail-title").inner_text() == f"sample {target}"
    facts = detail.locator(".detail-facts").inner_text()
    assert f"dataset index\t{target}" in facts and "label\t" in facts and "atypicality\t" in facts
    assert any(name in facts for name in ("circle", "square", "triangle"))
    for canvas in ("d-image", "d-map", "d-overlay"):
        spread = page.evaluate(
            f"""() => {{ const c = document.querySelector('aside.detail canvas.{canvas}');
            const p = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let lo = 255, hi = 0; for (let i = 0; i < p.length; i += 4) {{ lo = Math.min(lo, p[i]); hi = Math.max(hi, p[i]); }}
            return hi - lo; }}"""
        )
        assert spread > 30, canvas  # a picture, not a blank canvas
    # a chip (a cluster's typical member) opens that sample too
    chip = page.locator("canvas.xk-thumb").nth(2)
    member = chip.get_attribute("title").removeprefix("sample ")
    assert member != str(target)
    chip.click()
    assert page.get_attribute("aside.detail", "data-index") == member
    assert w.errors == []
    page.close()


def test_colour_toggle_recolours(browser, small_explorer):  # noqa: F811
    w, _ = _open(browser, small_explorer)
    page = w.page
    before = page.evaluate("document.querySelector('canvas.scatter').toDataURL()")
    legend = page.inner_text(".explorer-legend")
    assert "cluster 0 (" in legend and "correct:" not in legend
    page.check('input[value="correct"]')
    _until(lambda: page.get_attribute("[data-explorer]", "data-colour") == "correct")
    page.wait_for_timeout(100)  # one animation frame
    after = page.evaluate("document.querySelector('canvas.scatter').toDataURL()")
    legend = page.inner_text(".explorer-legend")
    assert after != before and "correct:" in legend and "wrong:" in legend
    counts = sum(int(part.rsplit(": ", 1)[1]) for part in legend.split("\n") if ": " in part)
    assert counts == 150
    # thumbnails off: dots only
    page.uncheck("input.xk-thumbs")
    page.wait_for_timeout(100)
    assert page.get_attribute("canvas.scatter", "data-thumbs") == "0"
    assert w.errors == []
    page.close()


def test_scatter_is_sharp_on_a_hi_dpi_screen(browser, small_explorer):  # noqa: F811
    """At devicePixelRatio 2 the canvas has two pixels per CSS pixel each way."""
    context = browser.new_context(viewport={"width": 1200, "height": 900}, device_scale_factor=2)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(small_explorer.as_uri())
    page.wait_for_selector('[data-explorer][data-ready="1"]', state="attached")
    width, height, css_w, css_h = page.evaluate(
        "(() => { const c = document.querySelector('canvas.scatter'); return [c.width, c.height, c.clientWidth, c.clientHeight]; })()"
    )
    assert (width, height) == (2 * css_w, 2 * css_h) and css_w > 300 and errors == []
    context.close()


@pytest.mark.slow
def test_explorer_at_10000_samples(browser, tmp_path, capsys):  # noqa: F811
    """10,000 samples of 32 x 32: page size, build time, time to the painted scatter, click
    latency (printed; asserted loosely: timings never decide a test tightly)."""
    store = make_analysed_store(tmp_path / "store", 10_000)
    start = time.perf_counter()
    page_path = report(store)
    built = time.perf_counter() - start
    size = page_path.stat().st_size
    w, ready = _open(browser, page_path)
    painted = w.page.evaluate("window.xkExplorer.e0.painted")
    assert w.errors == [] and w.network(page_path) == []
    w.page.locator(".explorer").scroll_into_view_if_needed()
    placed = w.page.evaluate("window.xkExplorer.e0.placed()")
    assert len(placed) > 50
    clicks = [_click_sample(w, int(i)) for i in placed[:5]]
    assert w.page.locator("aside.detail .detail-title").inner_text() == f"sample {placed[4]}"
    before = w.page.evaluate("document.querySelector('canvas.scatter').toDataURL()")
    start = time.perf_counter()
    w.page.check('input[value="correct"]')
    _until(lambda: w.page.get_attribute("[data-explorer]", "data-colour") == "correct")
    w.page.wait_for_timeout(50)
    toggle = time.perf_counter() - start
    draw_ms = w.page.evaluate("window.xkExplorer.e0.drawMs()")
    assert w.page.evaluate("document.querySelector('canvas.scatter').toDataURL()") != before
    assert size < 25_000_000 and ready < 15 and max(clicks) < 5
    with capsys.disabled():
        print(
            f"\n[explorer 10,000 x 32x32] html {size / 1e6:.1f} MB, built in {built:.1f} s, scatter painted "
            f"{ready:.2f} s after navigation (performance.now {painted:.0f} ms), click -> detail "
            f"{1000 * float(np.median(clicks)):.0f} ms median (max {1000 * max(clicks):.0f} ms), "
            f"colour toggle {1000 * toggle:.0f} ms (one redraw of the 10,000 points {draw_ms:.0f} ms)"
        )
    if os.environ.get("XAIKIT_UPDATE_DOCS_IMG") == "1":
        w.page.check('input[value="cluster"]')
        w.page.evaluate("document.querySelector('header').style.position = 'static'")  # not over the shot
        w.page.wait_for_timeout(100)
        box = w.page.locator(".explorer").bounding_box()  # relative to the viewport
        assert box is not None
        top = box["y"] + w.page.evaluate("scrollY")
        shot = tmp_path / "explorer.png"
        w.page.screenshot(
            path=str(shot),
            full_page=True,
            clip={"x": box["x"], "y": top, "width": box["width"], "height": min(box["height"], 1250)},
        )
        shutil.copyfile(shot, ROOT / "docs" / "img" / "dataset_explorer.png")
    w.page.close()
