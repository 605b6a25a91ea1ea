"""Core spouts: Storm's ``IRichSpout`` for at-least-once topologies (docs/design.md §7). The
interface (``BaseRichSpout``, ``SpoutOutputCollector``) is ``transactional.spout``'s, re-exported
here; this module keeps the implementation ``MemorySpout``.

A core spout is asked for tuples (``next_tuple``) and told their fate: ``ack(msg_id)``
when a tuple's whole tree was processed, ``fail(msg_id)`` when it failed or timed out, so
that the spout replays it. A tuple emitted without a ``msg_id`` is not tracked.
"""

from __future__ import annotations

import time
from typing import Any

from transactional.spout import BaseRichSpout, OutputDeclarer, SpoutContext, SpoutOutputCollector
from transactional.tuples import Fields

__all__ = ["MEMORY_SPOUT_LOGS", "BaseRichSpout", "MemorySpout", "SpoutOutputCollector"]


#: What every ``MemorySpout`` did, by name: ``(event, msg_id, delivery, time.monotonic())``
#: with event "emit", "ack" or "fail" (in the driver process, where core spouts run).
MEMORY_SPOUT_LOGS: dict[str, list[tuple[str, Any, int, float]]] = {}


class MemorySpout(BaseRichSpout):
    """An at-least-once source in memory, for tests and examples (Storm's
    ``FixedTupleSpout`` with replay): task ``i`` of ``n`` emits the items at positions
    ``j`` with ``j % n == i``, up to ``per_call`` per ``next_tuple``, each with the message
    id ``j``; a failed item is emitted again before new ones, until it is acked.

    ``items``: values tuples (a non-tuple item is one value). ``deliveries=True`` adds a
    last field ``delivery`` (1 on the first emit of an item, 2 on its replay, ...), so a
    bolt can behave differently on a replay. ``track=False`` emits without message ids
    (nothing is tracked). ``MEMORY_SPOUT_LOGS[name]`` records every emit, ack and fail.

    >>> s = MemorySpout(["a", "b"], Fields("letter"), name="doc")
    >>> s.fields, s.items
    (Fields('letter'), [('a',), ('b',)])
    """

    #: ``trident verify``: a fresh run of the topology reads the same data (docs/verify.md)
    replayable: bool | str = True

    def __init__(self, items: Any, fields: Fields, *, name: str = "memory", per_call: int = 100,
                 deliveries: bool = False, track: bool = True) -> None:
        self.items = [i if isinstance(i, tuple) else (i,) for i in items]
        self.fields = fields if isinstance(fields, Fields) else Fields(fields)
        if per_call < 1:
            msg = f"per_call must be >= 1; got {per_call}"
            raise ValueError(msg)
        self.name, self.per_call, self.deliveries, self.track = name, per_call, deliveries, track
        self._collector: SpoutOutputCollector | None = None
        self._next: list[int] = []
        self._replay: list[int] = []
        self._count: dict[int, int] = {}

    def open(self, conf: dict[str, Any], context: SpoutContext, collector: SpoutOutputCollector) -> None:
        """Take this task's share of the items."""
        self._collector = collector
        n, i = context.num_tasks, context.task_index
        self._next = [j for j in range(len(self.items)) if j % n == i][::-1]
        MEMORY_SPOUT_LOGS.setdefault(self.name, [])

    def next_tuple(self) -> None:
        """Emit items to replay first, then new ones, ``per_call`` at most."""
        assert self._collector is not None, "open() first"
        for _ in range(self.per_call):
            if self._replay:
                j = self._replay.pop(0)
            elif self._next:
                j = self._next.pop()
            else:
                return
            d = self._count[j] = self._count.get(j, 0) + 1
            MEMORY_SPOUT_LOGS[self.name].append(("emit", j, d, time.monotonic()))
            values = (*self.items[j], d) if self.deliveries else self.items[j]
            self._collector.emit(values, msg_id=j if self.track else None)

    def ack(self, msg_id: Any) -> None:
        """Log it; the item is done."""
        MEMORY_SPOUT_LOGS[self.name].append(("ack", msg_id, self._count.get(msg_id, 0), time.monotonic()))

    def fail(self, msg_id: Any) -> None:
        """Log it and emit the item again."""
        MEMORY_SPOUT_LOGS[self.name].append(("fail", msg_id, self._count.get(msg_id, 0), time.monotonic()))
        self._replay.append(msg_id)

    def declare_output_fields(self, declarer: OutputDeclarer) -> None:
        """The item fields (and ``delivery``)."""
        declarer.declare(Fields(*self.fields, "delivery") if self.deliveries else self.fields)
