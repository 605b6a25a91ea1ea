"""End to end: topologies whose committers keep counts in a real Redis, under failures.

Every run counts words into two maps at once, a ``TransactionalMap`` ("tcounts") and an
``OpaqueMap`` ("ocounts"), through the one committer; the test then compares them with
the exact counts of the data. Faults: injected ``FailedException`` at seeded-random
tasks and txids, SIGKILL of the driver in the middle of a commit (a subprocess, with
ZooKeeper as the durable coordinator), Redis killed and restarted mid-run, Redis down for
good. In-process runs share the session's SparkContext.

This file is also a topology file: ``trident run tests/transactional/engine/test_redis_engine.py`` runs
``build_topology()`` (the SIGKILL tests drive it that way, configured by environment).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from spouts import MemoryTransactionalSpout, OpaqueMemoryTransactionalSpout
from state.map import OpaqueMap, TransactionalMap
from state.redis import RedisMapBacking
from transactional import (
    BaseBasicBolt,
    BaseBatchBolt,
    BaseTransactionalBolt,
    Committer,
    FailedException,
    Fields,
    TopologyConfig,
    TransactionalTopologyBuilder,
    Values,
    run_topology,
)
from transactional.exceptions import ConfigError, TopologyFailedError
from transactional.testing import FaultPlan, with_faults
from transactional.testing._process import wait_until

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
WORDS = ["cat", "dog", "cow", "moon", "apple", "storm", "spark", "redis", "zk", "lamb"]


def make_data(seed: int, partitions: int = 3, per_partition: int = 20) -> dict[int, list[str]]:
    rng = random.Random(seed)
    return {p: [rng.choice(WORDS) for _ in range(per_partition)] for p in range(partitions)}


def exact(data: dict[int, list[str]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for rows in data.values():
        for w in rows:
            out[w] = out.get(w, 0) + 1
    return out


# -- the topology ------------------------------------------------------------------------------

class PartialCount(BaseBatchBolt):
    """Per-task word counts of the batch: ("id", "word", "n")."""

    def prepare(self, conf, context, collector, id):
        self.collector, self.id, self.counts = collector, id, {}

    def execute(self, tuple):
        w = tuple["word"]
        self.counts[w] = self.counts.get(w, 0) + 1

    def finish_batch(self):
        for w, n in self.counts.items():
            self.collector.emit(Values(self.id, w, n))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "word", "n"))


class CountBoth(BaseTransactionalBolt, Committer):
    """Adds the batch's counts to a TransactionalMap and an OpaqueMap; emits the new
    opaque counts downstream (so a bolt after the committer can fail after the writes)."""

    def prepare(self, conf, context, collector, attempt):
        self.collector, self.attempt, self.batch = collector, attempt, {}
        self.t = context.map_state("tcounts")
        self.o = context.map_state("ocounts", opaque=True)

    def execute(self, tuple):
        self.batch[tuple["word"]] = self.batch.get(tuple["word"], 0) + tuple["n"]

    def finish_batch(self):
        if not self.batch:
            return
        keys, vals = list(self.batch), list(self.batch.values())
        self.t.multi_combine(keys, vals, "sum")
        for w, n in zip(keys, self.o.multi_combine(keys, vals, "sum"), strict=True):
            self.collector.emit(Values(self.attempt, w, n))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "word", "count"))


class After(BaseBasicBolt):
    """Runs in the commit phase after the committer wrote; fails attempt ``fail_at``
    (a (txid, attempt_id) pair) to leave that txid's writes in Redis unrecorded."""

    def __init__(self, fail_at: tuple[int, int] | None = None) -> None:
        self.fail_at = fail_at

    def execute(self, tuple, collector):
        tx = tuple[0]
        if self.fail_at == (tx.txid, tx.attempt_id):
            raise FailedException(f"after the commit's writes of txid {tx.txid}")

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id"))


class ShortReplaySpout(OpaqueMemoryTransactionalSpout):
    """Opaque: the replay of txid ``short_txid`` (attempt 2; default 2, or
    ``TRIDENT_TEST_SHORT_TXID``) delivers one word per partition instead of ``take``; the
    rest comes in later batches."""

    def __init__(self, data, take, short_txid: int | None = None):
        super().__init__(data, Fields("word"), take, deliver=self.available)
        self.short_txid = short_txid or int(os.environ.get("TRIDENT_TEST_SHORT_TXID", "2"))

    def available(self, tx, partition, start, end):
        return start + 1 if (tx.txid, tx.attempt_id) == (self.short_txid, 2) else end


def build_topology(topology_id: str | None = None, data=None, *, take: int = 4, opaque: bool = False,
                   plans: tuple[FaultPlan | None, FaultPlan | None] = (None, None),
                   after: After | None = None, spout=None):
    """spout (3) -> partial (3, fields) -> counts (committer, 2, fields) -> after (2).

    ``plans``: faults for the processing phase (partial) and the commit phase (counts,
    after); a failure of committer task 1 or of ``after`` leaves writes of its txid behind.
    """
    topology_id = topology_id or os.environ["TRIDENT_TEST_TOPOLOGY"]
    data = data if data is not None else make_data(int(os.environ.get("TRIDENT_TEST_SEED", "1")))
    if spout is None and os.environ.get("TRIDENT_TEST_SPOUT") == "short-replay":
        spout = ShortReplaySpout(data, take)
    if spout is None:
        cls = OpaqueMemoryTransactionalSpout if opaque else MemoryTransactionalSpout
        spout = cls(data, Fields("word"), take)
    partial, counts, after = PartialCount(), CountBoth(), after or After()
    process_plan, commit_plan = plans
    if process_plan is not None:
        partial = with_faults(partial, process_plan)
    if commit_plan is not None:
        counts, after = with_faults(counts, commit_plan), with_faults(after, commit_plan)
    b = TransactionalTopologyBuilder(topology_id, "spout", spout, 3)
    b.set_bolt("partial", partial, 3).fields_grouping("spout", Fields("word"))
    b.set_bolt("counts", counts, 2).fields_grouping("partial", Fields("word"))
    b.set_bolt("after", after, 2).shuffle_grouping("counts")
    return b


def stored_counts(url: str, topology_id: str) -> tuple[dict, dict]:
    """(TransactionalMap counts, OpaqueMap counts) read back from Redis."""
    t = TransactionalMap(RedisMapBacking.from_url(url, f"{topology_id}:tcounts"))
    o = OpaqueMap(RedisMapBacking.from_url(url, f"{topology_id}:ocounts"))
    return ({w: n for w, n in zip(WORDS, t.multi_get(WORDS), strict=True) if n is not None},
            {w: n for w, n in zip(WORDS, o.multi_get(WORDS), strict=True) if n is not None})


def config(state: str, **kw) -> TopologyConfig:
    kw.setdefault("max_spout_pending", 3)
    kw.setdefault("progress", False)
    return TopologyConfig(spark_master="local[2]", state=state, **kw)


def new_id(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


# -- in-process runs -------------------------------------------------------------------------------

@pytest.mark.parametrize("placement", ["driver", "executors"])
@pytest.mark.parametrize("seed, opaque", [(3, False), (11, True)], ids=["transactional-spout", "opaque-spout"])
def test_exact_counts_under_injected_failures(spark_context, redis_url, seed, opaque, placement):
    """Random FailedExceptions in the processing and the commit phase (a committer task
    after another wrote, when commits run on executors; a bolt after the committer)."""
    data = make_data(seed)
    tid = new_id("faults")
    plans = (FaultPlan(seed=seed, rate=0.1, max_attempt=1),
             FaultPlan(seed=seed + 1000, rate=0.3, max_attempt=2))
    result = run_topology(build_topology(tid, data, plans=plans, opaque=opaque),
                          config(redis_url, max_attempts=4, commit_placement=placement),
                          spark_context=spark_context)
    commit_faults = [f for f in result.failures if "'counts'" in f or "'after'" in f]
    assert commit_faults, f"no fault hit the commit phase; pick another seed: {result.failures}"
    t, o = stored_counts(redis_url, tid)
    assert t == exact(data) and o == exact(data)


def test_one_read_and_one_write_per_batch_and_task(spark_context, redis_server, redis_url):
    data = make_data(5)
    tid = new_id("trips")
    probe = redis_server.client()
    before = probe.info("commandstats")
    result = run_topology(build_topology(tid, data), config(redis_url), spark_context=spark_context)
    after = probe.info("commandstats")
    calls = {k: after[k]["calls"] - before.get(k, {"calls": 0})["calls"] for k in ("cmdstat_mget", "cmdstat_evalsha")}
    # each committer task with words does, per map: one MGET and one EVALSHA
    most = result.batches_committed * 2 * 2
    assert result.batches_committed >= 5
    assert result.batches_committed <= calls["cmdstat_evalsha"] <= most, calls
    assert result.batches_committed <= calls["cmdstat_mget"] <= most, calls
    t, o = stored_counts(redis_url, tid)
    assert t == exact(data) and o == exact(data)


def test_a_commit_phase_failure_after_the_committer_writes_nothing(spark_context, redis_url):
    """Attempt 1 of txid 2 updates both maps, then a bolt after the committer fails; its
    replay emits fewer words (the opaque spout's partitions deliver less), the rest come
    later. The maps write only once the whole commit phase succeeded, so attempt 1 wrote
    nothing and both maps are exact. (A write that did happen before the attempt failed --
    a driver killed between the write and the record -- is the SIGKILL test below, where
    only OpaqueMap is exact.)"""
    data = make_data(9, per_partition=16)
    tid = new_id("opaque")
    spout = ShortReplaySpout(data, take=4)
    result = run_topology(build_topology(tid, data, spout=spout, after=After(fail_at=(2, 1))),
                          config(redis_url), spark_context=spark_context)
    assert any("after the commit's writes of txid 2" in f for f in result.failures), result.failures
    t, o = stored_counts(redis_url, tid)
    assert o == exact(data) and t == exact(data)


def test_redis_restarted_mid_run_keeps_counts_exact(spark_context, redis_factory):
    """Redis is SIGKILLed right after txid 3 commits; the next commit fails naming Redis
    and is replayed; Redis comes back (AOF, appendfsync always) as soon as the engine has
    seen that failure; the counts end exact."""
    server = redis_factory(appendonly=True)
    data = make_data(21)
    tid = new_id("restart")
    seen: list = []

    def revive() -> None:
        wait_until(lambda: seen and seen[0].failures, 120, what="a failed commit while Redis is down")
        server.start()

    reviver = threading.Thread(target=revive, daemon=True)

    def on_commit(txid, result):
        if txid == 3:
            server.kill()
            seen.append(result)
            reviver.start()

    result = run_topology(build_topology(tid, data, take=3), config(server.url, max_attempts=5),
                          spark_context=spark_context, on_commit=on_commit)
    reviver.join(5)
    assert not reviver.is_alive() and server.running
    assert any(f"127.0.0.1:{server.port}" in f and "StateUnavailableError" in f for f in result.failures), result.failures
    assert result.last_txid >= 6
    t, o = stored_counts(server.url, tid)
    assert t == exact(data) and o == exact(data)


def test_redis_down_stops_the_run_after_max_attempts_naming_redis(spark_context, redis_factory):
    server = redis_factory(appendonly=False)
    tid = new_id("down")

    def on_commit(txid, result):
        if txid == 2:
            server.kill()

    with pytest.raises(TopologyFailedError) as e:
        run_topology(build_topology(tid, make_data(4)), config(server.url, max_attempts=2),
                     spark_context=spark_context, on_commit=on_commit)
    msg = str(e.value)
    assert "txid 3 failed 2 times" in msg and f"127.0.0.1:{server.port}" in msg, msg
    # attempt 1 failed reading in committer "counts"; attempt 2 first rolls back what an
    # attempt whose commit began may have written to the opaque map, and fails there
    assert "StateUnavailableError" in msg and e.value.component == "(map 'ocounts')"


def test_wrong_password_stops_the_run_with_a_clear_error(spark_context, redis_factory):
    server = redis_factory(password="right", appendonly=False)
    url = server.url_for(password="pw-WRONG-42")
    committed = []
    with pytest.raises((ConfigError, TopologyFailedError)) as e:
        run_topology(build_topology(new_id("auth"), make_data(4)), config(url, max_attempts=2),
                     spark_context=spark_context, on_commit=lambda t, r: committed.append(t))
    msg = str(e.value)
    assert "refused the credentials" in msg and f"127.0.0.1:{server.port}" in msg
    assert "pw-WRONG-42" not in msg and "right" not in msg
    assert committed == []


def test_wrong_password_stops_the_run_before_any_batch_is_processed(spark_context, redis_factory):
    server = redis_factory(password="right", appendonly=False)
    with pytest.raises(ConfigError, match="refused the credentials"):
        run_topology(build_topology(new_id("auth2"), make_data(4)),
                     config(server.url_for(password="pw-WRONG-42"), max_attempts=2),
                     spark_context=spark_context)


@pytest.mark.parametrize("example, check", [
    ("global_count", lambda m, r: r.map_state("global-count").get("count") == sum(len(v) for v in m.DATA.values())),
    ("transactional_words", lambda m, r: m.read_results(r) == m.expected()),
    ("opaque_word_count", lambda m, r: dict(zip(m.WORDS, r.map_state("counts", opaque=True).multi_get(m.WORDS),
                                                strict=True))
     == {w: m.expected().get(w) for w in m.WORDS}),
])
def test_examples_run_against_redis(spark_context, redis_url, example, check):
    from state.base import MemoryTransactionalState
    from state.map import reset_memory_maps
    from transactional.ops.cli import load_topology_file

    module = load_topology_file(str(REPO / "examples" / f"{example}.py"))
    tid = module.build_topology().build().topology_id
    MemoryTransactionalState.reset(tid)   # a fresh run of the example's fixed topology id
    reset_memory_maps(tid)
    result = run_topology(module.build_topology(), config(redis_url), spark_context=spark_context)
    assert result.batches_committed > 1
    assert check(module, result)


# -- SIGKILL of the driver mid-commit, then restart (subprocesses, ZooKeeper coordination) -----------

def run_driver(tid: str, state: str, coordination: str, crash_at: str | None = None,
               seed: int = 1, spout: str = "transactional") -> subprocess.CompletedProcess:
    env = {**os.environ, "TRIDENT_TEST_TOPOLOGY": tid, "TRIDENT_TEST_SEED": str(seed),
           "TRIDENT_TEST_SPOUT": spout,
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("TRIDENT_CRASH_AT", None)
    if crash_at:
        env["TRIDENT_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, "-m", "transactional.ops.cli", "run", __file__, "--master", "local[2]",
         "--state", state, "--coordination", coordination, "--max-spout-pending", "3",
         "--lock-wait", "60", "-q"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def committed_txid(coordination: str, tid: str) -> int:
    from state.base import open_transactional_state

    s = open_transactional_state(coordination, tid)
    try:
        return (s.get("committed") or {}).get("txid", 0)
    finally:
        s.close()


@pytest.mark.slow
def test_sigkill_mid_commit_then_restart_is_exact_for_both_maps(redis_server, redis_url, zk_url):
    """Crash 1: task 0 of the committer ran for txid 3, task 1 did not: nothing of txid 3
    was written (the maps write after the whole commit phase). Crash 2: both maps of
    txid 5 written, txid not recorded. Restart: exact. Each driver fences with a new epoch."""
    tid = new_id("sigkill")
    fence = redis_server.client()
    zk_url += "?session_timeout=1"   # the killed driver's lock goes within about a second

    p = run_driver(tid, redis_url, zk_url, "commit.after_task:txid=3,component=counts,task=0")
    assert p.returncode == -9, p.stderr[-3000:]
    assert committed_txid(zk_url, tid) == 2
    assert fence.get(f"{tid}:~fence") == b"1:2"   # driver epoch 1; txid 3 wrote nothing

    p = run_driver(tid, redis_url, zk_url, "commit.before_record:txid=5")
    assert p.returncode == -9, p.stderr[-3000:]
    assert committed_txid(zk_url, tid) == 4
    assert fence.get(f"{tid}:~fence") == b"2:5"   # driver epoch 2 wrote txid 5, unrecorded

    p = run_driver(tid, redis_url, zk_url)
    assert p.returncode == 0, p.stderr[-3000:]
    t, o = stored_counts(redis_url, tid)
    assert t == exact(make_data(1)) and o == exact(make_data(1))


@pytest.mark.slow
def test_sigkill_mid_commit_then_a_different_opaque_replay(redis_server, redis_url, zk_url):
    """The driver dies after attempt 1 of txid 2 wrote every key; after the restart the
    opaque spout's replay of txid 2 delivers 1 word per partition instead of 4. OpaqueMap:
    exact (keys only attempt 1 touched fall back to prev). TransactionalMap: the keys the
    replay touches are rebuilt on prev, the others keep attempt 1's words: 6 too many."""
    tid = new_id("sigkill-opaque")
    zk_url += "?session_timeout=1"
    p = run_driver(tid, redis_url, zk_url, "commit.before_record:txid=2", spout="short-replay")
    assert p.returncode == -9, p.stderr[-3000:]
    assert committed_txid(zk_url, tid) == 1
    assert redis_server.client().get(f"{tid}:~fence") == b"1:2"

    p = run_driver(tid, redis_url, zk_url, spout="short-replay")
    assert p.returncode == 0, p.stderr[-3000:]
    t, o = stored_counts(redis_url, tid)
    assert o == exact(make_data(1))
    data = make_data(1)
    first = [w for rows in data.values() for w in rows[4:8]]      # attempt 1 of txid 2
    replay = {rows[4] for rows in data.values()}                   # its replay: 1 word a partition
    assert sum(t.values()) - sum(exact(data).values()) == sum(w not in replay for w in first) == 6
