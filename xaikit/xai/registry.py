"""Every explanation method as one record: its name, family, display title, aliases, options
and needs, and the runner that computes it.

A method is one file that defines its runner and registers its :class:`Method`. Everything that
needs a fact about methods reads it from here: :func:`xaikit.xai.explain` (dispatch, option
checks, which classes are pinned, whether a completeness delta exists), ``SaliencyNet``,
``explain_dataset`` (which options it may store, whether it records deltas), the traces
(columns, titles), ``xk.evaluate`` (method names), the CLI's ``--method`` help and the docs'
method table (``tools/method_table.py`` writes it from the records).

A runner follows the :class:`Runner` protocol: it gets a :class:`Call` (the prepared inputs on
the model's device, the pinned classes, the seed, the chunking and the call's settings, built
once by the front door) and the method's own options (checked against :attr:`Method.options`
and filled with their defaults), runs inside the model's inference mode, and returns an
:class:`Explained`.

Example:
    >>> canonical("ig"), canonical("Grad-CAM"), family("rise"), title("gradcam++")
    ('integrated', 'gradcam', 'perturbation', 'Grad-CAM++')
    >>> get_method("smoothgrad").options["nsamples"], get_method("gradcam").targets
    (None, 'in_pass')
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from xaikit.errors import XaikitTypeError, XaikitValueError, caller_level, describe

if TYPE_CHECKING:
    from xaikit.backend import Backend, T
    from xaikit.xai._engine.inputs import Inputs

__all__ = [
    "FAMILIES",
    "SHARED_OPTIONS",
    "Call",
    "CallSettings",
    "Explained",
    "Method",
    "Runner",
    "all_methods",
    "canonical",
    "family",
    "get_method",
    "method_names",
    "register_method",
    "title",
    "unregister_method",
]

#: the method families, in the order of tables and docs
FAMILIES = ("gradient", "cam", "perturbation", "rules", "agnostic", "transformer")
#: options every method takes besides its own: which model output to explain and extra forward
#: arguments (checked by :func:`xaikit.backend.outputs.check_output` / ``xai/_engine/kwargs.py``)
SHARED_OPTIONS = ("output", "model_kwargs")
#: what a method needs to know about the explained classes before it runs
TARGET_MODES = ("pinned", "in_pass")
#: what a method's map values measure (``Method.units``), for the health check's underflow test:
#: a derivative of the score (compared with the score per unit of input), a share of a change of
#: the score (compared with the score), or no score unit (not compared)
UNITS = ("gradient", "attribution", "none")


@dataclass(frozen=True)
class CallSettings:
    """How a call runs, whatever its method: the settings a method's own loop hands on to the
    engine (:meth:`Call.settings`; :func:`~xaikit.xai._engine.chunks.forward_rows`,
    :meth:`~xaikit.xai._engine.job.Job.over` and the sweep read them from here).

    Attributes:
        seed: the seed of every random draw (noise, baselines, masks).
        output: which model output is explained.
        max_batch: rows per chunk, or ``"auto"`` (the engine's plan).
        memory_budget: what an ``"auto"`` chunk may use (bytes, or a fraction of the memory).
        xla: compile the TensorFlow step with XLA.
        progress: report progress: True, False or None (shown once the call has run a few
            seconds; :mod:`xaikit.xai._engine.progress`).
        target: a bound target object (:class:`xaikit.targets.Bound`) scoring the rows instead
            of the classes (the pinned targets are then sample indices), or None.
    """

    seed: int = 0
    output: int | str = 0
    max_batch: int | str = "auto"
    memory_budget: int | float = 0.5
    xla: bool = False
    progress: bool | None = None
    target: Any = None


@dataclass
class Call:
    """One explanation call, built once by the front door and handed to the method's runner.

    Attributes:
        inp: the validated inputs on the model's device, in the model's layout
            (:class:`~xaikit.xai._engine.inputs.Inputs`; ``inp.to_user`` moves results back).
        method: the record of the method being run.
        targets: int64 (B,) classes on the device, pinned before the method runs (every noisy
            or interpolated row of a sample explains the same class), or None for a method
            with ``targets="in_pass"`` called without classes: it reads each row's predicted
            class off its own forward pass.
        seed: the seed of every random draw (noise, baselines, masks).
        max_batch: rows per fused chunk, or ``"auto"`` (the engine's plan).
        memory_budget: what an ``"auto"`` chunk may use (bytes, or a fraction of the memory).
        output: which model output is explained.
        xla: compile the TensorFlow step with XLA.
        with_delta: the caller wants the completeness delta (only for ``delta=True`` methods).
        progress: report progress (slow methods): True, False or None (after a few seconds).
        spec: the bound target object (:class:`xaikit.targets.Bound`) of a method that takes
            them (``Method.target_objects``), when one was given: ``targets`` then holds each
            sample's index; None otherwise.
        unchecked: for a method with ``targets="in_pass"``, the given classes (int64 (B,), host)
            whose range against the model's class count is not checked yet: the runner calls
            :meth:`check_classes` before its first row runs (a CAM, with its layer probe's
            output; the front door checks any the runner left, before returning a map).
    """

    inp: Inputs
    method: Method
    targets: T | None
    seed: int
    max_batch: int | str = "auto"
    memory_budget: int | float = 0.5
    output: int | str = 0
    xla: bool = False
    with_delta: bool = False
    progress: bool | None = None
    spec: Any = None
    unchecked: np.ndarray | None = None
    #: the front door's check of ``unchecked``, ``checker(inp, classes, output, probe)``
    #: (``_engine.targets.check_given``; the registry imports no engine module)
    checker: Callable[[Inputs, np.ndarray, int | str, Any], None] | None = None

    def check_classes(self, probe: Any = None) -> None:
        """Check :attr:`unchecked` against the model's class count, read off ``probe`` (what the
        model returned on one row, where the runner has it) or a forward pass of one row; a
        class the model does not have raises :class:`~xaikit.errors.XaikitValueError`."""
        if self.unchecked is not None:
            if self.checker is None:
                raise XaikitTypeError("Call.unchecked classes need Call.checker (the front door sets both)")
            self.checker(self.inp, self.unchecked, self.output, probe)
            self.unchecked = None

    def settings(self) -> CallSettings:
        """The call's :class:`CallSettings`, for a method's own loop (occlusion, RISE, XRAI, Guided
        IG, the sweep, the CAMs, LRP, the model-agnostic methods) to hand on to the engine."""
        return CallSettings(
            self.seed, self.output, self.max_batch, self.memory_budget, self.xla, self.progress, self.spec
        )

    @property
    def bk(self) -> Backend:
        return self.inp.bk

    @property
    def batch(self) -> int:
        return self.inp.batch


@dataclass
class Explained:
    """What a runner returns.

    Attributes:
        values: the attributions: for a ``result="input"`` method one array per model input,
            with its shape, in the caller's layout (``Call.inp.to_user``); for a
            ``result="map"`` method one (B, H, W) array.
        delta: (B,) completeness error sum(attributions) - (f(x) - f(baseline)), when asked for
            and the method has one.
        chunks: the rows of each fused pass (for inspection and benchmarks).
        scores: (B,) the explained score of each sample as the runner read it (methods that
            find the class in their own pass), for the degenerate-map check; None otherwise.
        detail: the method's full result (a :class:`~xaikit.xai.cam.CamResult`, an
            :class:`~xaikit.xai.gradient.xrai.XraiResult`) when the call asked for it with ``raw=True``;
            ``explain`` then returns it instead of ``values``.
    """

    values: list[np.ndarray]
    delta: np.ndarray | None = None
    chunks: list[int] = field(default_factory=list)
    scores: np.ndarray | None = None
    detail: Any = None


#: computes one method: ``runner(call, **options) -> Explained``, with ``call`` a :class:`Call`
#: and ``options`` the method's own, checked and filled with their defaults
Runner = Callable[..., Explained]
#: checks the values of a method's own options without a model (raises an ``XaikitError``); what
#: it returns is ignored
Check = Callable[[dict[str, Any]], object]


@dataclass(frozen=True)
class Method:
    """One explanation method.

    Attributes:
        name: the canonical name (lower case), e.g. ``"gradcam++"``.
        family: one of :data:`FAMILIES` (``"gradient"``, ``"cam"``, ``"perturbation"``, ``"rules"``,
            ``"agnostic"``, ``"transformer"``).
        title: the display name of columns, legends and grids, e.g. ``"Grad-CAM++"``.
        run: the runner, or ``"module:function"`` naming it (imported on first use).
        options: the method's own options and their defaults (None: the method chooses);
            ``output`` and ``model_kwargs`` (:data:`SHARED_OPTIONS`) come on top.
        aliases: other names the method is found by (matched like names: case, ``-``, spaces
            and ``_cam`` do not matter).
        short: a short label for narrow figure columns (default: the title).
        result: ``"input"`` (attributions with each input's shape) or ``"map"`` (one (B, H, W)
            map per image).
        gradients: whether it runs backward passes (False: forward passes only).
        layer: whether it reads an inner layer (``layer=`` picks it).
        noise: whether it draws random numbers (the seed matters).
        delta: whether it can report the completeness delta (``return_delta=True``).
        targets: ``"pinned"`` (the classes are fixed from a forward pass of the clean inputs
            before the method runs) or ``"in_pass"`` (without given classes, the method reads
            each row's predicted class off its own pass: no extra forward pass; given classes
            reach it with their range unchecked, ``Call.unchecked``, and it calls
            ``call.check_classes(probe)`` before its first row runs).
        target_objects: the method takes target objects (:mod:`xaikit.targets`: regions,
            regression units, similarities, callables) besides class indices; the front door
            refuses them for the others, with a message naming ``target``.
        core: one of the four methods ``SaliencyNet`` and the ``Saliency`` trace compute.
        slow: reports progress (``progress=``): its cost is more than one fused sweep.
        check: a function that checks the values of the method's own options without a model
            (raises an ``XaikitError``); names are checked against ``options`` in any case.
        summary: what the map answers, in one line (the docs' table, the CLI's help).
        reference: the paper or page it follows.
        formula: for a gradient class-activation map, ``formula(A, dA) -> (B, h, w)`` from a
            layer's activations and their gradients, channel-first float64 (the ``GradCAM``
            trace applies it to recorded batch keys).
        units: what the map's values measure (:data:`UNITS`), for the check of degenerate maps
            (:mod:`xaikit.xai.health`): ``"gradient"`` (a derivative of the score: vanilla
            gradients, SmoothGrad), ``"attribution"`` (default: a share of a change of the score,
            which a map below float32's resolution of the score has lost) or ``"none"`` (no unit
            of the score: a variance, a normalized or masked map, a dependence measure; no
            underflow test).
        renamed: old option name -> its name now (RISE's ``n_masks`` -> ``nsamples``): an old
            name is still taken, with a ``FutureWarning``, and stored dataset options written
            with it still resume (:meth:`current_names`).
    """

    name: str
    family: str
    title: str
    run: str | Runner
    options: Mapping[str, Any] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    short: str = ""
    result: str = "input"
    gradients: bool = True
    layer: bool = False
    noise: bool = False
    delta: bool = False
    targets: str = "pinned"
    target_objects: bool = False
    core: bool = False
    slow: bool = False
    check: Check | None = None
    summary: str = ""
    reference: str = ""
    formula: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
    units: str = "attribution"
    renamed: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or self.name != self.name.lower():
            raise XaikitValueError(f"Method name must be a non-empty lower-case str; got {self.name!r}")
        if self.family not in FAMILIES:
            raise XaikitValueError(
                f"Method {self.name!r}: family must be one of {FAMILIES}; got {describe(self.family)}"
            )
        for key in ("title", "short", "summary", "reference"):
            value = getattr(self, key)
            if not isinstance(value, str) or (key == "title" and not value.strip()):
                what = "a non-empty str" if key == "title" else "a str"
                raise XaikitTypeError(f"Method {self.name!r}: {key} must be {what}; got {describe(value)}")
        if not isinstance(self.aliases, tuple) or not all(isinstance(a, str) and a for a in self.aliases):
            raise XaikitTypeError(
                f"Method {self.name!r}: aliases must be a tuple of non-empty str, e.g. ('ig',); got "
                f"{describe(self.aliases)}"
            )
        if not isinstance(self.options, Mapping) or not all(
            isinstance(k, str) and k.isidentifier() for k in self.options
        ):
            raise XaikitTypeError(
                f"Method {self.name!r}: options must be a dict {{option name: default}} with identifier "
                f"names; got {describe(self.options)}"
            )
        flags = ("gradients", "layer", "noise", "delta", "core", "slow")
        bad = [k for k in flags if not isinstance(getattr(self, k), bool)]
        if bad:
            raise XaikitTypeError(f"Method {self.name!r}: {bad} must be True or False")
        for key in ("check", "formula"):
            if getattr(self, key) is not None and not callable(getattr(self, key)):
                raise XaikitTypeError(
                    f"Method {self.name!r}: {key} must be a function or None; got {describe(getattr(self, key))}"
                )
        if self.result not in ("input", "map"):
            raise XaikitValueError(
                f"Method {self.name!r}: result must be 'input' or 'map'; got {self.result!r}"
            )
        if self.units not in UNITS:
            raise XaikitValueError(f"Method {self.name!r}: units must be one of {UNITS}; got {self.units!r}")
        if self.targets not in TARGET_MODES:
            raise XaikitValueError(
                f"Method {self.name!r}: targets must be one of {TARGET_MODES}; got {self.targets!r}"
            )
        if not (isinstance(self.run, str) and ":" in self.run) and not callable(self.run):
            raise XaikitTypeError(
                f"Method {self.name!r}: run must be a runner or 'module:function'; got {describe(self.run)}"
            )
        clash = sorted(set(self.options) & set(SHARED_OPTIONS))
        if clash:
            raise XaikitValueError(f"Method {self.name!r}: {clash} are shared options, not the method's own")
        if not isinstance(self.renamed, Mapping) or any(
            not isinstance(old, str) or new not in self.options or old in self.options
            for old, new in self.renamed.items()
        ):
            raise XaikitTypeError(
                f"Method {self.name!r}: renamed must map old option names (no longer options) to "
                f"options of the method; got {describe(self.renamed)}"
            )
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))
        object.__setattr__(self, "renamed", MappingProxyType(dict(self.renamed)))
        if not self.short:
            object.__setattr__(self, "short", self.title)

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        """Records pickle (a trace that holds them, a process that runs them): the options go as
        a dict (a read-only mapping does not pickle), the runner and functions by reference."""
        state = {f.name: getattr(self, f.name) for f in fields(self)}
        state["options"] = dict(self.options)
        state["renamed"] = dict(self.renamed)
        return _method_from, (state,)

    @property
    def cost(self) -> str:
        """The cost class, for tables and help: ``"gradients"`` (forward and backward passes) or
        ``"forward only"``."""
        return "gradients" if self.gradients else "forward only"

    def option_texts(self) -> list[str]:
        """Each of the method's own options as ``name=default``, or ``name`` alone when the
        method chooses (default None), for help texts and the docs' table.

        Example:
            >>> get_method("rise").option_texts(), get_method("occlusion").option_texts()
            (['nsamples=1000', 'cell=8', 'p=0.5'], ['window', 'stride', 'baseline=0.0'])
        """
        return [k if v is None else f"{k}={v!r}" for k, v in self.options.items()]

    def runner(self) -> Runner:
        """The runner (imported on first use when given as ``"module:function"``)."""
        if callable(self.run):
            return self.run
        module, _, attr = self.run.partition(":")
        found: Runner = getattr(importlib.import_module(module), attr)
        return found

    def current_names(self, options: Mapping[str, Any], *, warn: bool = True) -> dict[str, Any]:
        """``options`` with each old name of :attr:`renamed` written as its name now; with
        ``warn``, a ``FutureWarning`` says so (stored options are translated silently).

        Raises:
            XaikitTypeError: an option given under both names.

        Example:
            >>> import warnings
            >>> with warnings.catch_warnings():
            ...     warnings.simplefilter("ignore")
            ...     get_method("rise").current_names({"n_masks": 64, "cell": 4})
            {'nsamples': 64, 'cell': 4}
        """
        old = [k for k in options if k in self.renamed]
        if not old:
            return dict(options)
        both = [k for k in old if self.renamed[k] in options]
        if both:
            raise XaikitTypeError(
                f"explain(method={self.name!r}) got {both[0]} and {self.renamed[both[0]]}, one option under "
                f"its old and its new name: give {self.renamed[both[0]]}= only"
            )
        if warn:
            import warnings

            said = ", ".join(f"{k} is now {self.renamed[k]}" for k in old)
            warnings.warn(
                f"explain(method={self.name!r}): {said} (one spelling for every method); write "
                f"{', '.join(self.renamed[k] + '=...' for k in old)}: the old name will stop working",
                FutureWarning,
                stacklevel=caller_level(),
            )
        return {self.renamed.get(k, k): v for k, v in options.items()}

    def split_options(self, options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(shared, own)``: the shared options given (``output``, ``model_kwargs``) and the
        method's own, every one filled with its default (a flag, an option whose default is True or
        False, given as None takes its default too, as :func:`flag` reads None); an option the
        method does not take is an error naming the ones it does, and :attr:`check` checks the
        values.

        Example:
            >>> shared, own = get_method("rise").split_options({"nsamples": 64, "output": 1})
            >>> shared, own["nsamples"], own["cell"]
            ({'output': 1}, 64, 8)
            >>> get_method("kernel_shap").split_options({"paired": None})[1]["paired"]
            True
        """
        options = self.current_names(options)
        unknown = sorted(k for k in options if k not in self.options and k not in SHARED_OPTIONS)
        if unknown:
            own = ", ".join(self.options) or "none of its own"
            raise XaikitTypeError(
                f"explain(method={self.name!r}) got unknown option(s) {unknown}; its options are "
                f"{own}, and output and model_kwargs{_taken_by(unknown, self.family)}"
            )
        shared = {k: options[k] for k in SHARED_OPTIONS if k in options}
        given = {
            k: v
            for k, v in options.items()
            if k in self.options and not (v is None and isinstance(self.options[k], bool))
        }
        if self.check is not None:
            self.check(dict(given))
        return shared, {**self.options, **given}


def _taken_by(options: list[str], family: str = "", most: int = 6) -> str:
    """For an error about options a method does not take: which methods take each of them (those
    of ``family`` first), so that an option meant for another method (``nsamples`` given to
    vanilla, ``nintegration`` to SmoothGrad) says where it belongs.

    Example:
        >>> _taken_by(["cell", "no_such_option"])
        ' (cell is an option of: rise)'
    """
    said = []
    for option in options:
        takers = [m.name for m in _REGISTRY.values() if option in m.options]
        takers.sort(key=lambda name: _REGISTRY[name].family != family)  # stable: record order within
        renamed = [f"{m.name}'s {m.renamed[option]}" for m in _REGISTRY.values() if option in m.renamed]
        if renamed:
            said.append(f"{option} is the old name of {', '.join(renamed)}")
        elif takers:
            more = f" and {len(takers) - most} more" if len(takers) > most else ""
            said.append(f"{option} is an option of: {', '.join(takers[:most])}{more}")
    return f" ({'; '.join(said)})" if said else ""


def _method_from(state: dict[str, Any]) -> Method:
    """A record from its pickled fields (see ``Method.__reduce__``)."""
    return Method(**state)


#: the registered methods by canonical name; the built-in ones register when their modules are
#: imported, which ``xaikit/xai/__init__.py`` does (importing any ``xaikit.xai`` module runs it)
_REGISTRY: dict[str, Method] = {}
_LOOKUP: dict[str, str] = {}


def _key(name: str) -> str:
    return name.lower().replace("-", "").replace(" ", "_").replace("_cam", "cam")


def register_method(method: Method, *, replace: bool = False) -> Method:
    """Add ``method`` to every place that takes a method by name: ``explain``, ``SaliencyNet``
    (not a core method: through ``explain``), the traces' ``methods=``, ``explain_dataset``,
    ``xk.evaluate`` and ``compare``, the CLI's ``--method``.

    Args:
        method: the record.
        replace: allow replacing a registered method of the same name (its aliases go too).

    Returns:
        The record, registered.

    Raises:
        XaikitValueError: the name is registered already (without ``replace``), or the name,
            title or an alias names another method; nothing changes then.
    """
    if not isinstance(method, Method):
        raise XaikitTypeError(f"register_method takes a Method record; got {describe(method)}")
    if method.name in _REGISTRY and not replace:
        raise XaikitValueError(
            f"a method named {method.name!r} is registered already; pass replace=True to replace it"
        )
    keys = {_key(method.name), _key(method.title), *(_key(a) for a in method.aliases)}
    taken = sorted(k for k in keys if _LOOKUP.get(k, method.name) != method.name)
    if taken:  # checked before a replaced record goes: a refused replacement changes nothing
        owners = sorted({_LOOKUP[k] for k in taken})
        raise XaikitValueError(
            f"method {method.name!r}: the name, title or alias {taken} already names {owners}"
        )
    if method.name in _REGISTRY:
        unregister_method(method.name)
    _REGISTRY[method.name] = method
    for k in keys:
        _LOOKUP[k] = method.name
    return method


def unregister_method(name: str) -> None:
    """Remove a registered method (and its aliases); a test's toy method, say."""
    found = _REGISTRY.pop(canonical(name))
    for k in [k for k, v in _LOOKUP.items() if v == found.name]:
        del _LOOKUP[k]


def canonical(method: Any, name: str = "method") -> str:
    """The canonical name of any method (``"ig"`` -> ``"integrated"``, ``"Grad-CAM"`` ->
    ``"gradcam"``), or an error that lists them all."""
    if not isinstance(method, str):
        raise XaikitTypeError(f"{name} must be a method name (str); got {describe(method)}")
    found = _LOOKUP.get(_key(method))
    if found is None:
        raise XaikitValueError(
            f"{name} must be one of {', '.join(map(repr, method_names()))}; got {method!r}"
        )
    return found


def get_method(method: str | Method, name: str = "method") -> Method:
    """The record of a method given by name, alias or title (or the record itself)."""
    if isinstance(method, Method):
        return method
    return _REGISTRY[canonical(method, name)]


def all_methods(family: str | None = None) -> list[Method]:
    """Every registered method (of one family), in the order of :data:`FAMILIES`, then of
    registration."""
    order = {f: i for i, f in enumerate(FAMILIES)}
    found = [m for m in _REGISTRY.values() if family is None or m.family == family]
    return sorted(found, key=lambda m: order.get(m.family, len(order)))


def method_names(family: str | None = None, **facts: Any) -> tuple[str, ...]:
    """The canonical names of the registered methods, optionally of one family and with given
    facts, e.g. ``method_names(core=True)`` or ``method_names("cam", gradients=False)``."""
    return tuple(m.name for m in all_methods(family) if all(getattr(m, k) == v for k, v in facts.items()))


def family(method: str) -> str:
    """The family of a (possibly aliased) method name."""
    return get_method(method).family


def title(method: str) -> str:
    """The display title of a method (a column or a legend)."""
    return get_method(method).title


def count(value: Any, name: str) -> None:
    """A count option: an int >= 1 (None: the method's default)."""
    from xaikit.checks import check_int

    if value is not None:
        check_int(value, name, 1, kind=XaikitTypeError)


def flag(value: Any, name: str) -> None:
    """A flag option: True or False (None: the method's default)."""
    if value is not None and not isinstance(value, (bool, np.bool_)):
        raise XaikitTypeError(f"{name} must be True or False; got {describe(value)}")


def non_negative(value: Any, name: str) -> None:
    """A number >= 0 (None: the method's default)."""
    from xaikit.checks import check_number

    if value is not None:
        check_number(value, name, low=0, kind=XaikitTypeError)
