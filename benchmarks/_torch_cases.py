"""Benchmark cases for a torch model: the fused bound, xaikit, captum, PAIR and a plain loop."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import torch
from _measure import Case, tuned_chunk
from _settings import Settings

import xaikit as xk

DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _gpu_hooks() -> dict[str, Any]:
    if DEV.type != "cuda":
        return {}
    return {
        "sync": torch.cuda.synchronize,
        "gpu_reset": torch.cuda.reset_peak_memory_stats,
        "gpu_peak": torch.cuda.max_memory_allocated,
    }


def data(batch: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + batch)
    return torch.rand(batch, 3, 32, 32, generator=g).to(DEV)


def _grad(model: Any, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    xs = x.detach().requires_grad_(True)
    out = model(xs)
    (g,) = torch.autograd.grad(out.gather(1, target[:, None]).sum(), xs)
    return g


def bound_cases(model: Any, name: str, st: Settings) -> list[Case]:
    """One fused forward+backward w.r.t. the inputs, ``chunk`` rows at a time, per chunk size and
    memory layout (the input tensor in contiguous or channels-last order)."""
    cases = []
    for layout in ("contiguous", "channels_last"):
        for chunk in st.chunks:
            x = data(chunk, seed=1)
            if layout == "channels_last":
                x = x.contiguous(memory_format=torch.channels_last)
            target = torch.arange(chunk, device=DEV) % 10
            n = max(2, math.ceil(st.bound_rows / chunk))

            def fn(x: torch.Tensor = x, target: torch.Tensor = target, n: int = n) -> None:
                for _ in range(n):
                    _grad(model, x, target)

            cases.append(
                Case(
                    f"bound chunk={chunk} {layout}",
                    "bound",
                    "torch",
                    name,
                    0,
                    n * chunk,
                    fn,
                    extra={"chunk": chunk, "layout": layout},
                    **_gpu_hooks(),
                )
            )
    return cases


def xaikit_cases(model: Any, name: str, batch: int, st: Settings, ref: bool = False) -> list[Case]:
    net = xk.xai.SaliencyNet(model, "x", "y_pred", seed=0)
    x = {"x": data(batch)}
    hooks = _gpu_hooks()
    if ref:
        return [
            Case(
                f"xaikit reference call (S={st.ref_s}, M={st.ref_m})",
                "xaikit",
                "torch",
                name,
                batch,
                batch * st.ref_s * st.ref_m,
                lambda: net.get_smoothed_masks(x, nsamples=st.ref_s, nintegration=st.ref_m),
                method="ref",
                handle=net,
                **hooks,
            )
        ]
    S, M, s2, m2 = st.sg_s, st.ig_m, st.smint_s, st.smint_m
    return [
        Case(
            f"xaikit SmInt (S={s2}, M={m2})",
            "xaikit",
            "torch",
            name,
            batch,
            batch * s2 * m2,
            lambda: net.get_smoothed_masks(x, nsamples=s2, nintegration=m2),
            method="smint",
            handle=net,
            **hooks,
        ),
        Case(
            "xaikit vanilla",
            "xaikit",
            "torch",
            name,
            batch,
            batch,
            lambda: net.get_masks(x),
            "vanilla",
            **hooks,
        ),
        Case(
            f"xaikit SmoothGrad (S={S})",
            "xaikit",
            "torch",
            name,
            batch,
            batch * S,
            lambda: net.get_smoothed_masks(x, nsamples=S),
            method="smoothgrad",
            **hooks,
        ),
        Case(
            f"xaikit IG (M={M})",
            "xaikit",
            "torch",
            name,
            batch,
            batch * M,
            lambda: net.get_integrated_masks(x, nsamples=M),
            method="integrated",
            **hooks,
        ),
    ]


def _predict(model: Any, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(x).argmax(1)


def _uniform_baseline(x: torch.Tensor, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    lo, hi = x.min(), x.max()
    return (lo + (hi - lo) * torch.rand(x.shape, generator=g)).to(DEV)


def captum_cases(
    model: Any, name: str, batch: int, st: Settings, chunk: int, memory: bool = False
) -> list[Case]:
    from captum.attr import IntegratedGradients, NoiseTunnel, Saliency

    x = data(batch)
    base = _uniform_baseline(x)
    sigma = float(0.15 * (x.max() - x.min()))  # captum's stdevs is absolute: 0.15 x range, like xaikit
    hooks = _gpu_hooks()
    S, M = st.smint_s, st.smint_m
    k = max(1, min(S, chunk // batch))  # noise samples per NoiseTunnel batch, so B*k <= chunk

    def nt(S: int, M: int, chunked: bool) -> Any:
        kwargs: dict[str, Any] = {}
        if chunked:
            kwargs = {"nt_samples_batch_size": max(1, min(S, chunk // batch)), "internal_batch_size": chunk}
        return NoiseTunnel(IntegratedGradients(model)).attribute(
            x,
            nt_type="smoothgrad_sq",
            nt_samples=S,
            stdevs=sigma,
            baselines=base,
            target=_predict(model, x),
            n_steps=M,
            **kwargs,
        )

    if memory:
        cases = []
        for S_, M_ in st.memory_sweep:
            for chunked in (False, True):
                label = "chunked" if chunked else "unchunked"
                cases.append(
                    Case(
                        f"captum NoiseTunnel(IG) {label} S={S_} M={M_}",
                        "memory",
                        "torch",
                        name,
                        batch,
                        batch * S_ * M_,
                        functools.partial(nt, S_, M_, chunked),
                        method="smint",
                        extra={"S": S_, "M": M_, "tool": f"captum NT(IG) {label}"},
                        **hooks,
                    )
                )
        return cases

    cases = [
        Case(
            "captum Saliency",
            "peer",
            "torch",
            name,
            batch,
            batch,
            lambda: Saliency(model).attribute(x, target=_predict(model, x)),
            method="vanilla",
            **hooks,
        ),
        Case(
            f"captum IG (M={st.ig_m}, internal_batch_size={chunk})",
            "peer",
            "torch",
            name,
            batch,
            batch * st.ig_m,
            lambda: IntegratedGradients(model).attribute(
                x, baselines=base, target=_predict(model, x), n_steps=st.ig_m, internal_batch_size=chunk
            ),
            method="integrated",
            **hooks,
        ),
        Case(
            f"captum NoiseTunnel(IG) chunked (S={S}, M={M}, nt_batch={k}, internal={chunk})",
            "peer",
            "torch",
            name,
            batch,
            batch * S * M,
            lambda: nt(S, M, True),
            method="smint",
            **hooks,
        ),
    ]
    if batch * S * M <= st.unchunked_max_rows:
        cases.append(
            Case(
                f"captum NoiseTunnel(IG) unchunked (S={S}, M={M})",
                "peer",
                "torch",
                name,
                batch,
                batch * S * M,
                lambda: nt(S, M, False),
                method="smint",
                **hooks,
            )
        )
    return cases


def pair_cases(model: Any, name: str, batch: int, st: Settings) -> list[Case]:
    """PAIR ``saliency`` through its ``call_model_function``, one image at a time as PAIR works."""
    import saliency.core as sc

    x = data(batch)
    xs = x.cpu().numpy()
    bases = _uniform_baseline(x).cpu().numpy()

    def call(xb: np.ndarray, call_model_args: Any = None, expected_keys: Any = None) -> dict[str, Any]:
        t = torch.as_tensor(np.asarray(xb, dtype=np.float32), device=DEV)
        target = torch.full((len(t),), int(call_model_args["target"]), device=DEV)
        return {sc.INPUT_OUTPUT_GRADIENTS: _grad(model, t, target).cpu().numpy()}

    def run(method: str) -> None:
        preds = _predict(model, x).cpu().numpy()
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

    hooks = _gpu_hooks()
    cases = [
        Case(
            "PAIR GradientSaliency",
            "peer",
            "torch",
            name,
            batch,
            batch,
            lambda: run("vanilla"),
            "vanilla",
            **hooks,
        ),
        Case(
            f"PAIR IntegratedGradients (M={st.ig_m}, batch_size={st.ig_m})",
            "peer",
            "torch",
            name,
            batch,
            batch * st.ig_m,
            lambda: run("integrated"),
            "integrated",
            **hooks,
        ),
        Case(
            f"PAIR IG.GetSmoothedMask (S={st.smint_s}, M={st.smint_m})",
            "peer",
            "torch",
            name,
            batch,
            batch * st.smint_s * st.smint_m,
            lambda: run("smint"),
            "smint",
            **hooks,
        ),
    ]
    if st.pair_smoothgrad:
        cases.append(
            Case(
                f"PAIR GradientSaliency.GetSmoothedMask (S={st.sg_s})",
                "peer",
                "torch",
                name,
                batch,
                batch * st.sg_s,
                lambda: run("smoothgrad"),
                "smoothgrad",
                **hooks,
            )
        )
    return cases


def loop_case(model: Any, name: str, batch: int, S: int, M: int, method: str) -> Case:
    """The reference's SmInt walk: one clean pass, then for each of S-1 noise samples a fresh
    uniform baseline and M path steps, one batch-sized forward+backward pass each."""
    x = data(batch)

    def run() -> torch.Tensor:
        target = _predict(model, x)
        g = _grad(model, x, target)
        acc = g * g
        lo, hi = float(x.min()), float(x.max())
        for _ in range(S - 1):
            base = lo + (hi - lo) * torch.rand_like(x)
            total = torch.zeros_like(x)
            for alpha in np.linspace(0.0, 1.0, M):
                total += _grad(model, base + float(alpha) * (x - base), target)
            ig = total * (x - base)
            acc += ig * ig
        return acc / S

    passes = 1 + (S - 1) * M
    return Case(
        f"sequential loop (S={S}, M={M}: {passes} passes of B={batch})",
        "loop",
        "torch",
        name,
        batch,
        batch * passes,
        run,
        method=method,
        **_gpu_hooks(),
    )


def memory_cases(model: Any, name: str, st: Settings) -> list[Case]:
    net = xk.xai.SaliencyNet(model, "x", "y_pred", seed=0)
    x = {"x": data(st.memory_b)}
    cases = [
        Case(
            f"xaikit SmInt S={S} M={M}",
            "memory",
            "torch",
            name,
            st.memory_b,
            st.memory_b * S * M,
            functools.partial(net.get_smoothed_masks, x, nsamples=S, nintegration=M),
            method="smint",
            extra={"S": S, "M": M, "tool": "xaikit"},
            **_gpu_hooks(),
        )
        for S, M in st.memory_sweep
    ]
    return cases + captum_cases(model, name, st.memory_b, st, tuned_chunk(model)[0], memory=True)
