"""``trident rebalance`` (transactional/ops/control.py, transactional/engine/layout.py): a
running topology's task counts change at a txid boundary without a restart; every kind of
state goes on exactly (compared with the exact counts); refusals name the component, both
counts and the reason; ``trident status`` shows a rebalance asked."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest

from spouts import MemoryTransactionalSpout
from state.base import MemoryTransactionalState
from transactional import Fields, TopologyConfig, run_topology
from transactional.engine.layout import RebalanceRefusedError, check_rebalance
from transactional.engine.routing import stable_hash
from transactional.ops.control import request
from trident import Count, TridentTopology, state
from trident.state import BaseStateUpdater, State, StateFactory
from trident.windowing import InMemoryWindowsStoreFactory

from test_core_topology import SENTENCES, WordCount, config, stateful_topology, task_states, word_truth
from trident_kill_topology import DATA, Split, expected

COUNTS = "persistent_aggregate(counts)"
ROWS = "partition_persist(Rows)"
#: what the user state wrote: (txid, partition) -> (num_partitions, rows)
WRITTEN: dict[tuple[str, int, int], tuple[int, list[str]]] = {}


class RowsState(State):
    def __init__(self, tid: str, part: int, parts: int) -> None:
        self.tid, self.part, self.parts, self.rows = tid, part, parts, []

    def begin_commit(self, txid: int) -> None:
        self.rows = []

    def commit(self, txid: int) -> None:
        WRITTEN[(self.tid, txid, self.part)] = (self.parts, self.rows)    # a replay overwrites its own


class Rows(StateFactory):
    def __init__(self, tid: str) -> None:
        self.tid = tid

    def make_state(self, conf: Any, metrics: Any, partition_index: int, num_partitions: int) -> State:
        return RowsState(self.tid, partition_index, num_partitions)


class AddRows(BaseStateUpdater):
    def update_state(self, state: Any, tuples: Any, collector: Any) -> None:
        state.rows += [t[0] for t in tuples]


def word_count(tid: str, window: bool = False) -> Any:
    t = TridentTopology(tid)
    s = t.new_stream("sentences", MemoryTransactionalSpout(DATA, Fields("sentence"), 4)).parallelism_hint(2)
    s.shuffle().parallelism_hint(2).partition_persist(Rows(tid), Fields("sentence"), AddRows())
    words = s.each(Fields("sentence"), Split(), Fields("word"))
    words.group_by(Fields("word")).persistent_aggregate(state.transactional("counts"), Count(), Fields("count")) \
        .parallelism_hint(2)
    if window:
        words.tumbling_window(4, InMemoryWindowsStoreFactory("win"), Fields("word"), Count(), Fields("n")) \
            .parallelism_hint(2)
    return t.build()


def test_a_running_trident_topology_is_rebalanced_2_3_1_and_every_state_goes_on_exactly() -> None:
    tid = f"rb-{uuid.uuid4().hex[:8]}"
    # shuffle().partition_persist(...) is one stage (the state's stage takes the repartitioning)
    asks = {3: {COUNTS: 3, ROWS: 3}, 7: {COUNTS: 1, ROWS: 1}}

    def committed(txid: int, _r: Any) -> None:
        if txid in asks:
            request("memory://", tid, "rebalance", tasks=asks[txid], by="test")

    cfg = TopologyConfig(executor="in-process", progress=False, max_spout_pending=2)
    r = run_topology(word_count(tid), cfg, on_commit=committed)
    assert (r.first_txid, r.last_txid) == (1, 15)
    want = expected()
    assert dict(zip(want, r.map_state("counts").multi_get(list(want)), strict=True)) == want
    mine = {k[1:]: v for k, v in WRITTEN.items() if k[0] == tid}
    assert sorted(s for _parts, rows in mine.values() for s in rows) == sorted(s for rows in DATA.values()
                                                                               for (s,) in rows)
    by_txid: dict[int, set[int]] = {}
    for (txid, _part), (parts, _rows) in mine.items():
        by_txid.setdefault(txid, set()).add(parts)
    # the user state learnt its partition count: 2 up to txid 3, 3 up to 7, then 1 -- one count per txid
    assert {t: p.pop() for t, p in by_txid.items() if len(p) == 1} == \
        {t: 2 if t <= 3 else 3 if t <= 7 else 1 for t in range(1, 16)}
    st = MemoryTransactionalState(tid)
    assert st.get("layout")["components"][COUNTS]["tasks"] == 1
    assert st.get("rebalanced")["tasks"][COUNTS] == {"from": 2, "to": 1}
    # the next start runs the rebalanced counts, not the file's
    again = run_topology(word_count(tid), cfg, max_batches=0)
    assert again.batches_committed == 0 and st.get("layout")["components"][COUNTS]["tasks"] == 1


def test_a_running_core_topology_moves_its_key_value_state_at_a_rebalance() -> None:
    name = f"rbcore-{uuid.uuid4().hex[:8]}"
    cfg = config(checkpoint_interval_ms=0, executor="in-process")
    run_topology(stateful_topology(name, WordCount(), SENTENCES, tasks=2), cfg)
    request("memory://", name, "rebalance", tasks={"count": 3}, by="test")
    r = run_topology(stateful_topology(name, WordCount(), SENTENCES, tasks=2), cfg)
    assert r.key_value_state("count") == word_truth(SENTENCES * 2)
    for t, counts in enumerate(task_states(name, 3)):
        assert all(stable_hash(w) % 3 == t for w in counts), (t, counts)
    assert MemoryTransactionalState(name).get("stateful")["count"] == {"parallelism": 3, "tasks": 3}


def test_a_rebalance_a_grouping_or_a_state_cannot_follow_is_refused_naming_component_counts_and_reason() -> None:
    tid = f"rb-{uuid.uuid4().hex[:8]}"
    run_topology(word_count(tid, window=True), TopologyConfig(executor="in-process", progress=False), max_batches=1)
    comp = "window(WindowSpec)"
    rec = MemoryTransactionalState(tid).get("layout")
    shuffled = {**rec["components"][comp], "routing": [["b-0", "default", "shuffle", []]]}
    with pytest.raises(RebalanceRefusedError) as e:
        check_rebalance({"components": {comp: shuffled}}, {comp: 3}, tid)
    assert str(e.value) == (f"rebalance of {comp!r} in topology {tid!r} from 2 to 3 task(s) refused: it keeps "
                            "windows per task and its inputs are shuffle groupings (a window's tuples would be "
                            "split between tasks); nothing was changed")
    swindowed = {"kind": "bolt", "tasks": 2, "core": "swindowed", "layout": {},
                 "routing": [["words", "default", "fields", ["word"]]]}
    check_rebalance({"components": {"win": swindowed}}, {"win": 1}, tid)     # its windows move with their keys
    shuffled = {**swindowed, "routing": [["words", "default", "shuffle", []]]}
    with pytest.raises(RebalanceRefusedError) as e:
        check_rebalance({"components": {"win": shuffled}}, {"win": 1}, tid)
    assert str(e.value) == (f"rebalance of 'win' in topology {tid!r} from 2 to 1 task(s) refused: it is a stateful "
                            "windowed bolt whose inputs are shuffle groupings, which do not say which task a held "
                            "tuple belongs to (its windows' tuples are moved with their keys: give it a fields or "
                            "a global grouping); nothing was changed")
    with pytest.raises(RebalanceRefusedError, match="has no component 'nope'; its components are "):
        request("memory://", tid, "rebalance", tasks={"nope": 3})
    assert MemoryTransactionalState(tid).get("control") is None
    name = f"rbshuffle-{uuid.uuid4().hex[:8]}"
    run_topology(stateful_topology(name, WordCount(), SENTENCES, tasks=2, grouping="shuffle"),
                 config(checkpoint_interval_ms=0, executor="in-process"))
    with pytest.raises(RebalanceRefusedError, match="from 2 to 3 task.s. refused: it is a stateful bolt whose "
                       "inputs are shuffle groupings, which do not say which task a key belongs to"):
        request("memory://", name, "rebalance", tasks={"count": 3})


def test_trident_status_shows_a_rebalance_asked(capsys: Any) -> None:
    from transactional.ops.cli import main

    tid = f"rb-{uuid.uuid4().hex[:8]}"
    run_topology(word_count(tid), TopologyConfig(executor="in-process", progress=False), max_batches=1)
    assert main(["rebalance", tid, "-e", f"{COUNTS}=3", "-w", "30", "--coordination", "memory://"]) == 0
    out = capsys.readouterr().out
    assert out == (f"{tid}: rebalance to {COUNTS}=3 asked; no driver runs it now: the next run starts after the "
                   "commit under way and a wait of 30 s\n")
    assert main(["status", tid, "--coordination", "memory://"]) == 0
    assert f"rebalance: to {COUNTS}=3 asked by " in capsys.readouterr().out
    assert Counter(MemoryTransactionalState(tid).get("control")["rebalance"]["tasks"]) == Counter({COUNTS: 3})


def test_local_cluster_rebalance_changes_a_running_topology_and_counts_stay_exact() -> None:
    from transactional import LocalCluster

    tid = f"rb-{uuid.uuid4().hex[:8]}"
    st = MemoryTransactionalState(tid)
    cfg = TopologyConfig(executor="in-process", progress=False, idle_timeout_secs=None, poll_interval_secs=0.02)
    with LocalCluster() as cluster:
        cluster.submit_topology("wc", cfg, word_count(tid))
        wait_until(lambda: ((st.get("committed") or {}).get("txid") or 0) >= 2)
        cluster.rebalance("wc", {COUNTS: 3})
        wait_until(lambda: (st.get("layout") or {}).get("components", {}).get(COUNTS, {}).get("tasks") == 3)
        wait_until(lambda: (st.get("committed") or {}).get("txid") == 15)
        r = cluster.kill_topology("wc")
    want = expected()
    assert r is not None and dict(zip(want, r.map_state("counts").multi_get(list(want)), strict=True)) == want


def wait_until(cond: Any, timeout: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_the_status_page_shows_a_rebalance_in_progress_until_the_next_txid_runs() -> None:
    from transactional.engine.coordinator import Transition
    from transactional.ops.webui.observer import RunObserver

    o = RunObserver(word_count("rb-page"), clock=lambda: 0.0)
    o(Transition("launched", 1, 1, 0.0))
    o(Transition("committed", 1, 1, 1.0, {"launched_at": 0.0, "emitted": {}}))
    o(Transition("stopped", 1, 0, 1.5, {"reason": "rebalance"}))
    assert (o.snapshot()["phase"], o.snapshot()["stopped_because"]) == ("rebalancing", "rebalance")
    o(Transition("launched", 2, 1, 2.0))
    assert o.snapshot()["phase"] == "running"
