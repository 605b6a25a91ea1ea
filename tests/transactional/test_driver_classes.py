"""On the driver, the commit phase and the spout's coordinator run the user's own classes
(module globals shared, as in Storm's LocalCluster); executors get them by value.

Storm's TransactionalGlobalCount keeps its "database" in a static ``DATABASE`` map that
the committer updates: that must work here too, and running a topology must not change
the user's classes (cloudpickle rewrites a class in place when its by-value form is loaded
in the process that defined it).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import uuid

import pytest

from spouts import Coordinator, Emitter, TransactionalSpout
from transactional import (
    BaseBatchBolt,
    BaseTransactionalBolt,
    Committer,
    Fields,
    TopologyConfig,
    TopologyError,
    TransactionalTopologyBuilder,
    Values,
    run_topology,
)

DATA = {
    0: ["cat", "dog", "chicken", "cat", "dog", "apple"],
    1: ["cat", "dog", "apple", "banana"],
    2: ["cat", "dog", "chicken", "cat", "dog", "apple", "zebra", "apple"],
}
ROWS = ["a", "b", "c", "d", "e", "f", "g"]          # the plain spout's data, 2 rows a batch

# Storm's TransactionalGlobalCount.DATABASE
DATABASE: dict = {}
GLOBAL_COUNT_KEY = "GLOBAL-COUNT"
COORDINATOR_CALLS: list = []                       # what the spout's coordinator was asked
MARKER = "as built"                                # read by the user's classes' methods
EXECUTOR_PIDS: list = []                           # filled by a committer, on the driver


def uid(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def config(pending: int = 1) -> TopologyConfig:
    return TopologyConfig(max_spout_pending=pending, progress=False, message_timeout_secs=60)


@pytest.fixture(autouse=True)
def fresh_globals():
    global MARKER
    DATABASE.clear()
    COORDINATOR_CALLS.clear()
    EXECUTOR_PIDS.clear()
    MARKER = "as built"
    yield
    MARKER = "as built"


# -- Storm's seed: partial counts, a committer updating a static map ------------------------------

class BatchCount(BaseBatchBolt):
    def prepare(self, conf, context, collector, id):
        self.collector, self.id, self.count = collector, id, 0

    def execute(self, tuple):
        self.count += 1

    def finish_batch(self):
        self.collector.emit(Values(self.id, self.count))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "count"))


class UpdateGlobalCount(BaseTransactionalBolt, Committer):
    """Storm's seed committer: the txid stored with the value makes the update idempotent."""

    def prepare(self, conf, context, collector, attempt):
        self.collector, self.attempt, self.sum = collector, attempt, 0

    def execute(self, tuple):
        self.sum += tuple["count"]

    def finish_batch(self):
        val = DATABASE.get(GLOBAL_COUNT_KEY)
        if val is None or val["txid"] != self.attempt.txid:
            newval = {"count": self.sum + (val["count"] if val else 0), "txid": self.attempt.txid}
            DATABASE[GLOBAL_COUNT_KEY] = newval
        else:
            newval = val
        self.collector.emit(Values(self.attempt, newval["count"]))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "sum"))

    def marker(self):
        return MARKER


def global_count(tid: str, spout=None) -> TransactionalTopologyBuilder:
    from spouts import MemoryTransactionalSpout

    spout = spout or MemoryTransactionalSpout(DATA, Fields("word"), 3)
    b = TransactionalTopologyBuilder(tid, "spout", spout, 3)
    b.set_bolt("partial-count", BatchCount(), 5).shuffle_grouping("spout")
    b.set_bolt("sum", UpdateGlobalCount()).global_grouping("partial-count")
    return b


@pytest.mark.parametrize("pending", [1, 4])
def test_storms_database_holds_the_exact_global_count(spark_context, pending):
    r = run_topology(global_count(uid("db")), config(pending), spark_context=spark_context)
    assert (r.batches_committed, r.failures) == (3, [])
    assert DATABASE == {GLOBAL_COUNT_KEY: {"count": 18, "txid": 3}}


# -- a plain transactional spout whose coordinator records its calls ------------------------------

class RecordingCoordinator(Coordinator):
    def __init__(self, rows: int) -> None:
        self.rows, self.next = rows, 0

    def is_ready(self):
        return self.next < self.rows

    def initialize_transaction(self, txid, prev_meta):
        COORDINATOR_CALLS.append(("initialize_transaction", txid))
        start = prev_meta["end"] if prev_meta else 0
        self.next = min(start + 2, self.rows)
        return {"start": start, "end": self.next}

    def committed(self, txid, meta):
        COORDINATOR_CALLS.append(("committed", txid))

    def marker(self):
        return MARKER


class RowsEmitter(Emitter):
    def __init__(self, rows: list, context) -> None:
        self.rows, self.context = rows, context

    def emit_batch(self, tx, meta, collector):
        if self.context.task_index == 0:
            for row in self.rows[meta["start"]:meta["end"]]:
                collector.emit((tx, row))


class RecordingSpout(TransactionalSpout):
    def __init__(self, rows: list) -> None:
        self.rows = rows

    def get_coordinator(self, conf, context):
        return RecordingCoordinator(len(self.rows))

    def get_emitter(self, conf, context):
        return RowsEmitter(self.rows, context)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("tx", "word"))

    def marker(self):
        return MARKER


@pytest.mark.parametrize("pending", [1, 4])
def test_the_spouts_coordinator_runs_the_users_class(spark_context, pending):
    r = run_topology(global_count(uid("coord"), RecordingSpout(ROWS)), config(pending),
                     spark_context=spark_context)
    assert (r.batches_committed, r.failures) == (4, [])
    inits = [c for c in COORDINATOR_CALLS if c[0] == "initialize_transaction"]
    assert inits == [("initialize_transaction", t) for t in (1, 2, 3, 4)]
    assert [c for c in COORDINATOR_CALLS if c[0] == "committed"] == [("committed", t) for t in (1, 2, 3, 4)]
    assert DATABASE == {GLOBAL_COUNT_KEY: {"count": len(ROWS), "txid": 4}}


# -- running a topology leaves the user's classes as they are ------------------------------------

def test_after_a_run_the_users_classes_read_the_modules_current_globals(spark_context):
    global MARKER
    r = run_topology(global_count(uid("globals"), RecordingSpout(ROWS)), config(2), spark_context=spark_context)
    assert r.batches_committed == 4
    MARKER = "changed after the run"
    assert UpdateGlobalCount().marker() == "changed after the run", "the committer's class was rewritten"
    assert RecordingSpout(ROWS).marker() == "changed after the run", "the spout's class was rewritten"
    assert RecordingCoordinator(1).marker() == "changed after the run"
    assert UpdateGlobalCount.finish_batch.__globals__ is globals()
    assert RecordingSpout.get_coordinator.__globals__ is globals()


# -- the processing phase still runs on executors, with classes shipped by value -----------------

class WhereAmI(BaseBatchBolt):
    def prepare(self, conf, context, collector, id):
        self.collector, self.id = collector, id

    def finish_batch(self):
        import sys

        by_value = sys.modules.get(type(self).__module__) is None or \
            type(self) is not getattr(sys.modules[type(self).__module__], "WhereAmI", None)
        self.collector.emit(Values(self.id, os.getpid(), by_value))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "pid", "by_value"))


class CollectPids(BaseTransactionalBolt, Committer):
    def prepare(self, conf, context, collector, attempt):
        self.seen = []

    def execute(self, tuple):
        self.seen.append((tuple["pid"], tuple["by_value"]))

    def finish_batch(self):
        EXECUTOR_PIDS.extend(self.seen)


def test_the_processing_phase_still_runs_on_executors_with_classes_by_value(spark_context):
    from spouts import MemoryTransactionalSpout

    b = TransactionalTopologyBuilder(uid("where"), "spout", MemoryTransactionalSpout(DATA, Fields("word"), 3), 2)
    b.set_bolt("where", WhereAmI(), 2).shuffle_grouping("spout")
    b.set_bolt("collect", CollectPids()).global_grouping("where")
    r = run_topology(b, config(2), spark_context=spark_context)
    assert r.batches_committed == 3
    assert len(EXECUTOR_PIDS) == 3 * 2
    assert all(pid != os.getpid() for pid, _ in EXECUTOR_PIDS), "processing ran on the driver"
    assert all(by_value for _, by_value in EXECUTOR_PIDS), "executors imported the test module"


# -- storm-starter's DATABASE: a module global of maps holding locks -------------------------------

#: a module global that cannot be pickled (a dict of maps holding locks, as storm-starter keeps)
LOCKED_DATABASE: dict = {}


def fresh_locked_database() -> None:
    LOCKED_DATABASE.clear()
    LOCKED_DATABASE[GLOBAL_COUNT_KEY] = {"lock": threading.Lock(), "count": 0, "txid": None}


class LockedGlobalCount(BaseTransactionalBolt, Committer):
    """Storm's seed committer, updating its value under the value's lock."""

    def prepare(self, conf, context, collector, attempt):
        self.attempt, self.sum = attempt, 0

    def execute(self, tuple):
        self.sum += tuple["count"]

    def finish_batch(self):
        val = LOCKED_DATABASE[GLOBAL_COUNT_KEY]
        with val["lock"]:
            if val["txid"] != self.attempt.txid:
                val["count"] += self.sum
                val["txid"] = self.attempt.txid

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id"))


class PeekingCount(BatchCount):
    """A processing-phase bolt (on executors) that reads the driver's global."""

    def finish_batch(self):
        with LOCKED_DATABASE[GLOBAL_COUNT_KEY]["lock"]:
            pass
        super().finish_batch()


def locked_count(tid: str, counter: BaseBatchBolt | None = None) -> TransactionalTopologyBuilder:
    from spouts import MemoryTransactionalSpout

    fresh_locked_database()
    b = TransactionalTopologyBuilder(tid, "spout", MemoryTransactionalSpout(DATA, Fields("word"), 3), 3)
    b.set_bolt("partial-count", counter or BatchCount(), 2).shuffle_grouping("spout")
    b.set_bolt("sum", LockedGlobalCount()).global_grouping("partial-count")
    return b


def test_a_committer_on_the_driver_uses_a_module_global_holding_locks(spark_context):
    r = run_topology(locked_count(uid("locked")), config(2), spark_context=spark_context)
    assert (r.batches_committed, r.failures) == (3, [])
    assert (LOCKED_DATABASE[GLOBAL_COUNT_KEY]["count"], LOCKED_DATABASE[GLOBAL_COUNT_KEY]["txid"]) == (18, 3)


def _global_message(cid: str, cls: str, reader: str, fix: str) -> str:
    return (f"component {cid!r} ({cls}) runs on Spark executors, but {reader} reads the module global "
            f"LOCKED_DATABASE of {__name__} ({__file__}), which cannot be pickled: cannot pickle "
            "'_thread.lock' object. Executors cannot import that module, so its code goes to them by "
            "value with the globals it reads, and they are other processes: they never share the "
            "driver's LOCKED_DATABASE. Create what LOCKED_DATABASE holds (locks, connections) in "
            f"prepare(), {fix}, or in map state (context.map_state)")


def test_a_processing_bolt_reaching_an_unpicklable_global_is_told_the_global_module_and_fix():
    with pytest.raises(TopologyError) as e:
        locked_count(uid("peek"), PeekingCount()).build()
    assert str(e.value) == _global_message(
        "partial-count", "PeekingCount", "PeekingCount.finish_batch()",
        "or keep such state in a committer (it runs on the driver with commit_placement='driver', "
        "the default, sharing the module's globals)")


def test_committers_placed_on_executors_reaching_it_are_named_before_anything_runs():
    t = locked_count(uid("placed")).build()
    assert t.component("sum").blob == b"", "a committer on the driver is never pickled for executors"
    assert t.placed("driver") is t
    fix = ("or run the commit phase on the driver (commit_placement='driver', the default), where "
           "committers share the driver's module globals")
    with pytest.raises(TopologyError) as e:
        t.placed("executors")
    assert str(e.value) == _global_message("sum", "LockedGlobalCount", "LockedGlobalCount.finish_batch()", fix)
    # run_topology places it before it opens any state (nothing listens on port 1)
    cfg = TopologyConfig(commit_placement="executors", state="redis://127.0.0.1:1/0", progress=False)
    with pytest.raises(TopologyError) as e:
        run_topology(t, cfg)
    assert str(e.value) == _global_message("sum", "LockedGlobalCount", "LockedGlobalCount.finish_batch()", fix)
    assert LOCKED_DATABASE[GLOBAL_COUNT_KEY]["txid"] is None


def test_a_commit_component_placed_on_executors_gets_its_executor_form():
    t = global_count(uid("placed-ok")).build()
    assert t.component("sum").blob == b""
    placed = t.placed("executors")
    assert placed.component("sum").blob != b"" and placed.component("partial-count") == t.component("partial-count")
    elsewhere = dataclasses.replace(t.component("sum"), origin="built-in-another-process")
    with pytest.raises(TopologyError, match="component 'sum' .UpdateGlobalCount. runs only in the driver "
                                            "process that built the topology"):
        elsewhere.new_instance()


# -- what goes by value: the user's modules, not the project's packages ---------------------------

def test_executors_import_the_projects_packages_trident_too():
    """Only the user's modules go to executors by value; the project's packages, trident
    among them, are imported there. A user's aggregator then derives from the very
    ``trident.operation`` classes that trident's runtime checks it against (a by-value copy
    of trident beside the imported one fails ``isinstance``: ``Total.init() takes 1
    positional argument but 3 were given``)."""
    from transactional.pickling import _by_value
    from trident import ReducerAggregator

    class Total(ReducerAggregator):
        def init(self):
            return 0

        def reduce(self, curr, tuple):
            return curr + tuple[0]

    assert set(_by_value([Total()], 3, set(), {})) == {__name__}
