"""The ``xaikit`` command line (``xaikit demo ...``; also ``python -m xaikit demo ...``).

No deep-learning framework is imported here: the demo loads the chosen one when it runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    from xaikit.demo import DEFAULTS

    parser = argparse.ArgumentParser(prog="xaikit", description="xaikit: explainability for image models.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo",
        help="train LeNet on the bundled shapes data with Saliency, LabelTracker and InstanceTracker",
        description=(
            "Train LeNet on the bundled 'shapes' images; explain the same eval images every few epochs "
            "(Saliency in a RepeatScheduler), track the per-sample loss by label and by sample, and write "
            "the figures and summary.json to --out."
        ),
    )
    demo.add_argument("--framework", choices=["torch", "tf"], default=DEFAULTS["framework"])
    demo.add_argument("--epochs", type=int, default=DEFAULTS["epochs"])
    demo.add_argument("--seed", type=int, default=DEFAULTS["seed"])
    demo.add_argument("--out", default=DEFAULTS["out"], help="output folder (default: %(default)s)")
    demo.add_argument(
        "--threads",
        type=int,
        default=DEFAULTS["threads"],
        help="CPU threads of the framework (default: %(default)s)",
    )
    demo.add_argument("--batch-size", type=int, default=DEFAULTS["batch_size"], help=argparse.SUPPRESS)
    demo.add_argument("--n-train", type=int, default=DEFAULTS["n_train"], help=argparse.SUPPRESS)
    demo.add_argument("--n-eval", type=int, default=DEFAULTS["n_eval"], help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.command == "demo":
        from xaikit.demo import run_demo
        from xaikit.errors import XaikitError

        print(f"xaikit demo: LeNet on shapes with {args.framework}, {args.epochs} epochs, seed {args.seed}")
        try:
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
            print(f"xaikit demo: {err}", file=sys.stderr)
            return 2
        metrics = result["final_metrics"]["eval"]
        print(
            f"xaikit demo: done in {result['time_sec']:.1f} s; eval accuracy {metrics.get('accuracy', float('nan')):.4f}; "
            f"wrote {len(result['files'])} files to {args.out}:"
        )
        for name in result["files"]:
            print(f"  {name}")
    return 0
