"""The calling convention of ``xk.evaluate``'s public functions, and the clear errors of old calls.

The convention (``docs/evaluate.md``, "One calling convention"; ``tests/test_evaluate_api.py``
walks every public signature):

* a metric that runs the model takes ``(model, x, saliency)`` by position, ``saliency`` being
  maps or a method name (computed once), or ``(model, x, method)`` when it must re-run the
  method itself (robustness, the randomization checks, completeness);
* a metric of maps alone takes ``saliency`` first (and ``mask`` for the localization scores);
* everything else is keyword-only, spelled one way everywhere: ``target``, ``nsamples``,
  ``normalize``, ``seed``, ``max_batch``, ``framework``, ``output``, ``model_kwargs``,
  ``method_options``, ...

:func:`public` wraps each public function so that a call in an old form fails with a message
that says what to write instead, never runs with its arguments in the wrong places: an old
keyword (``n_samples=``) names its new spelling, an option passed by position names the
keywords to use, an unknown keyword lists the function's options.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, ParamSpec, TypeVar

from xaikit.errors import XaikitTypeError, describe

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
        params = inspect.signature(fn).parameters
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
