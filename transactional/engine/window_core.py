"""Session windows, the one rule both window machines use (core
``transactional.engine.core.window_keeper`` and Trident ``trident.runtime.window_proc``;
docs/windows.md).

A session of a key is a run of its tuples, in event time, where each tuple is less than
``gap`` after the one before: ``[first ts, last ts + gap)``. Sessions are not kept as
such: they are derived, each time, from the tuples held, so a late tuple that falls
between two sessions of its key (within ``gap`` of both) merges them, as Flink's merging
windows do. A session fires once the watermark reaches its end; a tuple is late when its
own session would already have fired (``ts + gap <= watermark``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")

__all__ = ["Session", "split_sessions", "is_late"]


@dataclass(frozen=True)
class Session(Generic[T]):
    """One session: its key, ``[start, end)`` and its members, in the order given."""

    key: Any
    start: int
    end: int
    members: list[T]


def split_sessions(items: Iterable[T], ts: Callable[[T], int], key: Callable[[T], Any], gap: int) -> list[Session[T]]:
    """The sessions of ``items`` (module docstring), by key in order of first appearance,
    each key's in time order; members keep the order of ``items``.

    >>> s = split_sessions([("a", 0), ("a", 5), ("b", 1), ("a", 30)], lambda x: x[1], lambda x: x[0], 10)
    >>> [(x.key, x.start, x.end, [m[1] for m in x.members]) for x in s]
    [('a', 0, 15, [0, 5]), ('a', 30, 40, [30]), ('b', 1, 11, [1])]
    """
    by_key: dict[Any, list[tuple[int, int, T]]] = {}
    for i, x in enumerate(items):
        by_key.setdefault(key(x), []).append((ts(x), i, x))
    out: list[Session[T]] = []
    for k, rows in by_key.items():
        rows.sort(key=lambda r: (r[0], r[1]))
        run: list[tuple[int, int, T]] = []
        for r in rows:
            if run and r[0] - run[-1][0] >= gap:
                out.append(_session(k, run, gap))
                run = []
            run.append(r)
        if run:
            out.append(_session(k, run, gap))
    return out


def _session(key: Any, run: list[tuple[int, int, T]], gap: int) -> Session[T]:
    members = [x for _, _, x in sorted(run, key=lambda r: r[1])]
    return Session(key, run[0][0], run[-1][0] + gap, members)


def is_late(ts: int, gap: int, watermark: int | None) -> bool:
    """A tuple whose own session would already have fired."""
    return watermark is not None and ts + gap <= watermark
