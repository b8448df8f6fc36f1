"""Benchmark cases for a Keras model: the fused bound (tf.function, and XLA as its own line),
xaikit, PAIR and an eager loop like the reference's."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import tensorflow as tf
from _measure import Case
from _settings import Settings

import xaikit as xk


def data(batch: int, seed: int = 0) -> tf.Tensor:
    rng = np.random.default_rng(seed + batch)
    return tf.constant(rng.random((batch, 32, 32, 3), dtype=np.float32))


def _grad_eager(model: Any, x: tf.Tensor, target: tf.Tensor) -> tf.Tensor:
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = model(x, training=False)
        score = tf.gather(out, target, axis=1, batch_dims=1)
    return tape.gradient(score, x)


def bound_cases(model: Any, name: str, st: Settings) -> list[Case]:
    """One fused forward+backward w.r.t. the inputs per chunk, in a ``tf.function`` (traced once
    per chunk size, during warm-up), and with ``jit_compile=True`` (XLA) as its own line."""
    cases = []
    configs = [(c, False) for c in st.chunks] + [(c, True) for c in st.xla_chunks]
    for chunk, xla in configs:
        step = tf.function(lambda x, t: _grad_eager(model, x, t), jit_compile=xla)
        x = data(chunk, seed=1)
        target = tf.constant(np.arange(chunk) % 10, dtype=tf.int64)
        n = max(2, math.ceil(st.bound_rows / chunk))

        def fn(step: Any = step, x: tf.Tensor = x, target: tf.Tensor = target, n: int = n) -> None:
            for _ in range(n):
                g = step(x, target)
            g.numpy()

        cases.append(
            Case(
                f"bound chunk={chunk} tf.function{' XLA' if xla else ''}",
                "bound",
                "tf",
                name,
                0,
                n * chunk,
                fn,
                extra={"chunk": chunk, "layout": "xla" if xla else "tf.function"},
            )
        )
    return cases


def xaikit_cases(model: Any, name: str, batch: int, st: Settings, ref: bool = False) -> list[Case]:
    net = xk.xai.SaliencyNet(model, "x", "y_pred", seed=0)
    x = {"x": data(batch)}
    if ref:
        return [
            Case(
                f"xaikit reference call (S={st.ref_s}, M={st.ref_m})",
                "xaikit",
                "tf",
                name,
                batch,
                batch * st.ref_s * st.ref_m,
                lambda: net.get_smoothed_masks(x, nsamples=st.ref_s, nintegration=st.ref_m),
                method="ref",
                handle=net,
            )
        ]
    S, M, s2, m2 = st.sg_s, st.ig_m, st.smint_s, st.smint_m
    return [
        Case(
            f"xaikit SmInt (S={s2}, M={m2})",
            "xaikit",
            "tf",
            name,
            batch,
            batch * s2 * m2,
            lambda: net.get_smoothed_masks(x, nsamples=s2, nintegration=m2),
            method="smint",
            handle=net,
        ),
        Case("xaikit vanilla", "xaikit", "tf", name, batch, batch, lambda: net.get_masks(x), "vanilla"),
        Case(
            f"xaikit SmoothGrad (S={S})",
            "xaikit",
            "tf",
            name,
            batch,
            batch * S,
            lambda: net.get_smoothed_masks(x, nsamples=S),
            method="smoothgrad",
        ),
        Case(
            f"xaikit IG (M={M})",
            "xaikit",
            "tf",
            name,
            batch,
            batch * M,
            lambda: net.get_integrated_masks(x, nsamples=M),
            method="integrated",
        ),
    ]


def _predict(model: Any, x: tf.Tensor) -> np.ndarray:
    return np.argmax(model(x, training=False).numpy(), axis=1)


def _uniform_baseline(x: tf.Tensor, seed: int = 0) -> np.ndarray:
    xs = x.numpy()
    rng = np.random.default_rng(seed)
    return rng.uniform(xs.min(), xs.max(), xs.shape).astype(np.float32)


def pair_cases(model: Any, name: str, batch: int, st: Settings) -> list[Case]:
    """PAIR ``saliency`` with an eager ``GradientTape`` call_model_function, as in PAIR's TF2
    examples, one image at a time."""
    import saliency.core as sc

    x = data(batch)
    xs = x.numpy()
    bases = _uniform_baseline(x)

    def call(xb: np.ndarray, call_model_args: Any = None, expected_keys: Any = None) -> dict[str, Any]:
        t = tf.constant(np.asarray(xb, dtype=np.float32))
        target = tf.fill((t.shape[0],), tf.constant(int(call_model_args["target"]), tf.int64))
        return {sc.INPUT_OUTPUT_GRADIENTS: _grad_eager(model, t, target).numpy()}

    def run(method: str) -> None:
        preds = _predict(model, x)
        grad_sal, ig = sc.GradientSaliency(), sc.IntegratedGradients()
        for i in range(batch):
            args = {"target": int(preds[i])}
            if method == "vanilla":
                grad_sal.GetMask(xs[i], call, args)
            elif method == "smoothgrad":
                grad_sal.GetSmoothedMask(xs[i], call, args, stdev_spread=0.15, nsamples=st.sg_s)
            elif method == "integrated":
                ig.GetMask(xs[i], call, args, x_baseline=bases[i], x_steps=st.ig_m, batch_size=st.ig_m)
            else:
                ig.GetSmoothedMask(
                    xs[i],
                    call,
                    args,
                    stdev_spread=0.15,
                    nsamples=st.smint_s,
                    magnitude=True,
                    x_baseline=bases[i],
                    x_steps=st.smint_m,
                    batch_size=st.smint_m,
                )

    cases = [
        Case("PAIR GradientSaliency", "peer", "tf", name, batch, batch, lambda: run("vanilla"), "vanilla"),
        Case(
            f"PAIR IntegratedGradients (M={st.ig_m}, batch_size={st.ig_m})",
            "peer",
            "tf",
            name,
            batch,
            batch * st.ig_m,
            lambda: run("integrated"),
            "integrated",
        ),
        Case(
            f"PAIR IG.GetSmoothedMask (S={st.smint_s}, M={st.smint_m})",
            "peer",
            "tf",
            name,
            batch,
            batch * st.smint_s * st.smint_m,
            lambda: run("smint"),
            "smint",
        ),
    ]
    if st.pair_smoothgrad:
        cases.append(
            Case(
                f"PAIR GradientSaliency.GetSmoothedMask (S={st.sg_s})",
                "peer",
                "tf",
                name,
                batch,
                batch * st.sg_s,
                lambda: run("smoothgrad"),
                "smoothgrad",
            )
        )
    return cases


def loop_case(model: Any, name: str, batch: int, S: int, M: int, method: str) -> Case:
    """The reference's SmInt walk in EAGER mode, as the reference runs it: one clean pass, then
    for each of S-1 noise samples a fresh uniform baseline and M path steps, one batch-sized
    forward+backward pass each."""
    x = data(batch)

    def run() -> tf.Tensor:
        target = tf.constant(_predict(model, x), tf.int64)
        g = _grad_eager(model, x, target)
        acc = g * g
        lo, hi = float(tf.reduce_min(x)), float(tf.reduce_max(x))
        for _ in range(S - 1):
            base = tf.random.uniform(x.shape, lo, hi)
            total = tf.zeros_like(x)
            for alpha in np.linspace(0.0, 1.0, M):
                total += _grad_eager(model, base + float(alpha) * (x - base), target)
            ig = total * (x - base)
            acc += ig * ig
        return (acc / S).numpy()

    passes = 1 + (S - 1) * M
    return Case(
        f"eager sequential loop (S={S}, M={M}: {passes} passes of B={batch})",
        "loop",
        "tf",
        name,
        batch,
        batch * passes,
        run,
        method=method,
    )


def memory_cases(model: Any, name: str, st: Settings) -> list[Case]:
    net = xk.xai.SaliencyNet(model, "x", "y_pred", seed=0)
    x = {"x": data(st.memory_b)}
    return [
        Case(
            f"xaikit SmInt S={S} M={M}",
            "memory",
            "tf",
            name,
            st.memory_b,
            st.memory_b * S * M,
            functools.partial(net.get_smoothed_masks, x, nsamples=S, nintegration=M),
            method="smint",
            extra={"S": S, "M": M, "tool": "xaikit"},
        )
        for S, M in st.memory_sweep
    ]


def traces(model: Any) -> int:
    """Traces of the model's gradient-sweep steps: whole-slice chunks (one graph each, kind
    ``"sweep"``) and the eager-built ones (kind ``"grad"``)."""
    from xaikit.backend import get_backend

    bk = get_backend(model)
    return int(bk.traces(model, "sweep") + bk.traces(model, "grad"))
