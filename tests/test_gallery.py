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

from gallery.make_all import JOBS, NOT_PICTURES, TEST_PICTURES, Job, gallery_scripts

BACKENDS = {b.strip() for b in os.environ.get("XAIKIT_TEST_BACKENDS", "torch,tf").split(",") if b.strip()}


def test_every_gallery_script_has_a_job() -> None:
    assert sorted({job.script for job in JOBS} | set(NOT_PICTURES)) == gallery_scripts()
    assert not {job.script for job in JOBS} & set(NOT_PICTURES)


def test_every_picture_comes_from_one_job() -> None:
    pictures = [p for job in JOBS for p in job.outputs]
    assert len(set(pictures)) == len(pictures)
    assert all(p.endswith(".png") for p in pictures)


def test_every_docs_picture_is_painted_by_a_job() -> None:
    from gallery.make_all import DOCS_IMG

    on_disk = sorted(str(p.relative_to(DOCS_IMG)) for p in DOCS_IMG.rglob("*.png"))
    painted = {p for job in JOBS for p in job.outputs}
    assert [p for p in on_disk if p not in painted and p not in TEST_PICTURES] == []
    assert not painted & set(TEST_PICTURES)  # one source per picture
    for picture, how in TEST_PICTURES.items():  # a test's picture names the test that takes it
        assert (DOCS_IMG / picture).exists() and "pytest tests/" in how


@pytest.mark.slow
@pytest.mark.parametrize("job", JOBS, ids=[f"{job.script}-{job.out.removesuffix('.png')}" for job in JOBS])
def test_gallery_script_paints_a_picture(job: Job, tmp_path: Path) -> None:
    missing = set(job.frameworks) - BACKENDS
    if missing:
        pytest.skip(f"needs {sorted(missing)}, not in XAIKIT_TEST_BACKENDS")
    from gallery.make_all import DOCS_IMG, run

    def docs_files() -> dict[str, int]:
        return {str(p): p.stat().st_mtime_ns for p in DOCS_IMG.parent.rglob("*") if p.is_file()}

    before = docs_files()
    run(job, tmp_path, quick=True, timeout=600)
    assert docs_files() == before  # nothing written into docs/

    for picture in job.outputs:
        _check_picture(tmp_path / picture)


def _check_picture(out: Path) -> None:
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", out
    with Image.open(out) as img:
        width, height = img.size
        pixels = np.asarray(img.convert("RGB"), dtype=np.float64)
    assert width >= 100 and height >= 100, (out.name, width, height)
    assert pixels.std() > 5.0, out.name  # not one flat colour
    # something drawn across the picture: not a few pixels of content on a blank page
    content = (np.abs(pixels - pixels[0, 0]).sum(axis=-1) > 30).mean()
    assert content > 0.05, (out.name, content)
