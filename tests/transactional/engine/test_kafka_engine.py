"""End to end: Kafka topics counted exactly once by the engine, under failures.

A 4-partition topic holds a known corpus of sentences; the topology splits them and
counts words into a map state. Faults: ``FailedException`` at seeded-random tasks and
txids (both spouts), a partition made unfetchable for a few batches (opaque), a
partition added to the topic mid-run, and SIGKILL of the driver at random moments with
ZooKeeper coordination and Redis state (subprocesses). What each emitter read is
recorded through the spout's ``fetch_fault`` seam (an ``EventLog`` shared by executor
processes), so replays are checked range by range, not only through the counts.

This file is also a topology file: ``trident run tests/transactional/engine/test_kafka_engine.py`` runs
``build_topology()`` configured by environment (the SIGKILL test drives it that way).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from spouts.kafka import KafkaTransactionalSpout, OpaqueKafkaTransactionalSpout
from spouts.kafka.emitter import KafkaEmitter
from state.map import TransactionalMap
from state.redis import RedisMapBacking
from transactional import (
    BaseBatchBolt,
    BaseTransactionalBolt,
    Committer,
    Fields,
    TopologyConfig,
    TransactionalTopologyBuilder,
    Values,
    run_topology,
)
from transactional.testing import EventLog, FaultPlan, with_faults
from transactional.testing._process import wait_until

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
WORDS = ["storm", "spark", "kafka", "bolt", "spout", "tuple", "batch", "commit", "offset", "zk",
         "redis", "exactly", "once", "the", "a"]


def make_corpus(seed: int, partitions: int = 4, per_partition: int = 60, words: int = 5) -> dict[int, list[str]]:
    """partition -> sentences of ``words`` words each."""
    rng = random.Random(seed)
    return {p: [" ".join(rng.choices(WORDS, k=words)) for _ in range(per_partition)] for p in range(partitions)}


def exact(corpus: dict[int, list[str]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for sentences in corpus.values():
        for s in sentences:
            for w in s.split():
                out[w] = out.get(w, 0) + 1
    return out


# -- the topology -------------------------------------------------------------------------------

class SplitCount(BaseBatchBolt):
    """Splits its share of the batch's sentences and counts the words: ("id", "word", "n")."""

    def prepare(self, conf, context, collector, id):
        self.collector, self.id, self.counts = collector, id, {}

    def execute(self, tuple):                         # ("tx", "sentence")
        for w in tuple[1].split():
            self.counts[w] = self.counts.get(w, 0) + 1

    def finish_batch(self):
        for w, n in self.counts.items():
            self.collector.emit(Values(self.id, w, n))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "word", "n"))


class Count(BaseTransactionalBolt, Committer):
    """Adds the batch's counts to the map state "counts"."""

    def __init__(self, opaque: bool = False) -> None:
        self.opaque = opaque

    def prepare(self, conf, context, collector, attempt):
        self.counts = context.map_state("counts", opaque=self.opaque)
        self.batch = {}

    def execute(self, tuple):                         # ("id", "word", "n")
        self.batch[tuple["word"]] = self.batch.get(tuple["word"], 0) + tuple["n"]

    def finish_batch(self):
        if self.batch:
            self.counts.multi_combine(list(self.batch), list(self.batch.values()), "sum")

    def declare_output_fields(self, declarer):
        pass


class Recorder:
    """A ``fetch_fault`` that records every read (txid, attempt, partition, start, end) in
    an ``EventLog`` and makes ``partition`` unfetchable during ``txids`` (all attempts),
    and any partition during the first attempt of ``first_attempt_txids``."""

    def __init__(self, path: str, partition: int | None = None, txids: frozenset[int] = frozenset(),
                 first_attempt_txids: frozenset[int] = frozenset()) -> None:
        self.log = EventLog(path)
        self.partition, self.txids, self.first = partition, txids, first_attempt_txids

    def __call__(self, tx, partition, start, end):
        down = (partition == self.partition and tx.txid in self.txids) or \
            (tx.txid in self.first and tx.attempt_id == 1)
        self.log.record("read", txid=tx.txid, attempt=tx.attempt_id, partition=partition,
                        start=start, end=end, down=down)
        return start if down else None

    def reads(self) -> list[dict]:
        return self.log.events("read")


def split_batch(batch):
    """The columnar split: sentences -> words, Arrow kernels only."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pa.RecordBatch.from_arrays([pc.list_flatten(pc.utf8_split_whitespace(batch.column(0)))], names=["word"])


def build_topology(topology_id: str | None = None, bootstrap: str | None = None, topic: str | None = None, *,
                   opaque: bool = False, max_records: int | None = None, recorder: Recorder | None = None,
                   plans: tuple[FaultPlan | None, FaultPlan | None] = (None, None), columnar: bool | None = None,
                   **spout_options):
    """spout (Kafka, 2 tasks) -> split (3, shuffle) -> count (committer, 2, fields on word).

    ``columnar``: the same count as a Trident topology whose stages take the spout's
    batches as Arrow columns: spout (2 tasks) -> ``map_batches(split_batch)`` ->
    ``group_by(word).persistent_aggregate(Count())`` into the map "counts" (``plans``
    do not apply: fail reads with the ``recorder``).

    Without arguments (``trident run``), configured by the environment:
    TRIDENT_TEST_TOPOLOGY, KAFKA_TEST_BOOTSTRAP, KAFKA_TEST_TOPIC, KAFKA_TEST_MAX_RECORDS,
    KAFKA_TEST_COLUMNAR=1.
    """
    topology_id = topology_id or os.environ["TRIDENT_TEST_TOPOLOGY"]
    bootstrap = bootstrap or os.environ["KAFKA_TEST_BOOTSTRAP"]
    topic = topic or os.environ["KAFKA_TEST_TOPIC"]
    max_records = max_records or int(os.environ.get("KAFKA_TEST_MAX_RECORDS", "15"))
    if columnar is None:
        columnar = os.environ.get("KAFKA_TEST_COLUMNAR") == "1"
    cls = OpaqueKafkaTransactionalSpout if opaque else KafkaTransactionalSpout
    spout = cls(bootstrap, topic, max_records_per_partition=max_records, field_names=("sentence",),
                fetch_fault=recorder, fetch_timeout_secs=5, **spout_options)
    if columnar:
        from trident import Count as TridentCount
        from trident import TridentTopology
        from trident import state as trident_state

        t = TridentTopology(topology_id)
        flavour = trident_state.opaque if opaque else trident_state.transactional
        t.new_stream("spout", spout).parallelism_hint(2).map_batches(split_batch, Fields("word")) \
            .group_by(Fields("word")).persistent_aggregate(flavour("counts"), TridentCount(), Fields("n")) \
            .parallelism_hint(2)
        return t.build()
    split, count = SplitCount(), Count(opaque)
    if plans[0] is not None:
        split = with_faults(split, plans[0])
    if plans[1] is not None:
        count = with_faults(count, plans[1])
    b = TransactionalTopologyBuilder(topology_id, "spout", spout, 2)
    b.set_bolt("split", split, 3).shuffle_grouping("spout")
    b.set_bolt("count", count, 2).fields_grouping("split", Fields("word"))
    return b


def config(**kw) -> TopologyConfig:
    kw.setdefault("max_spout_pending", 3)
    kw.setdefault("progress", False)
    kw.setdefault("max_attempts", 6)
    return TopologyConfig(spark_master="local[2]", **kw)


def counts_of(result, opaque: bool = False) -> dict[str, int]:
    m = result.map_state("counts", opaque=opaque)
    return {w: n for w, n in zip(WORDS, m.multi_get(WORDS), strict=True) if n is not None}


def new_id(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def ranges_by_txid(reads: list[dict]) -> dict[int, dict[int, set]]:
    """txid -> attempt -> {(partition, start, end)} read."""
    out: dict[int, dict[int, set]] = {}
    for r in reads:
        out.setdefault(r["txid"], {}).setdefault(r["attempt"], set()).add((r["partition"], r["start"], r["end"]))
    return out


def assert_tiles(ranges: list[tuple[int, int]], end: int) -> None:
    """The ranges cover [0, end) exactly once, in order."""
    pos = 0
    for s, e in sorted(ranges):
        assert s == pos, f"gap or overlap at offset {pos}: next range starts at {s}"
        pos = e
    assert pos == end


@pytest.fixture
def corpus_topic(kafka_broker, kafka_topic):
    corpus = make_corpus(7)
    kafka_broker.create_topic(kafka_topic, 4)
    kafka_broker.produce(kafka_topic, corpus)
    return kafka_topic, corpus


# -- in-process runs ------------------------------------------------------------------------------

@pytest.mark.parametrize("opaque", [False, True], ids=["transactional", "opaque"])
def test_exact_counts_with_failures_at_random_txids(spark_context, kafka_broker, corpus_topic, tmp_path, opaque):
    topic, corpus = corpus_topic
    rec = Recorder(str(tmp_path / "reads.jsonl"))
    plans = (FaultPlan(seed=11, rate=0.15, where="execute"), FaultPlan(seed=12, rate=0.15))
    b = build_topology(new_id("kafka-faults"), kafka_broker.bootstrap, topic, opaque=opaque,
                       recorder=rec, plans=plans)
    result = run_topology(b, config(), spark_context=spark_context)
    assert result.failures, "the fault plans injected no failure"
    assert counts_of(result, opaque) == exact(corpus)
    by_txid = ranges_by_txid(rec.reads())
    assert result.batches_committed == len(by_txid)
    replayed = [t for t, attempts in by_txid.items() if len(attempts) > 1]
    assert replayed
    if not opaque:
        # every attempt of a txid read exactly the same offsets of each partition (an
        # attempt cancelled early may not have read every partition)
        for t in replayed:
            per_partition: dict[int, set] = {}
            for rs in by_txid[t].values():
                for q, s, e in rs:
                    per_partition.setdefault(q, set()).add((s, e))
            assert all(len(v) == 1 for v in per_partition.values()), f"txid {t} read {by_txid[t]}"
    # the last attempt of each txid (the committed one) tiles every partition
    last = [max(a.items())[1] for a in by_txid.values()]
    for p in range(4):
        assert_tiles([(s, e) for rs in last for (q, s, e) in rs if q == p], len(corpus[p]))


@pytest.mark.parametrize("opaque", [False, True], ids=["transactional", "opaque"])
def test_columnar_exact_counts_with_failed_reads_at_random_txids(spark_context, kafka_broker, corpus_topic,
                                                                 tmp_path, opaque):
    """The columnar path (Trident stages taking the spout's Arrow batches): reads fail in
    the first attempt of seeded-random txids; a transactional replay reads the stored
    ranges again, an opaque batch goes on with what it read; the counts are exact."""
    topic, corpus = corpus_topic
    failing = frozenset(random.Random(5).sample(range(1, 5), 2))
    rec = Recorder(str(tmp_path / "reads.jsonl"), first_attempt_txids=failing)
    t = build_topology(new_id("kafka-columnar"), kafka_broker.bootstrap, topic, opaque=opaque, recorder=rec,
                       columnar=True)
    result = run_topology(t, config(), spark_context=spark_context)
    assert counts_of(result, opaque) == exact(corpus)
    reads = rec.reads()
    assert any(r["down"] for r in reads)
    if opaque:   # the reads that were down delivered nothing; the later batches caught up
        return
    by_txid = ranges_by_txid(reads)
    last = [max(a.items())[1] for a in by_txid.values()]
    for p in range(4):
        assert_tiles([(s, e) for rs in last for (q, s, e) in rs if q == p], len(corpus[p]))
    if not opaque:
        assert result.failures
        for txid in failing:
            # each partition read the same offsets in every attempt (the failed one may have
            # been cancelled before it read every partition -- or, cancelled for an earlier
            # txid's failure before its job was submitted, not have run at all: a cancel also
            # cancels the jobs its group submits later)
            per_partition: dict[int, set] = {}
            for rs in by_txid[txid].values():
                for q, s, e in rs:
                    per_partition.setdefault(q, set()).add((s, e))
            assert all(len(v) == 1 for v in per_partition.values()), by_txid[txid]
        assert any(len(by_txid[txid]) > 1 for txid in failing), by_txid      # a failed read was replayed


def test_transactional_replay_of_a_failed_txid_reads_the_stored_offsets(spark_context, kafka_broker,
                                                                         corpus_topic, tmp_path):
    """txid 3 fails in the commit phase on its first attempt; its replay and the replays
    of the later txids in flight read the offsets stored for them, to the record."""
    topic, corpus = corpus_topic
    rec = Recorder(str(tmp_path / "reads.jsonl"))
    plan = FaultPlan(seed=1, rate=1.0, max_attempt=1, txids=frozenset({3}))
    b = build_topology(new_id("kafka-replay"), kafka_broker.bootstrap, topic, recorder=rec, plans=(None, plan))
    result = run_topology(b, config(max_spout_pending=3), spark_context=spark_context)
    assert result.failures and all("txid 3" in f for f in result.failures)
    by_txid = ranges_by_txid(rec.reads())
    assert set(by_txid[3]) == {1, 2}
    assert by_txid[3][1] == by_txid[3][2]
    planned = {(p, 15 * 2, 15 * 3) for p in range(4)}   # txid 3 = the third 15 records of each partition
    assert by_txid[3][1] == planned
    assert counts_of(result) == exact(corpus)


@pytest.mark.parametrize("columnar", [False, True], ids=["rows", "columns"])
def test_opaque_partition_unfetchable_for_a_few_batches_catches_up_exactly(spark_context, kafka_broker,
                                                                           corpus_topic, tmp_path, columnar):
    topic, corpus = corpus_topic
    rec = Recorder(str(tmp_path / "reads.jsonl"), partition=1, txids=frozenset({2, 3, 4}))
    b = build_topology(new_id("kafka-down"), kafka_broker.bootstrap, topic, opaque=True, recorder=rec,
                       columnar=columnar)
    result = run_topology(b, config(), spark_context=spark_context)
    assert counts_of(result, opaque=True) == exact(corpus)
    reads = rec.reads()
    assert any(r["down"] for r in reads)
    # partition 1 delivered nothing in txids 2..4 and was read to its end afterwards
    by_txid = ranges_by_txid(reads)
    last = {t: max(a.items())[1] for t, a in by_txid.items()}
    p1 = [(s, e) for t, rs in last.items() for (q, s, e) in rs if q == 1 and t not in (2, 3, 4)]
    assert_tiles(p1, len(corpus[1]))
    assert max(t for t, rs in last.items() if any(q == 1 for q, _, _ in rs)) > \
        max(t for t, rs in last.items() if any(q == 0 for q, _, _ in rs)), "partition 1 did not lag"


@pytest.mark.parametrize("columnar", [False, True], ids=["rows", "columns"])
def test_partition_added_mid_run_is_read_from_its_start(spark_context, kafka_broker, kafka_topic, tmp_path,
                                                        columnar):
    first = make_corpus(3, partitions=2, per_partition=30)
    kafka_broker.create_topic(kafka_topic, 2)
    kafka_broker.produce(kafka_topic, first)
    added = make_corpus(4, partitions=4, per_partition=12)
    rec = Recorder(str(tmp_path / "reads.jsonl"))
    # Tansu has no CreatePartitions: the helper recreates the topic, which crashes
    # librdkafka consumers that fetched from it, so emitters close theirs after each read
    b = build_topology(new_id("kafka-grow"), kafka_broker.bootstrap, kafka_topic, max_records=5,
                       recorder=rec, reuse_consumer=False, columnar=columnar)
    grown_at: list[int] = []

    def on_commit(txid, result):
        if txid == 2:   # mid-run: nothing is in flight with max_spout_pending=1
            kafka_broker.add_partitions(kafka_topic, 4)
            kafka_broker.produce(kafka_topic, {2: added[2], 3: added[3]})
            grown_at.append(txid)

    result = run_topology(b, config(max_spout_pending=1), spark_context=spark_context, on_commit=on_commit)
    assert grown_at == [2]
    want = exact(first)
    for w, n in exact({2: added[2], 3: added[3]}).items():
        want[w] = want.get(w, 0) + n
    assert counts_of(result) == want
    reads = rec.reads()
    for p in (2, 3):
        mine = sorted((r["start"], r["end"]) for r in reads if r["partition"] == p)
        assert mine[0][0] == 0 and min(r["txid"] for r in reads if r["partition"] == p) > 2
        assert_tiles(mine, len(added[p]))


class AssignLogEmitter(KafkaEmitter):
    """Records each consumer assignment (its partitions) in the spout's ``assign_log``."""

    def _assign(self, c, partitions):
        EventLog(self.spout.assign_log).record("assign", partitions=sorted(tp.partition for tp in partitions))
        super()._assign(c, partitions)


class AssignLogSpout(KafkaTransactionalSpout):
    def __init__(self, *args, assign_log: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.assign_log = assign_log

    def get_emitter(self, conf, context):
        return AssignLogEmitter(self)


def test_a_spark_task_carrying_both_emitter_tasks_reads_the_batch_in_one_assignment(
        spark_context, kafka_broker, corpus_topic, tmp_path, monkeypatch):
    """Every batch's 2 logical emitter tasks run in one Spark task (``task_groups``): the
    4 partitions of each batch are assigned once, together, and the counts are exact."""
    from transactional.engine import spark as spark_executor

    monkeypatch.setattr(spark_executor, "spark_tasks", lambda parallelism, cores, in_flight: 1)
    topic, corpus = corpus_topic
    rec = Recorder(str(tmp_path / "reads.jsonl"))
    assigns = EventLog(str(tmp_path / "assigns.jsonl"))
    spout = AssignLogSpout(kafka_broker.bootstrap, topic, max_records_per_partition=15, field_names=("sentence",),
                           fetch_fault=rec, assign_log=assigns.path)
    b = TransactionalTopologyBuilder(new_id("kafka-one-fetch"), "spout", spout, 2)
    b.set_bolt("split", SplitCount(), 3).shuffle_grouping("spout")
    b.set_bolt("count", Count(), 2).fields_grouping("split", Fields("word"))
    result = run_topology(b, config(), spark_context=spark_context)
    assert not result.failures and result.batches_committed == 4
    assert counts_of(result) == exact(corpus)
    assert result.executed["split"] == 4 * 60
    by_txid = ranges_by_txid(rec.reads())
    assert sorted(by_txid) == [1, 2, 3, 4] and all(len(a) == 1 for a in by_txid.values())
    assert [e["partitions"] for e in assigns.events("assign")] == [[0, 1, 2, 3]] * 4


# -- SIGKILL of the driver at random moments (subprocesses, ZooKeeper + Redis) ---------------------

CRASH_POINTS = ["process.after_meta", "commit.before", "commit.after_task", "commit.before_record",
                "commit.after_record"]


def start_driver(env_extra: dict, state: str, coordination: str, executor: str = "spark") -> subprocess.Popen:
    env = {**os.environ, **env_extra,
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    if "TRIDENT_CRASH_AT" not in env_extra:
        env.pop("TRIDENT_CRASH_AT", None)
    return subprocess.Popen(
        [sys.executable, "-m", "transactional.ops.cli", "run", __file__, "--master", "local[2]",
         "--set", f"executor={executor}",
         "--state", state, "--coordination", coordination, "--max-spout-pending", "3",
         "--lock-wait", "60", "--idle-timeout", "0", "-q"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)


def _kill_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def committed_txid(coordination: str, tid: str) -> int:
    from state.base import open_transactional_state

    s = open_transactional_state(coordination, tid)
    try:
        return (s.get("committed") or {}).get("txid", 0)
    finally:
        s.close()


@pytest.mark.slow
@pytest.mark.parametrize("columnar", [False, True], ids=["rows", "columns"])
def test_driver_sigkilled_at_random_moments_resumes_with_exact_counts(kafka_broker, kafka_topic, redis_url, zk_url,
                                                                      columnar):
    """Six SIGKILLs of the driver: three at a random crash point of a random upcoming txid
    (exact moments inside the commit protocol), three from outside at a random delay after
    the run is seen committing (tests/transactional/engine/test_zookeeper_engine.py kills at every crash point). After each, a restart resumes from ZooKeeper; at the end
    the counts in Redis are exact and the committed txid never went back."""
    corpus = make_corpus(21, per_partition=400)
    kafka_broker.create_topic(kafka_topic, 4)
    kafka_broker.produce(kafka_topic, corpus)
    tid = new_id("kafka-sigkill")
    zk = zk_url + "?session_timeout=1"
    env = {"TRIDENT_TEST_TOPOLOGY": tid, "KAFKA_TEST_BOOTSTRAP": kafka_broker.bootstrap,
           # 40 batches; 80 on the columnar path, which is fast enough to finish 40 before the kills
           "KAFKA_TEST_TOPIC": kafka_topic, "KAFKA_TEST_MAX_RECORDS": "5" if columnar else "10",
           "KAFKA_TEST_COLUMNAR": "1" if columnar else "0"}
    batches = 400 // int(env["KAFKA_TEST_MAX_RECORDS"])
    rng = random.Random(2024)
    last = 0
    for i in range(6):
        if i % 2 == 0:
            point = rng.choice(CRASH_POINTS)
            at = f"{point}:txid={last + rng.randint(1, 2)}"
            # a crash point is inside the driver's commit protocol: its emitters and bolts
            # run in-process there (no JVM to start); the kills from outside hit a Spark driver
            p = start_driver({**env, "TRIDENT_CRASH_AT": at}, redis_url, zk, executor="in-process")
            out, err = p.communicate(timeout=240)
        else:
            p = start_driver(env, redis_url, zk)
            before = last
            wait_until(lambda p=p, before=before: p.poll() is not None or committed_txid(zk, tid) > before, 120,
                       what="the driver to commit a batch")
            time.sleep(rng.uniform(0.0, 1.0))   # the random moment of the kill
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate(timeout=60)
        _kill_group(p)   # the driver's Spark JVM, if it outlived the driver
        assert p.returncode == -9, f"kill {i}: driver ended with {p.returncode}\n{err[-3000:]}"
        now = committed_txid(zk, tid)
        assert now >= last, f"kill {i}: committed txid went back from {last} to {now}"
        last = now
    assert last < batches, "the kills came too late to interrupt the run"
    p = start_driver(env, redis_url, zk)
    out, err = p.communicate(timeout=240)
    assert p.returncode == 0, err[-3000:]
    assert committed_txid(zk, tid) == batches
    counts = TransactionalMap(RedisMapBacking.from_url(redis_url, f"{tid}:counts"))
    got = {w: n for w, n in zip(WORDS, counts.multi_get(WORDS), strict=True) if n is not None}
    assert got == exact(corpus)
