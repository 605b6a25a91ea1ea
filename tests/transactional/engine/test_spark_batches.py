"""What one small batch costs on Spark (``transactional.engine.spark``, docs/design.md,
"Execution on Spark"): a narrow Trident word count is one Spark job of one stage a batch,
the topology is broadcast once a run, and a batch's job reaches the JVM with few Py4J
calls (``transactional.engine.spark_submit``)."""

from __future__ import annotations

import re
import uuid
from collections import Counter
from typing import Any

import pytest

from spouts import MemoryTransactionalSpout
from transactional import Fields, TopologyConfig, run_topology
from trident import BaseFunction, Count, TridentTopology, state

SENTENCES = ["the cow jumped over the moon", "the man went to the store and bought some candy",
             "four score and seven years ago", "how many apples can you eat", "to be or not to be the person"]
ROWS = SENTENCES * 4
WORDS = Counter(w for s in ROWS for w in s.split())


class Split(BaseFunction):
    def execute(self, tuple, collector):
        for w in tuple[0].split():
            collector.emit((w,))


def word_count(tid: str) -> Any:
    """Two emitter tasks, a split local to them, the counts partially aggregated before the
    commit (on the driver): every processing stage is narrow. 5 batches of 4 sentences."""
    t = TridentTopology(tid)
    spout = MemoryTransactionalSpout({p: [(s,) for s in ROWS[p::2]] for p in range(2)}, Fields("sentence"), 2)
    (t.new_stream("sentences", spout).parallelism_hint(2).each(Fields("sentence"), Split(), Fields("word"))
     .group_by(Fields("word")).persistent_aggregate(state.counters("counts"), Count(), Fields("count")))
    return t.build()


def config() -> TopologyConfig:
    return TopologyConfig(executor="spark", progress=False, max_spout_pending=1, message_timeout_secs=60)


def processing_jobs(sc: Any, tid: str) -> dict[int, list[int]]:
    """txid -> the stage ids of each Spark job that ran ``tid``'s processing phase (from
    Spark's status store, by the jobs' descriptions)."""
    store = sc._jsc.sc().statusStore()
    jobs = store.jobsList(None)
    pattern = re.compile(rf"trident {re.escape(tid)} txid (\d+) attempt \d+ \(processing\)")
    out: dict[int, list[int]] = {}
    for i in range(jobs.size()):
        j = jobs.apply(i)
        m = None if j.description().isEmpty() else pattern.search(str(j.description().get()))
        if m is not None:
            ids = j.stageIds()
            assert int(m.group(1)) not in out, f"txid {m.group(1)} ran more than one processing job"
            out[int(m.group(1))] = [ids.apply(k) for k in range(ids.size())]
    return out


def test_a_narrow_batch_is_one_spark_job_of_one_stage(spark_context: Any) -> None:
    tid = f"narrow-{uuid.uuid4().hex[:8]}"
    r = run_topology(word_count(tid), config())
    assert r.batches_committed == 5 and r.tuples == 20 and not r.failures
    assert dict(zip(WORDS, r.map_state("counts").multi_get(list(WORDS)), strict=True)) == WORDS
    jobs = processing_jobs(spark_context, tid)
    assert sorted(jobs) == [1, 2, 3, 4, 5]
    assert [len(stages) for _, stages in sorted(jobs.items())] == [1, 1, 1, 1, 1]


def test_a_run_broadcasts_its_topology_once_and_makes_one_spout_input_a_batch(
        spark_context: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []
    parallelize, broadcast = spark_context.parallelize, spark_context.broadcast

    def counted_parallelize(data: Any, parts: int | None = None) -> Any:
        if isinstance(data, range):           # not PySpark's own parallelize([]) under it
            made.append(f"parallelize {parts}")
        return parallelize(data, parts)

    def counted_broadcast(value: Any) -> Any:
        made.append(f"broadcast {type(value).__name__}")
        return broadcast(value)
    monkeypatch.setattr(spark_context, "parallelize", counted_parallelize)
    monkeypatch.setattr(spark_context, "broadcast", counted_broadcast)
    r = run_topology(word_count(f"once-{uuid.uuid4().hex[:8]}"), config())
    assert r.batches_committed == 5 and not r.failures
    assert dict(zip(WORDS, r.map_state("counts").multi_get(list(WORDS)), strict=True)) == WORDS
    assert made == ["broadcast Topology"] + ["parallelize 2"] * 5


@pytest.fixture
def py4j_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The commands this thread sends to the JVM over Py4J, from when the fixture is used."""
    import threading

    from py4j import clientserver

    sent: list[str] = []
    me, send = threading.get_ident(), clientserver.JavaClient.send_command

    def counted(self: Any, command: str, *a: Any, **kw: Any) -> Any:
        if threading.get_ident() == me:
            sent.append(command.split("\n")[0])
        return send(self, command, *a, **kw)
    monkeypatch.setattr(clientserver.JavaClient, "send_command", counted)
    return sent


def test_a_job_over_a_remembered_input_is_submitted_with_few_py4j_calls(
        spark_context: Any, py4j_calls: list[str]) -> None:
    from transactional.engine.spark_submit import Submitter

    submit = Submitter(spark_context)
    base = spark_context.parallelize([], 2)
    submit.remember(base)
    shared = spark_context.broadcast({"k": 3})

    def job(part: int, _: Any) -> Any:
        yield (part, shared.value["k"])
    assert submit.collect(base.mapPartitionsWithIndex(job)) == [(0, 3), (1, 3)]   # the broadcasts' list made
    del py4j_calls[:]
    assert submit.collect(base.mapPartitionsWithIndex(job).filter(lambda kv: kv[0] == 1)) == [(1, 3)]
    fast = len(py4j_calls)
    del py4j_calls[:]
    assert base.mapPartitionsWithIndex(job).collect() == [(0, 3), (1, 3)]          # PySpark's own
    # the RDD's barrier flag (2), the broadcast's id when pickled, the function, the RDD, the job,
    # the result's socket (4): 10 here, 27 through PySpark's collect
    assert fast <= 10 and len(py4j_calls) >= 2 * fast
    # what it does not build itself is PySpark's collect
    assert submit.collect(spark_context.union([base.map(lambda x: x), spark_context.parallelize([7], 1)])) == [7]
