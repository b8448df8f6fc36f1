"""Order traces so that each one runs after the traces that write its inputs."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from xaikit.errors import XaikitValueError
from xaikit.trace.base import Trace

__all__ = ["sort_traces"]


def _name(trace: Trace) -> str:
    name = type(trace).__name__
    return f"{name}(outputs={trace.outputs})" if trace.outputs else name


def _find_cycle(stuck: list[Trace], deps: dict[int, dict[int, str]], by_id: dict[int, Trace]) -> str:
    """Describe one dependency cycle among ``stuck`` traces as 'A -[key]-> B -[key]-> A'."""
    stuck_ids = {id(t) for t in stuck}
    start = id(stuck[0])
    path: list[int] = [start]
    seen = {start: 0}
    node = start
    while True:
        # every stuck trace waits on at least one other stuck trace
        nxt = next(d for d in deps[node] if d in stuck_ids)
        if nxt in seen:
            cycle = [*path[seen[nxt] :], nxt]
            break
        seen[nxt] = len(path)
        path.append(nxt)
        node = nxt
    # cycle lists consumers first: a waits on b; print producers pointing to consumers
    cycle = cycle[::-1]
    parts = [_name(by_id[cycle[0]])]
    for producer, consumer in itertools.pairwise(cycle):
        parts.append(f"-[{deps[consumer][producer]!r}]-> {_name(by_id[consumer])}")
    return " ".join(parts)


def sort_traces(
    traces: Sequence[Trace], ds_ids: Iterable[str] | None = None, available_keys: Iterable[str] | None = None
) -> list[Trace]:
    """Order traces by their inputs and outputs.

    Built-in bookkeeping traces (those with ``_runs_first = True``) come first, traces that read
    every key (``inputs="*"``, such as the Logger) come last (those with outputs before those
    without), and every other trace runs after all traces that write one of its inputs. Among
    traces that do not depend on each other the given order is kept.

    Args:
        traces: The traces to order (no schedulers; resolve them first).
        ds_ids: The dataset ids the traces will run on (passed to ``trace.get_outputs``).
        available_keys: Keys the data will hold without any trace (batch keys and predictions).
            ``None`` assumes every key that no trace writes is provided by the data.

    Returns:
        The traces, in the order to run them.

    Raises:
        XaikitValueError: When traces depend on each other in a cycle (the message names the
            traces and keys) or when a trace reads a key that no trace writes and the data does
            not hold (the message names the trace, the key and the keys that are available).

    Example:
        >>> a = Trace(inputs="p", outputs="f1")
        >>> b = Trace(inputs="y", outputs="p")
        >>> [t.outputs for t in sort_traces([a, b])]
        [['p'], ['f1']]
    """
    ds_list = list(ds_ids) if ds_ids is not None else None
    first = [t for t in traces if getattr(t, "_runs_first", False)]
    star = [t for t in traces if not getattr(t, "_runs_first", False) and "*" in t.inputs]
    rest = [t for t in traces if not getattr(t, "_runs_first", False) and "*" not in t.inputs]
    outputs = {id(t): set(t.get_outputs(ds_list)) for t in traces}

    available = set(available_keys) if available_keys is not None else None
    first_keys = {k for t in first for k in outputs[id(t)]}
    producers: dict[str, list[Trace]] = {}
    for t in rest:
        for key in outputs[id(t)]:
            producers.setdefault(key, []).append(t)

    by_id = {id(t): t for t in rest}
    deps: dict[int, dict[int, str]] = {}
    for t in rest:
        waits: dict[int, str] = {}
        for key in t.inputs:
            makers = [p for p in producers.get(key, []) if p is not t]
            for p in makers:
                waits.setdefault(id(p), key)
            if makers or key in first_keys or key in outputs[id(t)]:
                continue
            if available is not None and key not in available:
                written = sorted(first_keys | set(producers))
                raise XaikitValueError(
                    f"trace {_name(t)} reads key {key!r}, which no trace writes and the data does not hold; "
                    f"data keys: {sorted(available)}; keys written by traces: {written}"
                )
        deps[id(t)] = waits

    ordered: list[Trace] = []
    placed: set[int] = set()
    pending = list(rest)
    while pending:
        ready = next((t for t in pending if set(deps[id(t)]) <= placed), None)
        if ready is None:
            raise XaikitValueError(
                "traces depend on each other in a cycle: " + _find_cycle(pending, deps, by_id)
            )
        ordered.append(ready)
        placed.add(id(ready))
        pending.remove(ready)

    star_sorted = [t for t in star if outputs[id(t)]] + [t for t in star if not outputs[id(t)]]
    return first + ordered + star_sorted
