"""Saliency benchmark: xaikit against the fused forward+backward bound and against its peers.

Usage:
    python benchmarks/saliency_bench.py [--quick] [--json out.json] [--out docs/benchmarks.md]
        [--frameworks torch,tf] [--models lenet,resnet] [--batches 16,64] [--reps 3]

Every figure is measured in one run, on the same model and batch, with interleaved repetitions
(each round calls every case once, in the same order) and reported as a median; ratios are
computed between medians of the same run. See ``benchmarks/README.md`` for what each line means.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import importlib
import json
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

from _measure import Case, machine, rounds, trimmed_malloc, tuned_chunk, warm  # noqa: E402
from _models import make_model  # noqa: E402
from _settings import Settings  # noqa: E402

MB = 2**20


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("torch", "tensorflow", "tensorflow-cpu", "keras", "captum", "saliency", "numpy"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    try:
        out["xaikit commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return out


# ---- running ------------------------------------------------------------------------------------
def run_model(fw: str, name: str, st: Settings) -> dict[str, Any]:
    """All cases of one framework and model, interleaved and timed (no memory sampler: see
    :func:`memory_phase`); returns cases and side facts."""
    mod = importlib.import_module("_torch_cases" if fw == "torch" else "_tf_cases")
    model = make_model(fw, name)
    facts: dict[str, Any] = {}

    xaikit: list[Case] = []
    for b in sorted(st.batches, reverse=True):  # SmInt at the largest B first: it tunes the chunk
        xaikit += mod.xaikit_cases(model, name, b, st)
    xaikit += mod.xaikit_cases(model, name, st.ref_b, st, ref=True)
    first = xaikit[0]
    t0 = time.perf_counter()
    first.fn()
    first.warmed = True
    log(f"  warm-up {fw}/{name} {first.name} (tunes max_batch='auto'): {time.perf_counter() - t0:.2f}s")
    chunk, layout = tuned_chunk(model)
    if fw == "tf":  # TF pads every chunk to the planned size, so that is the size it runs
        layout = "tf.function"
    facts["xaikit_chunk"] = chunk
    facts["xaikit_layout"] = layout
    facts["xaikit_last_chunks"] = list(first.handle.last_chunks)
    if chunk not in st.chunks:
        st = Settings(**{**st.__dict__, "chunks": (*st.chunks, chunk)})

    cases: list[Case] = mod.bound_cases(model, name, st) + xaikit
    for b in st.batches:
        if fw == "torch":
            cases += mod.captum_cases(model, name, b, st, chunk)
        if st.pair:
            cases += mod.pair_cases(model, name, b, st)
        if st.smint_loop:
            cases.append(mod.loop_case(model, name, b, st.smint_s, st.smint_m, "smint"))
    cases.append(mod.loop_case(model, name, st.ref_b, st.ref_s, st.ref_m, "ref"))
    memory_runs = st.memory and name == st.models[0]

    warm(cases, log)
    if fw == "tf":
        facts["traces_after_warmup"] = mod.traces(model)
    rounds(cases, st.reps, log, measure_memory=False)
    if fw == "tf":
        facts["traces_after_rounds"] = mod.traces(model)
        shapes = (*st.batches, st.ref_b, *((st.memory_b,) if memory_runs else ()))
        facts["traces_expected"] = len({_padded(b, chunk) for b in shapes})
    return {
        "cases": cases,
        "facts": facts,
        "fw": fw,
        "name": name,
        "model": model,
        "memory_runs": memory_runs,
    }


def memory_phase(res: dict[str, Any], st: Settings) -> None:
    """The peak-memory part of one framework and model (after every timed round of the run and
    :func:`trimmed_malloc`): one untimed call of each case under the resident-set sampler, then
    the memory sweep (one call of each size)."""
    fw, name, model, facts = res["fw"], res["name"], res["model"], res["facts"]
    mod = importlib.import_module("_torch_cases" if fw == "torch" else "_tf_cases")
    for case in res["cases"]:
        case.memory_once()
    if fw == "tf":  # every case called once more: still no new trace (the sweep's new shapes may)
        facts["traces_after_memory"] = mod.traces(model)
    memory = mod.memory_cases(model, name, st) if res["memory_runs"] else []
    for case in memory:  # one call each (memory needs no repetitions), after everything is warm
        case.run_once()
        log(f"  memory {case.name}: {case.peak_rss / MB:.0f} MB in {case.median:.2f}s")
    res["cases"] = res["cases"] + memory


def _padded(batch: int, chunk: int) -> int:
    """The padded chunk shape the TF engine traces for a batch of ``batch`` rows per slice."""
    return (chunk // batch) * batch if chunk >= batch else chunk


# ---- reporting ------------------------------------------------------------------------------------
def _fmt_rate(x: float) -> str:
    return f"{x:,.0f}"


def _fmt_s(x: float) -> str:
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def analyse(fw: str, name: str, res: dict[str, Any], st: Settings) -> tuple[list[str], dict[str, Any]]:
    """Markdown lines for one framework/model and the numbers the targets are checked on."""
    cases: list[Case] = res["cases"]
    facts = res["facts"]
    bounds = [c for c in cases if c.group == "bound"]
    plain = [c for c in bounds if c.extra["layout"] != "xla"]
    best = max(plain, key=lambda c: c.rate)
    used = next(
        (
            c
            for c in plain
            if c.extra["chunk"] == facts["xaikit_chunk"] and c.extra["layout"] == facts["xaikit_layout"]
        ),
        None,
    )
    lines = [f"### {fw} / {name}", ""]
    lines.append(
        f"Bound search (one fused forward+backward w.r.t. the inputs, {bounds[0].rows // bounds[0].extra['chunk']}+ "
        'chunks per measurement). xaikit\'s `max_batch="auto"` chose '
        f"**{facts['xaikit_chunk']} rows, {facts['xaikit_layout']}**."
    )
    lines.append("")
    rows = []
    for c in bounds:
        mark = " **best**" if c is best else ""
        mark += " (xaikit's)" if c is used else ""
        rows.append(
            [
                f"{c.extra['chunk']}",
                c.extra["layout"] + mark,
                _fmt_rate(c.rate),
                f"{c.rate / best.rate:.2f}",
                f"{c.peak_rss / MB:.0f}",
            ]
        )
    lines += _table(["chunk", "layout", "rows/s", "× best", "peak ΔRSS MB"], rows)
    lines.append("")

    xk_cases = [c for c in cases if c.group == "xaikit"]
    others = [c for c in cases if c.group in ("peer", "loop")]
    numbers: dict[str, Any] = {"best_bound": best.rate, "bound_at_xaikit_chunk": used.rate if used else None}
    header = [
        "B",
        "case",
        "rows",
        "median s",
        "rows/s",
        "× best bound",
        "peak ΔRSS MB",
        "xaikit speed-up vs this",
    ]
    if any(c.gpu for c in cases):
        header.insert(7, "peak GPU MB")
    rows = []
    for b in sorted({c.batch for c in xk_cases}):
        for xc in [c for c in xk_cases if c.batch == b]:
            row = [str(b), f"**{xc.name}**", str(xc.rows), _fmt_s(xc.median), _fmt_rate(xc.rate)]
            row += [f"{xc.rate / best.rate:.2f}", f"{xc.peak_rss / MB:.0f}", "—"]
            if "peak GPU MB" in header:
                row.insert(7, f"{max(xc.gpu) / MB:.0f}" if xc.gpu else "")
            rows.append(row)
            numbers[f"{xc.method}@{b}"] = {"xaikit_s": xc.median, "x_bound": xc.rate / best.rate, "peers": {}}
            if used is not None:
                numbers[f"{xc.method}@{b}"]["x_bound_at_chunk"] = xc.rate / used.rate
            for pc in [c for c in others if c.batch == b and c.method == xc.method]:
                speed = pc.median / xc.median
                numbers[f"{xc.method}@{b}"]["peers"][pc.name] = speed
                # the speed-up xaikit would have if it ran its rows at the best bound's rate
                numbers[f"{xc.method}@{b}"].setdefault("ceiling", {})[pc.name] = pc.median / (
                    xc.rows / best.rate
                )
                row = [str(b), pc.name, str(pc.rows), _fmt_s(pc.median), _fmt_rate(pc.rate)]
                row += [f"{pc.rate / best.rate:.2f}", f"{pc.peak_rss / MB:.0f}", f"{speed:.2f}×"]
                if "peak GPU MB" in header:
                    row.insert(7, f"{max(pc.gpu) / MB:.0f}" if pc.gpu else "")
                rows.append(row)
    lines.append(
        'Methods (`max_batch="auto"`). *rows* = forward+backward rows the case evaluates; '
        "*× best bound* = its rows/s over the best bound's; *speed-up* = this line's median time "
        "over the xaikit line's above it (same method, same batch)."
    )
    lines.append("")
    lines += _table(header, rows)
    lines.append("")

    mem = [c for c in cases if c.group == "memory"]
    if mem:
        lines.append(f"Peak memory as S×M grows (SmInt, B={st.memory_b}, one call each):")
        lines.append("")
        rows = [
            [
                c.extra["tool"],
                f"{c.extra['S']}×{c.extra['M']}",
                str(c.rows),
                _fmt_s(c.median),
                f"{c.peak_rss / MB:.0f}",
            ]
            + ([f"{max(c.gpu) / MB:.0f}"] if c.gpu else [])
            for c in mem
        ]
        lines += _table(
            ["tool", "S×M", "rows", "s", "peak ΔRSS MB"]
            + (["peak GPU MB"] if any(c.gpu for c in mem) else []),
            rows,
        )
        lines.append("")
        for tool in sorted({c.extra["tool"] for c in mem}):
            numbers[f"memory:{tool}"] = [(c.rows, c.peak_rss) for c in mem if c.extra["tool"] == tool]
        numbers["chunk"] = facts["xaikit_chunk"]
    if fw == "tf":
        lines.append(
            f"TF chunk-step traces: {facts['traces_after_warmup']} after the warm-up calls, "
            f"{facts['traces_after_rounds']} after {st.reps} more rounds of every call, "
            f"{facts.get('traces_after_memory', 'not yet measured')} after the memory phase's call of "
            "every case (the S×M sweep's new shapes are traced after that); distinct padded chunk "
            f"shapes expected: {facts['traces_expected']}."
        )
        lines.append("")
    return lines, numbers


def targets(
    all_numbers: dict[tuple[str, str], dict[str, Any]], facts: dict[tuple[str, str], Any]
) -> list[str]:
    rows = []

    def add(what: str, fw: str, name: str, value: str, ok: bool | None) -> None:
        rows.append([what, f"{fw}/{name}", value, "n/a" if ok is None else ("held" if ok else "**missed**")])

    for (fw, name), num in all_numbers.items():
        for key, v in num.items():
            if key.startswith("smint@"):
                b = key.split("@")[1]
                add(f"SmInt ≥ 0.9× best bound (B={b})", fw, name, f"{v['x_bound']:.2f}×", v["x_bound"] >= 0.9)
                for peer, speed in v["peers"].items():
                    if fw == "torch" and peer.startswith("captum NoiseTunnel(IG) chunked"):
                        add(
                            f"SmInt ≥ 1.3× captum NT(IG) chunked (B={b})",
                            fw,
                            name,
                            f"{speed:.2f}×",
                            speed >= 1.3,
                        )
            if key.startswith("ref@"):
                for peer, speed in v["peers"].items():
                    need = 1.5 if fw == "torch" else 15.0
                    ceiling = v.get("ceiling", {}).get(peer)
                    add(
                        f"reference call ≥ {need:g}× sequential loop",
                        fw,
                        name,
                        f"{speed:.2f}×" + (f" (at the bound it would be {ceiling:.1f}×)" if ceiling else ""),
                        speed >= need,
                    )
        full = [peak for rows_, peak in num.get("memory:xaikit", []) if rows_ >= num["chunk"]]
        if len(full) >= 2:  # only sweep points with at least one full chunk of rows can be flat
            growth = (max(full) - min(full)) / MB
            add("xaikit peak memory flat over the S×M sweep", fw, name, f"+{growth:.0f} MB", growth <= 64)
        elif "memory:xaikit" in num:
            add("xaikit peak memory flat over the S×M sweep", fw, name, "sweep below one chunk", None)
        cm = num.get("memory:captum NT(IG) unchunked")
        if cm:
            add(
                "(contrast) captum NT(IG) unchunked grows",
                fw,
                name,
                f"{cm[0][1] / MB:.0f} → {cm[-1][1] / MB:.0f} MB",
                None,
            )
        f = facts[(fw, name)]
        if fw == "tf":
            # Each padded shape (full chunks and power-of-two tails) is traced once: repeated
            # calls must add no trace.
            last = f.get("traces_after_memory", f["traces_after_rounds"])  # before the memory phase
            ok = f["traces_after_warmup"] == last
            add(
                "TF chunk step traced once per shape",
                fw,
                name,
                f"{f['traces_after_warmup']} after warm-up, {last} after every later call",
                ok,
            )
    return _table(["target", "where", "measured", "result"], rows)


def write_doc(
    path: Path, body: list[str], meta: dict[str, Any], st: Settings, fe_note: str, notes: str = ""
) -> None:
    m = meta["machine"]
    v = meta["versions"]
    head = [
        "# Saliency benchmarks",
        "",
        "Generated by `benchmarks/saliency_bench.py`"
        + (" **--quick** (reduced S and M: a smoke run, not a result)" if st.quick else "")
        + f" on {meta['date']}.",
        "",
        "## Machine and versions",
        "",
        *(
            [
                f"**Taken on a shared machine (load average {m['load_avg_start'][0]} on {m.get('cores')} "
                "cores at the start): the timings are noisy and some ratios are distorted; re-run it on a "
                "quiet machine for figures to quote.**",
                "",
            ]
            if m.get("load_avg_start") and m["load_avg_start"][0] > (m.get("cores") or 1)
            else []
        ),
        f"- Command: `python benchmarks/saliency_bench.py {meta.get('argv', '')}`"
        f" — frameworks {', '.join(st.frameworks)}; models {', '.join(st.models)}; batches "
        f"{', '.join(map(str, st.batches))}; {st.reps} timed rounds; whole run {meta.get('wall_s')} s.",
        f"- CPU: {m.get('cpu')}, {m.get('cores')} cores visible, {m.get('ram_gib')} GiB RAM; "
        f"load average at start {m.get('load_avg_start')}, at end {m.get('load_avg_end')} "
        "(a load far above the core count means the machine was shared and the timings are noisy).",
        f"- torch threads: {meta.get('torch_threads', 'n/a')}; TF intra-op threads: "
        f"{meta.get('tf_intra_op_threads', 'n/a')}; GPU: {meta.get('gpu') or 'none'}.",
        "- " + ", ".join(f"{k} {val}" for k, val in v.items()),
        "",
        "## Method",
        "",
        "- Every case is one complete call (e.g. one `get_smoothed_masks` on the whole batch). Each case "
        'is called once untimed (warm-up: TF tracing, the `max_batch="auto"` probe, first-call '
        f"allocations), then {st.reps} timed rounds call every case once, in the same order "
        "(interleaved, so that a slow phase of a shared machine hits all cases alike). Figures are "
        "medians; every ratio is between medians of the same run.",
        "- **Bound**: the model's fused forward+backward with respect to the inputs (no parameter "
        "gradients, target-class score gathered per row), on one pre-built chunk, repeated; searched over "
        f"chunk sizes {', '.join(map(str, st.chunks))} and, for torch, contiguous and channels-last input; "
        "for TF a `tf.function` per chunk size (traced in the warm-up) and XLA (`jit_compile=True`) as its "
        "own line. The best plain (non-XLA) rows/s is the bound every method is compared with; the bound at "
        "the chunk size and layout xaikit chose is marked.",
        f"- **xaikit**: `SaliencyNet(model, 'x', 'y_pred', seed=0)` with `max_batch=\"auto\"`: vanilla, "
        f"SmoothGrad (S={st.sg_s}), IG (M={st.ig_m}), SmInt (S={st.smint_s}, M={st.smint_m}), and the "
        f"reference's own call `get_smoothed_masks(nsamples={st.ref_s}, nintegration={st.ref_m})` on "
        f"B={st.ref_b}. Times include the whole call (the clean prediction pass and display scaling).",
        "- **captum** (torch): `Saliency`; `IntegratedGradients` with `internal_batch_size` = xaikit's chunk; "
        "`NoiseTunnel(IntegratedGradients)` (`smoothgrad_sq`, σ = 0.15 × the batch's range, since "
        "captum's σ is absolute) chunked with `nt_samples_batch_size` = chunk // B and "
        "`internal_batch_size` = chunk, at the SmInt settings; unchunked NoiseTunnel (all rows in one "
        f"pass) where it has at most {st.unchunked_max_rows} rows, and in the memory sweep. Same uniform "
        "random baseline as xaikit's default.",
        "- **PAIR `saliency`**: `GradientSaliency`, `IntegratedGradients` (batch_size = steps) and "
        "`IntegratedGradients.GetSmoothedMask` through a `call_model_function` (torch autograd, or an eager "
        "`GradientTape` for TF as in PAIR's examples), one image at a time, as PAIR works.",
        "- **Sequential loop**: the reference's walk (one clean pass, then S−1 noise samples × M steps, "
        "one batch-sized forward+backward each: 1 + 5×100 = 501 passes for the reference call), a plain "
        "loop for torch and an EAGER loop for TF like the reference's.",
        "- **Peak memory**: the increase of the process's resident set (VmRSS from `/proc/self/status`, "
        "sampled every 1 ms in a thread) over its value just before the call, in one untimed call of "
        "each case after every timed round of the run (`tracemalloc` cannot see torch/TF buffers). "
        "For that phase the script switches glibc's malloc (`mallopt`, as "
        "`MALLOC_MMAP_THRESHOLD_`/`MALLOC_TRIM_THRESHOLD_` = 128 KiB would) to hand freed buffers "
        "back to the OS, so that each call's peak is its own, not a high-water mark left by an earlier "
        "case. The timed rounds run with the default malloc and without the sampler: returned buffers "
        "cost page faults, which on some CPUs made torch's kernels 2.7× slower and penalized large "
        "chunks more than small loops. On a GPU, `torch.cuda.max_memory_allocated` after a reset.",
        "",
        "## How to read this",
        "",
        "- *rows/s* is the throughput in forward+backward rows; *× best bound* near 1 means the method "
        "runs at the speed of the model itself (xaikit's extra work — noise, paths, reductions — is "
        "free); it can exceed 1 slightly through noise, or when the bound's best chunk was measured in "
        "a slow phase.",
        "- *speed-up* > 1 means xaikit's call was that many times faster than the peer at the same "
        "settings and batch. The sequential loop at the SmInt settings evaluates fewer rows (1+(S−1)×M "
        "passes, like the reference), so its speed-up is a call-for-call comparison.",
        "- The targets of issue #6: SmInt ≥ 0.9× bound for both frameworks on CPU; torch ≥ 1.5× the "
        "sequential loop for the reference call and ≥ 1.3× captum NoiseTunnel(IG) chunked at equal "
        "settings; TF ≥ 15× the eager sequential loop; flat peak memory as S×M grows; the TF chunk "
        "step traced once per shape.",
        "",
        *([notes.rstrip(), ""] if notes else []),
        "## Targets",
        "",
    ]
    gpu = [
        "",
        "## GPU",
        "",
        "No GPU was lent to this task, so GPU figures are absent. On a CUDA machine the torch cases run "
        "on the GPU and add a peak-GPU-memory column (`torch.cuda.max_memory_allocated`).",
        "",
        "## FastEstimator",
        "",
        fe_note,
        "",
    ]
    text = "\n".join(head + body + gpu)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


FE_NOTE = (
    "FastEstimator's own `SaliencyNet` is not measured. `pip install fastestimator` was tried in a "
    "throwaway venv: it resolved fastestimator 1.7.0, which pins jax/jaxlib 0.4.33, transformers "
    "4.38.2, tensorflow-probability 0.22.1 and ~60 other packages (albumentations, opencv, "
    "plotly/kaleido, ...) but not tensorflow or torch themselves; the download and install had not "
    "finished after 5 minutes and was stopped. Its pins (tensorflow-probability 0.22 goes with "
    "TF 2.14) do not fit the TF 2.21 / Keras 3 used here in any case. The *sequential loop* lines "
    "reproduce its model-call pattern instead (one eager batch-sized pass per noise sample and step)."
)


def _case_from(d: dict[str, Any]) -> Case:
    extra: dict[str, Any] = {k: d[k] for k in ("chunk", "layout", "S", "M", "tool") if k in d}
    case = Case(d["name"], d["group"], d["framework"], d["model"], d["batch"], d["rows"], lambda: None)
    case.method, case.note, case.extra = d["method"], d["note"], extra
    case.times, case.rss, case.gpu = (
        list(d["times_s"]),
        list(d["peak_rss_increase_bytes"]),
        list(d["peak_gpu_bytes"]),
    )
    return case


def _settings_from(d: dict[str, Any]) -> Settings:
    names = {f.name for f in dataclasses.fields(Settings)}
    kwargs: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k in names}
    return Settings(**kwargs)


def render(paths: list[Path], out: Path, notes: str = "") -> None:
    """Rebuild the Markdown report from one or more ``--json`` files (e.g. runs of different models)."""
    runs = [json.loads(p.read_text()) for p in paths]
    numbers: dict[tuple[str, str], dict[str, Any]] = {}
    facts: dict[tuple[str, str], Any] = {}
    results_md: list[str] = ["## Results", ""]
    for run in runs:
        st = _settings_from(run["settings"])
        groups: dict[tuple[str, str], list[Case]] = {}
        for d in run["cases"]:
            groups.setdefault((d["framework"], d["model"]), []).append(_case_from(d))
        for (fw, name), cases in groups.items():
            f = run["facts"][f"{fw}/{name}"]
            lines, num = analyse(fw, name, {"cases": cases, "facts": f}, st)
            results_md += lines
            numbers[(fw, name)] = num
            facts[(fw, name)] = f
    meta = dict(runs[0])
    for r in runs[1:]:  # per-framework facts of the other runs
        for key in ("torch_threads", "tf_intra_op_threads", "gpu"):
            if meta.get(key) is None and r.get(key) is not None:
                meta[key] = r[key]
    if len(runs) > 1:
        meta["argv"] = "` and `python benchmarks/saliency_bench.py ".join(r.get("argv", "") for r in runs)
        meta["wall_s"] = " + ".join(str(r.get("wall_s", "?")) for r in runs)
    body = [*targets(numbers, facts), "", *results_md]
    st = _settings_from(runs[0]["settings"])
    st.models = tuple(dict.fromkeys(m for r in runs for m in r["settings"]["models"]))
    st.frameworks = tuple(dict.fromkeys(f for r in runs for f in r["settings"]["frameworks"]))
    st.batches = tuple(dict.fromkeys(b for r in runs for b in r["settings"]["batches"]))
    write_doc(out, body, meta, st, FE_NOTE, notes)


def _write(
    args: argparse.Namespace,
    meta: dict[str, Any],
    st: Settings,
    numbers: dict[tuple[str, str], dict[str, Any]],
    facts: dict[tuple[str, str], Any],
    results_md: list[str],
    raw: list[dict[str, Any]],
    t_start: float,
) -> None:
    meta["machine"]["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    meta["wall_s"] = round(time.perf_counter() - t_start, 1)
    write_doc(args.out, [*targets(numbers, facts), "", *results_md], meta, st, FE_NOTE)
    if args.json:
        payload = {
            **meta,
            "facts": {f"{k[0]}/{k[1]}": v for k, v in facts.items()},
            "summary": {f"{k[0]}/{k[1]}": v for k, v in numbers.items()},
            "cases": raw,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.json.with_name(args.json.name + ".tmp")
        tmp.write_text(json.dumps(payload, indent=1, default=str))
        os.replace(tmp, args.json)


def _collect(
    res: dict[str, Any],
    st: Settings,
    numbers: dict[tuple[str, str], dict[str, Any]],
    facts: dict[tuple[str, str], Any],
    results_md: list[str],
    raw: list[dict[str, Any]],
) -> list[str]:
    """Add one framework and model's analysis to the report's parts; returns its lines."""
    fw, name = res["fw"], res["name"]
    lines, num = analyse(fw, name, res, st)
    results_md += lines
    numbers[(fw, name)] = num
    facts[(fw, name)] = res["facts"]
    raw += [{**c.as_dict()} for c in res["cases"]]
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smoke run: reduced settings, well under a minute")
    p.add_argument("--json", type=Path, help="write all raw numbers here")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md", help="Markdown report")
    p.add_argument("--frameworks", help="comma list of torch,tf")
    p.add_argument("--models", help="comma list of lenet,resnet")
    p.add_argument("--batches", help="comma list of batch sizes")
    p.add_argument("--reps", type=int, help="timed rounds")
    p.add_argument("--chunks", help="comma list of chunk sizes for the bound search")
    p.add_argument("--bound-rows", type=int, help="rows per bound measurement (at least two chunks)")
    p.add_argument("--render", help="comma list of --json files: rewrite --out from them, measure nothing")
    p.add_argument("--notes", type=Path, help="with --render: a Markdown section to put before the targets")
    p.add_argument("--no-pair", action="store_true", help="skip the PAIR saliency peers")
    p.add_argument("--no-memory-sweep", action="store_true", help="skip the peak-memory sweep")
    p.add_argument(
        "--threads",
        type=int,
        help="intra-op threads for torch and TF (default: theirs); 1 on a machine loaded past its cores",
    )
    args = p.parse_args(argv)

    if args.render:
        notes = args.notes.read_text() if args.notes else ""
        render([Path(s) for s in args.render.split(",") if s.strip()], args.out, notes)
        log(f"wrote {args.out}")
        return 0
    st = Settings.quick_run() if args.quick else Settings()
    if args.frameworks:
        st.frameworks = tuple(s.strip() for s in args.frameworks.split(",") if s.strip())
    if args.models:
        st.models = tuple(s.strip() for s in args.models.split(",") if s.strip())
    if args.batches:
        st.batches = tuple(int(s) for s in args.batches.split(",") if s.strip())
    if args.reps:
        st.reps = args.reps
    if args.chunks:
        st.chunks = tuple(int(s) for s in args.chunks.split(",") if s.strip())
    if args.bound_rows:
        st.bound_rows = args.bound_rows
    if args.no_pair:
        st.pair = st.pair_smoothgrad = False
    if args.no_memory_sweep:
        st.memory = False
    for fw in st.frameworks:
        if fw not in ("torch", "tf"):
            p.error(f"--frameworks: unknown framework {fw!r}; expected torch and/or tf")

    t_start = time.perf_counter()
    meta_argv = " ".join(argv if argv is not None else sys.argv[1:])
    mach = machine()
    meta: dict[str, Any] = {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {**mach, "load_avg_start": mach.get("load_avg")},
        "versions": _versions(),
        "argv": meta_argv,
        "settings": dict(st.__dict__),
    }
    raw: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    numbers: dict[tuple[str, str], dict[str, Any]] = {}
    facts: dict[tuple[str, str], Any] = {}
    results_md: list[str] = ["## Results", ""]
    for fw in st.frameworks:
        if fw == "torch":
            import torch

            if args.threads:
                torch.set_num_threads(args.threads)
            meta["torch_threads"] = torch.get_num_threads()
            meta["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        else:
            import tensorflow as tf

            if args.threads:
                tf.config.threading.set_intra_op_parallelism_threads(args.threads)
                tf.config.threading.set_inter_op_parallelism_threads(args.threads)
            meta["tf_intra_op_threads"] = tf.config.threading.get_intra_op_parallelism_threads() or "default"
        for name in st.models:
            log(f"== {fw} / {name}")
            res = run_model(fw, name, st)
            runs.append(res)
            _collect(res, st, numbers, facts, results_md, raw)
            _write(args, meta, st, numbers, facts, results_md, raw, t_start)  # after each model: a
            # run cut short still leaves its finished timings behind (memory comes last)
    log(
        "== memory (glibc malloc now returns freed buffers to the OS: "
        + ("yes" if trimmed_malloc() else "no glibc")
        + ")"
    )
    meta["memory_phase_trimmed_malloc"] = True
    numbers.clear()
    facts.clear()
    raw.clear()
    results_md[:] = ["## Results", ""]
    for res in runs:
        memory_phase(res, st)
        lines = _collect(res, st, numbers, facts, results_md, raw)
        print("\n".join(lines), flush=True)
    _write(args, meta, st, numbers, facts, results_md, raw, t_start)
    print("\n".join(targets(numbers, facts)), flush=True)
    log(f"wrote {args.out}" + (f" and {args.json}" if args.json else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
