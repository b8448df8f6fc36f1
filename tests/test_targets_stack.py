"""Stacked detection targets in the gradient CAMs (issue 28): ``Box(boxes (B, T, 4), k)`` runs
the layers below the CAM layer once per image (the layer's output is spread to the T targets'
rows), and its maps equal T single-box calls, chunked or not, on torch and Keras; a model that
does not let its rows be spread runs the repeated rows (same maps); the model is left as it was."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import xaikit as xk
from xaikit.backend import get_backend

torch = pytest.importorskip("torch")

GRAD_CAMS = ["gradcam", "gradcam++", "xgradcam", "layercam", "hirescam"]
S, K = 8, 3  # image side, classes
#: the four quadrants of the image: the anchors' fixed boxes (x0, y0, x1, y1)
ANCHORS = np.array([[0, 0, 4, 4], [4, 0, 8, 4], [0, 4, 4, 8], [4, 4, 8, 8]], dtype=np.float32)


class ConvYolo(torch.nn.Module):
    """(B, 1, 8, 8) -> (B, 4 anchors, 4 + K): a conv trunk (the CAM layer ``trunk``, 4x4), a 1x1
    head pooled to the 2x2 anchors. ``batch_of_x``: the boxes take x's batch size (so the rows
    above the layer cannot be spread); ``limit``: the head raises on more rows than that;
    ``skip``: the stem's output is added above the layer; ``pair``: returns a tuple (the
    detections and the scores), which a stacked call cannot repeat row by row."""

    def __init__(
        self, batch_of_x: bool = False, limit: int | None = None, skip: bool = False, pair: bool = False
    ) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU())
        self.trunk = torch.nn.Sequential(torch.nn.Conv2d(4, 6, 3, padding=1, stride=2), torch.nn.ReLU())
        self.head = torch.nn.Conv2d(6, K, 1)
        with torch.no_grad():  # positive evidence: no map is clipped to zero everywhere
            self.head.weight.abs_()
        self.register_buffer("anchors", torch.tensor(ANCHORS))
        self.batch_of_x, self.limit, self.skip, self.pair = batch_of_x, limit, skip, pair

    def forward(self, x: Any) -> Any:
        h = self.stem(x)
        a = self.trunk(h)
        if self.skip:  # a tensor from below the layer reaches the head (broadcast for one image)
            a = a + torch.nn.functional.avg_pool2d(h, 2)[:, :1]
        if self.limit is not None and a.shape[0] > self.limit:
            raise RuntimeError("the head takes at most limit rows")
        s = torch.nn.functional.avg_pool2d(self.head(a), 2).flatten(2).transpose(1, 2)  # (B, 4, K)
        n = x.shape[0] if self.batch_of_x else s.shape[0]
        out = torch.cat([self.anchors.expand(n, -1, -1), s], dim=-1)
        return (out, s) if self.pair else out


def images(batch: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.0, 1.0, (batch, 1, S, S)).astype(np.float32)


def stacked(out: np.ndarray, picks: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(B, T, 4) boxes of the anchors ``picks[b]`` (a little off, IoU > 0.5) and their predicted
    labels (B, T), from the model's output on the images."""
    boxes = np.stack([ANCHORS[p] for p in picks]) + np.float32(0.25)
    labels = np.stack([out[b, p, 4:].argmax(-1) for b, p in enumerate(picks)]).astype(np.int64)
    return boxes, labels


PICKS = [[0, 3, 3, 1], [2, 0, 1, 3], [3, 3, 0, 2]]  # T = 4 per image, repeats included


def torch_case(model: Any, batch: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = images(batch)
    with torch.no_grad():
        out = model(torch.tensor(x)).numpy()
    boxes, labels = stacked(out, PICKS[:batch])
    return x, boxes, labels


def close(a: np.ndarray, b: np.ndarray, tol: float = 1e-6) -> None:
    """Each map (the axes after the first two) equal to within ``tol`` of its largest value."""
    assert a.shape == b.shape
    a2, b2 = a.reshape(*a.shape[:2], -1), b.reshape(*b.shape[:2], -1)
    scale = np.maximum(np.abs(b2).max(axis=-1), 1e-12)
    err = np.abs(a2 - b2).max(axis=-1) / scale
    assert err.max() <= tol, err


def looped(model: Any, x: Any, boxes: np.ndarray, labels: np.ndarray, method: str, **kw: Any) -> np.ndarray:
    return np.stack(
        [
            xk.xai.explain(model, x, target=xk.targets.Box(boxes[:, t], labels[:, t]), method=method, **kw)
            for t in range(boxes.shape[1])
        ],
        axis=1,
    )


def rows_through(module: Any) -> tuple[list[int], Any]:
    """The rows of each call of ``module`` (a forward hook; the handle to remove it)."""
    seen: list[int] = []
    handle = module.register_forward_hook(lambda _m, args, _o: seen.append(int(args[0].shape[0])))
    return seen, handle


@pytest.mark.parametrize("method", [*GRAD_CAMS, "guided_gradcam"])
def test_torch_stacked_equals_looped(method: str) -> None:
    model = ConvYolo()
    x, boxes, labels = torch_case(model)
    seen, handle = rows_through(model.stem)
    try:
        maps = xk.xai.explain(model, x, target=xk.targets.Box(boxes, labels), method=method, layer="trunk")
    finally:
        handle.remove()
    assert maps.shape == ((3, 4, 1, S, S) if method == "guided_gradcam" else (3, 4, S, S))
    if method != "guided_gradcam":  # its guided backprop runs every row; its CAM part is shared
        assert max(seen) == 3, seen  # the trunk never ran the B*T = 12 repeated rows
    close(maps, looped(model, x, boxes, labels, method, layer="trunk"))


def test_the_trunk_runs_once_per_image() -> None:
    """Pinning the boxes, finding the layer and the fused pass: 3 + 1 + 3 rows through the stem
    (12 + 1 + 12 before, each image repeated T = 4 times)."""
    model = ConvYolo()
    x, boxes, labels = torch_case(model)
    seen, handle = rows_through(model.stem)
    head_rows, head_handle = rows_through(model.head)
    try:
        xk.xai.explain(model, x, target=xk.targets.Box(boxes, labels), method="gradcam", layer="trunk")
    finally:
        handle.remove()
        head_handle.remove()
    assert seen == [3, 1, 3]
    assert head_rows == [3, 1, 12]  # the head runs the 12 target rows


@pytest.mark.parametrize("max_batch", [1, 3, 5, 8])
def test_chunks_across_and_inside_groups_equal_one_chunk(max_batch: int) -> None:
    """T = 4: chunks of 3 and 5 rows end inside an image's group, 8 between groups, 1 per row."""
    model = ConvYolo()
    x, boxes, labels = torch_case(model)
    target = xk.targets.Box(boxes, labels)
    whole = xk.xai.explain(model, x, target=target, method="gradcam++", layer="trunk")
    seen, handle = rows_through(model.stem)
    try:
        parts = xk.xai.explain(
            model, x, target=target, method="gradcam++", layer="trunk", max_batch=max_batch
        )
    finally:
        handle.remove()
    close(parts, whole)
    assert sum(seen[2:]) == sum(
        len({r // 4 for r in range(r0, min(r0 + max_batch, 12))}) for r0 in range(0, 12, max_batch)
    )


def test_one_box_per_image() -> None:
    model = ConvYolo()
    x, boxes, labels = torch_case(model)
    maps = xk.xai.explain(
        model, x, target=xk.targets.Box(boxes[:, :1], labels[:, :1]), method="hirescam", layer="trunk"
    )
    one = xk.xai.explain(
        model, x, target=xk.targets.Box(boxes[:, 0], labels[:, 0]), method="hirescam", layer="trunk"
    )
    assert maps.shape == (3, 1, S, S)
    np.testing.assert_array_equal(maps[:, 0], one)


def test_rows_that_cannot_be_spread_run_repeated() -> None:
    """The boxes take x's batch size above the layer: the spread pass fails, the repeated rows
    run (the trunk sees the 12 rows) and the maps are the same."""
    model = ConvYolo(batch_of_x=True)
    x, boxes, labels = torch_case(model)
    seen, handle = rows_through(model.stem)
    try:
        maps = xk.xai.explain(model, x, target=xk.targets.Box(boxes, labels), method="gradcam", layer="trunk")
    finally:
        handle.remove()
    assert seen == [3, 1, 3, 12]  # pinning, the layer, the spread try, the repeated rows
    close(maps, looped(model, x, boxes, labels, "gradcam", layer="trunk"))


@pytest.mark.parametrize("max_batch", [2, 3, "auto"])
def test_a_skip_around_the_layer_runs_repeated_from_the_chunk_that_fails(max_batch: Any) -> None:
    """A chunk of one image broadcasts the skip (its rows spread, equal to the repeated ones); the
    first chunk of two images fails and it and the rest run repeated; the maps are the same."""
    model = ConvYolo(skip=True)
    x, boxes, labels = torch_case(model)
    maps = xk.xai.explain(
        model, x, target=xk.targets.Box(boxes, labels), method="gradcam", layer="trunk", max_batch=max_batch
    )
    close(maps, looped(model, x, boxes, labels, "gradcam", layer="trunk"))


def state(model: Any) -> dict[str, np.ndarray]:
    return {k: v.detach().clone().numpy() for k, v in model.state_dict().items()}


def hooks(model: Any) -> int:
    return sum(
        len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks) for m in model.modules()
    )


def test_the_model_is_unchanged_also_when_the_call_raises() -> None:
    model = ConvYolo()
    x, boxes, labels = torch_case(model)
    before = state(model)
    xk.xai.explain(model, x, target=xk.targets.Box(boxes, labels), method="layercam", layer="trunk")
    model.limit = 3  # the head refuses the 12 target rows: the spread and the repeated pass raise
    with pytest.raises(Exception, match="at most limit rows"):
        xk.xai.explain(model, x, target=xk.targets.Box(boxes, labels), method="gradcam", layer="trunk")
    after = state(model)
    assert before.keys() == after.keys() and all(np.array_equal(before[k], after[k]) for k in before)
    assert hooks(model) == 0
    assert all(p.grad is None for p in model.parameters())


# ---- Keras ---------------------------------------------------------------------------------


def keras_yolo(skip: bool = False) -> Any:
    """The Keras twin (channels last) of :class:`ConvYolo`; ``skip``: a 1x1 stride-2 convolution
    of the stem's output is added to the layer's output (a tensor from below the layer reaches
    the head: the rows cannot be spread)."""
    keras = pytest.importorskip("keras")
    keras.utils.set_random_seed(1)

    class Anchors(keras.layers.Layer):
        def call(self, s: Any) -> Any:
            a = keras.ops.convert_to_tensor(ANCHORS)[None]
            return keras.ops.concatenate([keras.ops.repeat(a, keras.ops.shape(s)[0], axis=0), s], axis=-1)

    inp = keras.Input((S, S, 1))
    h = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inp)
    a = keras.layers.Conv2D(6, 3, strides=2, padding="same", activation="relu", name="trunk")(h)
    if skip:
        a = keras.layers.Add()([a, keras.layers.Conv2D(6, 1, strides=2)(h)])
    head = keras.layers.Conv2D(K, 1)
    s = keras.layers.AveragePooling2D(2)(head(a))
    model = keras.Model(inp, Anchors()(keras.layers.Reshape((4, K))(s)))
    kernel, bias = head.get_weights()
    head.set_weights([np.abs(kernel), bias])  # positive evidence: no map is clipped to zero everywhere
    return model


def keras_case(model: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = images().transpose(0, 2, 3, 1)
    boxes, labels = stacked(np.asarray(model(x)), PICKS)
    return x, boxes, labels


@pytest.mark.parametrize("method", GRAD_CAMS)
def test_keras_stacked_equals_looped(method: str) -> None:
    model = keras_yolo()
    x, boxes, labels = keras_case(model)
    maps = xk.xai.explain(model, x, target=xk.targets.Box(boxes, labels), method=method, layer="trunk")
    assert maps.shape == (3, 4, S, S)
    close(maps, looped(model, x, boxes, labels, method, layer="trunk"))
    assert get_backend(model).traces(model, "cam_spread") == 1
    assert get_backend(model).traces(model, "cam_grad") == 1  # the looped calls only


@pytest.mark.parametrize(("max_batch", "skip"), [(3, False), (5, False), (3, True)])
def test_keras_chunks_inside_groups(max_batch: int, skip: bool) -> None:
    """Chunks that end inside an image's group, the last one padded (TF pads a short chunk);
    with a skip around the layer the one-image chunks spread and the others run repeated."""
    model = keras_yolo(skip)
    x, boxes, labels = keras_case(model)
    target = xk.targets.Box(boxes, labels)
    whole = xk.xai.explain(model, x, target=target, method="xgradcam", layer="trunk")
    parts = xk.xai.explain(model, x, target=target, method="xgradcam", layer="trunk", max_batch=max_batch)
    close(parts, whole)


def test_keras_skip_around_the_layer_runs_the_repeated_rows() -> None:
    model = keras_yolo(skip=True)
    weights = [w.copy() for w in model.get_weights()]
    x, boxes, labels = keras_case(model)
    maps = xk.xai.explain(model, x, target=xk.targets.Box(boxes, labels), method="gradcam", layer="trunk")
    bk = get_backend(model)
    assert bk.traces(model, "cam_spread") == 1 and bk.traces(model, "cam_grad") == 1  # tried, then repeated
    close(maps, looped(model, x, boxes, labels, "gradcam", layer="trunk"))
    assert all(np.array_equal(a, b) for a, b in zip(weights, model.get_weights()))
    assert "call" not in model.get_layer("trunk").__dict__  # the swapped call is put back


@pytest.mark.parametrize("form", ["yolo", "detr", "listed"])
def test_pinning_runs_each_image_once_for_every_output_form(form: str) -> None:
    """A tensor, a dict (DETR-style) and a torchvision list of dicts: the clean pass that pins
    the boxes runs the 2 images, not the 6 (image, box) rows, and the maps equal the loop."""
    from tests.test_targets_box import ANCHORS as BOX_ANCHORS
    from tests.test_targets_box import Detr, Listed, Yolo
    from tests.test_targets_box import images as box_images

    model = {"yolo": Yolo, "detr": Detr, "listed": Listed}[form]()
    x = box_images()
    boxes = (np.stack([BOX_ANCHORS[[0, 1, 1]], BOX_ANCHORS[[1, 0, 1]]]) + [0, 0, 0, 0.25]) / (
        8 if form == "detr" else 1
    )
    labels = np.ones((2, 3), np.int64)
    seen, handle = rows_through(model.cls)
    try:
        maps = xk.xai.explain(
            model, x, target=xk.targets.Box(boxes, labels), method="vanilla", magnitude=False
        )
    finally:
        handle.remove()
    assert seen[0] == 2 and seen[1:] == [6], seen  # pinning, then the 6 rows' gradients
    close(maps, looped(model, x, boxes, labels, "vanilla", magnitude=False))


@pytest.mark.parametrize("max_batch", ["auto", 5])
def test_torch_scorecam_scores_every_box_from_one_masked_pass(max_batch: Any) -> None:
    """The B x C masked images run once (3 x 6 rows through the stem, not 12 x 6), each pass's
    output scored by the image's 4 boxes; maps equal the loop's."""
    model = ConvYolo()
    x, boxes, labels = torch_case(model)
    seen, handle = rows_through(model.stem)
    try:
        maps = xk.xai.explain(
            model,
            x,
            target=xk.targets.Box(boxes, labels),
            method="scorecam",
            layer="trunk",
            max_batch=max_batch,
        )
    finally:
        handle.remove()
    assert sum(seen) == 3 + 1 + 3 + 3 * 6, seen  # pinning, the layer, its activations, the masked rows
    close(maps, looped(model, x, boxes, labels, "scorecam", layer="trunk"), 1e-5)


def test_keras_scorecam_stacked_equals_looped() -> None:
    model = keras_yolo()
    x, boxes, labels = keras_case(model)
    maps = xk.xai.explain(model, x, target=xk.targets.Box(boxes, labels), method="scorecam", layer="trunk")
    close(maps, looped(model, x, boxes, labels, "scorecam", layer="trunk"), 1e-5)


def test_scorecam_of_an_output_that_cannot_be_repeated_runs_every_box() -> None:
    """A tuple output: pinning and the masked passes fall back to the 12 repeated rows (every
    box's masked images, 12 x 6), with the same maps."""
    model = ConvYolo(pair=True)
    x = images()
    with torch.no_grad():
        out = model(torch.tensor(x))[0].numpy()
    boxes, labels = stacked(out, PICKS)
    seen, handle = rows_through(model.stem)
    try:
        maps = xk.xai.explain(
            model, x, target=xk.targets.Box(boxes, labels), method="scorecam", layer="trunk"
        )
    finally:
        handle.remove()
    # pinning tries the 3 images, then runs the 12 rows; the layer; the activations of the 3
    # images and their 18 masked rows, which cannot be repeated: the 12 rows' activations and
    # their 72 masked rows (and the forward-only plan's probe rows)
    assert seen[:6] == [3, 12, 1, 3, 18, 12] and sum(seen[6:]) >= 12 * 6, seen
    close(maps, looped(model, x, boxes, labels, "scorecam", layer="trunk"), 1e-5)


@pytest.mark.parametrize("method", ["gradcam", "xrai"])
def test_raw_results_of_a_stack_are_regrouped_per_image(method: str) -> None:
    """``raw=True`` with stacked boxes gives the method's full result with every per-row field
    regrouped (B, T, ...), as the maps are; before, it came back with B*T rows."""
    model = ConvYolo()
    x, boxes, labels = torch_case(model, batch=2)
    target = xk.targets.Box(boxes, labels)
    kw: dict[str, Any] = {"layer": "trunk"} if method == "gradcam" else {"steps": 4}
    raw = xk.xai.explain(model, x, target=target, method=method, raw=True, **kw)
    assert raw.maps.shape[:2] == (2, 4)
    for t in (0, 3):  # each box's raw maps are those of its own single-box call
        one = xk.xai.explain(
            model, x, target=xk.targets.Box(boxes[:, t], labels[:, t]), method=method, raw=True, **kw
        )
        close(raw.maps[:, t : t + 1], one.maps[:, None], tol=1e-5)
    if method == "xrai":
        assert len(raw.regions) == 2 and all(len(r) == 4 for r in raw.regions)
        assert raw.gains[1][3].shape == one.gains[1].shape
