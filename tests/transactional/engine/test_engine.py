"""The transactional engine, memory state (docs/design.md §3-§6): every test runs twice, on a
real local Spark context and on the in-process executor (the same plan and interpreter,
no Spark), as bytewax runs its tests in-process and clustered."""

from __future__ import annotations

import itertools
import sys
import time
import uuid
from pathlib import Path

import pytest

from spouts import MemoryTransactionalSpout, OpaqueMemoryTransactionalSpout
from transactional import (
    BaseBatchBolt,
    BaseTransactionalBolt,
    Committer,
    Fields,
    TopologyConfig,
    TopologyFailedError,
    TransactionalTopologyBuilder,
    Values,
    run_topology,
)
from transactional.testing import SINKS, EventLog, FaultPlan, ListSink, with_faults

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
import global_count  # noqa: E402
import transactional_words  # noqa: E402


def uid(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


EXECUTOR = "spark"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    both = metafunc.definition.get_closest_marker("spark_only") is None
    metafunc.parametrize("executor", ["spark", "in-process"] if both else ["spark"], indirect=True)


@pytest.fixture(autouse=True)
def executor(request: pytest.FixtureRequest):
    """Run the test on each executor (``config()`` below picks it up)."""
    global EXECUTOR
    EXECUTOR = request.param
    if request.param == "spark":
        request.getfixturevalue("spark_context")
    yield request.param
    EXECUTOR = "spark"


def config(**kw) -> TopologyConfig:
    kw.setdefault("message_timeout_secs", 60)
    kw.setdefault("progress", False)
    kw.setdefault("retry_backoff_secs", 0.05)   # replays at once: the tests inject many failures
    kw.setdefault("executor", EXECUTOR)
    return TopologyConfig(**kw)


def rebuild(builder: TransactionalTopologyBuilder, topology_id: str) -> TransactionalTopologyBuilder:
    builder.topology_id = topology_id
    return builder


# -- the examples, exact, with and without injected failures ---------------------------------

def global_count_topology(tid: str, plan: FaultPlan | None = None) -> TransactionalTopologyBuilder:
    spout = MemoryTransactionalSpout(global_count.DATA, Fields("word"), global_count.PARTITION_TAKE_PER_BATCH)
    b = TransactionalTopologyBuilder(tid, "spout", spout, 3)
    partial, total = global_count.BatchCount(), global_count.UpdateGlobalCount()
    if plan:
        partial, total = with_faults(partial, plan), with_faults(total, plan)
    b.set_bolt("partial-count", partial, 5).shuffle_grouping("spout")
    b.set_bolt("sum", total).global_grouping("partial-count")
    return b


@pytest.mark.parametrize("pending", [1, 4])
def test_global_count_is_exact(spark_context, pending):
    r = run_topology(global_count_topology(uid("gc")), config(max_spout_pending=pending))
    assert r.map_state("global-count").get("count") == 18
    assert (r.batches_committed, r.first_txid, r.last_txid) == (3, 1, 3)
    assert r.failures == [] and r.attempts == 3


@pytest.mark.parametrize("pending,seed", list(itertools.product([1, 4], range(3))))
def test_global_count_is_exact_under_injected_failures(spark_context, pending, seed):
    plan = FaultPlan(seed=seed, rate=0.25, max_attempt=2)
    r = run_topology(global_count_topology(uid("gcf"), plan), config(max_spout_pending=pending, max_attempts=4))
    assert r.map_state("global-count").get("count") == 18
    assert r.batches_committed == 3
    assert r.attempts == 3 + len(r.failures) + r.attempts - 3 - len(r.failures)  # bookkeeping is consistent
    assert len(r.failures) > 0, "the plan injected no failure; pick another seed"
    assert all("injected failure" in f for f in r.failures)


def words_topology(tid: str, plan: FaultPlan | None = None) -> TransactionalTopologyBuilder:
    tw = transactional_words
    b = tw.build_topology(tid)
    if plan:
        b = TransactionalTopologyBuilder(tid, "spout", b.spout, 2)
        b.set_bolt("count", with_faults(tw.KeyedCountUpdater(), plan), 3).fields_grouping("spout", Fields("word"))
        b.set_bolt("bucketize", with_faults(tw.Bucketize(), plan), 2).shuffle_grouping("count")
        b.set_bolt("buckets", with_faults(tw.BucketCountUpdater(), plan), 2).fields_grouping("bucketize", Fields("bucket"))
    return b


@pytest.mark.parametrize("pending,seed,where", [(1, 0, "finish_batch"), (4, 1, "finish_batch"),
                                                (4, 2, "execute"), (1, 3, "prepare")])
def test_transactional_words_is_exact_under_injected_failures(spark_context, pending, seed, where):
    plan = FaultPlan(seed=seed, rate=0.15, max_attempt=2, where=where)
    r = run_topology(words_topology(uid("tw"), plan), config(max_spout_pending=pending, max_attempts=4))
    assert transactional_words.read_results(r) == transactional_words.expected()
    assert len(r.failures) > 0
    assert r.batches_committed == 9


# -- commit order and pipelining -------------------------------------------------------------

class RecordingCommitter(BaseTransactionalBolt, Committer):
    """Logs the start and end of every commit-phase finish_batch."""

    def __init__(self, log_path: str, wait_for: str | None = None) -> None:
        self.log, self.wait_for = EventLog(log_path), wait_for

    def prepare(self, conf, context, collector, attempt):
        self.attempt = attempt

    def finish_batch(self):
        self.log.record("commit-start", txid=self.attempt.txid, attempt=self.attempt.attempt_id)
        if self.wait_for and self.attempt.txid == 1:
            deadline = time.time() + 30
            while time.time() < deadline and not self.log.events(self.wait_for):
                time.sleep(0.02)
        self.log.record("commit-end", txid=self.attempt.txid)


class SignallingBolt(BaseBatchBolt):
    """In txid 2, waits until the commit of txid 1 has started, then says so (with
    ``wait=False`` it only emits: its waiting tasks would hold both cores of ``local[2]``
    while a failed txid 1 waits for one to be replayed)."""

    def __init__(self, log_path: str, wait: bool = True) -> None:
        self.log, self.wait = EventLog(log_path), wait

    def prepare(self, conf, context, collector, attempt):
        self.attempt, self.collector = attempt, collector

    def execute(self, tuple):
        pass

    def finish_batch(self):
        if self.wait and self.attempt.txid == 2:
            deadline = time.time() + 30
            while time.time() < deadline and not self.log.events("commit-start"):
                time.sleep(0.02)
            if self.log.events("commit-start"):
                self.log.record("processed-during-commit", txid=2)
        self.collector.emit(Values(self.attempt, 1))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "n"))


def test_commits_are_strictly_ordered_and_once_per_txid(spark_context, tmp_path):
    log = str(tmp_path / "events")
    data = {p: list(range(40)) for p in range(3)}
    b = TransactionalTopologyBuilder(uid("order"), "spout", MemoryTransactionalSpout(data, Fields("n"), 4), 3)
    b.set_bolt("work", with_faults(SignallingBolt(log, wait=False), FaultPlan(seed=5, rate=0.2)), 2).shuffle_grouping("spout")
    b.set_bolt("commit", with_faults(RecordingCommitter(log), FaultPlan(seed=6, rate=0.2)), 1).global_grouping("work")
    r = run_topology(b, config(max_spout_pending=4, max_attempts=4))
    events = EventLog(log).events()
    ends = [e["txid"] for e in events if e["event"] == "commit-end"]
    assert ends == list(range(1, 11)), "each txid committed once, in increasing order"
    assert r.last_txid == 10 and len(r.failures) > 0
    # never two at once: every commit-start is followed by its own commit-end
    phases = [(e["event"], e["txid"]) for e in events if e["event"].startswith("commit-")]
    for (ev1, t1), (ev2, t2) in zip(phases, phases[1:], strict=False):
        if ev1 == "commit-start":
            assert ev2 in ("commit-end", "commit-start") and (ev2 == "commit-start") <= (t2 == t1)


def test_processing_of_a_later_batch_overlaps_the_commit_of_an_earlier_one(spark_context, tmp_path):
    log = str(tmp_path / "events")
    data = {0: list(range(9))}
    b = TransactionalTopologyBuilder(uid("overlap"), "spout", MemoryTransactionalSpout(data, Fields("n"), 3), 1)
    b.set_bolt("work", SignallingBolt(log), 1).shuffle_grouping("spout")
    b.set_bolt("commit", RecordingCommitter(log, wait_for="processed-during-commit"), 1).global_grouping("work")
    r = run_topology(b, config(max_spout_pending=3))
    assert r.last_txid == 3
    ev = EventLog(log).events()
    names = [(e["event"], e.get("txid")) for e in ev]
    # txid 2 was processed while txid 1 was committing: commit 1 started, then txid 2's
    # processing signalled, then commit 1 ended
    assert names.index(("commit-start", 1)) < names.index(("processed-during-commit", 2)) < names.index(("commit-end", 1))


# -- the seed's A -> B (committer) -> C -> D (committer) ---------------------------------------

class PhaseBolt(BaseTransactionalBolt):
    def __init__(self, log_path: str, emit: bool = True) -> None:
        self.log, self.emit = EventLog(log_path), emit

    def prepare(self, conf, context, collector, attempt):
        self.context, self.collector, self.attempt, self.n = context, collector, attempt, 0

    def execute(self, tuple):
        self.n += 1

    def finish_batch(self):
        self.log.record("finish", component=self.context.component_id, phase=self.context.phase,
                        txid=self.attempt.txid, task=self.context.task_index, n=self.n)
        if self.emit:
            self.collector.emit(Values(self.attempt, self.n))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "n"))


class PhaseCommitter(PhaseBolt, Committer):
    pass


def test_seed_four_bolt_example_runs_committers_and_downstream_in_the_commit_phase(spark_context, tmp_path):
    log = str(tmp_path / "events")
    data = {0: list(range(6)), 1: list(range(6))}
    b = TransactionalTopologyBuilder(uid("abcd"), "spout", MemoryTransactionalSpout(data, Fields("n"), 2), 2)
    b.set_bolt("A", PhaseBolt(log), 2).shuffle_grouping("spout")
    b.set_bolt("B", PhaseCommitter(log), 1).global_grouping("A")
    b.set_bolt("C", PhaseBolt(log), 1).global_grouping("B").global_grouping("A")
    b.set_bolt("D", PhaseCommitter(log, emit=False), 1).global_grouping("C")
    topo = b.build()
    assert topo.commit_components == {"B", "C", "D"}
    r = run_topology(topo, config(max_spout_pending=3))
    assert r.last_txid == 3
    ev = EventLog(log).events("finish")
    assert {e["phase"] for e in ev if e["component"] == "A"} == {"processing"}
    assert {e["phase"] for e in ev if e["component"] in "BCD"} == {"commit"}
    commit_seq = [(e["component"], e["txid"]) for e in ev if e["component"] in "BCD"]
    assert commit_seq == [(c, t) for t in (1, 2, 3) for c in "BCD"], "B, then C, then D, per commit"
    # C saw B's tuple and A's two tuples of each batch: it ran after B's finish_batch
    assert [e["n"] for e in ev if e["component"] == "C"] == [3, 3, 3]


def test_a_task_that_receives_no_tuples_still_gets_prepare_and_finish_batch(spark_context, tmp_path):
    log = str(tmp_path / "events")
    b = TransactionalTopologyBuilder(uid("empty"), "spout", MemoryTransactionalSpout({0: [1, 2, 3]}, Fields("n"), 3), 1)
    b.set_bolt("g", PhaseBolt(log, emit=False), 4).global_grouping("spout")
    r = run_topology(b, config())
    assert r.last_txid == 1
    ev = EventLog(log).events("finish")
    assert sorted((e["task"], e["n"]) for e in ev) == [(0, 3), (1, 0), (2, 0), (3, 0)]


# -- timeouts and failures that stop the run ------------------------------------------------------

class SlowOnce(BaseBatchBolt):
    """Blocks for a long time in the first attempt of txid 2."""

    def prepare(self, conf, context, collector, attempt):
        self.attempt = attempt

    def execute(self, tuple):
        pass

    def finish_batch(self):
        if self.attempt == (2, 1):
            time.sleep(120)


@pytest.mark.spark_only   # cancelling a running task takes Spark's job groups; in process it runs on
def test_a_timed_out_attempt_is_cancelled_and_replayed(spark_context):
    tid = uid("timeout")
    b = TransactionalTopologyBuilder(tid, "spout", MemoryTransactionalSpout({0: list(range(9))}, Fields("n"), 3), 1)
    b.set_bolt("slow", SlowOnce(), 1).shuffle_grouping("spout")
    b.set_bolt("sink", ListSink(tid), 1).global_grouping("spout")
    t0 = time.monotonic()
    r = run_topology(b, config(message_timeout_secs=4, max_spout_pending=2))
    assert time.monotonic() - t0 < 60
    assert r.last_txid == 3
    assert any("message_timeout_secs" in f and "txid 2 (attempt 1)" in f for f in r.failures)
    assert sorted(v for _, (v,) in SINKS[tid]) == list(range(9)), "every tuple once"
    assert [t for t, _ in SINKS[tid]] == sorted(t for t, _ in SINKS[tid])


class Boom(BaseBatchBolt):
    def prepare(self, conf, context, collector, attempt):
        self.attempt, self.task = attempt, context.task_index

    def execute(self, tuple):
        if self.attempt.txid == 2 and self.task == 1:
            raise ValueError("boom in the bolt")


def test_a_batch_that_always_fails_stops_the_run_naming_txid_component_task_and_cause(spark_context):
    tid = uid("always")
    b = TransactionalTopologyBuilder(tid, "spout", MemoryTransactionalSpout({0: list(range(12))}, Fields("n"), 4), 1)
    b.set_bolt("boom", Boom(), 2).shuffle_grouping("spout")
    b.set_bolt("sink", ListSink(tid), 1).global_grouping("spout")
    with pytest.raises(TopologyFailedError) as e:
        run_topology(b, config(max_attempts=3, max_spout_pending=1))
    msg = str(e.value)
    assert "txid 2 failed 3 times" in msg and "'boom'" in msg and "task 1" in msg and "boom in the bolt" in msg
    assert (e.value.txid, e.value.component, e.value.task) == (2, "boom", 1)
    assert sorted(v for _, (v,) in SINKS[tid]) == list(range(4)), "only txid 1 committed"


# -- opaque spouts: the seed's scenario ------------------------------------------------------------

class CountPerValue(BaseTransactionalBolt, Committer):
    """Counts each value into a map; fails the first commit of txid 1 after task 0 wrote
    (unless ``fail_first`` is False)."""

    def __init__(self, opaque: bool, fail_first: bool = True) -> None:
        self.opaque, self.fail_first = opaque, fail_first

    def prepare(self, conf, context, collector, attempt):
        self.attempt, self.task, self.counts = attempt, context.task_index, {}
        self.map = context.map_state("per-value", opaque=self.opaque)

    def execute(self, tuple):
        self.counts[tuple[1]] = self.counts.get(tuple[1], 0) + 1

    def finish_batch(self):
        from transactional import FailedException

        if self.fail_first and self.attempt == (1, 1) and self.task == 1:
            raise FailedException("commit of txid 1 fails after task 0 wrote its keys")
        self.map.multi_combine(list(self.counts), list(self.counts.values()), "sum")


def _short_first_replay(tx, partition, start, end):
    """txid 1 (attempts 1 and 2) delivers 10; its replay, attempt 2, only 8: a broker is down."""
    return start + 8 if tx == (1, 2) else end


@pytest.mark.parametrize("opaque", [True, False])
def test_a_failed_commit_phase_writes_nothing_so_a_different_replay_is_exact(spark_context, opaque):
    """Task 1 of the committer fails after task 0 updated its keys. The maps buffer the
    commit's updates until every commit-phase task succeeded, so nothing was written and
    the different replay of txid 1 is exact with either map. (Where a write did happen
    before the failure -- a driver killed between the write and the record -- only
    OpaqueMap is exact: tests/transactional/engine/test_redis_engine.py, the SIGKILL tests.)"""
    tid = uid("opaque")
    data = {0: list(range(40))}
    spout = OpaqueMemoryTransactionalSpout(data, Fields("n"), 10, deliver=_short_first_replay)
    b = TransactionalTopologyBuilder(tid, "spout", spout, 1)
    b.set_bolt("count", CountPerValue(opaque), 2).fields_grouping("spout", Fields("n"))
    r = run_topology(b, config(max_spout_pending=3))
    counts = r.map_state("per-value").multi_get(list(range(40)))
    assert len(r.failures) >= 1
    assert counts == [1] * 40, "every value counted exactly once"


# -- bad input, caught before anything is committed ------------------------------------------------

class EmitsWithoutAttempt(BaseBatchBolt):
    def prepare(self, conf, context, collector, attempt):
        self.collector = collector

    def execute(self, tuple):
        self.collector.emit(Values(tuple[1]))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n"))


def test_a_bolt_emitting_without_the_attempt_stops_the_run_at_once(spark_context):
    tid = uid("noattempt")
    b = TransactionalTopologyBuilder(tid, "spout", MemoryTransactionalSpout({0: [1, 2]}, Fields("n"), 1), 1)
    b.set_bolt("bad", EmitsWithoutAttempt(), 1).shuffle_grouping("spout")
    b.set_bolt("sink", ListSink(tid), 1).global_grouping("bad")
    with pytest.raises(TopologyFailedError) as e:
        run_topology(b, config(max_attempts=5))
    assert "'bad' task 0 emitted a tuple without its TransactionAttempt as the first field" in str(e.value)
    assert "emit Values(self.id, ...)" in str(e.value)
    assert e.value.txid in (1, 2) and tid not in SINKS  # txids 1 and 2 run at once; either may report


def test_resume_in_the_same_process_continues_at_the_next_txid(spark_context):
    tid = uid("resume")
    b = global_count_topology(tid)
    r1 = run_topology(b, config(), max_batches=2)
    assert (r1.first_txid, r1.last_txid) == (1, 2)
    r2 = run_topology(b, config())
    assert (r2.first_txid, r2.last_txid) == (3, 3)
    assert r2.map_state("global-count").get("count") == 18


# -- groupings ----------------------------------------------------------------------------------------

class Router(BaseBatchBolt):
    """Emits each value on 'default' and on a direct stream to task value % 3."""

    def prepare(self, conf, context, collector, attempt):
        self.collector, self.attempt = collector, attempt

    def execute(self, tuple):
        self.collector.emit(Values(self.attempt, f"w{tuple[1] % 5}"))
        self.collector.emit(Values(self.attempt, tuple[1]), stream="side")
        self.collector.emit_direct(tuple[1] % 3, Values(self.attempt, tuple[1]), stream="direct")

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "word"))
        declarer.declare_stream("side", Fields("id", "n"))
        declarer.declare(Fields("id", "n"), stream="direct", direct=True)


class TaskRecorder(BaseBatchBolt, Committer):
    def __init__(self, name: str) -> None:
        self.name = name

    def prepare(self, conf, context, collector, attempt):
        self.task, self.rows = context.task_index, []

    def execute(self, tuple):
        self.rows.append((tuple.source_stream, tuple[1], self.task))

    def finish_batch(self):
        from transactional.testing import SINKS  # the driver's, not a pickled copy

        SINKS.setdefault(self.name, []).extend(self.rows)


def test_groupings_fields_all_direct_local_and_named_streams(spark_context, tmp_path):
    tid = uid("groupings")
    b = TransactionalTopologyBuilder(tid, "spout", MemoryTransactionalSpout({0: list(range(30)), 1: list(range(30, 60))}, Fields("n"), 10), 2)
    b.set_bolt("route", Router(), 3).shuffle_grouping("spout")
    b.set_bolt("by-word", TaskRecorder(tid + "f"), 3).fields_grouping("route", Fields("word"))
    b.set_bolt("all", TaskRecorder(tid + "a"), 2).all_grouping("route", "side")
    b.set_bolt("local", PhaseBolt(str(tmp_path / "local"), emit=False), 2).local_or_shuffle_grouping("spout")
    b.set_bolt("direct", TaskRecorder(tid + "d"), 3).direct_grouping("route", "direct")
    run_topology(b, config(max_spout_pending=2))
    fields = SINKS[tid + "f"]
    assert len(fields) == 60
    assert all(len({t for _, w2, t in fields if w2 == w}) == 1 for w in {w for _, w, _ in fields}), \
        "one task per word"
    assert len({t for _, _, t in fields}) > 1, "words spread over several tasks"
    side = SINKS[tid + "a"]
    assert sorted(side) == sorted(("side", n, t) for n in range(60) for t in range(2))
    assert sorted(SINKS[tid + "d"]) == sorted(("direct", n, n % 3) for n in range(60))
    local = EventLog(str(tmp_path / "local")).events("finish")
    assert sorted((e["txid"], e["task"], e["n"]) for e in local) == [(t, k, 10) for t in (1, 2, 3) for k in (0, 1)], \
        "local_or_shuffle: each task reads its own emitter task's 10 tuples"


# -- several spouts in one topology (one txid, each spout's metadata under it) ------------------------

class AuditBatch(BaseBatchBolt):
    """Logs, per attempt, the values each spout delivered; fails the first attempt of txid 2."""

    def __init__(self, log_path: str) -> None:
        self.log = EventLog(log_path)

    def prepare(self, conf, context, collector, attempt):
        self.attempt, self.task, self.seen = attempt, context.task_index, {}

    def execute(self, tuple):
        self.seen.setdefault(tuple.source_component, []).append(tuple[1])

    def finish_batch(self):
        from transactional import FailedException

        self.log.record("batch", txid=self.attempt.txid, attempt=self.attempt.attempt_id, task=self.task,
                        seen={k: sorted(v) for k, v in self.seen.items()})
        if self.attempt == (2, 1):
            raise FailedException("txid 2, attempt 1: the batch fails once")

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id"))


def _short_b_on_first_try(tx, partition, start, end):
    """Spout b delivers 2 fewer in the first attempt of txid 2 (its broker was down)."""
    return start + 1 if tx == (2, 1) else end


def two_spouts(tid: str, log_path: str, plan: FaultPlan | None = None) -> TransactionalTopologyBuilder:
    """a: transactional, 2 partitions of 15 (5 a batch: 3 txids); b: opaque, 1 partition
    of 25 (4 a batch, less once: 7 txids). Every value counted once into "per-value"."""
    a = MemoryTransactionalSpout({0: list(range(15)), 1: list(range(15, 30))}, Fields("n"), 5)
    b = OpaqueMemoryTransactionalSpout({0: list(range(100, 125))}, Fields("n"), 4, deliver=_short_b_on_first_try)
    builder = TransactionalTopologyBuilder(tid, "a", a, 2)
    builder.set_spout("b", b, 1)
    count = CountPerValue(True, fail_first=False)   # txid 2's failure is the only one planned
    builder.set_bolt("count", with_faults(count, plan) if plan else count, 2) \
        .fields_grouping("a", Fields("n")).fields_grouping("b", Fields("n"))
    builder.set_bolt("audit", AuditBatch(log_path), 1).global_grouping("a").global_grouping("b")
    return builder


def test_several_spouts_share_each_txid_and_count_exactly(spark_context, tmp_path):
    log = str(tmp_path / "events")
    r = run_topology(two_spouts(uid("spouts"), log), config(max_spout_pending=3))
    counts = r.map_state("per-value").multi_get([*range(30), *range(100, 125)])
    assert counts == [1] * 55, "every value of both spouts counted exactly once"
    assert r.tuples == 55 and r.emitted["a"] == 30 and r.emitted["b"] == 25
    batches = {(e["txid"], e["attempt"]): e["seen"] for e in EventLog(log).events("batch")}
    # txid 1 holds a batch of each spout; b goes on alone once a has nothing more
    assert batches[(1, 1)] == {"a": [0, 1, 2, 3, 4, 15, 16, 17, 18, 19], "b": [100, 101, 102, 103]}
    # txid 2 failed once: a (transactional) replays the same batch; b (opaque) was planned
    # again and delivers from where its txid 1 ended
    assert sorted(a for t, a in batches if t == 2) == [1, 2], batches
    assert batches[(2, 1)]["a"] == batches[(2, 2)]["a"] == [5, 6, 7, 8, 9, 20, 21, 22, 23, 24]
    assert batches[(2, 1)]["b"] == [104] and batches[(2, 2)]["b"] == [104, 105, 106, 107]
    assert [f.split(":")[0] for f in r.failures] == ["txid 2 (attempt 1), component 'audit', task 0"]
    assert "a" not in batches[(r.last_txid, 1)] and r.last_txid == 7


def test_several_spouts_are_exact_under_injected_failures(spark_context, tmp_path):
    plan = FaultPlan(seed=4, rate=0.2, max_attempt=2)
    r = run_topology(two_spouts(uid("spoutsf"), str(tmp_path / "events"), plan),
                     config(max_spout_pending=4, max_attempts=5))
    assert r.map_state("per-value").multi_get([*range(30), *range(100, 125)]) == [1] * 55
    assert any("injected failure" in f for f in r.failures)


def test_several_spouts_resume_where_each_left_off(spark_context, tmp_path):
    tid = uid("spoutsr")
    b = two_spouts(tid, str(tmp_path / "events"))
    r1 = run_topology(b, config(), max_batches=4)
    assert r1.last_txid == 4
    r2 = run_topology(b, config())
    assert r2.first_txid == 5
    assert r2.map_state("per-value").multi_get([*range(30), *range(100, 125)]) == [1] * 55


class ImportsMissing(BaseBatchBolt):
    def prepare(self, conf, context, collector, attempt):
        import trident_no_such_module  # noqa: F401

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id"))


def test_code_the_executors_cannot_import_stops_at_once_naming_the_module_and_the_fix(spark_context):
    b = TransactionalTopologyBuilder(uid("noimport"), "spout", MemoryTransactionalSpout({0: [1, 2]}, Fields("n"), 1), 1)
    b.set_bolt("needs", ImportsMissing(), 1).shuffle_grouping("spout")
    with pytest.raises(TopologyFailedError) as e:
        run_topology(b, config(max_attempts=5))
    msg = str(e.value)
    assert "ModuleNotFoundError: No module named 'trident_no_such_module'" in msg, msg
    assert "install 'trident_no_such_module' there, or ship it" in msg and "--py-files" in msg, msg
    assert "failed 5 times" not in msg and e.value.component == "needs"
