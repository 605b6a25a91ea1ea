"""A persistent core window holds each spout tuple once across a driver restart
(``transactional.engine.core.window_keeper``): a tuple replayed with the origin of one the
restored window holds (same spout ``msg_id``, same values, a new root) is acked and not
added again; a new tuple that reuses a ``msg_id`` with other values is added. The window
task is fed by hand over an in-memory ``KeyValueState`` stand-in; the end-to-end check is
tests/transactional/engine/test_core_session_kill.py (driver SIGKILLs, real redis-server)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from transactional.engine.core.task import CoreTuple
from transactional.engine.core.window_keeper import WindowTask
from transactional.tuples import Fields
from transactional.windowing import BaseStatefulWindowedBolt, Count

FIELDS = Fields("n")
TOPOLOGY: Any = SimpleNamespace(component=lambda _: SimpleNamespace(streams={"default": SimpleNamespace(fields=FIELDS)}))


class KV:
    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def put(self, key: str, value: Any) -> None:
        self.data[key] = value

    def delete(self, key: str) -> None:
        self.data.pop(key, None)


class Collector:
    def __init__(self) -> None:
        self.acked: list[Any] = []
        self.ids = SimpleNamespace(report=lambda key, m: m)

    def ack(self, t: CoreTuple) -> None:
        self.acked.append(t[0])


class Bolt(BaseStatefulWindowedBolt):
    def __init__(self) -> None:
        self.fired: list[list[Any]] = []

    def execute(self, window: Any) -> None:
        self.fired.append([t[0] for t in window.get()])


class Run:
    """One driver's run of the window task over ``kv``; ``msgs``: root -> spout msg_id."""

    def __init__(self, kv: KV, msgs: dict[int, Any]) -> None:
        self.bolt, self.collector, self.msgs = Bolt().with_tumbling_window(Count(3)).with_persistence(), Collector(), msgs
        assert isinstance(self.bolt, Bolt)
        self.task = WindowTask(TOPOLOGY, "w", 0, self.bolt.window_config, lambda: 0.0, self.origin)
        self.task.begin(self.collector, self.bolt, kv)
        self.key = 0

    def origin(self, message_id: dict[int, int]) -> str | None:
        return "|".join(sorted(f"s/{self.msgs[r]!r}" for r in message_id))

    def add(self, n: str, root: int, msg_id: Any) -> None:
        self.msgs[root] = msg_id
        self.key += 1
        self.task.add(CoreTuple((n,), FIELDS, "s", "default", 0, {root: 1}, self.key))

    def end(self) -> None:
        self.task.end()


def test_a_replayed_tuple_the_restored_window_holds_is_acked_not_added_again() -> None:
    kv = KV()
    first = Run(kv, {})
    first.add("a", 11, "m1")
    first.add("b", 12, "m2")
    first.end()                                   # committed; the driver dies before the acks reach the spout
    assert first.collector.acked == ["a", "b"]
    assert first.bolt.fired == []
    again = Run(kv, {})
    again.add("a", 21, "m1")                      # the spout's replays: new roots, same msg_ids and values
    again.add("b", 22, "m2")
    assert again.collector.acked == ["a", "b"]
    assert [e.item[0] for e in again.task.events] == ["a", "b"]
    again.add("c", 23, "m3")
    assert again.bolt.fired == [["a", "b", "c"]]
    again.end()
    assert again.collector.acked == ["a", "b", "c"]


def test_a_new_tuple_reusing_a_held_msg_id_with_other_values_is_added() -> None:
    kv = KV()
    first = Run(kv, {})
    first.add("a", 11, 0)
    first.end()
    again = Run(kv, {})
    again.add("x", 21, 0)                         # a spout numbering its msg_ids afresh (MemorySpout)
    again.add("y", 22, 1)
    assert again.bolt.fired == [["a", "x", "y"]]


def test_equal_tuples_of_one_spout_tuple_are_each_held_once() -> None:
    kv = KV()
    first = Run(kv, {})
    first.add("the", 11, "m1")                    # a split bolt's two "the" of one sentence
    first.add("the", 11, "m1")
    first.end()
    again = Run(kv, {})
    again.add("the", 21, "m1")                    # the sentence replayed: both acked, neither added
    again.add("the", 21, "m1")
    assert again.collector.acked == ["the", "the"]
    again.add("cat", 22, "m2")
    assert again.bolt.fired == [["the", "the", "cat"]]
