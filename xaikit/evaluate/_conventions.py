"""The calling convention of ``xk.evaluate``'s public functions, and the clear errors of old calls.

The convention (``docs/evaluate.md``, "One calling convention"; ``tests/test_evaluate_api.py``
walks every public signature):

* a metric that runs the model takes ``(model, x, saliency)`` by position, ``saliency`` being
  maps or a method name (computed once), or ``(model, x, method)`` when it must re-run the
  method itself (robustness, the randomization checks, completeness);
* a metric of maps alone takes ``saliency`` first (and ``mask`` for the localization scores);
* everything else is keyword-only, spelled one way everywhere: ``target``, ``nsamples``,
  ``normalize``, ...; the run options shared by every metric (``seed``, ``max_batch``,
  ``framework``, ``output``, ``model_kwargs``, ``method_options``) come through
  ``**run: Unpack[RunOptions]`` (:mod:`xaikit.evaluate._options`).

:func:`public` wraps each public function so that a call in an old form fails with a message
that says what to write instead, never runs with its arguments in the wrong places: an old
keyword (``n_samples=``) names its new spelling, an option passed by position names the
keywords to use, an unknown keyword lists the function's options (its own and the run options
its ``**run`` takes). The wrapper's signature shows the run options as keyword-only parameters
with their defaults, so that ``help()`` and notebooks list them.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Mapping
from typing import Any, ParamSpec, TypeVar

from xaikit.errors import XaikitTypeError, describe
from xaikit.evaluate._options import RUN_DEFAULTS, RUN_OPTIONS

__all__ = ["RENAMED", "check_method", "public"]

P = ParamSpec("P")
R = TypeVar("R")

#: old keyword -> its one spelling now, for every public function of ``xk.evaluate`` (a function
#: adds its own with ``public(renamed=...)``)
RENAMED: dict[str, str] = {
    "n_samples": "nsamples",
    "n_perturb": "nsamples",
    "n_runs": "nsamples",
    "normalise": "normalize",
    "layer_order": "order",
    "std": "stdev",
}

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def run_keys(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The run options a function takes through ``**run: Unpack[<TypedDict>]`` (a TypedDict of
    :data:`~xaikit.evaluate._options.RUN_OPTIONS`), in the order of :data:`RUN_DEFAULTS`; ``()``
    for a function without one.

    Example:
        >>> from xaikit.evaluate import deletion, max_sensitivity
        >>> run_keys(deletion)
        ('seed', 'max_batch', 'framework', 'output', 'model_kwargs', 'method_options')
        >>> "model_kwargs" in run_keys(max_sensitivity)
        False
    """
    fn = inspect.unwrap(fn)
    for p in inspect.signature(fn).parameters.values():
        if p.kind is not inspect.Parameter.VAR_KEYWORD:
            continue
        if isinstance(p.annotation, str):  # ``from __future__ import annotations``
            found = re.fullmatch(r"(?:typing\.|typing_extensions\.)?Unpack\[(\w+)\]", p.annotation)
            typed = RUN_OPTIONS.get(found.group(1)) if found else None
            if typed is None and "Unpack" in p.annotation:
                raise TypeError(
                    f"{fn.__name__}: **{p.name}: {p.annotation} names no TypedDict of RUN_OPTIONS"
                )
        else:
            args = getattr(p.annotation, "__args__", ())
            typed = args[0] if args and args[0] in RUN_OPTIONS.values() else None
        keys: frozenset[str] = getattr(typed, "__optional_keys__", frozenset())
        return tuple(k for k in RUN_DEFAULTS if k in keys)
    return ()


def _shown_signature(sig: inspect.Signature, run: tuple[str, ...]) -> inspect.Signature:
    """``sig`` with its ``**run`` written out as the keyword-only run options and their defaults."""
    if not run:
        return sig
    typed = RUN_OPTIONS["RunOptions"].__annotations__
    params = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    params += [
        inspect.Parameter(
            k,
            inspect.Parameter.KEYWORD_ONLY,
            default=RUN_DEFAULTS[k],
            annotation=getattr(typed[k], "__forward_arg__", typed[k]),
        )
        for k in run
    ]
    return sig.replace(parameters=params)


def public(
    *, renamed: Mapping[str, str] | None = None, old_order: tuple[str, ...] = ()
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Check each call of a public function against its signature before it runs.

    Args:
        renamed: old keyword -> new keyword, beside :data:`RENAMED`.
        old_order: the function's positional parameters before the convention, to name the
            keywords an old positional call must use now.

    Example:
        >>> @public(old_order=("a", "b"))
        ... def f(a, *, b=0, nsamples=1):
        ...     return a + b * nsamples
        >>> f(1, b=2, nsamples=3)
        7
        >>> f(1, n_samples=3)
        Traceback (most recent call last):
        ...
        xaikit.errors.XaikitTypeError: f(): n_samples was renamed nsamples: write nsamples=...
        >>> f(1, 2)
        Traceback (most recent call last):
        ...
        xaikit.errors.XaikitTypeError: f() takes only a by position and every option by keyword; got 2 positional arguments: write f(a, b=...)
    """
    extra = dict(renamed or {})

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        sig = inspect.signature(fn)
        run = run_keys(fn)
        shown = _shown_signature(sig, run)
        params = shown.parameters  # the run options as keywords: a key of **run is known
        positional = [n for n, p in params.items() if p.kind in _POSITIONAL]
        options = [n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        old = {k: v for k, v in {**RENAMED, **extra}.items() if v in params}
        name = fn.__name__

        def check(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
            if len(args) > len(positional):
                meant = list(old_order[: len(args)]) or [*positional, *options[: len(args) - len(positional)]]
                write = [n for n in positional if n in meant] + [
                    f"{n}=..." for n in meant if n not in positional
                ]
                before = (
                    f" (the order was {name}({', '.join(old_order)}) before)"
                    if tuple(old_order[: len(positional)]) != tuple(positional) and old_order
                    else ""
                )
                raise XaikitTypeError(
                    f"{name}() takes only {', '.join(positional)} by position and every option by keyword; "
                    f"got {len(args)} positional arguments: write {name}({', '.join(write)}){before}"
                )
            for key in kwargs:
                if key in params:
                    continue
                if key in old:
                    raise XaikitTypeError(f"{name}(): {key} was renamed {old[key]}: write {old[key]}=...")
                if not takes_any and key in RUN_DEFAULTS:
                    raise XaikitTypeError(
                        f"{name}() does not take the run option {key!r}: it does not use it; its options "
                        f"are {', '.join(options)}"
                    )
                if not takes_any:
                    hint = (
                        f"; an option of the explanation method goes in method_options={{{key!r}: ...}}"
                        if "method_options" in params
                        else ""
                    )
                    raise XaikitTypeError(
                        f"{name}() has no option {key!r}; its options are {', '.join(options)}{hint}"
                    )

        @functools.wraps(fn)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            check(args, kwargs)
            return fn(*args, **kwargs)

        call.__signature__ = shown  # type: ignore[attr-defined]
        return call

    return wrap


def check_method(method: Any, what: str = "method") -> str:
    """The canonical name of the method a metric re-runs, or an error that lists the methods
    (and, for a value that is no name at all, says where the classes go: ``target=``).

    Example:
        >>> check_method("ig")
        'integrated'
    """
    from xaikit.xai.registry import canonical, method_names

    if not isinstance(method, str):
        raise XaikitTypeError(
            f"{what} must be the name of an explanation method ({', '.join(map(repr, method_names()))}); "
            f"got {describe(method)} (the classes to explain go in target=, maps in saliency= of the "
            "metrics that take maps)"
        )
    return canonical(method, what)
