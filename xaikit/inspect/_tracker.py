"""``ModuleTracker``: statistics of every module's inputs, outputs, weights and gradients.

The façade: hooks on and off, steps, flags and views. The pieces live next to it: naming of
call tensors (``_record``), statistics on the device (``_stats``), flags (``_flags``) and the
run folder (``_log``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from xaikit.checks import check_int
from xaikit.errors import XaikitTypeError, XaikitValueError, describe
from xaikit.inspect._flags import Thresholds, find_flags, flag_entry
from xaikit.inspect._log import (
    META_FILE,
    STATS_FILE,
    TREE_FILE,
    append_lines,
    clean,
    frame,
    make_run_dir,
    write_json,
)
from xaikit.inspect._record import KINDS, StatFn, check_kinds, flatten
from xaikit.inspect._stats import StatCollector

__all__ = ["KINDS", "ModuleTracker", "StatFn"]

F = TypeVar("F", bound=Callable[..., Any])


def _inspector_for(model: Any) -> Any:
    """The framework inspector of ``model`` (its modules named from ``"model"``): the backend's
    inspector facet."""
    from xaikit.backend import framework_of, load_backend

    name = framework_of(model)
    if name is None:
        raise XaikitTypeError(f"model must be a torch.nn.Module or a Keras model; got {describe(model)}")
    return load_backend(name).inspector(model, "model")


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
        check_int(every_n_steps, "every_n_steps (1 = every step)", 1, kind=XaikitTypeError)
        if isinstance(kinds, str):
            kinds = (kinds,)
        self.kinds = check_kinds(kinds, "kinds")
        self.every_n_steps = every_n_steps
        self.auto_step = bool(auto_step)
        self._thresholds = Thresholds.checked(dead_threshold, explode_threshold, vanish_threshold)

        if stats is not None and not isinstance(stats, Mapping):
            raise XaikitTypeError(f"stats must be a dict of kind -> function; got {describe(stats)}")
        checked = dict(stats or {})
        for kind, fn in checked.items():
            StatCollector.check_stat(kind, fn, "stats")

        self.model = model
        self._insp = _inspector_for(model)
        self._stats = StatCollector(self._insp)
        for kind, fn in checked.items():
            self._stats.set_stat(kind, fn, "stats")
        self.framework: str = self._insp.framework
        self.log_dir = make_run_dir(log_dir, model)
        self.path = self.log_dir / STATS_FILE

        self._step = 0
        self._depth = 0
        self._attached = False
        self._stack: list[int] = []
        self._calls: dict[str, int] = {}
        self._events: list[tuple[str, str]] = []
        self._last_events: list[tuple[str, str]] = []
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
            "stats": self._stats.stat_names(KINDS),
            "thresholds": {
                "dead": self.dead_threshold,
                "explode": self.explode_threshold,
                "vanish": self.vanish_threshold,
            },
        }
        write_json(self.log_dir / META_FILE, meta)

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
        check_kinds(kinds, "stat()")

        def register(fn: F) -> F:
            for kind in kinds:
                self._stats.set_stat(kind, fn, "stat()")
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
        check_int(value, "current_step", 0)
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
                flatten(arg, f"x.{i}", is_tensor, found)
            for key, arg in kwargs.items():
                flatten(arg, f"x.{key}", is_tensor, found)
            for tname, t in found:
                self._record(name, "input", tname, t, call)

    def _on_exit(self, name: str, output: Any, failed: bool) -> None:
        self._depth = max(self._depth - 1, 0)
        if self.recording and self._stack:
            call = self._stack.pop()
            self._events.append(("exit", name))
            if not failed and "output" in self.kinds:
                found: list[tuple[str, Any]] = []
                flatten(output, "out", self._insp.is_tensor, found)
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
        self._stats.record(meta, t)

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
                            self._stats.record_row(row)
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
        rows = self._stats.collect()
        if not rows:
            return
        now = round(time.time(), 3)
        for i, row in enumerate(rows):
            found = find_flags(row, self._thresholds)
            self.flags.extend(flag_entry(row, *f) for f in found)
            row["flags"] = [flag for flag, _, _ in found]
            row["time"] = now
            rows[i] = {k: clean(v) for k, v in row.items()}
        append_lines(self.path, rows)
        self._rows.extend(rows)

    # ---- thresholds --------------------------------------------------------------------------
    @property
    def dead_threshold(self) -> float | None:
        """Zero fraction from which an output is flagged ``"dead"`` (None: off)."""
        return self._thresholds.dead

    @property
    def explode_threshold(self) -> float | None:
        """Gradient norm above which a gradient is flagged ``"exploding_grad"`` (None: off)."""
        return self._thresholds.explode

    @property
    def vanish_threshold(self) -> float | None:
        """Gradient norm below which a gradient is flagged ``"vanishing_grad"`` (None: off)."""
        return self._thresholds.vanish

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
