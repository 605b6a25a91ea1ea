"""Moving a persistent core window to another task count (transactional/engine/core/window_moves.py):
held tuples go with their keys, numbered again with the fired ones first, the triggers'
state follows; overdue count windows fire in order (``WindowMachine.catch_up``); a
grouping that cannot place a window's tuples is refused; and end to end, in process, a
stateful windowed word count rebalanced 2 -> 3 -> 1 fires every tuple of its tumbling
windows exactly once."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from spouts import MemorySpout
from state.base import MemoryTransactionalState
from state.keyvalue import open_key_value_state
from transactional import Fields, TopologyBuilder, TopologyConfig, run_topology
from transactional.engine.core.window_moves import META, TaskWindow, move_windows, take_windows
from transactional.engine.layout import RebalanceRefusedError, check_rebalance
from transactional.engine.routing import stable_hash
from transactional.engine.window_core import Event, WindowMachine
from transactional.ops.control import request
from transactional.windowing import BaseStatefulWindowedBolt, Count, Duration, WindowConfig


def row(seq: int, word: str, ts: int, origin: str | None = None) -> list[Any]:
    return [seq, [word, ts], ts, "s", "default", 0, origin]


def meta(seq: int, last_fired: int, count_since: int, next_end: int | None = None, wm: int | None = None,
         maxts: list[list[Any]] | None = None) -> dict[str, Any]:
    return {"seq": seq, "count_since": count_since, "next_end": next_end, "watermark": wm,
            "last_fired": last_fired, "maxts": maxts or [], "chunks": [1]}


def by_word(r: list[Any]) -> Any:
    return r[1][0]


WORDS = ["cat", "dog", "cow", "moon", "apple", "the", "a", "man"]


def test_held_tuples_go_with_their_keys_fired_ones_first_numbered_again_and_a_second_move_changes_nothing() -> None:
    a = TaskWindow(meta(5, 2, 2, next_end=3000, wm=2500, maxts=[["s", "default", 0, 2900]]),
                   [row(1, "cat", 100), row(2, "dog", 200), row(3, "cow", 300, "s/7"), row(4, "man", 400)])
    b = TaskWindow(meta(4, 1, 2, next_end=2000, wm=1900, maxts=[["s", "default", 0, 2950], ["s", "default", 1, 80]]),
                   [row(1, "moon", 150), row(2, "the", 50), row(3, "a", 250)])
    route = lambda k: stable_hash(k) % 3  # noqa: E731
    new = move_windows([a, b], by_word, route, 3)
    held = {j: [r[1][0] for r in recs.get(f"{META}:1", [])] for j, recs in enumerate(new)}
    for j, words in held.items():
        assert all(route(w) == j for w in words)
    assert sorted(w for ws in held.values() for w in ws) == sorted(["cat", "dog", "cow", "man", "moon", "the", "a"])
    fired = {"cat", "dog", "moon"}                           # seq <= last_fired of their old task
    for recs in new:
        rows = recs.get(f"{META}:1", [])
        m = recs[META]
        assert [r[0] for r in rows] == list(range(1, len(rows) + 1)) and m["seq"] == len(rows) + 1
        words = [r[1][0] for r in rows]
        assert words == sorted(words, key=lambda w: (w not in fired, next(r[2] for r in rows if r[1][0] == w)))
        assert m["last_fired"] == sum(w in fired for w in words)
        assert m["count_since"] == len(words) - m["last_fired"]
        assert m["watermark"] == 1900                        # the least: it never goes back
        assert m["maxts"] == [["s", "default", 0, 2950], ["s", "default", 1, 80]]
        assert m["chunks"] == ([1] if rows else [])
    cow = next(r for recs in new for r in recs.get(f"{META}:1", []) if r[1][0] == "cow")
    assert cow[6] == "s/7"                                   # its origin moves with it
    again = move_windows([take_windows({k: (v, None) for k, v in recs.items()}) for recs in new], by_word, route, 3)
    assert again == new


def test_a_time_window_takes_the_least_next_end_of_the_tasks_its_tuples_come_from_and_global_keeps_task_0() -> None:
    a = TaskWindow(meta(2, 0, 1, next_end=3000), [row(1, "cat", 2100)])
    b = TaskWindow(meta(2, 0, 1, next_end=2000), [row(1, "cat", 1100)])
    new = move_windows([a, b], by_word, lambda k: 0, 2)
    assert new[0][META]["next_end"] == 2000 and new[1][META]["next_end"] is None
    assert [r[2] for r in new[0][f"{META}:1"]] == [1100, 2100] and f"{META}:1" not in new[1]


def test_take_windows_reads_only_the_chunks_the_trigger_state_names() -> None:
    held = {META: ({**meta(3, 0, 2), "chunks": [2]}, None), f"{META}:1": ([row(1, "old", 1)], None),
            f"{META}:2": ([row(2, "cat", 5)], None), "cat": (4, 99)}
    w = take_windows(held)
    assert [r[1][0] for r in w.rows] == ["cat"] and sorted(w.keys) == [META, f"{META}:1", f"{META}:2"]
    assert held == {"cat": (4, 99)}


class Hooks:
    def __init__(self) -> None:
        self.fired: list[list[int]] = []

    def held(self, e: Event) -> None:
        pass

    def fire(self, window: list[Event], start: int | None, end: int, key: Any) -> bool:
        self.fired.append([e.seq for e in window])
        return False

    def evicted(self, events: list[Event]) -> None:
        pass


def test_catch_up_fires_the_count_windows_a_move_left_overdue_in_order() -> None:
    h = Hooks()
    m = WindowMachine(WindowConfig(length=Count(3), sliding=Count(3)), h)
    m.events = [Event(i, i, None) for i in range(1, 9)]     # 8 pending after a move: 2 windows owed
    m.next_seq, m.count_since = 9, 8
    m.catch_up()
    assert h.fired == [[1, 2, 3], [4, 5, 6]] and m.count_since == 2 and m.last_fired == 6
    m.add(None, 9)
    assert h.fired[-1] == [7, 8, 9]
    m.catch_up()
    assert len(h.fired) == 3                               # nothing owed: nothing fires


def test_a_stateful_windowed_bolt_fed_by_a_shuffle_grouping_is_refused_naming_it_counts_and_reason() -> None:
    swindowed = {"kind": "bolt", "tasks": 2, "core": "swindowed", "layout": {},
                 "routing": [["words", "default", "shuffle", []]]}
    with pytest.raises(RebalanceRefusedError) as e:
        check_rebalance({"components": {"win": swindowed}}, {"win": 3}, "t1")
    assert str(e.value) == ("rebalance of 'win' in topology 't1' from 2 to 3 task(s) refused: it is a stateful "
                            "windowed bolt whose inputs are shuffle groupings, which do not say which task a held "
                            "tuple belongs to (its windows' tuples are moved with their keys: give it a fields or "
                            "a global grouping); nothing was changed")
    fields = {**swindowed, "routing": [["words", "default", "fields", ["word"]]]}
    check_rebalance({"components": {"win": fields}}, {"win": 3}, "t1")          # placed: no refusal


# -- end to end, in process -----------------------------------------------------------------------

FIRED: dict[str, list[list[str]]] = {}


class Tumbling(BaseStatefulWindowedBolt):
    def __init__(self, name: str) -> None:
        self.name = name

    def prepare(self, conf, context, collector):
        self.collector = collector

    def init_state(self, state):
        self.state = state

    def execute(self, window):
        FIRED.setdefault(self.name, []).append([t["id"] for t in window.get()])
        for t in window.get():
            self.state.put(t["word"], self.state.get(t["word"], 0) + 1)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n"))


def words_topology(name: str, items: list[tuple[str, str]], tasks: int) -> Any:
    b = TopologyBuilder(name)
    b.set_spout("s", MemorySpout(items, Fields("id", "word"), name=f"{name}-{items[0][0]}", per_call=7), 1)
    b.set_bolt("win", Tumbling(name).with_tumbling_window(Count(4)).with_persistence(), tasks) \
        .fields_grouping("s", Fields("word"))
    return b.build()


def unfired(name: str, task: int) -> list[str]:
    """The ids of the tuples task ``task``'s window holds that no window fired yet (a
    tumbling count window keeps its last window's tuples until the next one fires)."""
    kv = open_key_value_state("memory://", f"{name}:win:{task}")
    w = take_windows({k: (v, None) for k, v in kv.items()})
    assert w.meta is not None
    return [r[1][0] for r in w.rows if r[0] > w.meta["last_fired"]]


def test_a_stateful_windowed_word_count_rebalanced_2_3_1_fires_every_tuple_once_in_its_tumbling_windows() -> None:
    name = f"wmove-{uuid.uuid4().hex[:8]}"
    cfg = TopologyConfig(executor="in-process", progress=False, checkpoint_interval_ms=0, idle_timeout_secs=0.2,
                         poll_interval_secs=0.02, message_timeout_secs=30)
    parts = [[(f"{p}{i}", WORDS[(i * 7 + p) % len(WORDS)]) for i in range(30)] for p in range(3)]
    run_topology(words_topology(name, parts[0], 2), cfg)
    for tasks, items in ((3, parts[1]), (1, parts[2])):
        request("memory://", name, "rebalance", tasks={"win": tasks}, by="test")
        run_topology(words_topology(name, items, 2), cfg)
        assert MemoryTransactionalState(name).get("stateful")["win"] == {"parallelism": tasks, "tasks": tasks}
    fired = [i for w in FIRED[name] for i in w]
    pending = unfired(name, 0)
    assert len(fired) == len(set(fired))                           # no tuple in two tumbling windows
    assert sorted(fired + pending) == sorted(i for p in parts for i, _ in p)   # none lost
    assert all(len(w) == 4 for w in FIRED[name]) and len(pending) < 4
    counts = dict(open_key_value_state("memory://", f"{name}:win:0").items())
    truth: dict[str, int] = {}
    for i, w in (x for p in parts for x in p):
        if i in fired:
            truth[w] = truth.get(w, 0) + 1
    assert {k: v for k, v in counts.items() if not str(k).startswith(META)} == truth


def test_a_restart_with_another_parallelism_hint_moves_the_windows_too() -> None:
    name = f"wmove-{uuid.uuid4().hex[:8]}"
    cfg = TopologyConfig(executor="in-process", progress=False, checkpoint_interval_ms=0, idle_timeout_secs=0.2,
                         poll_interval_secs=0.02, message_timeout_secs=30)
    parts = [[(f"{p}{i}", WORDS[(i * 5 + p) % len(WORDS)]) for i in range(21)] for p in range(2)]
    run_topology(words_topology(name, parts[0], 3), cfg)
    held_before = sorted(i for t in range(3) for i in unfired(name, t))
    assert held_before                                              # the move has tuples to move
    run_topology(words_topology(name, parts[1], 2), cfg)           # the file says 2 now
    assert MemoryTransactionalState(name).get("stateful")["win"] == {"parallelism": 2, "tasks": 2}
    fired = [i for w in FIRED[name] for i in w]
    pending = unfired(name, 0) + unfired(name, 1)
    assert len(fired) == len(set(fired)) and sorted(fired + pending) == sorted(i for p in parts for i, _ in p)
    for t in range(2):
        kv = open_key_value_state("memory://", f"{name}:win:{t}")
        assert all(stable_hash(k) % 2 == t for k, _ in kv.items() if not str(k).startswith(META))
    assert not [k for k, _ in open_key_value_state("memory://", f"{name}:win:2").items()]


# -- a sliding time window whose old tasks had fired different ends --------------------------------

class Seen:
    """Hooks recording, per tuple id, the ends of the windows it was counted in."""

    def __init__(self, ends: dict[str, list[int]]) -> None:
        self.ends = ends

    def held(self, e: Event) -> None:
        pass

    def fire(self, window: list[Event], start: int | None, end: int, key: Any) -> bool:
        for e in window:
            self.ends.setdefault(e.item, []).append(end)
        return False

    def evicted(self, events: list[Event]) -> None:
        pass


SLIDING = WindowConfig(length=Duration(3000), sliding=Duration(1000), timestamp_field="ts")


def saved(m: WindowMachine) -> TaskWindow:
    """A machine's window records as ``WindowTask._save`` writes them (one chunk)."""
    rows = [[e.seq, [e.item, e.ts], e.ts, "s", "default", 0, None, *([e.mark] if e.mark is not None else [])]
            for e in m.events]
    meta = {"seq": m.next_seq, "count_since": m.count_since, "next_end": m.next_end, "watermark": m.wm.value,
            "last_fired": m.last_fired, "maxts": [[*k, v] for k, v in sorted(m.wm.maxima.items())],
            "chunks": [1] if rows else []}
    return TaskWindow(meta, rows)


def loaded(recs: dict[str, Any], hooks: Seen) -> WindowMachine:
    """A machine from a task's window records, as ``WindowTask._load`` reads them."""
    m = WindowMachine(SLIDING, hooks)
    meta = recs[META]
    m.next_seq, m.count_since, m.next_end = meta["seq"], meta["count_since"], meta["next_end"]
    m.wm.value, m.last_fired = meta["watermark"], meta["last_fired"]
    m.wm.maxima = {(s, st, t): v for s, st, t, v in meta["maxts"]}
    for seq, values, ts, *rest in recs.get(f"{META}:1", []):
        e = Event(seq, ts, values[0])
        if len(rest) > 4:
            e.mark = rest[4]
        m.events.append(e)
    return m


def feed(m: WindowMachine, items: list[tuple[str, int]], wm: int | None) -> None:
    for word_id, ts in items:
        assert m.add(word_id, ts, ("s", "default", 0)) is not None
    if wm is not None:
        m.wm.advance(0.0, None, wm)
        m.reach(wm)


def test_a_sliding_time_window_moved_from_tasks_that_fired_different_ends_counts_each_tuple_once_per_window() -> None:
    ends: dict[str, list[int]] = {}
    hooks = Seen(ends)
    route3 = lambda k: int(k[1:]) % 3  # noqa: E731           tuple "w<i>": its key is i
    key = lambda r: r[1][0]  # noqa: E731
    all_ts: dict[str, int] = {}

    def items(lo: int, hi: int, step: int, tag: str) -> list[tuple[str, int]]:
        out = [(f"w{len(all_ts) + i}", ts) for i, ts in enumerate(range(lo, hi, step))]
        all_ts.update(out)
        return out

    a, b = WindowMachine(SLIDING, hooks), WindowMachine(SLIDING, hooks)
    feed(a, items(0, 6000, 350, "a"), 5200)                # a fired ends 1000..5000: next end 6000
    feed(b, items(100, 6000, 400, "b"), 2100)              # b fired ends 1000..2000: next end 3000
    assert (a.next_end, b.next_end) == (6000, 3000)
    three = [loaded(r, hooks) for r in move_windows([saved(a), saved(b)], key, route3, 3)]
    for j, m in enumerate(three):                          # new tuples; the tasks move on unevenly
        feed(m, items(6000 + 100 * j, 7500, 450, f"n{j}"), [3100, 6200, 4300][j])
    recs = move_windows([saved(m) for m in three], key, lambda k: 0, 1)[0]
    assert recs[META]["next_end"] == 4000                  # the least of 4000, 7000, 5000
    assert {r[7] for r in recs[f"{META}:1"] if len(r) > 7} == {5000, 6000, 7000}   # marks moved on
    one = loaded(recs, hooks)
    feed(one, items(7500, 9000, 300, "z"), None)
    one.flush()                                            # the input ended: every window fires
    assert not one.events
    want = {i: [e for e in range(1000, 13000, 1000) if e - 3000 <= ts < e] for i, ts in all_ts.items()}
    assert {i: sorted(v) for i, v in ends.items()} == want


def test_a_time_window_merged_with_a_task_that_fired_none_starts_at_its_first_window_and_marks_the_others() -> None:
    ends: dict[str, list[int]] = {}
    a, b = WindowMachine(SLIDING, Seen(ends)), WindowMachine(SLIDING, Seen(ends))
    feed(a, [("w0", 500), ("w1", 2500)], 2200)             # a fired ends 1000, 2000: next end 3000
    feed(b, [("w2", 600)], None)                           # b fired none: w2 still owes 1000, 2000, 3000
    assert (a.next_end, b.next_end) == (3000, None)
    recs = move_windows([saved(a), saved(b)], lambda r: 0, lambda k: 0, 1)[0]
    assert recs[META]["next_end"] is None
    assert [(r[1][0], r[7] if len(r) > 7 else None) for r in recs[f"{META}:1"]] == [
        ("w0", 3000), ("w2", None), ("w1", 3000)]          # fired first, then by time
    one = loaded(recs, Seen(ends))
    one.flush()
    assert {i: sorted(v) for i, v in ends.items()} == {"w0": [1000, 2000, 3000], "w1": [3000, 4000, 5000],
                                                        "w2": [1000, 2000, 3000]}
