"""The ``xaikit`` command line (``xaikit demo ...``, ``xaikit report RUN``, ``xaikit --version``; also
``python -m xaikit``).

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
from typing import NoReturn

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
    return parser


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
