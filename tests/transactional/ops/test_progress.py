"""``Progress``: the progress lines of a run, from the coordinator's transitions, on a
fake clock (no Spark, no sleeping)."""

from __future__ import annotations

from transactional.engine.events import Transition
from transactional.ops.progress import Progress


class Clock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def progress(clock: Clock, interval: float = 2.0) -> tuple[Progress, list[str]]:
    lines: list[str] = []
    return Progress("words", ["sentences", "queries"], interval_secs=interval, clock=clock, log=lines.append), lines


def launched(txid: int, attempt: int = 1) -> Transition:
    return Transition("launched", txid, attempt, 0.0)


def committed(txid: int, **emitted: int) -> Transition:
    return Transition("committed", txid, 1, 0.0, {"emitted": emitted, "launched_at": 0.0})


def test_the_first_commit_at_once_then_a_line_at_most_every_interval():
    clock = Clock()
    p, lines = progress(clock)
    for txid in (1, 2, 3):
        p(launched(txid))
    clock.now += 1.0
    p(committed(1, sentences=30, split=90))
    assert lines == ["words: committed txid 1 (1 batch), 2 txids in flight, 0 failed attempts, 30 tuples, "
                     "30 tuples/s"], "the first commit is logged at once"
    clock.now += 1.5
    p(Transition("failed", 2, 1, 0.0, {"failure": None}))
    assert len(lines) == 1, "no line before the interval has passed"
    clock.now += 0.5
    p(launched(2, attempt=2))
    assert lines[-1] == "words: committed txid 1 (1 batch), 2 txids in flight, 1 failed attempt, 30 tuples, 10 tuples/s"
    clock.now += 1.0
    p(committed(2, sentences=30, queries=2))
    assert len(lines) == 2, "the next line waits a full interval"
    clock.now += 1.0
    p(committed(3, sentences=30))
    assert lines[-1] == ("words: committed txid 3 (3 batches), 0 txids in flight, 1 failed attempt, 92 tuples, "
                         "18 tuples/s")


def test_rate_counts_from_the_first_launched_batch_not_from_construction():
    clock = Clock(0.0)
    p, lines = progress(clock, interval=0.0)
    clock.now = 50.0                 # Spark's start-up: 50 s before the first batch
    p(launched(1))
    clock.now = 54.0
    p(committed(1, sentences=400))
    assert lines[-1].endswith("400 tuples, 100 tuples/s")
    assert p.rate() == 100.0


def test_only_the_spouts_tuples_count():
    clock = Clock()
    p, _ = progress(clock)
    p(launched(1))
    p(committed(1, sentences=10, queries=1, split=70, count=7))
    assert p.tuples == 11


def test_final_line_without_a_commit_says_so_and_never_none():
    clock = Clock()
    p, lines = progress(clock)
    p(launched(1))
    p(Transition("failed", 1, 1, 0.0, {}))
    p(Transition("stopped", 0, 0, 0.0, {"reason": "max_batches"}))
    clock.now += 3.0
    p.final()
    assert lines == ["words: no batch committed, 1 failed attempt, 0 tuples in 3.0 s, 0 tuples/s; "
                     "stopped: max_batches"]
    assert "None" not in lines[0]


def test_final_line_names_the_txids_this_run_committed():
    clock = Clock()
    p, lines = progress(clock)
    for txid in (8, 9, 10):          # a resumed run: txids 8..10
        p(launched(txid))
    clock.now += 2.0
    for txid in (8, 9, 10):
        p(committed(txid, sentences=5))
    p(Transition("stopped", 10, 0, 0.0, {"reason": "spout has nothing more"}))
    p.final()
    assert lines[-1] == ("words: committed txids 8..10 (3 batches), 0 failed attempts, 15 tuples in 2.0 s, "
                         "8 tuples/s; stopped: spout has nothing more")
    one, one_lines = progress(Clock())
    one(launched(4))
    one(committed(4, sentences=1))
    one.final()
    assert one_lines[-1].startswith("words: committed txid 4 (1 batch), 0 failed attempts, 1 tuple in ")


def test_a_run_that_never_commits_still_logs_every_interval():
    clock = Clock()
    p, lines = progress(clock, interval=1.0)
    p(launched(1))
    p(launched(2))
    clock.now += 1.0
    p(Transition("processed", 1, 1, 0.0))
    assert lines == ["words: no batch committed yet, 2 txids in flight, 0 failed attempts, 0 tuples, 0 tuples/s"]
    p(Transition("stopped", 0, 0, 0.0, {"reason": "interrupted"}))
    assert p.in_flight == set() and len(lines) == 1, "a stop logs nothing by itself: final() does"


def test_for_topology_reads_the_spouts_of_a_built_topology():
    from spouts import MemoryTransactionalSpout
    from transactional import Fields, TransactionalTopologyBuilder
    from transactional.bolt import BaseBatchBolt

    b = TransactionalTopologyBuilder("t", "a", MemoryTransactionalSpout({0: [("x",)]}, Fields("w"), 1))
    b.set_spout("b", MemoryTransactionalSpout({0: [("y",)]}, Fields("w"), 1))
    b.set_bolt("count", BaseBatchBolt()).shuffle_grouping("a").shuffle_grouping("b")
    p = Progress.for_topology(b.build(), interval_secs=5.0)
    assert p.topology_id == "t" and p.spout_ids == {"a", "b"} and p.interval_secs == 5.0


def test_the_transitions_of_a_real_run_make_the_lines():
    """The engine's coordinator (in-process executor, memory state) as the speaker: what
    Progress reads of its transitions is there."""
    import uuid

    from spouts import MemoryTransactionalSpout
    from transactional import Fields, TopologyConfig, TransactionalTopologyBuilder
    from transactional.bolt import BaseBatchBolt
    from transactional.ops.run import OperatedRun as Engine

    tid = f"progress-{uuid.uuid4().hex[:8]}"
    b = TransactionalTopologyBuilder(tid, "spout", MemoryTransactionalSpout(
        {0: [(w,) for w in "abcdefghi"], 1: [(w,) for w in "jklmnopqr"]}, Fields("word"), 3), 2)
    b.set_bolt("count", BaseBatchBolt(), 2).shuffle_grouping("spout")
    topology = b.build()
    lines: list[str] = []
    p = Progress.for_topology(topology, interval_secs=3600.0, log=lines.append)
    engine = Engine(topology, TopologyConfig(executor="in-process", progress=False))
    engine.listeners.append(p)
    engine.run(None)
    p.final()
    assert lines[0].startswith(f"{tid}: committed txid 1 (1 batch), ")
    assert lines[-1].startswith(f"{tid}: committed txids 1..3 (3 batches), 0 failed attempts, 18 tuples in ")
    assert lines[-1].endswith("; stopped: spout has nothing more")
    assert len(lines) == 2


def test_the_first_commit_is_logged_at_once_even_right_after_a_line_before_it():
    """Slow first jobs: a "no batch committed yet" line comes first; the first commit, a
    moment later, is still logged (a run that then goes idle would never show one)."""
    clock = Clock()
    p, lines = progress(clock)
    for txid in (1, 2, 3):
        p(launched(txid))
    clock.now += 2.5
    p(Transition("processed", 1, 1, 0.0))
    assert lines == ["words: no batch committed yet, 3 txids in flight, 0 failed attempts, 0 tuples, 0 tuples/s"]
    clock.now += 0.1
    p(committed(1, sentences=9))
    assert lines[-1].startswith("words: committed txid 1 (1 batch), 2 txids in flight")
    clock.now += 0.1
    p(committed(2, sentences=9))
    assert len(lines) == 2                       # then the interval holds again
