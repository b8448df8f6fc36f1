"""One calling convention for every public function of ``xk.evaluate`` (issue 26).

The signature walk reads every function of ``xk.evaluate.__all__`` with ``inspect.signature``:
the data by position, ``(model, x, saliency | method)`` or ``(saliency[, mask])``, then every
option keyword-only, spelled one way, with the same default everywhere. The run options every
metric shares come through ``**run: Unpack[RunOptions]`` (typed and defaulted once, in
``xaikit.evaluate._options``); the signature users see (``help()``) writes them out as
keyword-only parameters with their defaults. The call tests check
that an old spelling or an old positional order fails with a message that names the fix, before
anything runs, never with the arguments in the wrong places.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import xaikit as xk
from xaikit.errors import XaikitTypeError, XaikitValueError
from xaikit.evaluate._conventions import run_keys
from xaikit.evaluate._options import RUN_DEFAULTS, BaseRunOptions, RunOptions, RunSettings, Unpack
from xaikit.evaluate.registry import METRICS

P = inspect.Parameter

#: every public function: a metric, a driver of metrics, or a helper
FUNCTIONS = {
    name: obj for name in xk.evaluate.__all__ if inspect.isfunction(obj := getattr(xk.evaluate, name))
}
#: metrics of maps alone: the maps first (and the masks for the localization scores)
MAPS_FIRST = {
    "sparseness": ("saliency",),
    "complexity": ("saliency",),
    "effective_complexity": ("saliency",),
    "mst_c": ("saliency",),
    "localization": ("saliency", "mask"),
    "relevance_rank_accuracy": ("saliency", "mask"),
    "attribution_localisation": ("saliency", "mask"),
    "top_k_intersection": ("saliency", "mask"),
    "relevance_mass_accuracy": ("saliency", "mask"),
    "localization_auc": ("saliency", "mask"),
}
#: helpers that are no metric: their own data first
HELPERS = {
    "model_layers": ("model",),
    "save_evaluation": ("result", "folder", "name"),
    "make_mosaics": ("x", "y"),
}
#: metrics that take maps (or a method name computed once) as ``saliency``
SALIENCY_METRICS = {"deletion", "insertion", "road", "infidelity", "faithfulness_correlation", "focus"}
SALIENCY_METRICS |= {"region_perturbation", "irof", "selectivity"}  # issue 31: region curves
SALIENCY_METRICS |= {  # issue 31: feature_removal.py
    "sensitivity_n", "faithfulness_estimate", "monotonicity", "monotonicity_correlation", "sufficiency",
}  # fmt: skip
SALIENCY_METRICS |= {"non_sensitivity"}  # issue 31: axiomatic.py
#: metrics that re-run a method themselves: ``method``
METHOD_METRICS = {
    "randomization_test", "random_logit", "efficient_mprt", "smooth_mprt", "max_sensitivity",
    "avg_sensitivity", "local_lipschitz", "completeness", "input_invariance", "convergence",
}  # fmt: skip
#: the stability group (xaikit/evaluate/stability.py)
STABILITY_METHOD_METRICS = {
    "relative_input_stability", "relative_output_stability", "relative_representation_stability", "continuity",
}  # fmt: skip
SALIENCY_METRICS |= {"consistency"}
METHOD_METRICS |= STABILITY_METHOD_METRICS
#: spellings that must not come back (the one spelling of each concept is on the right)
BANNED = {
    "n_samples": "nsamples",
    "num_samples": "nsamples",
    "nr_samples": "nsamples",
    "n_perturb": "nsamples",
    "n_runs": "nsamples",
    "normalise": "normalize",
    "std": "stdev",
    "noise": "stdev / stdev_spread",
    "layer_order": "order",
    "maps": "saliency",
    "masks": "mask",
    "targets": "target",
    "classes": "target",
    "labels": "target",
    "batch_size": "max_batch",
    "random_state": "seed",
}
#: the shared options and their one default
SHARED_DEFAULTS: dict[str, Any] = {
    "target": None,
    "seed": 0,
    "max_batch": "auto",
    "framework": None,
    "output": 0,
    "model_kwargs": None,
    "method_options": None,
    "model": None,
    "x": None,
    "rank": "auto",
    "layers": None,
}
#: the order of the shared options, where a function has them (its own options come between
#: ``target`` and ``seed``)
SHARED_ORDER = ("target", "seed", "max_batch", "framework", "output", "model_kwargs", "method_options")
#: what every function that runs a model takes
RUNS_A_MODEL = {"target", "seed", "max_batch", "framework", "method_options"}
#: the functions that spell the run options out instead of taking ``**run``: ``compare`` (its
#: ``method_options`` holds one dict per method, and it has no ``output`` / ``model_kwargs``),
#: ``randomization_test`` (its ``**options`` are the method's options, SPEC §7)
EXPLICIT_RUN = {"compare", "randomization_test"}
#: the metrics that call the model with ``x`` alone: ``**run: Unpack[BaseRunOptions]``
NO_MODEL_KWARGS = {"max_sensitivity", "avg_sensitivity", "local_lipschitz"} | STABILITY_METHOD_METRICS
#: the data of a call that fails after the convention's check (no model)
DATA = {
    **dict.fromkeys(METHOD_METRICS, (None, None, "vanilla")),
    **{name: (None, None, np.ones((2, 4, 4))) for name in SALIENCY_METRICS},
    "sparseness": (np.ones((2, 4, 4)),),
    "complexity": (np.ones((2, 4, 4)),),
    "effective_complexity": (np.ones((2, 4, 4)),),
    "mst_c": (np.ones((2, 4, 4)),),
    "localization": (np.ones((2, 4, 4)), np.ones((2, 4, 4), dtype=bool)),
    "relevance_rank_accuracy": (np.ones((2, 4, 4)), np.ones((2, 4, 4), dtype=bool)),
    **{
        name: (np.ones((2, 4, 4)), np.ones((2, 4, 4), dtype=bool))
        for name in (
            "attribution_localisation",
            "top_k_intersection",
            "relevance_mass_accuracy",
            "localization_auc",
        )
    },
}
#: every function that takes the run options through ``**run``
RUN_FUNCTIONS = sorted(set(FUNCTIONS) - set(HELPERS) - EXPLICIT_RUN)


def _params(fn: Callable[..., Any]) -> list[inspect.Parameter]:
    return list(inspect.signature(fn).parameters.values())


def test_every_public_function_is_classified() -> None:
    known = set(MAPS_FIRST) | set(HELPERS) | SALIENCY_METRICS | METHOD_METRICS | {"compare"}
    assert set(FUNCTIONS) == known, "a new public function: add it to one of the groups above"
    # the registry's re-explaining metrics that have a function of their own take ``method``
    for metric in METRICS.values():
        if metric.name in FUNCTIONS and metric.re_explains:
            assert metric.name in METHOD_METRICS, metric.name


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_data_by_position_options_by_keyword(name: str) -> None:
    fn = FUNCTIONS[name]
    params = _params(fn)
    positional = [p.name for p in params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    if name in MAPS_FIRST:
        want = list(MAPS_FIRST[name])
    elif name in HELPERS:
        want = list(HELPERS[name])
    elif name == "compare":
        want = ["model", "x", "methods"]  # several methods: the one driver of metrics
    else:
        want = ["model", "x", "saliency" if name in SALIENCY_METRICS else "method"]
    assert positional == want, f"{name}{inspect.signature(fn)}"
    rest = params[len(positional) :]
    var_keyword = [p.name for p in rest if p.kind is P.VAR_KEYWORD]
    # randomization_test alone also takes the method's options as keywords: SPEC §7's
    # ``randomization_test(model, x, method=..., **method_options)``
    assert var_keyword == (["options"] if name == "randomization_test" else []), name
    assert all(p.kind is P.KEYWORD_ONLY for p in rest if p.kind is not P.VAR_KEYWORD), name
    assert not any(p.kind is P.VAR_POSITIONAL for p in params), name
    # the data have no defaults, except the methods of the drivers that have a usual one
    defaults = {p.name: p.default for p in params[: len(positional)] if p.default is not P.empty}
    assert defaults in (
        {},
        {"method": "vanilla"},
        {"method": "integrated"},
        {"methods": ("vanilla", "integrated")},
    )


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_shared_options_are_spelled_once_with_one_default(name: str) -> None:
    fn = FUNCTIONS[name]
    params = {p.name: p for p in _params(fn)}
    wrong = {k: BANNED[k] for k in params if k in BANNED}
    assert not wrong, f"{name}: spell {wrong}"
    for key, default in SHARED_DEFAULTS.items():
        if key in params and key not in MAPS_FIRST.get(name, ()) and params[key].kind is P.KEYWORD_ONLY:
            assert params[key].default == default, f"{name}({key}={params[key].default!r}), not {default!r}"
    shared = [k for k in params if k in SHARED_ORDER]
    assert shared == sorted(shared, key=SHARED_ORDER.index), (
        f"{name}: shared options in the order {SHARED_ORDER}"
    )
    if name not in HELPERS:
        assert RUNS_A_MODEL <= set(params), f"{name} lacks {sorted(RUNS_A_MODEL - set(params))}"
    if name in SALIENCY_METRICS | METHOD_METRICS:
        assert list(params)[3] == "target", f"{name}: target= comes first after the data"
    if name in MAPS_FIRST:  # a method name is computed on model= and x=, with every shared option
        assert {"model", "x", "output", "model_kwargs"} <= set(params), name


def test_the_run_options_are_typed_and_defaulted_once() -> None:
    """RunOptions holds the shared run options in the signatures' order, RunSettings' field
    defaults are the defaults the convention names, BaseRunOptions is RunOptions less
    ``model_kwargs``."""
    assert tuple(RUN_DEFAULTS) == SHARED_ORDER[1:]
    assert RUN_DEFAULTS == {k: SHARED_DEFAULTS[k] for k in SHARED_ORDER[1:]}
    assert RunOptions.__optional_keys__ == frozenset(RUN_DEFAULTS) and not RunOptions.__required_keys__
    assert BaseRunOptions.__optional_keys__ == frozenset(RUN_DEFAULTS) - {"model_kwargs"}
    assert RunSettings.of({}) == RunSettings(**RUN_DEFAULTS)
    assert RunSettings.of({"seed": 3}).seed == 3
    assert xk.evaluate.RunOptions is RunOptions and xk.evaluate.BaseRunOptions is BaseRunOptions


@pytest.mark.parametrize("name", sorted(set(FUNCTIONS) - set(HELPERS)))
def test_the_run_options_come_through_run(name: str) -> None:
    """The written signature: the function's own options keyword-only, the run options only in
    ``**run: Unpack[RunOptions]`` (``BaseRunOptions`` where the model takes no keyword
    arguments); the shown signature writes them out, last, with RunSettings' defaults."""
    fn = FUNCTIONS[name]
    raw = list(inspect.signature(inspect.unwrap(fn)).parameters.values())
    shown = _params(fn)
    if name in EXPLICIT_RUN:
        assert run_keys(fn) == () and "run" not in typing.get_type_hints(fn)
        assert [p.name for p in raw] == [p.name for p in shown], name
        return
    own = [p for p in raw if p.kind is P.KEYWORD_ONLY]
    assert own and all(p.name not in RUN_DEFAULTS for p in own), f"{name} spells a run option itself"
    assert raw[-1].kind is P.VAR_KEYWORD and raw[-1].name == "run", name
    typed = "BaseRunOptions" if name in NO_MODEL_KWARGS else "RunOptions"
    assert raw[-1].annotation == f"Unpack[{typed}]", f"{name}: **run: {raw[-1].annotation}"
    keys = tuple(k for k in RUN_DEFAULTS if name not in NO_MODEL_KWARGS or k != "model_kwargs")
    assert run_keys(fn) == keys
    hints = typing.get_type_hints(fn)  # the annotations resolve at run time (IDEs, docs tools)
    assert hints["run"] == Unpack[BaseRunOptions if name in NO_MODEL_KWARGS else RunOptions], name
    tail = shown[len(raw) - 1 :]
    assert [p.name for p in tail] == list(keys), name
    assert all(p.kind is P.KEYWORD_ONLY and p.default == RUN_DEFAULTS[p.name] for p in tail), name
    assert [p.name for p in shown[: len(raw) - 1]] == [p.name for p in raw[:-1]], name


@pytest.mark.parametrize("name", RUN_FUNCTIONS)
def test_run_takes_every_key_it_claims_and_refuses_others(name: str) -> None:
    """Every key of the function's TypedDict passes the convention's check (the call then fails
    on the missing model, not on the keyword); an unknown keyword and a run option the function
    does not use fail before anything runs, naming the options."""
    fn, args = FUNCTIONS[name], DATA[name]
    for key in run_keys(fn):
        try:
            fn(*args, **{key: RUN_DEFAULTS[key]})
        except Exception as exc:  # the missing model, the missing mask, ...: not the keyword
            assert type(exc) is not TypeError and not str(exc).startswith(f"{name}("), (
                f"{name}({key}=...): {exc}"
            )
    options = ", ".join(p.name for p in _params(fn) if p.kind is P.KEYWORD_ONLY)
    assert options.endswith(", ".join(run_keys(fn)))
    with pytest.raises(
        XaikitTypeError, match=rf"^{name}\(\) has no option 'seeds'; its options are {options}"
    ):
        fn(*args, seeds=1)
    if name in NO_MODEL_KWARGS:
        with pytest.raises(
            XaikitTypeError,
            match=rf"^{name}\(\) does not take the run option 'model_kwargs': it does not use it; its options "
            rf"are {options}$",
        ):
            fn(*args, model_kwargs={"mask": None})


def test_the_run_options_keep_their_meaning() -> None:
    """The same call with the run options as keywords, as a RunOptions dict, or left at their
    defaults gives the same numbers; another seed gives other ones."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)
    )  # nonlinear: SmoothGrad's noise (drawn from seed) changes the maps
    x = torch.rand(2, 1, 4, 4)
    ev = xk.evaluate
    plain = ev.deletion(model, x, "smoothgrad", steps=4, method_options={"nsamples": 3})
    run: RunOptions = dict(RUN_DEFAULTS)  # type: ignore[assignment]
    run["method_options"] = {"nsamples": 3}
    spelled = ev.deletion(model, x, "smoothgrad", steps=4, **run)
    np.testing.assert_array_equal(plain.scores, spelled.scores)
    other = ev.deletion(model, x, "smoothgrad", steps=4, **{**run, "seed": 5})
    assert not np.array_equal(plain.scores, other.scores)
    a = ev.max_sensitivity(model, x, "smoothgrad", nsamples=3, seed=2, method_options={"nsamples": 2})
    b = ev.max_sensitivity(
        model, x, "smoothgrad", nsamples=3, **{"seed": 2, "method_options": {"nsamples": 2}}
    )
    np.testing.assert_array_equal(a.ratios, b.ratios)


def test_the_traces_spell_the_shared_options_the_same_way() -> None:
    """The traces of ``xk.evaluate`` follow the trace conventions (``model_inputs``, ``mode``,
    ...), and spell the options they share with the metrics as the metrics do."""
    for trace in (xk.evaluate.DeletionAUC, xk.evaluate.SaliencyStability, xk.evaluate.Compare):
        params = inspect.signature(trace).parameters
        assert not set(params) & set(BANNED), trace
        for key, default in SHARED_DEFAULTS.items():
            if key in params and params[key].default is not P.empty:
                assert params[key].default == default, (trace, key)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_every_public_function_checks_its_calls(name: str) -> None:
    fn = FUNCTIONS[name]
    assert getattr(fn, "__wrapped__", None) is not None, f"{name} is not wrapped by _conventions.public"


# ---- old calls: a clear error, before anything runs ----------------------------------------------------------
MAPS = np.ones((2, 4, 4))
OLD_KEYWORDS = [
    ("max_sensitivity", (None, None, "vanilla"), "n_samples", "nsamples"),
    ("avg_sensitivity", (None, None, "vanilla"), "n_samples", "nsamples"),
    ("local_lipschitz", (None, None, "vanilla"), "n_samples", "nsamples"),
    ("local_lipschitz", (None, None, "vanilla"), "normalise", "normalize"),
    ("max_sensitivity", (None, None, "vanilla"), "normalise", "normalize"),
    ("local_lipschitz", (None, None, "vanilla"), "std", "stdev"),
    ("infidelity", (None, None, MAPS), "n_perturb", "nsamples"),
    ("faithfulness_correlation", (None, None, MAPS), "n_runs", "nsamples"),
    ("road", (None, None, MAPS), "noise", "stdev"),
    ("smooth_mprt", (None, None, "vanilla"), "noise", "stdev_spread"),
    ("smooth_mprt", (None, None, "vanilla"), "layer_order", "order"),
]


@pytest.mark.parametrize(("name", "args", "old", "new"), OLD_KEYWORDS)
def test_an_old_keyword_names_its_new_spelling(name: str, args: tuple[Any, ...], old: str, new: str) -> None:
    with pytest.raises(XaikitTypeError, match=rf"^{name}\(\): {old} was renamed {new}: write {new}=\.\.\.$"):
        FUNCTIONS[name](*args, **{old: 1})


def test_old_positional_orders_fail_with_the_keywords_to_use() -> None:
    """``complexity(maps, model, x)`` once meant model and x; ``deletion(model, x, maps, y)``
    the target; ``randomization_test(model, x, y, "vanilla")`` the target then the method."""
    ev = xk.evaluate
    cases = [
        (lambda: ev.complexity(MAPS, object(), MAPS), r"complexity\(saliency, model=\.\.\., x=\.\.\.\)"),
        (lambda: ev.sparseness(MAPS, object(), MAPS, 0), r"sparseness\(saliency, model=\.\.\., x=\.\.\., target=\.\.\.\)"),
        (lambda: ev.deletion(None, None, MAPS, 0, 10), r"deletion\(model, x, saliency, target=\.\.\., steps=\.\.\.\)"),
        (lambda: ev.localization(MAPS, MAPS > 0, 2.0), r"localization\(saliency, mask, tolerance=\.\.\.\)"),
        (lambda: ev.max_sensitivity(None, None, "vanilla", 0), r"max_sensitivity\(model, x, method, target=\.\.\.\)"),
        (
            lambda: ev.randomization_test(None, None, 0, "vanilla"),
            r"randomization_test\(model, x, method, target=\.\.\.\) \(the order was "
            r"randomization_test\(model, x, target, method, order, layers, seed\) before\)",
        ),
        (lambda: ev.save_evaluation({}, ".", "x", "title"), r"save_evaluation\(result, folder, name, title=\.\.\.\)"),
        (lambda: ev.compare(None, None, ["vanilla"], ["sparseness"]), r"compare\(model, x, methods, metrics=\.\.\.\)"),
    ]  # fmt: skip
    for call, message in cases:
        with pytest.raises(
            XaikitTypeError, match=r"takes only .* by position and every option by keyword; got \d "
        ):
            call()
        with pytest.raises(XaikitTypeError, match=message):
            call()


def test_a_class_where_the_method_goes_says_where_it_belongs() -> None:
    """The old ``randomization_test(model, x, target)``: the third argument is the method now."""
    with pytest.raises(XaikitTypeError, match=r"method must be the name of an explanation method .* got int 3 "
                       r"\(the classes to explain go in target="):  # fmt: skip
        xk.evaluate.randomization_test(object(), np.zeros((2, 4)), 3)
    with pytest.raises(XaikitTypeError, match=r"got ndarray .*maps in saliency="):
        xk.evaluate.max_sensitivity(object(), np.zeros((2, 4)), MAPS)


def test_an_unknown_keyword_lists_the_options_and_points_at_method_options() -> None:
    with pytest.raises(XaikitTypeError, match=r"^deletion\(\) has no option 'nsamples'; its options are target, steps, "
                       r".*; an option of the explanation method goes in method_options=\{'nsamples': \.\.\.\}$"):  # fmt: skip
        xk.evaluate.deletion(None, None, "integrated", nsamples=8)
    with pytest.raises(XaikitTypeError, match=r"completeness\(\) has no option 'baseline'.*method_options="):
        xk.evaluate.completeness(None, None, baseline="zeros")
    with pytest.raises(
        XaikitTypeError, match=r"^model_layers\(\) has no option 'fw'; its options are framework$"
    ):
        xk.evaluate.model_layers(None, fw="torch")


def test_randomization_test_takes_method_options_either_way() -> None:
    """SPEC §7's keywords and the ``method_options=`` of every metric give the same run; one key
    both ways is refused."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
    x = torch.rand(2, 1, 4, 4)
    a = xk.evaluate.randomization_test(model, x, method="smoothgrad", nsamples=3, random_baseline=False)
    b = xk.evaluate.randomization_test(
        model, x, method="smoothgrad", method_options={"nsamples": 3}, random_baseline=False
    )
    assert list(a.maps) == list(b.maps)
    for key in a.maps:
        np.testing.assert_array_equal(a.maps[key], b.maps[key])
    with pytest.raises(XaikitValueError, match=r"options \['nsamples'\] are given both as keywords"):
        xk.evaluate.randomization_test(
            model, x, method="smoothgrad", nsamples=3, method_options={"nsamples": 3}
        )
    with pytest.raises(XaikitValueError, match=r"method options \['output'\] are set by the evaluation"):
        xk.evaluate.randomization_test(model, x, method_options={"output": 0})


def test_metric_records_carry_their_labels() -> None:
    """The registry is the one place of a metric's label (figures, verdicts, the saved JSON) and
    abbreviation."""
    assert METRICS["deletion_auc"].label == "deletion AUC" and METRICS["deletion_auc"].short == "del"
    assert METRICS["efficient_mprt"].label == "eMPRT" and METRICS["road"].label == "ROAD"
    assert all(m.label and m.short for m in METRICS.values())
    assert len({m.label for m in METRICS.values()}) == len(METRICS)
    assert len({m.short for m in METRICS.values()}) == len(METRICS)
    custom = xk.evaluate.Metric("my_auc", "faithfulness", True, False, False, "?", lambda ctx: ctx.nan())
    assert (custom.label, custom.short) == ("my AUC", "my AUC")


def test_the_renames_table_is_the_one_the_docs_show() -> None:
    """docs/evaluate.md lists every old spelling the functions refuse."""
    from pathlib import Path

    from xaikit.evaluate import _conventions

    page = (Path(__file__).resolve().parent.parent / "docs" / "evaluate.md").read_text(encoding="utf-8")
    for old, new in _conventions.RENAMED.items():
        assert f"`{old}`" in page and f"`{new}`" in page, old


@pytest.mark.parametrize("name", [n for n in RUN_FUNCTIONS if "seed" in run_keys(FUNCTIONS[n])])
def test_a_bad_seed_is_refused_by_name_before_anything_runs(name: str) -> None:
    """RunSettings.of checks the run options: a float seed is not truncated by a random
    generator, nor a string passed on to numpy's raw error."""
    fn, args = FUNCTIONS[name], DATA[name]
    for seed, got in ((1.5, "float 1.5"), ("a", "str 'a'"), (-1, "int -1")):
        with pytest.raises(XaikitValueError, match=rf"^seed must be an int >= 0; got {got}$"):
            fn(*args, seed=seed)
