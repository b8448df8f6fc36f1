"""``ModuleTracker``: statistics of every module's inputs, outputs, weights and gradients."""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from xaikit.backend.inspector import DEAD_UNITS, DEFAULT_STATS
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.inspect._log import META_FILE, STATS_FILE, TREE_FILE, append_lines, clean, frame, write_json

__all__ = ["KINDS", "ModuleTracker"]

#: what a statistic describes: a module's call inputs, its call outputs, its own weights, their grads
KINDS = ("input", "output", "weight", "grad")

StatFn = Callable[[Any], Mapping[str, Any]]
F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class _Pending:
    """A record whose statistics are still on the device."""

    meta: dict[str, Any]
    #: (statistic name, index of the device part, first element in it, value shape)
    fields: list[tuple[str, int, int, tuple[int, ...]]] = field(default_factory=list)
    host: dict[str, Any] = field(default_factory=dict)


def _flatten(obj: Any, prefix: str, is_tensor: Callable[[Any], bool], out: list[tuple[str, Any]]) -> None:
    """Tensors inside nested tuples / lists / dicts / namedtuples, named ``prefix.key.index...``."""
    if is_tensor(obj):
        out.append((prefix, obj))
    elif isinstance(obj, Mapping):
        for key, value in obj.items():
            _flatten(value, f"{prefix}.{key}", is_tensor, out)
    elif isinstance(obj, (list, tuple)):
        names = getattr(obj, "_fields", None) or range(len(obj))
        for key, value in zip(names, obj):
            _flatten(value, f"{prefix}.{key}", is_tensor, out)


def _check_kinds(kinds: Iterable[Any], arg: str) -> tuple[str, ...]:
    result = []
    for kind in kinds:
        if kind not in KINDS:
            raise XaikitValueError(f"{arg} must name kinds among {KINDS}; got {kind!r}")
        result.append(kind)
    return tuple(result)


def _check_threshold(
    value: Any, arg: str, upper: float | None = None, allow_zero: bool = False
) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise XaikitTypeError(f"{arg} must be a number or None; got {describe(value)}")
    low_ok = value > 0 or (allow_zero and value == 0)
    if not low_ok or (upper is not None and value > upper):
        low = "0 <=" if allow_zero else "0 <"
        high = f" <= {upper}" if upper is not None else ""
        raise XaikitValueError(f"{arg} must be None or a number with {low} {arg}{high}; got {value!r}")
    return float(value)


def _inspector(model: Any, root_name: str) -> Any:
    from xaikit.backend import framework_of, load_backend

    name = framework_of(model)
    if name is None:
        raise XaikitTypeError(f"model must be a torch.nn.Module or a Keras model; got {describe(model)}")
    return load_backend(name).inspector(model, root_name)


class ModuleTracker:
    """Record statistics of every module (torch) or layer (Keras) of a model while it runs.

    Per module and call, the tracker records the tensors going in (``kind="input"``, named
    ``x.0``, ``x.1``, ``x.<keyword>``, nested containers as ``x.0.1``, ``x.0.key``) and coming out
    (``kind="output"``, ``out`` or ``out.0``, ``out.logits``); at :meth:`step` it records each
    module's own parameters (``kind="weight"``, named ``weight``, ``bias``, ``kernel``...) and their
    gradients (``kind="grad"``; a parameter without a gradient gives a row with ``absent=True``).

    Default statistics: ``shape``, ``dtype``, ``mean``, ``std`` (population), ``min``, ``max``,
    ``zero_frac`` (fraction of exact zeros), ``nonfinite`` (count of NaN/inf), plus ``dead_units``
    for outputs (fraction of units — axis 1 in torch, the last axis in Keras — that are zero for
    every sample and position of the batch) and ``norm`` for weights and grads. They are reduced on
    the device without synchronising, and each step's statistics reach the host in one copy.

    **Steps.** A step is advanced by :meth:`step` (call it once per training iteration, after
    ``loss.backward()`` in torch, or with the gradients list in Keras), or, with
    ``auto_step=True``, at the end of every outermost forward call. Only steps ``0, n, 2n, ...``
    (``n = every_n_steps``) are recorded; other steps cost one integer check per module call.

    **Flags.** Rows get a ``flags`` list, and :attr:`flags` collects them as dicts:
    ``"dead"`` (an output whose ``zero_frac >= dead_threshold``), ``"nonfinite"`` (NaN or inf
    seen), ``"exploding_grad"`` / ``"vanishing_grad"`` (a gradient's L2 norm above
    ``explode_threshold`` / below ``vanish_threshold``). A threshold of None turns its flag off.

    **Storage.** ``<log_dir>/stats.jsonl`` (one JSON object per line, appended once per step),
    ``tree.json`` and ``meta.json``; read back with :func:`xaikit.inspect.read_log`.

    Hooks: torch ``register_forward_pre_hook`` / ``register_forward_hook`` on every submodule;
    Keras 3 an instance-level wrapper of each layer's ``call`` (eager calls only). :meth:`detach`
    removes them all and leaves the model as it was.

    Args:
        model: a ``torch.nn.Module`` or a Keras 3 model.
        log_dir: the run folder; default ``./runs/inspect/<ModelClass>_<YYYYmmdd-HHMMSS>``.
            An existing folder is appended to.
        every_n_steps: record every n-th step (a positive int).
        stats: custom statistic functions per kind, ``{"output": fn}``; ``fn(tensor)`` returns a
            dict of name -> number or framework tensor (any shape; kept on the device), and
            replaces the default statistics of that kind. See also :meth:`stat`.
        kinds: which kinds to record (default all four).
        auto_step: end a step after each outermost forward call (for inference-only use).
        dead_threshold: zero fraction from which an output is flagged ``"dead"``.
        explode_threshold: gradient norm above which a gradient is flagged ``"exploding_grad"``.
        vanish_threshold: gradient norm below which a gradient is flagged ``"vanishing_grad"``.
        attach: attach the hooks now (else call :meth:`attach` or use ``with``).

    Example:
        >>> import tempfile, torch
        >>> model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU())
        >>> with ModuleTracker(model, log_dir=tempfile.mkdtemp()) as tracker:
        ...     model(torch.ones(4, 3)).sum().backward()
        ...     _ = tracker.step()
        >>> sorted(set(tracker.df["kind"]))
        ['grad', 'input', 'output', 'weight']
        >>> tracker.call_order
        ['model', 'model.0', 'model.1']
        >>> model._forward_hooks
        OrderedDict()
    """

    def __init__(
        self,
        model: Any,
        log_dir: str | Path | None = None,
        every_n_steps: int = 1,
        stats: Mapping[str, StatFn] | None = None,
        *,
        kinds: Sequence[str] = KINDS,
        auto_step: bool = False,
        dead_threshold: float | None = 0.99,
        explode_threshold: float | None = 1e3,
        vanish_threshold: float | None = 1e-7,
        attach: bool = True,
    ) -> None:
        if isinstance(every_n_steps, bool) or not isinstance(every_n_steps, int):
            raise XaikitTypeError(f"every_n_steps must be a positive int; got {describe(every_n_steps)}")
        if every_n_steps < 1:
            raise XaikitValueError(
                f"every_n_steps must be a positive int (1 = every step); got {every_n_steps}"
            )
        if isinstance(kinds, str):
            kinds = (kinds,)
        self.kinds = _check_kinds(kinds, "kinds")
        self.every_n_steps = every_n_steps
        self.auto_step = bool(auto_step)
        self.dead_threshold = _check_threshold(dead_threshold, "dead_threshold", upper=1.0)
        self.explode_threshold = _check_threshold(explode_threshold, "explode_threshold")
        self.vanish_threshold = _check_threshold(vanish_threshold, "vanish_threshold", allow_zero=True)

        self._stat_fns: dict[str, StatFn] = {}
        if stats is not None:
            if not isinstance(stats, Mapping):
                raise XaikitTypeError(f"stats must be a dict of kind -> function; got {describe(stats)}")
            for kind, fn in stats.items():
                self._set_stat(kind, fn, "stats")

        self.model = model
        self._insp = _inspector(model, "model")
        self.framework: str = self._insp.framework
        self.log_dir = self._make_dir(log_dir)
        self.path = self.log_dir / STATS_FILE

        self._step = 0
        self._depth = 0
        self._attached = False
        self._stack: list[int] = []
        self._calls: dict[str, int] = {}
        self._events: list[tuple[str, str]] = []
        self._last_events: list[tuple[str, str]] = []
        self._pending: list[_Pending] = []
        self._parts: list[Any] = []
        self._sizes: list[int] = []
        # id(tensor) -> (weak reference, in-place version, part index): a tensor measured as one
        # module's output and passed on as the next module's input is reduced only once per step
        self._seen: dict[int, tuple[Any, int, int]] = {}
        self._grads: dict[int, Any] | None = None
        self._rows: list[dict[str, Any]] = []
        self.flags: list[dict[str, Any]] = []
        """Every flag raised so far: dicts with step, call, module, kind, tname, flag, value, threshold."""

        self.tree: dict[str, Any] = self._tree("model")
        """The module tree: nested dicts with name, short, class, params (name -> shape), children."""
        write_json(self.log_dir / TREE_FILE, self.tree)
        self._write_meta()
        if attach:
            self.attach()

    # ---- set-up ------------------------------------------------------------------------------
    def _make_dir(self, log_dir: str | Path | None) -> Path:
        if log_dir is None:
            stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
            base = Path("runs") / "inspect" / f"{type(self.model).__name__}_{stamp}"
            path, i = base, 1
            while path.exists():
                path, i = base.with_name(f"{base.name}_{i}"), i + 1
        elif isinstance(log_dir, (str, Path)):
            path = Path(log_dir)
        else:
            raise XaikitTypeError(f"log_dir must be a str, a Path or None; got {describe(log_dir)}")
        if path.exists() and not path.is_dir():
            raise XaikitValueError(f"log_dir must be a folder; {str(path)!r} is a file")
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _tree(self, name: str) -> dict[str, Any]:
        info = self._insp.modules[name]
        node: dict[str, Any] = {"name": info.name, "short": info.short, "class": info.cls}
        if info.params:
            node["params"] = {p: self._insp.describe(self._insp.value(v))[0] for p, v in info.params}
        if info.children:
            node["children"] = [self._tree(c) for c in info.children]
        return node

    def _write_meta(self) -> None:
        meta = {
            "framework": self.framework,
            "model": type(self.model).__name__,
            "created": datetime.now().isoformat(timespec="seconds"),
            "every_n_steps": self.every_n_steps,
            "kinds": list(self.kinds),
            "auto_step": self.auto_step,
            "stats": {k: getattr(self._stat_fns.get(k), "__name__", "default") for k in KINDS},
            "thresholds": {
                "dead": self.dead_threshold,
                "explode": self.explode_threshold,
                "vanish": self.vanish_threshold,
            },
        }
        write_json(self.log_dir / META_FILE, meta)

    def _set_stat(self, kind: Any, fn: Any, arg: str) -> None:
        _check_kinds([kind], arg)
        if fn is None:
            self._stat_fns.pop(kind, None)
        elif not callable(fn):
            raise XaikitTypeError(f"{arg}[{kind!r}] must be a function tensor -> dict; got {describe(fn)}")
        else:
            self._stat_fns[kind] = fn

    def stat(self, *kinds: str) -> Callable[[F], F]:
        """Decorator: use a function as the statistics of the given kinds (replacing the defaults).

        The function takes one framework tensor and returns a dict of name -> number or tensor.

        Example:
            >>> import tempfile, torch
            >>> model = torch.nn.Linear(3, 2)
            >>> tracker = ModuleTracker(model, log_dir=tempfile.mkdtemp())
            >>> @tracker.stat("input", "output")
            ... def l1(t):
            ...     return {"l1": t.abs().sum(), "numel": t.numel()}
            >>> _ = model(torch.ones(2, 3))
            >>> float(tracker.df.query("kind == 'input'")["l1"].iloc[0])
            6.0
            >>> tracker.detach()
        """
        if not kinds:
            raise XaikitValueError(f"stat() needs at least one kind among {KINDS}")
        _check_kinds(kinds, "stat()")

        def register(fn: F) -> F:
            for kind in kinds:
                self._set_stat(kind, fn, "stat()")
            self._write_meta()
            return fn

        return register

    # ---- attaching ---------------------------------------------------------------------------
    @property
    def attached(self) -> bool:
        """Whether the hooks are in place."""
        return self._attached

    def attach(self) -> ModuleTracker:
        """Put the hooks on every module (no-op when attached)."""
        if not self._attached:
            self._insp.attach(self._on_enter, self._on_exit)
            self._attached = True
            self._depth = 0
            self._stack = []
        return self

    def detach(self) -> None:
        """Write what is pending and remove every hook, leaving the model as it was."""
        if self._attached:
            self._insp.detach()
            self._attached = False
        self._flush()

    def __enter__(self) -> ModuleTracker:
        return self.attach()

    def __exit__(self, *exc: object) -> None:
        self.detach()

    def __repr__(self) -> str:
        state = "attached" if self._attached else "detached"
        return (
            f"ModuleTracker({type(self.model).__name__}, {len(self._insp.modules)} modules, "
            f"step {self._step}, every {self.every_n_steps}, {state}, log_dir={str(self.log_dir)!r})"
        )

    # ---- recording ---------------------------------------------------------------------------
    @property
    def current_step(self) -> int:
        """The index of the step being recorded into (advanced by :meth:`step`).

        It may be set (e.g. to a training loop's own step counter); what is pending is written
        first, under the old index.
        """
        return self._step

    @current_step.setter
    def current_step(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise XaikitValueError(f"current_step must be an int >= 0; got {describe(value)}")
        self._flush()
        self._step = value
        self._calls = {}
        self._stack = []

    @property
    def recording(self) -> bool:
        """Whether calls made now are recorded (attached and a sampled step)."""
        return self._attached and self._step % self.every_n_steps == 0

    def _on_enter(self, name: str, args: tuple, kwargs: dict) -> None:
        self._depth += 1
        if not self.recording:
            return
        if self._depth == 1:
            self._events = []
        call = self._calls.get(name, 0)
        self._calls[name] = call + 1
        self._stack.append(call)
        self._events.append(("enter", name))
        if "input" in self.kinds:
            found: list[tuple[str, Any]] = []
            is_tensor = self._insp.is_tensor
            for i, arg in enumerate(args):
                _flatten(arg, f"x.{i}", is_tensor, found)
            for key, arg in kwargs.items():
                _flatten(arg, f"x.{key}", is_tensor, found)
            for tname, t in found:
                self._record(name, "input", tname, t, call)

    def _on_exit(self, name: str, output: Any, failed: bool) -> None:
        self._depth = max(self._depth - 1, 0)
        if self.recording and self._stack:
            call = self._stack.pop()
            self._events.append(("exit", name))
            if not failed and "output" in self.kinds:
                found: list[tuple[str, Any]] = []
                _flatten(output, "out", self._insp.is_tensor, found)
                for tname, t in found:
                    self._record(name, "output", tname, t, call)
            if self._depth == 0:
                self._last_events = self._events
        if self._depth == 0 and self.auto_step and not failed:
            self.step()

    def _record(self, module: str, kind: str, tname: str, t: Any, call: int | None) -> None:
        shape, dtype = self._insp.describe(t)
        meta: dict[str, Any] = {
            "step": self._step,
            "call": call,
            "module": module,
            "class": self._insp.modules[module].cls,
            "kind": kind,
            "tname": tname,
            "shape": shape,
            "dtype": dtype,
        }
        if kind == "grad":
            meta["absent"] = False
        pending = _Pending(meta)
        fn = self._stat_fns.get(kind)
        if fn is None:
            activation = kind in ("input", "output")
            part = self._cached(t) if activation else None
            if part is None:
                part = self._add_part(self._insp.default_stats(t, activation), 7 if activation else 6)
                if activation:
                    self._remember(t, part)
            keys = [*DEFAULT_STATS, DEAD_UNITS] if activation else list(DEFAULT_STATS)
            pending.fields = [(key, part, i, ()) for i, key in enumerate(keys)]
        else:
            result = fn(t)
            if not isinstance(result, Mapping):
                raise XaikitTypeError(
                    f"the {kind!r} statistic function {getattr(fn, '__name__', fn)!r} must return a dict "
                    f"of name -> number or tensor; got {describe(result)}"
                )
            for key, value in result.items():
                if isinstance(value, (bool, int, float, str)) or value is None:
                    pending.host[str(key)] = value
                    continue
                vshape = getattr(value, "shape", None)
                dims = tuple(int(d) for d in vshape) if vshape is not None else (len(value),)
                size = 1
                for d in dims:
                    size *= d
                part = self._add_part(self._insp.flat(value), size)
                pending.fields.append((str(key), part, 0, dims))
        self._pending.append(pending)

    def _add_part(self, part: Any, size: int) -> int:
        self._parts.append(part)
        self._sizes.append(size)
        return len(self._parts) - 1

    def _cached(self, t: Any) -> int | None:
        entry = self._seen.get(id(t))
        if entry is None:
            return None
        ref, version, part = entry
        if ref() is not t or version != self._insp.version(t):
            return None
        return part

    def _remember(self, t: Any, part: int) -> None:
        try:
            ref = weakref.ref(t)
        except TypeError:
            return
        self._seen[id(t)] = (ref, self._insp.version(t), part)

    def record_gradients(self, grads: Sequence[Any], variables: Sequence[Any] | None = None) -> None:
        """Give the gradients that the next :meth:`step` records.

        Args:
            grads: gradients aligned with ``variables`` (None entries allowed), e.g. the result of
                ``tape.gradient(loss, model.trainable_variables)``.
            variables: default ``model.trainable_variables`` (Keras) or the parameters with
                ``requires_grad`` (torch; torch models need no call: ``.grad`` is read).
        """
        variables = self._insp.trainable() if variables is None else list(variables)
        grads = list(grads)
        if len(grads) != len(variables):
            raise XaikitValueError(
                f"grads must have one entry per variable ({len(variables)} variables); got {len(grads)}"
            )
        self._grads = {id(v): g for v, g in zip(variables, grads)}

    def step(self, grads: Sequence[Any] | None = None, variables: Sequence[Any] | None = None) -> int:
        """End the current step: record weights and gradients (on sampled steps), write, advance.

        Args:
            grads: optional gradients (see :meth:`record_gradients`); torch reads ``.grad`` when
                none are given, Keras records gradients as absent.
            variables: the variables ``grads`` is aligned with.

        Returns:
            The index of the next step.
        """
        if grads is not None:
            self.record_gradients(grads, variables)
        if self.recording:
            want_w, want_g = "weight" in self.kinds, "grad" in self.kinds
            for name, info in self._insp.modules.items():
                for pname, var in info.params:
                    if want_w:
                        self._record(name, "weight", pname, self._insp.value(var), None)
                    if want_g:
                        g = self._insp.grad(var, self._grads)
                        if g is None:
                            shape, dtype = self._insp.describe(self._insp.value(var))
                            row = {"step": self._step, "call": None, "module": name, "class": info.cls}
                            row.update(kind="grad", tname=pname, shape=shape, dtype=dtype, absent=True)
                            self._pending.append(_Pending(row))
                        else:
                            self._record(name, "grad", pname, g, None)
        self._flush()
        self._grads = None
        self._step += 1
        self._calls = {}
        self._stack = []
        return self._step

    log_model = step  # the reference's name for "record weights and gradients now"

    def _flush(self) -> None:
        if not self._pending:
            return
        host = self._insp.to_host(self._parts)
        starts = [0]
        for size in self._sizes:
            starts.append(starts[-1] + size)
        now = round(time.time(), 3)
        rows = []
        for pending in self._pending:
            row = dict(pending.meta)
            for key, part, first, shape in pending.fields:
                at = starts[part] + first
                if shape == ():
                    row[key] = float(host[at])
                else:
                    size = starts[part + 1] - starts[part]
                    row[key] = host[at : at + size].reshape(shape).tolist()
            row.update(pending.host)
            self._derive(row)
            row["flags"] = self._check(row)
            row["time"] = now
            rows.append({k: clean(v) for k, v in row.items()})
        self._pending, self._parts, self._sizes = [], [], []
        self._seen = {}
        append_lines(self.path, rows)
        self._rows.extend(rows)

    @staticmethod
    def _derive(row: dict[str, Any]) -> None:
        if isinstance(row.get("nonfinite"), float):
            row["nonfinite"] = int(row["nonfinite"])
        if row["kind"] in ("weight", "grad") and isinstance(row.get("mean"), float):
            n = 1
            for d in row["shape"]:
                n *= d
            mean, std = row["mean"], row["std"]
            row["norm"] = (n * (std * std + mean * mean)) ** 0.5

    def _check(self, row: dict[str, Any]) -> list[str]:
        found: list[tuple[str, Any, Any]] = []
        nonfinite = row.get("nonfinite")
        if isinstance(nonfinite, (int, float)) and nonfinite > 0:
            found.append(("nonfinite", nonfinite, 0))
        zero = row.get("zero_frac")
        if row["kind"] == "output" and self.dead_threshold is not None and isinstance(zero, float):
            if zero >= self.dead_threshold:
                found.append(("dead", zero, self.dead_threshold))
        norm = row.get("norm")
        if row["kind"] == "grad" and isinstance(norm, float) and norm == norm:
            if self.explode_threshold is not None and norm > self.explode_threshold:
                found.append(("exploding_grad", norm, self.explode_threshold))
            if self.vanish_threshold is not None and norm < self.vanish_threshold:
                found.append(("vanishing_grad", norm, self.vanish_threshold))
        for flag, value, threshold in found:
            self.flags.append(
                {
                    "step": row["step"],
                    "call": row["call"],
                    "module": row["module"],
                    "kind": row["kind"],
                    "tname": row["tname"],
                    "flag": flag,
                    "value": value,
                    "threshold": threshold,
                }
            )
        return [f for f, _, _ in found]

    # ---- views -------------------------------------------------------------------------------
    @property
    def call_order(self) -> list[str]:
        """Module names in the order they were entered during the last recorded forward pass."""
        return [name for event, name in self._last_events if event == "enter"]

    @property
    def call_events(self) -> list[tuple[str, str]]:
        """``("enter" | "exit", module)`` events of the last recorded forward pass."""
        return list(self._last_events)

    @property
    def df(self) -> Any:
        """Every record so far as a pandas DataFrame (pending statistics are written first)."""
        self._flush()
        return frame(self._rows)

    @property
    def latest_df(self) -> Any:
        """The records of the latest recorded step as a pandas DataFrame."""
        self._flush()
        if not self._rows:
            return frame([])
        last = self._rows[-1]["step"]
        start = len(self._rows)
        while start > 0 and self._rows[start - 1]["step"] == last:
            start -= 1
        return frame(self._rows[start:]).reset_index(drop=True)
