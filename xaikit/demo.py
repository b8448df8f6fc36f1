"""The main job: train LeNet on the bundled ``shapes`` data while explaining and tracking it.

``xaikit demo`` (or ``python -m xaikit demo``) runs :func:`run_demo`: LeNet learns the five
shape classes; every few epochs a :class:`~xaikit.trace.xai.Saliency` trace (in a
``RepeatScheduler``) explains the same eval images; a ``LabelTracker`` follows the per-sample
loss by class and an ``InstanceTracker`` the hardest and easiest eval samples; an
``ImageSaver`` writes every figure (and the data behind it); after training, a
model-parameter randomization test and deletion curves score the final maps
(``evaluation/``); ``summary.json`` records the final metrics, their history, the settings, the
files written and the time taken; and :func:`xaikit.viz.report` gathers everything into one
page, ``report.html``.
"""

from __future__ import annotations

import importlib
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from xaikit.checks import check_int
from xaikit.errors import XaikitValueError
from xaikit.files import write_json

__all__ = ["DEFAULTS", "OUT_EXPECTED", "out_dir_problem", "run_demo", "start_framework"]

DEFAULTS: dict[str, Any] = {
    "framework": "torch",
    "epochs": 7,
    "seed": 0,
    "out": "runs/demo",
    "n_train": 6000,
    "n_eval": 1000,
    "batch_size": 32,
    "saliency_every": 3,
    "saliency_samples": 6,
    "threads": 1,
}

_ARCH = {"torch": "xaikit.architecture.torch", "tf": "xaikit.architecture.tensorflow"}


def _write_json(path: Path, obj: Any) -> None:
    write_json(path, obj, default=_jsonable)


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def _scalar(value: Any) -> float | None:
    arr = np.asarray(value, dtype=object if isinstance(value, str) else None)
    if arr.dtype.kind in "iuf" and arr.size == 1:
        return round(float(arr.reshape(())), 6)
    return None


def _history(summary: Any) -> dict[str, dict[str, dict[int, float]]]:
    """The scalar metrics logged at two steps or more, ``{mode: {metric: {step: value}}}`` (times
    and one-off values such as the learning rate at the end left out)."""
    out: dict[str, dict[str, dict[int, float]]] = {}
    for mode, metrics in summary.history.items():
        for key, steps in metrics.items():
            if key == "epoch" or "time" in key or key == "steps/sec":
                continue
            values = {int(step): v for step, value in steps.items() if (v := _scalar(value)) is not None}
            if len(values) > 1:
                out.setdefault(mode, {})[key] = values
    return out


def _evaluate(model: Any, samples: dict[str, np.ndarray] | None, out_dir: Path, seed: int) -> list[Path]:
    """Score the final maps of the Saliency samples: the randomization test (vanilla gradients,
    cascading), deletion curves of vanilla gradients and SmoothGrad, and a comparison of four
    methods by every default metric of ``xk.evaluate.compare``; one file each in ``evaluation/``
    (a few seconds for LeNet)."""
    if samples is None:
        return []
    from xaikit.evaluate import compare, deletion, randomization_test, save_evaluation
    from xaikit.xai import explain

    x = np.asarray(samples["x"], dtype=np.float32)
    rand = randomization_test(model, x, method="vanilla", order="cascading", seed=seed)
    written = [save_evaluation(rand, out_dir, "randomization", title="Model-parameter randomization test")]
    # deletion's defaults (20 steps, to black) are those of compare's deletion_auc: the page shows
    # one deletion AUC per method, the same number in both sections
    curves = {
        "vanilla": deletion(model, x, explain(model, x, method="vanilla", seed=seed), seed=seed),
        "smoothgrad": deletion(
            model, x, explain(model, x, method="smoothgrad", nsamples=16, seed=seed), seed=seed
        ),
    }
    written.append(save_evaluation(curves, out_dir, "deletion", title="Deletion curves"))
    methods = ["vanilla", "smoothgrad", "integrated", "gradcam"]
    options = {"smoothgrad": {"nsamples": 16}, "integrated": {"nsamples": 16}}
    table = compare(model, x, methods, method_options=options, seed=seed)
    written.append(save_evaluation(table, out_dir, "compare", title="Which explanation can you trust?"))
    return written


def _final(summary: Any, mode: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, steps in summary.history.get(mode, {}).items():
        if not steps or key == "epoch" or "time" in key or key == "steps/sec":
            continue
        value = steps[max(steps)]
        arr = np.asarray(value, dtype=object if isinstance(value, str) else None)
        if arr.dtype.kind in "iuf" and arr.size == 1:
            out[key] = round(float(arr.reshape(())), 6)
    return out


OUT_EXPECTED = "a folder that can be created and written to"


def out_dir_problem(out: str | os.PathLike[str]) -> str | None:
    """Create the folder ``out`` if needed and try to write a file in it; None if that worked,
    else what went wrong (e.g. ``"'/proc/x' (No such file or directory)"``).

    Example:
        >>> import tempfile
        >>> out_dir_problem(tempfile.mkdtemp()) is None
        True
    """
    out_dir = Path(out)
    if out_dir.exists() and not out_dir.is_dir():
        return f"{str(out)!r} (an existing file)"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".xaikit-write-check-", dir=out_dir)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        return f"{str(out)!r} ({err.strerror or type(err).__name__})"
    return None


def start_framework(framework: str, threads: int | None = None) -> None:
    """Import ``framework`` (``"torch"`` or ``"tf"``), limit its CPU threads and run one tiny op.

    This is everything that makes a framework print its native start-up notices (TensorFlow:
    oneDNN, CUDA driver and ``cuInit`` lines), so a caller can run it with those filtered out;
    :func:`run_demo` then finds the framework ready.
    """
    from xaikit.backend import load_backend

    importlib.import_module(_ARCH[framework])
    bk = load_backend(framework)
    if threads is not None:
        bk.limit_threads(int(threads))
    bk.to_numpy(bk.zeros((1,), None))


def run_demo(
    framework: str = DEFAULTS["framework"],
    epochs: int = DEFAULTS["epochs"],
    seed: int = DEFAULTS["seed"],
    out: str | os.PathLike[str] = DEFAULTS["out"],
    n_train: int = DEFAULTS["n_train"],
    n_eval: int = DEFAULTS["n_eval"],
    batch_size: int = DEFAULTS["batch_size"],
    saliency_every: int = DEFAULTS["saliency_every"],
    saliency_samples: int = DEFAULTS["saliency_samples"],
    log_steps: int | None = 25,
    threads: int | None = DEFAULTS["threads"],
    report: bool = True,
) -> dict[str, Any]:
    """Train, explain and track LeNet on ``shapes``; write figures and ``summary.json`` to ``out``.

    Args:
        framework: ``"torch"`` or ``"tf"``.
        epochs: training epochs (Saliency runs at epoch 1 and every ``saliency_every`` after).
        seed: seeds the data, the model's initial weights, shuffling and the saliency noise.
        out: the output folder.
        n_train: training images.
        n_eval: evaluation images.
        batch_size: batch size.
        saliency_every: the RepeatScheduler period of the Saliency trace.
        saliency_samples: how many eval images Saliency explains.
        log_steps: print a training line every this many steps (None: quiet).
        threads: CPU threads for the framework's kernels, >= 1 (None: its default). One thread is the
            default: LeNet's small kernels gain little from more, and a busy machine loses a lot.
        report: write ``report.html`` (:func:`xaikit.viz.report`) into ``out`` at the end.

    Returns:
        The content of ``summary.json``, with ``"report"``: the page's path (when written).
    """
    if framework not in _ARCH:
        raise XaikitValueError(f"framework must be 'torch' or 'tf'; got {framework!r}")
    for name, value in (
        ("epochs", epochs),
        ("n_train", n_train),
        ("n_eval", n_eval),
        ("batch_size", batch_size),
    ):
        check_int(value, name, 1)
    check_int(threads, "threads", 1, allow_none=True)
    start = time.perf_counter()
    problem = out_dir_problem(out)
    if problem is not None:
        raise XaikitValueError(f"out must be {OUT_EXPECTED}; got {problem}")
    out_dir = Path(out)

    import xaikit as xk
    from xaikit.backend import load_backend, reduce_mean
    from xaikit.dataset.data import shapes
    from xaikit.op.numpyop import Minmax
    from xaikit.op.tensorop import CrossEntropy, LambdaOp, ModelOp, UpdateOp
    from xaikit.schedule import RepeatScheduler
    from xaikit.trace.io import ImageSaver
    from xaikit.trace.metric import Accuracy
    from xaikit.trace.xai import InstanceTracker, LabelTracker, Saliency

    arch = importlib.import_module(_ARCH[framework])
    bk = load_backend(framework)
    if threads is not None:
        bk.limit_threads(int(threads))
    bk.seed(seed)

    train, evals = shapes.load_data(n_train=n_train, n_eval=n_eval, seed=seed)
    train["index"] = np.arange(len(train), dtype=np.int64)
    evals["index"] = np.arange(len(evals), dtype=np.int64)
    size = int(train["x"].shape[1])
    pipeline = xk.Pipeline(
        train_data=train, eval_data=evals, batch_size=batch_size, ops=[Minmax("x", "x")], seed=seed
    )
    classes = len(shapes.label_mapping)
    # the model returns logits (the loss applies the softmax): an explanation of a saturated
    # probability is round-off (docs/degenerate.md), so every map of the demo explains a logit
    model = xk.build(
        lambda: arch.LeNet(input_shape=(size, size, 3), classes=classes, softmax=False), optimizer_fn="adam"
    )
    network = xk.Network(
        [
            ModelOp(model=model, inputs="x", outputs="y_pred"),
            CrossEntropy(inputs=("y_pred", "y"), outputs="sample_ce", average_loss=False, from_logits=True),
            LambdaOp(fn=reduce_mean, inputs="sample_ce", outputs="ce"),
            UpdateOp(model=model, loss_name="ce"),
        ]
    )
    off = [None] * (max(int(saliency_every), 1) - 1)
    saliency = Saliency(
        model,
        model_inputs="x",
        model_outputs="y_pred",
        class_key="y",
        label_mapping=shapes.label_mapping,
        samples=saliency_samples,
        seed=seed,
    )
    saver = ImageSaver(
        inputs=["saliency", "ce_by_label", "ce_by_index"], save_dir=out_dir, dpi=110, save_data=True
    )
    label_tracker = LabelTracker(
        label="y", metric="sample_ce", label_mapping=shapes.label_mapping, bounds=None, outputs="ce_by_label"
    )
    instance_tracker = InstanceTracker(
        index="index",
        metric="sample_ce",
        n_max_to_keep=4,
        n_min_to_keep=2,
        list_to_keep=[0],
        outputs="ce_by_index",
    )
    traces = [
        Accuracy(true_key="y", pred_key="y_pred"),
        RepeatScheduler([saliency, *off]),
        label_tracker,
        instance_tracker,
        saver,
    ]
    estimator = xk.Estimator(
        pipeline=pipeline, network=network, epochs=epochs, traces=traces, log_steps=log_steps
    )
    summary = estimator.fit()
    evaluated = _evaluate(model, saliency.collector.get("eval"), out_dir, seed)
    elapsed = time.perf_counter() - start

    pictures = [p.with_suffix(".png") for p in evaluated] + [
        p.with_name(f"{p.stem}_agreement.png") for p in evaluated
    ]
    written = [*saver.saved, *map(str, evaluated), *map(str, pictures)]
    files = sorted(os.path.relpath(p, out_dir) for p in dict.fromkeys(written) if Path(p).exists())
    result: dict[str, Any] = {
        "model": "LeNet",
        "data": f"shapes ({n_train} train / {n_eval} eval images, {classes} classes)",
        "framework": framework,
        "seed": seed,
        "settings": {
            "epochs": epochs,
            "n_train": n_train,
            "n_eval": n_eval,
            "batch_size": batch_size,
            "threads": threads,
            "image_size": size,
            "saliency_epochs": [
                e for e in range(1, epochs + 1) if (e - 1) % max(int(saliency_every), 1) == 0
            ],
            "saliency_samples": saliency_samples,
            "smoothing": saliency.smoothing,
            "integrating": [saliency.n_integration, saliency.n_smint],
            "classes": list(shapes.label_mapping),
        },
        "final_metrics": {"eval": _final(summary, "eval")},
        "history": _history(summary),
        "files": files,
        "time_sec": round(elapsed, 2),
        "python": platform.python_version(),
        "platform": sys.platform,
    }
    _write_json(out_dir / "summary.json", result)
    result["files"].append("summary.json")
    if report:
        from xaikit.viz import report as write_report

        result["report"] = str(write_report(out_dir))
        result["files"].append(os.path.relpath(result["report"], out_dir))
    return result
