"""The gallery scripts paint every picture of the docs: each runs at its smallest size.

Each job of ``gallery/make_all.py`` runs as its own process (as ``make_all`` runs it) into a
temporary folder, never into ``docs/img``; the picture must be a readable PNG of a sensible
size that is not blank.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from gallery.make_all import JOBS, Job, gallery_scripts

BACKENDS = {b.strip() for b in os.environ.get("XAIKIT_TEST_BACKENDS", "torch,tf").split(",") if b.strip()}


def test_every_gallery_script_has_a_job() -> None:
    assert sorted({job.script for job in JOBS}) == gallery_scripts()


def test_every_job_writes_its_own_picture() -> None:
    pictures = [job.picture for job in JOBS]
    assert len(set(pictures)) == len(pictures)
    assert all(p.endswith(".png") for p in pictures)


@pytest.mark.slow
@pytest.mark.parametrize("job", JOBS, ids=[job.picture.removesuffix(".png") for job in JOBS])
def test_gallery_script_paints_a_picture(job: Job, tmp_path: Path) -> None:
    missing = set(job.frameworks) - BACKENDS
    if missing:
        pytest.skip(f"needs {sorted(missing)}, not in XAIKIT_TEST_BACKENDS")
    from gallery.make_all import DOCS_IMG, run

    before = {p.name: p.stat().st_mtime_ns for p in DOCS_IMG.glob("*")}
    run(job, tmp_path, quick=True, timeout=600)
    assert {p.name: p.stat().st_mtime_ns for p in DOCS_IMG.glob("*")} == before  # docs/img untouched

    out = tmp_path / job.picture
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(out) as img:
        width, height = img.size
        pixels = np.asarray(img.convert("RGB"), dtype=np.float64)
    assert width >= 300 and height >= 200, (width, height)
    assert pixels.std() > 5.0  # not one flat colour
    # something drawn across the picture: not a few pixels of content on a blank page
    content = (np.abs(pixels - pixels[0, 0]).sum(axis=-1) > 30).mean()
    assert content > 0.05, content
