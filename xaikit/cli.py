"""The ``xaikit`` command line (``xaikit demo ...``, ``xaikit report RUN``, ``xaikit explain --model M
--data D --out DIR``, ``xaikit --version``; also ``python -m xaikit``).

No deep-learning framework is imported here: every option is checked first, and the demo loads
the chosen framework only when it runs. A bad option gives one line on stderr,
``xaikit: error: argument --NAME: expected ...; got ...``, and exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

__all__ = ["main"]


def _fail(prog: str, message: str) -> NoReturn:
    sys.stderr.write(f"xaikit: error: {message} (see '{prog} --help')\n")
    raise SystemExit(2)


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line: ``xaikit: error: <message>``, status 2."""

    def error(self, message: str) -> NoReturn:
        _fail(self.prog, message)


def _int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an int >= {minimum}; got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an int >= {minimum}; got {value}")
        return value

    return parse


# A native (absl / glog) log line: "I0000 00:00:1795439460.414635    6318 port.cc:153] ...", or absl's
# preamble. Fatal ("F...") lines are kept.
_NATIVE_LOG = re.compile(
    r"^(?:[IWE]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ \S+:\d+\] |WARNING: All log messages before absl::)"
)


@contextlib.contextmanager
def _native_notices_filtered() -> Iterator[None]:
    """Capture file descriptor 2 while a framework starts; afterwards replay all of it except
    the native info / warning / error log lines (TensorFlow's C++ start-up notices ignore
    ``TF_CPP_MIN_LOG_LEVEL`` before absl's logging is initialized). Python output, warnings and
    tracebacks are replayed in full; nothing is filtered when ``TF_CPP_MIN_LOG_LEVEL`` is 0."""
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0").strip() in ("", "0"):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            lines = captured.read().decode("utf-8", "replace").splitlines(keepends=True)
            kept = "".join(line for line in lines if not _NATIVE_LOG.match(line))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()


def _parser() -> _Parser:
    from xaikit import __version__
    from xaikit.demo import DEFAULTS

    parser = _Parser(prog="xaikit", description="xaikit: explainability for image models.")
    parser.add_argument("--version", action="version", version=f"xaikit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    demo = sub.add_parser(
        "demo",
        help="train LeNet on the bundled shapes data with Saliency, LabelTracker and InstanceTracker",
        description=(
            "Train LeNet on the bundled 'shapes' images; explain the same eval images every few epochs "
            "(Saliency in a RepeatScheduler), track the per-sample loss by label and by sample, and write "
            "the figures and summary.json to --out."
        ),
    )
    positive, natural = _int_at_least(1), _int_at_least(0)
    demo.add_argument("--framework", choices=["torch", "tf"], default=DEFAULTS["framework"])
    demo.add_argument("--epochs", type=positive, default=DEFAULTS["epochs"])
    demo.add_argument("--seed", type=natural, default=DEFAULTS["seed"])
    demo.add_argument("--out", default=DEFAULTS["out"], help="output folder (default: %(default)s)")
    demo.add_argument(
        "--threads",
        type=positive,
        default=DEFAULTS["threads"],
        help="CPU threads of the framework, >= 1 (default: %(default)s)",
    )
    demo.add_argument("--batch-size", type=positive, default=DEFAULTS["batch_size"], help=argparse.SUPPRESS)
    demo.add_argument("--n-train", type=positive, default=DEFAULTS["n_train"], help=argparse.SUPPRESS)
    demo.add_argument("--n-eval", type=positive, default=DEFAULTS["n_eval"], help=argparse.SUPPRESS)
    rep = sub.add_parser(
        "report",
        help="write one self-contained HTML page that shows a run folder",
        description=(
            "Gather what xaikit wrote into the run folder RUN (summary.json, the saliency grids and their "
            "data, tracker curves, evaluation results) into one HTML file that needs no network."
        ),
    )
    rep.add_argument("run", metavar="RUN", help="the run folder (e.g. runs/demo)")
    rep.add_argument("--out", default=None, help="the HTML file (default: RUN/report.html)")
    exp = sub.add_parser(
        "explain",
        help="explain every sample of a dataset into a resumable Zarr store (plus PNG grids)",
        description=(
            "Explain every sample of --data with --model into the Zarr store --out (resumable: a run "
            "that stops keeps its committed shards), then paint grids of the first, the most and the "
            "least confident samples into --out/grids. See docs/dataset.md."
        ),
    )
    exp.add_argument(
        "--model",
        required=True,
        help="a Keras file (.keras), a TorchScript file (.pt, .pth, .ts) or package.module:factory",
    )
    exp.add_argument(
        "--data",
        required=True,
        help="a folder or glob of PNG/JPEG images, a .npy array, or a .npz with x (and y)",
    )
    exp.add_argument("--method", default="smint", help="any method of xk.xai.explain (default: %(default)s)")
    exp.add_argument("--out", required=True, help="the store folder, e.g. runs/audit.zarr")
    exp.add_argument("--workers", type=positive, default=None, help="Ray workers (implies the Ray engine)")
    exp.add_argument("--ray-address", default=None, help="join this Ray cluster ('auto' or ray://host:port)")
    exp.add_argument(
        "--resume",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep the shards an earlier run committed (default: %(default)s)",
    )
    exp.add_argument("--batch-size", type=positive, default=64)
    exp.add_argument(
        "--shard-size", type=positive, default=None, help="samples per shard (default: 4 batches)"
    )
    exp.add_argument("--seed", type=natural, default=0)
    exp.add_argument("--target", choices=["predicted", "label"], default="predicted")
    exp.add_argument(
        "--option",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a method option, e.g. -o nsamples=8 (a JSON value, else a string); repeatable",
    )
    exp.add_argument("--grid-size", type=natural, default=8, help="samples per PNG grid (0: no grids)")
    return parser


#: explain_dataset's own arguments: never method options
_OWN_KEYS = frozenset(
    ("method", "out", "batch_size", "engine", "workers", "resume", "seed", "shard_size", "target", "address")
)


def _method_options(items: Sequence[str]) -> dict[str, Any]:
    import json

    options: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.isidentifier():
            _fail("xaikit explain", f"argument --option: expected KEY=VALUE; got {item!r}")
        if key in _OWN_KEYS:
            flag = "--" + key.replace("_", "-")
            _fail(
                "xaikit explain",
                f"argument --option: {key} is an option of its own here ({flag}); got {item!r}",
            )
        try:
            options[key] = json.loads(text)
        except ValueError:
            options[key] = text
    return options


def _explain_data(spec: str) -> object:
    import numpy as np

    lower = spec.lower()
    if lower.endswith(".npy"):
        if not os.path.isfile(spec):
            _fail("xaikit explain", f"argument --data: expected an existing .npy file; got {spec!r}")
        return np.load(spec, mmap_mode="r")
    if lower.endswith(".npz"):
        if not os.path.isfile(spec):
            _fail("xaikit explain", f"argument --data: expected an existing .npz file; got {spec!r}")
        from xaikit.dataset import NumpyDataset

        with np.load(spec) as npz:
            return NumpyDataset({k: npz[k] for k in npz.files})
    return spec


def _explain(args: argparse.Namespace) -> int:
    options = _method_options(args.option)
    data = _explain_data(args.data)
    engine = "ray" if args.workers is not None or args.ray_address is not None else "local"
    print(f"xaikit explain: {args.method} of {args.data} with {args.model} ({engine} engine) -> {args.out}")
    from xaikit.errors import XaikitError

    try:
        with _native_notices_filtered():
            import xaikit as xk
            from xaikit.xai._grids import save_grids
            from xaikit.xai._sources import as_source

        source = as_source(data)
        result = xk.xai.explain_dataset(
            args.model,
            source,
            method=args.method,
            out=args.out,
            batch_size=args.batch_size,
            engine=engine,
            workers=args.workers,
            resume=args.resume,
            seed=args.seed,
            shard_size=args.shard_size,
            target="label" if args.target == "label" else None,
            address=args.ray_address,
            **options,
        )
        grids = (
            save_grids(result, source, os.path.join(args.out, "grids"), args.grid_size)
            if args.grid_size
            else []
        )
    except (XaikitError, OSError) as err:
        print(f"xaikit: error: {err}", file=sys.stderr)
        return 2
    table = result.table
    shards = len(result.committed)
    done = f"{shards} shard{'' if shards == 1 else 's'}"
    if result.resumed:
        done += f": {len(result.resumed)} kept from an earlier run, {len(result.explained)} explained now"
    else:
        done += ", all explained now"
    print(
        f"xaikit explain: {len(table)} samples in {done}; attributions "
        f"{tuple(result.attributions.shape)} in {os.path.join(args.out, 'attributions')}"
    )
    for path in grids:
        print(f"  {path}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from xaikit.errors import XaikitError

    if not os.path.isdir(args.run):
        _fail("xaikit report", f"argument RUN: expected an existing run folder; got {args.run!r}")
    if args.out is not None and not args.out.lower().endswith((".html", ".htm")):
        _fail("xaikit report", f"argument --out: expected a file name ending in .html; got {args.out!r}")
    from xaikit.viz import report

    try:
        path = report(args.run, args.out)
    except (XaikitError, OSError) as err:
        print(f"xaikit: error: {err}", file=sys.stderr)
        return 2
    print(f"xaikit report: wrote {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (bad options exit with status 2)."""
    # TensorFlow's C++ start-up notices (oneDNN, cuInit, cuDNN/cuBLAS factory registration) are
    # not the CLI's output; a user who wants them sets TF_CPP_MIN_LOG_LEVEL=0 themselves.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "report":
        return _report(args)
    if args.command == "explain":
        return _explain(args)
    if args.command == "demo":
        from xaikit.demo import OUT_EXPECTED, out_dir_problem, run_demo, start_framework
        from xaikit.errors import XaikitError

        problem = out_dir_problem(args.out)
        if problem is not None:
            _fail("xaikit demo", f"argument --out: expected {OUT_EXPECTED}; got {problem}")
        print(f"xaikit demo: LeNet on shapes with {args.framework}, {args.epochs} epochs, seed {args.seed}")
        try:
            with _native_notices_filtered():
                start_framework(args.framework, args.threads)
            result = run_demo(
                framework=args.framework,
                epochs=args.epochs,
                seed=args.seed,
                out=args.out,
                n_train=args.n_train,
                n_eval=args.n_eval,
                batch_size=args.batch_size,
                threads=args.threads,
            )
        except XaikitError as err:
            print(f"xaikit: error: {err}", file=sys.stderr)
            return 2
        metrics = result["final_metrics"]["eval"]
        print(
            f"xaikit demo: done in {result['time_sec']:.1f} s; eval accuracy {metrics.get('accuracy', float('nan')):.4f}; "
            f"wrote {len(result['files'])} files to {args.out}:"
        )
        for name in result["files"]:
            print(f"  {name}")
        if "report" in result:
            print(f"xaikit demo: report: {result['report']} (open it in a browser)")
    return 0
