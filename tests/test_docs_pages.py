"""The guide pages of docs/ run as a user would copy them: every ``python`` block, in order, in one
namespace, in a temporary folder.

Reference pages show fragments that use a ``model`` or an ``x`` the prose assumes; ``SETUP``
defines those (a small model, a small batch) before the page's blocks run. ``SUBS`` shrinks the
data and epochs of the training pages (same code, fewer images), so that each page takes
seconds. docs/own_models.md has its own test (tests/test_own_models_page.py), and
docs/tutorial_lightning.md runs in tests/test_lightning.py. docs/getting_started.md has no
``python`` block (its commands run in tests/test_demo.py).
"""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

BACKENDS = {b.strip() for b in os.environ.get("XAIKIT_TEST_BACKENDS", "torch,tf").split(",") if b.strip()}
needs_torch = pytest.mark.skipif("torch" not in BACKENDS, reason="torch is not in XAIKIT_TEST_BACKENDS")
needs_tf = pytest.mark.skipif("tf" not in BACKENDS, reason="tf is not in XAIKIT_TEST_BACKENDS")

DOCS = Path(__file__).resolve().parent.parent / "docs"

# a small torch classifier and batch for the reference pages' fragments
TORCH_MODEL = """
import numpy as np
import torch
import xaikit as xk

torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 8, 3, padding=1, padding_mode="replicate"), torch.nn.ReLU(),
    torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(), torch.nn.Linear(128, 5),
).eval()
rng = np.random.default_rng(0)
x = rng.random((4, 3, 32, 32), dtype=np.float32)
y = np.array([0, 1, 2, 3])
mask = np.zeros((4, 32, 32), dtype=bool)
mask[:, 8:24, 8:24] = True
masks = mask
train_images = rng.random((16, 3, 32, 32), dtype=np.float32)
"""

# a detector of two fixed boxes (the first given), class 2 the most likely: (B, N, 4 + K)
DETECTOR = """

class Detector(torch.nn.Module):
    def forward(self, x):
        b = x.shape[0]
        boxes = torch.tensor([[{box}], [0.0, 0.0, 8.0, 8.0]]).expand(b, 2, 4)
        scores = (x.mean(dim=(2, 3)) + torch.tensor([0.0, 0.0, 5.0]))[:, None, :].expand(b, 2, 3)
        return torch.cat([boxes, scores], dim=-1)


detector = Detector()
"""

SETUP: dict[str, str] = {
    "evaluate": TORCH_MODEL
    + """
x, y, mask = x[:, :, :16, :16], np.array([1, 1, 0, 2]), mask[:, :16, :16]   # 256 pixels: subset_size=224 fits
masks = mask
run_folder = "runs/evaluate"
methods = ["vanilla", "smoothgrad", "integrated", "gradcam"]
my_I = rng.normal(0, 0.1, (5, *x.shape)).astype(np.float32)
""",
    "rules": TORCH_MODEL
    + """
segmenter = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(4, 4, 1))
images = x
road_mask = mask[0]
""",
    "saliency": TORCH_MODEL
    + """
batch = {"x": x}
segmenter = torch.nn.Conv2d(3, 4, 1)   # (B, K, H, W) scores
box = mask[0]


class Heads(torch.nn.Module):   # returns a dict, as a Hugging Face model's output is one
    def __init__(self):
        super().__init__()
        self.body = model

    def forward(self, pixel_values, attention_mask=None, return_dict=True):
        logits = self.body(pixel_values)
        return {"aux": logits[:, :2], "logits": logits} if return_dict else logits


model = hf_model = two_heads = Heads().eval()
""",
    "gradient_methods": TORCH_MODEL,
    "imgdata": TORCH_MODEL
    + """
batch = {"x": x}
res = {"saliency": rng.random((4, 1, 32, 32))}
y, y_pred = ["a", "b", "c", "d"], ["a", "b", "d", "d"]
m = mask[:, None].astype(float)
blended = xk.viz.overlay(x, res["saliency"][:, 0])
labels, raw = y, rng.normal(size=(4, 32, 32))
mask = res["saliency"][:, 0]
""",
    "tasks": TORCH_MODEL
    + """
seg_model = torch.nn.Conv2d(3, 5, 1)
with torch.no_grad():
    seg_model.bias[3] = 5.0   # class 3 predicted everywhere

"""
    + DETECTOR.format(box="12.0, 20.0, 60.0, 64.0"),
    "dataset": TORCH_MODEL
    + """
from pathlib import Path

from PIL import Image

x = rng.random((8, 3, 32, 32), dtype=np.float32)
data = images = x
Path("photos").mkdir()
for i in range(3):   # three small RGB JPEGs, 40 x 48
    Image.fromarray((rng.random((40, 48, 3)) * 255).astype(np.uint8)).save(f"photos/{i}.jpg")
boxes = np.tile(np.array([4.0, 4.0, 20.0, 24.0]), (8, 1))
labels = np.full(8, 2)   # the class the detector finds

"""
    + DETECTOR.format(box="2.0, 4.0, 18.0, 24.0"),
}

# the training pages, with fewer images and epochs
SUBS: dict[str, dict[str, str]] = {
    "index": {"epochs=7": "epochs=1", "shapes.load_data()": "shapes.load_data(n_train=256, n_eval=64)"},
    # the fragments name layers of VGG-16, ResNet-18, MobileNetV2 and a ViT: here, the set-up's
    "rules": {
        '"features.28"': '"2"',
        '"classifier.6"': '"6"',
        '"layer4.1.conv2"': '"2"',
        '"block_16_project"': '"2"',
        '"stem.conv"': '"0"',
    },
    # 3 epochs: the Saliency and GradCAM traces still run twice (epochs 1 and 3); fewer masks
    # one epoch each (the digits data stay whole: 1,797 images)
    "tutorial_traces": {
        "epochs=4": "epochs=1",
        "epochs=2, traces=traces, log_steps=1000)": "epochs=1, traces=traces, log_steps=1000)",
    },
    "pointing-game": {
        "shapes_pairs(4000, 200, 0)": "shapes_pairs(256, 32, 0)",
        "train(data, False, 8, 0)": "train(data, False, 1, 0)",
        "n_train=4000, n_eval=200": "n_train=64, n_eval=16",
    },
    "dataset": {".resize((224, 224))": ".resize((32, 32))"},  # the transform's photos: SmInt at 32 px
    "tutorial_xai": {
        "n_train=6000, n_eval=500": "n_train=256, n_eval=64",
        "epochs=5": "epochs=3",
        "samples=5, label_mapping=label_mapping": "samples=2, smoothing=4, integrating=(8, 2), label_mapping=label_mapping",
        "nsamples=6, nintegration=100": "nsamples=2, nintegration=8",
    },
}


# blocks that need a download (pretrained weights): not run here
SKIP_BLOCKS: dict[str, set[int]] = {"tasks": {4}}  # CLIP from the Hugging Face hub


def page_blocks(name: str) -> list[str]:
    """The ``python`` blocks of docs/<name>.md, in order, those in tabs and lists dedented."""
    text = (DOCS / f"{name}.md").read_text(encoding="utf-8")
    found = re.findall(r"^([ \t]*)```python\n(.*?)^\1```", text, flags=re.S | re.M)
    blocks = [textwrap.dedent(block) for _, block in found]
    for old, new in SUBS.get(name, {}).items():
        assert any(old in b for b in blocks), f"docs/{name}.md no longer says {old!r}"
        blocks = [b.replace(old, new) for b in blocks]
    return blocks


def run_page(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, skip: frozenset[int] = frozenset()
) -> dict:
    """Runs the page's blocks in order; ``skip``: more block numbers (from 1) not to run."""
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": f"docs_{name}"}
    if name in SETUP:
        exec(compile(SETUP[name], f"<set-up of docs/{name}.md>", "exec"), namespace)
    for i, block in enumerate(page_blocks(name)):
        if i + 1 in SKIP_BLOCKS.get(name, set()) | skip:
            continue
        exec(compile(block, f"docs/{name}.md, block {i + 1}", "exec"), namespace)
    return namespace


def test_getting_started_has_no_python_block() -> None:
    """Its commands run in tests/test_demo.py; a python block added later needs a test here."""
    assert page_blocks("getting_started") == []


@needs_torch
def test_saliency(tmp_path, monkeypatch) -> None:
    ns = run_page("saliency", tmp_path, monkeypatch)
    assert ns["attr"].shape == ns["x"].shape


@needs_torch
@pytest.mark.slow  # guided IG at 200 steps and XRAI: about a minute
def test_gradient_methods(tmp_path, monkeypatch) -> None:
    ns = run_page("gradient_methods", tmp_path, monkeypatch)
    assert ns["maps"].shape == (4, 32, 32)


@needs_torch
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::xaikit.DegenerateMapWarning")  # Grad-CAM of a random model
def test_evaluate(tmp_path, monkeypatch) -> None:
    ns = run_page("evaluate", tmp_path, monkeypatch)
    assert ns["loc"]["energy"].shape == (4,)  # one score per image
    assert (tmp_path / "compare.png").stat().st_size > 10_000


@needs_torch
def test_rules(tmp_path, monkeypatch) -> None:
    ns = run_page("rules", tmp_path, monkeypatch)
    assert ns["attr"].shape == ns["x"].shape


@needs_torch
def test_imgdata(tmp_path, monkeypatch) -> None:
    ns = run_page("imgdata", tmp_path, monkeypatch)
    assert (tmp_path / "grid.png").stat().st_size > 10_000
    assert ns["arr"].ndim == 4 and ns["arr"].shape[0] == 1 and ns["arr"].dtype == np.uint8


@needs_torch
def test_tasks(tmp_path, monkeypatch) -> None:
    ns = run_page("tasks", tmp_path, monkeypatch)
    assert ns["maps"].shape == ns["x"].shape


@needs_torch
@pytest.mark.slow  # four short trainings (256 images, 3 epochs each) and the traces' figures
def test_tutorial_xai(tmp_path, monkeypatch) -> None:
    ns = run_page("tutorial_xai", tmp_path, monkeypatch)
    saved = tmp_path / "tutorial_xai"
    for name in (
        "saliency_eval_epoch_1.png",
        "saliency_eval_epoch_3.png",  # RepeatScheduler([trace, None]): epochs 1, 3, ...
        "gradcam_eval_epoch_1.png",
        "gradcam_eval_epoch_3.png",
        "ce_vs_y_train_epoch_3.png",  # the trackers write at the end of training
        "ce_vs_idx_train_epoch_3.png",
    ):
        assert (saved / name).stat().st_size > 10_000, name
    assert not (saved / "saliency_eval_epoch_2.png").exists()
    assert (tmp_path / "smint_without_traces.png").stat().st_size > 10_000
    assert (tmp_path / "hardest_sample.png").stat().st_size > 1_000
    assert len(ns["tracker"].summaries) == 5  # one line per class
    assert {10, 18} <= {s.name for s in ns["instances"].summaries}


@needs_torch
@needs_tf
@pytest.mark.slow  # the Keras ViT block imports TensorFlow: about 35 s in all
@pytest.mark.filterwarnings("ignore::xaikit.DegenerateMapWarning")  # Grad-CAM of random weights
def test_transformers(tmp_path, monkeypatch) -> None:
    pytest.importorskip("transformers")
    ns = run_page("transformers", tmp_path, monkeypatch)
    assert ns["maps"].shape == (2, 32, 48)  # the Swin block's, on the 32 x 48 images
    assert ns["rollout"].shape == ns["relevance"].shape == ns["cam"].shape == (4, 32, 32)
    assert np.isfinite(ns["rollout"]).all()


@needs_torch
@pytest.mark.slow  # the Keras loop imports TensorFlow: about 40 s
def test_inspect(tmp_path, monkeypatch) -> None:
    keras = "tf" in BACKENDS  # block 2 is the Keras loop
    ns = run_page("inspect", tmp_path, monkeypatch, skip=frozenset() if keras else frozenset({2}))
    relu = ns["relu"]
    assert sorted(relu.step.unique()) == [0, 10]  # 20 steps, every_n_steps=10
    assert ((relu.zero_frac >= 0) & (relu.zero_frac <= 1)).all()
    assert (tmp_path / "std.png").stat().st_size > 10_000
    if keras:
        tf_log = ns["xk"].inspect.read_log(tmp_path / "runs/inspect/lenet-tf")
        assert {"input", "output", "weight", "grad"} <= set(tf_log.kind)
    # the custom statistics of block 3 take effect on the next recorded step
    import torch

    tracker, model = ns["tracker"], ns["model"]
    model(torch.zeros(2, 3, 32, 32)).sum().backward()
    tracker.step()
    tracker.detach()
    df = tracker.df
    assert "l1" in df[df.kind == "output"].columns and df[df.kind == "output"].l1.notna().all()
    assert df[df.kind == "grad"].numel.notna().all()


@needs_torch
def test_dataset(tmp_path, monkeypatch) -> None:
    ns = run_page("dataset", tmp_path, monkeypatch)
    assert ns["maps"].shape == (8, 3, 32, 32)  # runs/audit.zarr, written by the first block
    assert len(ns["df"]) == 8 and len(ns["their_maps"]) == 8
    assert ns["res"].attributions.shape == (8, 3, 32, 32)  # the detector's run, the last one
    assert ns["res"].targets_of([3, 7]).box.shape == (2, 4)
    photos = ns["xk"].xai.DatasetExplanation.open(tmp_path / "runs/photos.zarr")
    assert photos.attributions.shape == (3, 32, 32, 3)  # the transform's channel-last images


@needs_torch
@pytest.mark.filterwarnings("ignore::xaikit.DegenerateMapWarning")  # Grad-CAM of a briefly trained LeNet
def test_pointing_game(tmp_path, monkeypatch, capsys) -> None:
    ns = run_page("pointing-game", tmp_path, monkeypatch)
    assert ns["hit"].dtype == bool and 0 <= ns["accuracy"] <= 1
    assert ns["tolerance"] == pytest.approx(15 * 32 / 224)
    assert ns["masks"].shape == (len(ns["target"]), 64, 64)  # the scenes' pairs (block 2)
    assert len(capsys.readouterr().out.splitlines()) == 5  # the side check prints five lines


@needs_torch
@pytest.mark.slow  # two short trainings (torch and Keras, 256 images, 1 epoch): about 25 s
def test_index(tmp_path, monkeypatch) -> None:
    keras = "tf" in BACKENDS  # the second tab is the Keras version
    ns = run_page("index", tmp_path, monkeypatch, skip=frozenset() if keras else frozenset({2}))
    assert (tmp_path / "smint.png").stat().st_size > 10_000
    assert ns["res"]["saliency"].shape == ((4, 32, 32, 1) if keras else (4, 1, 32, 32))
    assert ns["attr"].shape == ns["x"].shape and ns["delta"].shape == (4,)


@needs_torch
def test_tutorial_traces(tmp_path, monkeypatch, capsys) -> None:
    run_page("tutorial_traces", tmp_path, monkeypatch)
    out = capsys.readouterr().out
    assert "f2_score:" in out  # FBetaScore, logged at the end of the evaluation epoch
    assert "f1_score:" in out and "xaikit-Test:" in out  # the vector metric, and estimator.test()
    assert out.count("Global Step Index:") == 4  # MonitorPred: two epochs of two batches
