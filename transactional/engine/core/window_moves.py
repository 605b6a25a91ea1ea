"""Moving a persistent core window to another task count (``trident rebalance``, or a
restart with a changed ``parallelism_hint``; docs/core.md, "Rebalancing a windowed bolt").

A stateful windowed bolt (``BaseStatefulWindowedBolt.with_persistence``) keeps its window
in its task's ``KeyValueState`` (``transactional.engine.core.window_keeper``): ``__window__``
holds the triggers' state, ``__window__:<n>`` the held tuples, each stored as
``[seq, values, ts, source, stream, source_task, origin]`` and, after a move, ``mark``
(below). The checkpointer moves a bolt's
states to a new task count as one fenced, recorded checkpoint
(``transactional.engine.core.checkpoint``); for a windowed bolt ``move_windows`` gives it
the window records of the new layout, which that checkpoint writes with the bolt's own keys:

* **Each held tuple goes with its key**: to the task its input's grouping now sends it to
  (fields grouping: ``stable_hash`` of the grouped values, as routing does; global
  grouping: task 0). A tuple's later replays, and the later tuples of its key, reach that
  same task, so a session (keyed by a grouped field) or a key's tuples of a time window stay
  together. A shuffle grouping places no tuple: such a bolt is refused before anything runs
  (``transactional.engine.layout``).
* **Order and numbering**: a new task's tuples are those already in a fired window first,
  then the others, each part by event (or arrival) time, old task and old number; they are
  numbered again from 1, so ``get_new()`` of the next window is exactly the tuples no
  window has held yet. Moving a layout again changes nothing.
* **Triggers**: ``count_since`` is the number of tuples no window has held yet; when it
  reaches the sliding count (several old tasks' tuples met), the overdue count windows
  fire when the task is next loaded (``WindowMachine.catch_up``), in order, so no tuple
  leaves a tumbling window unfired. A time window's next end is the least of the old tasks'
  that held its tuples (None, the first window holding a tuple, when one of them had fired
  none). Old tasks may have fired different ends (their watermarks differ): each moved
  tuple carries a ``mark``, the next end of the task it came from (the later of that and
  the mark it carried already), and a duration window ending before its mark leaves it
  out (``window_core.TimeTrigger``): every tuple is counted once in each of its sliding
  windows across any number of moves. A mark not after its new task's next end is
  dropped (it says nothing).
  The watermark: the greatest time each input partition sent (a fact about the partition)
  over every old task, and the least watermark of the old tasks (it never goes back).
* **Acks**: a persistent window's tuples were acked when held and the checkpoint that
  stored them released the acks before the rebalance (the run before it ended with a
  checkpoint); each tuple's *origin* (which spout tuple it came from) moves with it, so a
  spout's replay of a held tuple, routed by its key to the new task, is acked, not added.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from transactional.topology import Topology

#: the key of a persistent window's trigger state; ``META:<n>``: its tuples of chunk ``n``
META = "__window__"

#: one held tuple as stored: ``[seq, values, ts, source, stream, source_task, origin]``, and
#: ``mark`` (``window_core.Event.mark``) when a move gave it one
Row = list[Any]


def is_window_key(key: Any) -> bool:
    """A key of a persistent window's records (not of the bolt's own state)."""
    return isinstance(key, str) and (key == META or key.startswith(META + ":"))


@dataclass
class TaskWindow:
    """One task's stored window: its trigger state (``META``; None: none), its rows, and
    the keys its records have (the move deletes them)."""

    meta: dict[str, Any] | None = None
    rows: list[Row] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)


def take_windows(held: dict[Any, Any]) -> TaskWindow:
    """The window records of one task's ``held`` items (``{key: (value, expiry)}``), taken
    out of it (what is left are the bolt's own keys). Only the chunks the trigger state
    names hold the window."""
    w = TaskWindow()
    chunks: dict[str, list[Row]] = {}
    for key in [k for k in held if is_window_key(k)]:
        value, _exp = held.pop(key)
        w.keys.append(key)
        if key == META:
            w.meta = dict(value)
        else:
            chunks[key] = [list(r) for r in value]
    if w.meta is not None:
        w.rows = [r for c in w.meta.get("chunks") or [] for r in chunks.get(f"{META}:{c}", [])]
    return w


def grouped_key(topology: Topology, component: str) -> Callable[[Row], Any]:
    """A stored row -> the value (the tuple of values, for several fields) its input's
    fields grouping routes by, as ``transactional.engine.routing.fields`` does."""
    spec = topology.component(component)
    idx: dict[tuple[str, str], list[int]] = {}
    for s in spec.inputs:
        names = topology.component(s.source).streams[s.stream].fields
        idx[(s.source, s.stream)] = [list(names).index(f) for f in s.fields]

    def key(row: Row) -> Any:
        values, at = row[1], idx.get((row[3], row[4]), [])
        return values[at[0]] if len(at) == 1 else tuple(values[i] for i in at)
    return key


def move_windows(old: list[TaskWindow], key_of: Callable[[Row], Any], route: Callable[[Any], int],
                 p_new: int) -> list[dict[str, Any]]:
    """The window records (``{key: value}``) of each of ``p_new`` tasks that hold the held
    tuples of ``old`` (one ``TaskWindow`` per old task) placed by ``route(key_of(row))``
    (module docstring). Pure: the same ``old`` gives the same records."""
    parts: list[list[tuple[Any, ...]]] = [[] for _ in range(p_new)]
    ends: list[set[int | None]] = [set() for _ in range(p_new)]
    maxima: dict[tuple[str, str, int], int] = {}
    marks = [w.meta["watermark"] for w in old if w.meta is not None and w.meta.get("watermark") is not None]
    for t, w in enumerate(old):
        if w.meta is None:
            continue
        for s, st, task, v in w.meta.get("maxts") or []:
            maxima[(s, st, task)] = max(v, maxima.get((s, st, task), v))
        fired_to = int(w.meta.get("last_fired") or 0)
        end = w.meta.get("next_end")
        for row in w.rows:
            j = route(key_of(row))
            parts[j].append((int(row[0]) > fired_to, row[2], t, int(row[0]), row, _mark(row, end)))
            ends[j].add(None if end is None else int(end))
    out: list[dict[str, Any]] = []
    for j in range(p_new):
        rows = sorted(parts[j], key=lambda p: p[:4])
        fired = sum(1 for p in rows if not p[0])
        next_end = None if None in ends[j] or not ends[j] else min(e for e in ends[j] if e is not None)
        stored = [[i + 1, *(list(p[4]) + [None] * 7)[1:7], *_past(p[5], next_end)] for i, p in enumerate(rows)]
        meta = {"seq": len(stored) + 1, "count_since": len(stored) - fired,
                "next_end": next_end, "watermark": min(marks) if marks else None,
                "last_fired": fired, "maxts": [[*k, v] for k, v in sorted(maxima.items())],
                "chunks": [1] if stored else []}
        recs: dict[str, Any] = {META: meta}
        if stored:
            recs[f"{META}:1"] = stored
        out.append(recs)
    return out


def _mark(row: Row, next_end: Any) -> int | None:
    """A held tuple's mark after a move: the end of the first time window that may still
    count it -- the later of the mark it carried (an earlier move's) and its old task's next
    end (every window before that was evaluated for it there); None: none."""
    had = row[7] if len(row) > 7 else None
    marks = [int(x) for x in (had, next_end) if x is not None]
    return max(marks) if marks else None


def _past(mark: int | None, next_end: int | None) -> list[int]:
    """The mark a stored row carries (its 8th field): none when its new task's next end is
    not before it (the trigger starts there anyway), so moving a layout again changes nothing."""
    return [] if mark is None or (next_end is not None and mark <= next_end) else [mark]
