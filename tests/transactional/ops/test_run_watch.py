"""The engine takes what an operator wants of a run from its caller (docs/design.md §2):
the engine's own ``run_topology`` runs a topology with nothing of ``transactional.ops``,
``transactional.run_topology`` (``transactional.ops.run``) with the status record and the
operator's requests, and a ``RunWatch`` of the caller's own hears every step in order."""

from __future__ import annotations

import uuid
from typing import Any

from spouts import MemoryTransactionalSpout
from state.base import MemoryTransactionalState
from transactional import Fields, TopologyConfig, TransactionalTopologyBuilder, run_topology
from transactional.engine import driver
from transactional.ops.control import request
from transactional.ops.status import topology_status
from transactional.testing import ListSink

CONFIG = TopologyConfig(executor="in-process", progress=False)


def words(tid: str) -> TransactionalTopologyBuilder:
    b = TransactionalTopologyBuilder(tid, "spout", MemoryTransactionalSpout({0: list(range(6))}, Fields("n"), 2))
    b.set_bolt("sink", ListSink(tid)).shuffle_grouping("spout")
    return b


class Heard(driver.RunWatch):
    """Every hook, in the order the run calls it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def started(self, engine: Any) -> None:
        self.calls.append("started")
        engine.listeners.append(lambda t: self.calls.append(t.kind) if t.kind in ("committed", "stopped") else None)

    def locked(self, engine: Any, state: Any, owner: str, runner: Any) -> None:
        self.calls.append("locked")

    def requests(self, coord: Any, now: float, fresh: bool = False) -> list[Any]:
        if "requests" not in self.calls:
            self.calls.append("requests")
        return []

    def stopped(self) -> None:
        self.calls.append("stopped-loop")

    def unlocking(self, error: BaseException | None) -> None:
        self.calls.append(f"unlocking({error!r})")

    def ended(self) -> None:
        self.calls.append("ended")


def test_the_engine_alone_writes_no_status_record_and_the_package_run_topology_does() -> None:
    bare, wired = f"bare-{uuid.uuid4().hex[:6]}", f"wired-{uuid.uuid4().hex[:6]}"
    try:
        r = driver.run_topology(words(bare), CONFIG)
        assert r.batches_committed == 3
        assert topology_status("memory://", bare)["run"] is None
        r = run_topology(words(wired), CONFIG)
        assert r.batches_committed == 3
        run = topology_status("memory://", wired)["run"]
        assert run is not None and (run["batches"], run["running"], run["stopped_because"]) == (
            3, False, "spout has nothing more")
    finally:
        MemoryTransactionalState.reset(bare)
        MemoryTransactionalState.reset(wired)


def test_a_watch_of_the_callers_own_hears_each_step_and_its_requests_steer_the_run() -> None:
    tid = f"watch-{uuid.uuid4().hex[:6]}"
    heard = Heard()
    try:
        r = driver.run_topology(words(tid), CONFIG, watch=heard)
    finally:
        MemoryTransactionalState.reset(tid)
    assert r.batches_committed == 3
    assert heard.calls == ["started", "locked", "requests", "committed", "committed", "committed", "stopped",
                           "stopped-loop", "unlocking(None)", "ended"]

    class Kill(driver.RunWatch):
        """Asks the coordinator to stop after the first commit."""

        def requests(self, coord: Any, now: float, fresh: bool = False) -> list[Any]:
            return coord.kill(now, "a watch") if coord.last_committed >= 1 and coord.stopped is None else []

    tid = f"watch-{uuid.uuid4().hex[:6]}"
    try:
        r = driver.run_topology(words(tid), CONFIG, watch=Kill())
    finally:
        MemoryTransactionalState.reset(tid)
    assert (r.batches_committed, r.stopped_because) == (1, "killed by a watch")


def test_trident_kill_is_heard_only_through_the_operators_watch() -> None:
    """A kill already written when the run starts: the package's run_topology stops at
    once; the engine alone never reads the control record and runs to the end."""
    results = {}
    for name, run in (("wired", run_topology), ("bare", driver.run_topology)):
        tid = f"kill-{name}-{uuid.uuid4().hex[:6]}"
        try:
            MemoryTransactionalState(tid).set("control", {"state": "active", "kill": None})

            def kill_me(tid: str = tid) -> None:
                request("memory://", tid, "kill", by="ops")

            results[name] = run(words(tid), CONFIG, on_start=kill_me)
        finally:
            MemoryTransactionalState.reset(tid)
    assert (results["wired"].batches_committed, results["wired"].stopped_because) == (0, "killed by ops")
    assert (results["bare"].batches_committed, results["bare"].stopped_because) == (3, "spout has nothing more")
