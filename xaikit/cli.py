"""The ``xaikit`` command line (``xaikit demo ...``, ``xaikit report RUN``, ``xaikit explain --model M
--data D --out DIR``, ``xaikit analyze STORE``, ``xaikit methods [NAME ...]``, ``xaikit --version``; also ``python -m xaikit``).

The explanation methods the command line offers are the registered method records
(:mod:`xaikit.xai.registry`): ``xaikit explain --help`` lists them by family with their titles,
``xaikit methods`` with their options, defaults and what each answers, both read off the records
when they are shown (so that ``xaikit --version`` or ``xaikit report`` import no method). A method of your own registered by the module of a
``--model package.module:factory`` is found too (the module is imported when ``--method`` names
no registered method).

No deep-learning framework is imported here: every option is checked first (``explain``: the
method, its ``-o`` options, ``--classes``, ``--out`` and the first sample of ``--data`` before the
model loads), and the demo loads the chosen framework only when it runs. A bad option gives one
line on stderr, ``xaikit: error: argument --NAME: expected ...; got ...``, and exit status 2; so
does an ``--out`` that cannot be written (``argument --out: 'PATH' is not writable (REASON)``).
Messages of the Python API that reach the command line name the flags, not the Python arguments
(:data:`EXPLAIN_FLAGS`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

__all__ = ["main"]


def _fail(prog: str, message: str) -> NoReturn:
    sys.stderr.write(f"xaikit: error: {message} (see '{prog} --help')\n")
    raise SystemExit(2)


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line: ``xaikit: error: <message>``, status 2."""

    def error(self, message: str) -> NoReturn:
        _fail(self.prog, message)


def _out_problem(path: str, folder: bool = True) -> str | None:
    """Why ``--out`` cannot be written, as ``"'PATH' is not writable (REASON)"``, or None. A
    folder is created if needed and a file tried in it (only trying tells: root ignores
    permission bits, and a read-only mount or /proc refuses even root); for a file, its folder."""
    from xaikit.demo import out_dir_problem

    if not folder and os.path.isdir(path):
        return f"{path!r} is not writable (a folder; give a file name)"
    target = path if folder else os.path.dirname(os.path.abspath(path))
    problem = out_dir_problem(target)
    if problem is None:
        return None
    reason = problem[len(repr(target)) + 2 : -1]  # out_dir_problem says "'TARGET' (REASON)"
    if reason == "an existing file":
        reason += ", not a folder"
    return f"{path!r} is not writable ({reason if folder else f'{target!r}: {reason}'})"


#: the help of ``xaikit explain --method`` until it is shown: the method list is read off the
#: records when the help is formatted (a call that shows no help imports no method)
_METHOD_HELP = "an explanation method (the registered ones are listed when the help is shown)"


class _Formatter(argparse.HelpFormatter):
    """Help texts keep their line breaks, each line wrapped on its own (the method list of
    ``xaikit explain --method``: one line per family, from the method records)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        return _method_help() if action.help == _METHOD_HELP else action.help

    def _split_lines(self, text: str, width: int) -> list[str]:
        split = super()._split_lines
        return [part for line in text.splitlines() for part in (split(line, width) or [""])]


def _method_help() -> str:
    """``--method``'s help: every registered method by family, ``name (Title)``."""
    from xaikit.xai import get_method, method_names

    records = [get_method(m) for m in method_names()]
    lines = [
        "an explanation method by name, alias or title (default: %(default)s); -o KEY=VALUE sets "
        "its options, which 'xaikit methods NAME' lists:"
    ]
    for family in dict.fromkeys(r.family for r in records):
        names = ", ".join(f"{r.name} ({r.title})" for r in records if r.family == family)
        lines.append(f"{family}: {names}".replace("%", "%%"))
    return "\n".join(lines)


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
        formatter_class=_Formatter,
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
    exp.add_argument("--method", default="smint", help=_METHOD_HELP)
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
    exp.add_argument(
        "--target",
        type=target_arg,
        default="predicted",
        help="what each map explains: predicted (the predicted class), label, class:K (class K), "
        "region:K (a segmentation model's region predicted K: xk.targets.ClassRegion(K)) or "
        "output:I (unit I of a regression output: xk.targets.Output(I)); default: %(default)s",
    )
    exp.add_argument(
        "--option",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a method option, e.g. -o nsamples=8 (a JSON value, else a string); repeatable",
    )
    exp.add_argument("--grid-size", type=natural, default=8, help="samples per PNG grid (0: no grids)")
    exp.add_argument(
        "--resize",
        nargs=2,
        type=positive,
        default=None,
        metavar=("H", "W"),
        help="image files: resize every image to H x W pixels as it is read (bilinear)",
    )
    exp.add_argument(
        "--channels",
        type=int,
        choices=[1, 3],
        default=None,
        help="image files: read every image as RGB (3) or grayscale (1) (default: as each file is)",
    )
    exp.add_argument(
        "--skip-bad",
        action="store_true",
        help="image files: skip files that cannot be read (listed in OUT/skipped.json) instead of stopping",
    )
    exp.add_argument(
        "--classes",
        default=None,
        metavar="FILE",
        help="class names: a text file (one per line) or a JSON list; shown in the grids and table",
    )
    methods = sub.add_parser(
        "methods",
        help="list the explanation methods: names, titles, options with defaults, what each answers",
        description=(
            "The explanation methods --method takes, by family: each one's name (and the other names "
            "it goes by), title, what it answers, its options with their defaults (set with -o "
            "KEY=VALUE; an option without a default is chosen by the method), its cost and result, "
            "and the paper it follows. See docs/methods.md."
        ),
    )
    methods.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="the methods to show (any name, alias or title; default: all)",
    )
    ana = sub.add_parser(
        "analyze",
        help="find the strategies a model uses across an explained dataset (clusters, concepts)",
        description=(
            "Analyse the maps of the store STORE that 'xaikit explain' wrote: per-class mean maps, atypical "
            "samples, strategy clusters (SpRAy) and an embedding for display; with --data also thumbnails, "
            "with --model and --data also concepts and a region-ablation check per cluster. Written into "
            "STORE/analysis; 'xaikit report STORE' shows it. See docs/analyze.md."
        ),
    )
    ana.add_argument("store", metavar="STORE", help="the store folder 'xaikit explain' wrote")
    ana.add_argument(
        "--model",
        default=None,
        help="the model (a .keras / TorchScript file or package.module:factory); needs --data",
    )
    ana.add_argument(
        "--data",
        default=None,
        help="the dataset the store explains: a folder or glob of images, a .npy array, or a .npz with x (and y)",
    )
    ana.add_argument("--layer", default=None, help="the concepts' layer (default: the last spatial layer)")
    ana.add_argument(
        "--size", type=_int_at_least(2), default=16, help="side of the clustered maps (default: 16)"
    )
    ana.add_argument(
        "--max-clusters", type=positive, default=8, help="the largest k the eigengap may choose (default: 8)"
    )
    ana.add_argument("--concepts", type=natural, default=5, help="concepts per class (0: none; default: 5)")
    ana.add_argument(
        "--max-display", type=natural, default=10_000, help="samples placed by the embedding (default: 10000)"
    )
    ana.add_argument("--seed", type=natural, default=0)
    ana.add_argument(
        "--engine",
        choices=["auto", "local", "ray"],
        default="auto",
        help="read the shards here or in Ray tasks (default: auto: Ray for a store Ray workers wrote)",
    )
    ana.add_argument("--workers", type=positive, default=None, help="CPUs of the local Ray cluster")
    ana.add_argument("--ray-address", default=None, help="join this Ray cluster ('auto' or ray://host:port)")
    return parser


def _describe_method(record: Any) -> list[str]:
    """The lines ``xaikit methods`` prints for one method record."""
    also = f"  (also: {', '.join(record.aliases)})" if record.aliases else ""
    shape = "input-shaped attributions" if record.result == "input" else "one (H, W) map per image"
    facts = [record.cost, shape]
    if record.delta:
        facts.append("completeness delta")
    if record.noise:
        facts.append("seeded noise")
    if record.layer:
        facts.append("one layer (layer=)")
    lines = [f"  {record.name}  {record.title}{also}"]
    if record.summary:
        lines.append(f"      {record.summary}")
    lines.append(f"      options: {', '.join(record.option_texts()) or 'none of its own'}")
    lines.append(f"      {'; '.join(facts)}" + (f"; {record.reference}" if record.reference else ""))
    return lines


def _methods(args: argparse.Namespace) -> int:
    from xaikit.errors import XaikitError
    from xaikit.xai import get_method, method_names

    try:
        chosen = [get_method(n).name for n in args.names] if args.names else list(method_names())
    except XaikitError as err:
        _fail("xaikit methods", f"argument NAME: {err}")
    records = [get_method(m) for m in dict.fromkeys(chosen)]
    if not args.names:
        print(
            f"xaikit methods: {len(records)} explanation methods; xaikit explain --method NAME -o KEY=VALUE "
            "(an option without '=' is chosen by the method unless given)"
        )
    for family in dict.fromkeys(r.family for r in records):
        print(f"\n{family}")
        for record in (r for r in records if r.family == family):
            print("\n".join(_describe_method(record)))
    return 0


#: how ``explain_dataset``'s messages name its Python arguments -> the flags of ``xaikit explain``:
#: a message that reaches the command line is rewritten with these (regex, replacement) pairs, in
#: order; the Python API keeps its own names
EXPLAIN_FLAGS: tuple[tuple[str, str], ...] = (
    (r"^out: ", "argument --out: "),
    (r"^(?:data|x_key|label_key): ", "argument --data: "),
    (r"^classes: ", "argument --classes: "),
    (r"^model_or_factory: ", "argument --model: "),
    (r"\bmodel_or_factory\b", "--model"),
    (r"\bout=", "--out"),
    (r"\bresume=False\b", "--no-resume"),
    (r"\bskip_bad=True\b", "--skip-bad"),
    (r"\bresize=\(H, W\)", "--resize H W"),
    (r"\bresize=", "--resize"),
    (r"\bchannels=(\d)", r"--channels \1"),
    (r"\bchannels=", "--channels"),
    (r'\btarget="label"', "--target label"),
    (r"\btarget=ClassRegion\((\d+), \.\.\.\)", r"--target region:\1"),
    (r"\bexplain\(method='([^']+)'\)", r"--method \1"),
)


#: ``--target``'s spellings of a target object: prefix -> its class in :mod:`xaikit.targets`
TARGET_PREFIXES = {"class": "Class", "region": "ClassRegion", "output": "Output"}


def target_arg(value: str) -> str:
    """``--target``: ``predicted``, ``label``, or ``class:K``, ``region:K``, ``output:I`` (K, I
    integers >= 0), checked as argparse reads it.

    Example:
        >>> target_arg("region:3"), target_arg("label")
        ('region:3', 'label')
    """
    if value in ("predicted", "label"):
        return value
    prefix, _, number = value.partition(":")
    if prefix not in TARGET_PREFIXES or not number.isdigit():
        raise argparse.ArgumentTypeError(
            f"expected predicted, label, class:K, region:K or output:I (K, I integers >= 0); got {value!r}"
        )
    return f"{prefix}:{int(number)}"


def target_of(value: str) -> Any:
    """The ``target=`` of ``explain_dataset`` for a checked ``--target`` value.

    Example:
        >>> target_of("predicted"), target_of("label"), target_of("region:3")
        (None, 'label', ClassRegion(k=3, mask=None, reduce='sum', axis=None))
    """
    if value in ("predicted", "label"):
        return None if value == "predicted" else "label"
    from xaikit import targets

    prefix, _, number = value.partition(":")
    return getattr(targets, TARGET_PREFIXES[prefix])(int(number))


def cli_message(message: str, options: Sequence[str] = ()) -> str:
    """A message of the Python API as the command line says it: the arguments named by their
    flags (:data:`EXPLAIN_FLAGS`), and one that starts with the name of a ``-o KEY=VALUE``
    option given (checked when the model runs, e.g. a CAM's ``layer``) prefixed with that option.

    Example:
        >>> cli_message("out: the store 'a' was written with other settings; pass another out=, or resume=False")
        "argument --out: the store 'a' was written with other settings; pass another --out, or --no-resume"
        >>> cli_message("layer 'x' is not a module of the model", ["layer=x"])
        "argument -o layer=x: layer 'x' is not a module of the model"
    """
    for pattern, flag in EXPLAIN_FLAGS:
        message = re.sub(pattern, flag, message)
    if not message.startswith("argument "):
        for item in options:
            key = item.partition("=")[0]
            if re.match(rf"{re.escape(key)}\b", message):
                return f"argument -o {item}: {message}"
    return message


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


def _method_name(method: str, model: str) -> str:
    """The canonical name of ``--method``. A name that no registered method has is looked up
    again after importing the module of a ``package.module:factory`` ``--model``: a method of
    your own is registered by a module that the factory's module imports."""
    import importlib

    from xaikit.errors import XaikitError
    from xaikit.xai import ModelSpec, get_method

    try:
        return get_method(method).name
    except XaikitError as err:
        try:
            spec = ModelSpec.of(model)
        except XaikitError:
            raise err from None
        if spec.kind != "import":
            raise
        module = str(spec.value).partition(":")[0]
        try:
            with _native_notices_filtered():
                importlib.import_module(module)
        except Exception as exc:
            raise type(err)(
                f"{err} (importing {module!r}, the module of --model, for a method of your own failed: "
                f"{type(exc).__name__}: {exc})"
            ) from None
        return get_method(method).name


def _explain(args: argparse.Namespace) -> int:
    from xaikit.errors import XaikitError
    from xaikit.xai.dataset import check_method_options, read_classes
    from xaikit.xai.internal import as_source

    prog = "xaikit explain"
    options = _method_options(args.option)
    try:
        method = _method_name(args.method, args.model)
    except XaikitError as err:
        _fail(prog, f"argument --method: {err}")
    try:
        check_method_options(method, options)
    except XaikitError as err:
        _fail(prog, f"argument --option: {cli_message(str(err))}")
    try:
        classes = read_classes(args.classes)
        source = as_source(
            _explain_data(args.data),
            resize=args.resize and tuple(args.resize),
            channels=args.channels,
            skip_bad=args.skip_bad,
        )
    except XaikitError as err:
        _fail(prog, cli_message(str(err)))
    existed = Path(args.out).exists()
    problem = _out_problem(args.out)
    if problem is not None:
        _fail(prog, f"argument --out: {problem}")
    engine = "ray" if args.workers is not None or args.ray_address is not None else "local"
    print(f"xaikit explain: {args.method} of {args.data} with {args.model} ({engine} engine) -> {args.out}")
    try:
        with _native_notices_filtered():
            import xaikit as xk
            from xaikit.xai.internal import save_grids

        result = xk.xai.explain_dataset(
            args.model,
            source,
            method=method,
            out=args.out,
            batch_size=args.batch_size,
            engine=engine,
            workers=args.workers,
            resume=args.resume,
            seed=args.seed,
            shard_size=args.shard_size,
            target=target_of(args.target),
            address=args.ray_address,
            classes=classes,
            **options,
        )
        table = result.table
        table_path = result.write_table(table=table)
        grids = (
            save_grids(result, source, os.path.join(args.out, "grids"), args.grid_size)
            if args.grid_size
            else []
        )
    except (XaikitError, OSError) as err:
        if not existed:  # the folder the writability check made, still empty: refused before the store
            with contextlib.suppress(OSError):
                Path(args.out).rmdir()
        print(f"xaikit: error: {cli_message(str(err), args.option)}", file=sys.stderr)
        return 2
    _explain_summary(args.out, result, table, table_path, grids)
    return 0


def _explain_summary(out: str, result: Any, table: Any, table_path: Any, grids: Sequence[Any]) -> None:
    """What ``xaikit explain`` did: the samples and shards, what was skipped, the degenerate
    maps, where the table and the grids are, and the next command."""
    shards = len(result.committed)
    done = f"{shards} shard{'' if shards == 1 else 's'}"
    if result.resumed:
        done += f": {len(result.resumed)} kept from an earlier run, {len(result.explained)} explained now"
    else:
        done += ", all explained now"
    skipped = result.skipped
    n = int(result.manifest["length"])
    print(
        f"xaikit explain: {n} samples{f' ({len(skipped)} skipped)' if skipped else ''} in {done}; "
        f"attributions {tuple(result.attributions.shape)} in {os.path.join(out, 'attributions')}"
    )
    if skipped:
        files = "file" if len(skipped) == 1 else "files"
        print(
            f"xaikit explain: skipped {len(skipped)} unreadable {files} (listed in {os.path.join(out, 'skipped.json')}):"
        )
        for item in skipped[:10]:
            print(f"  #{item['index']} {item['file']}: {item['error']}")
        if len(skipped) > 10:
            print(f"  ... and {len(skipped) - 10} more")
    if "map_status" in table.columns:
        status = table["map_status"].fillna("").astype(str)
        bad = status[status != ""]
        if len(bad):
            counts = ", ".join(f"{v} {k}" for k, v in bad.value_counts().sort_index().items())
            print(f"xaikit explain: {len(bad)} of {len(table)} maps are degenerate (map_status: {counts})")
        else:
            print(f"xaikit explain: no degenerate maps (map_status empty for all {len(table)})")
    print(f"xaikit explain: table of {len(table)} samples: {table_path}")
    if grids:
        print(f"xaikit explain: grids: {os.path.join(out, 'grids')}")
        for path in grids:
            print(f"  {path}")
    print(f"next: xaikit analyze {shlex.quote(out)} (strategy clusters; add --model and --data for concepts)")
    print(f"      xaikit report {shlex.quote(out)}")


#: how ``xk.analyze.dataset``'s messages name its Python arguments -> the flags of ``xaikit analyze``
ANALYZE_FLAGS: tuple[tuple[str, str], ...] = (
    (r"^store: ", "argument STORE: "),
    (r"^(?:data|x_key|label_key): ", "argument --data: "),
    (r"^model: ", "argument --model: "),
    (r"^model_or_factory: ", "argument --model: "),
    (r"\bmax_clusters\b", "--max-clusters"),
    (r"\bmax_display\b", "--max-display"),
    (r"\bdata=", "--data"),
    (r"\bmodel=", "--model"),
    (r"\bxk\.analyze\.dataset\(store\) or ", ""),
)


def _analyze(args: argparse.Namespace) -> int:
    from xaikit.errors import XaikitError

    prog = "xaikit analyze"
    if not os.path.isfile(os.path.join(args.store, "manifest.json")):
        _fail(
            prog,
            f"argument STORE: expected a store folder that 'xaikit explain' wrote (with manifest.json); got {args.store!r}",
        )
    if args.model is not None and args.data is None:
        _fail(prog, "argument --model: the concepts and the ablation check need the images too; add --data")
    data = None if args.data is None else _explain_data(args.data)
    problem = _out_problem(args.store)
    if problem is not None:
        _fail(prog, f"argument STORE: {problem}")
    print(
        f"xaikit analyze: {args.store}"
        + (f" with {args.model}" if args.model else "")
        + (f" on {args.data}" if args.data else "")
    )
    try:
        with _native_notices_filtered():
            import xaikit as xk

            res = xk.analyze.dataset(
                args.store, model=args.model, data=data, layer=args.layer, size=args.size,
                max_clusters=args.max_clusters, concepts=args.concepts, max_display=args.max_display,
                seed=args.seed, engine=args.engine, workers=args.workers, address=args.ray_address,
            )  # fmt: skip
    except (XaikitError, OSError) as err:
        message = str(err)
        for pattern, flag in ANALYZE_FLAGS:
            message = re.sub(pattern, flag, message)
        print(f"xaikit: error: {message}", file=sys.stderr)
        return 2
    _analyze_summary(args.store, res)
    return 0


def _analyze_summary(store: str, res: Any) -> None:
    """What ``xaikit analyze`` found: per class k, the clusters' sizes and accuracies (and the
    ablation check), where it wrote, and the next command."""
    n = len(res.arrays["index"])
    skipped = sum(res.skipped.values())
    print(
        f"xaikit analyze: {n} maps in {len(res.classes)} class{'' if len(res.classes) == 1 else 'es'}"
        + (f" ({skipped} skipped: {res.skipped})" if skipped else "")
    )
    for c in res.classes:
        acc = "" if c.accuracy is None else f", accuracy {c.accuracy:.3f}"
        head = f"  class {c.name or c.klass}: {c.n} samples{acc}, "
        if not c.k:
            print(head + "too few to cluster")
            continue
        parts = []
        for cl in c.clusters:
            text = f"#{cl.id}: {cl.size}" + ("" if cl.accuracy is None else f" (accuracy {cl.accuracy:.3f})")
            if cl.ablation and cl.ablation.get("accuracy_after") is not None:
                text += f" ablated {cl.ablation['accuracy_before']:.3f}->{cl.ablation['accuracy_after']:.3f}"
                if cl.ablation.get("accuracy_random") is not None:
                    text += f" (random region: {cl.ablation['accuracy_random']:.3f})"
            parts.append(text)
        print(head + f"k={c.k}: " + ", ".join(parts))
    if res.concepts:
        print(f"xaikit analyze: {len(res.concepts)} concepts of layer {res.layer!r}")
    print(f"xaikit analyze: wrote {res.path}")
    print(f"next: xaikit report {shlex.quote(store)}")


def _report(args: argparse.Namespace) -> int:
    from xaikit.errors import XaikitError

    if not os.path.isdir(args.run):
        _fail("xaikit report", f"argument RUN: expected an existing run folder; got {args.run!r}")
    if args.out is not None and not args.out.lower().endswith((".html", ".htm")):
        _fail("xaikit report", f"argument --out: expected a file name ending in .html; got {args.out!r}")
    page = args.out if args.out is not None else os.path.join(args.run, "report.html")
    problem = _out_problem(page, folder=False)
    if problem is not None:
        default = "" if args.out is not None else " (the default, in RUN; pass --out FILE.html)"
        _fail("xaikit report", f"argument --out: {problem}{default}")
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
    if args.command == "methods":
        return _methods(args)
    if args.command == "analyze":
        return _analyze(args)
    if args.command == "demo":
        from xaikit.demo import run_demo, start_framework
        from xaikit.errors import XaikitError

        problem = _out_problem(args.out)
        if problem is not None:
            _fail("xaikit demo", f"argument --out: {problem}")
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
