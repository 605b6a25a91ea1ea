"""Core topologies against real servers: a Redis Stream read through ``RedisStreamSpout``
by a driver killed with SIGKILL and restarted (at least once: nothing lost), and stateful
bolts on Redis ``KeyValueState`` killed at every step of the checkpoint protocol (the
state is the last committed checkpoint plus the replayed tuples: never below the truth,
exact where the checkpoint was rolled back)."""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from transactional import BaseRichBolt, BaseStatefulBolt, Fields, TopologyBuilder, TopologyConfig, run_topology

pytestmark = pytest.mark.integration
TESTS = Path(__file__).resolve().parents[2]
REPO = TESTS.parent
TOPOLOGY = TESTS / "support" / "core_stream_topology.py"
WORDS = ["cat", "dog", "cow", "moon", "apple", "the", "a", "man", "snow", "seven"]


def sentences(n: int, seed: int = 5) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(4)) for _ in range(n)]


def fill(r: redis.Redis, stream: str, rows: list[str]) -> list[str]:
    pipe = r.pipeline(transaction=False)
    for s in rows:
        pipe.xadd(stream, {"sentence": s})
    return [i.decode() for i in pipe.execute()]


class Driver:
    """``trident run tests/support/core_stream_topology.py`` in its own process group."""

    def __init__(self, tmp: Path, name: str, redis_url: str, stream: str, kind: str, *, coordination: str,
                 crash_at: str | None = None, executor: str = "in-process", placement: str = "driver",
                 count_tasks: int = 2) -> None:
        env = {**os.environ, "TRIDENT_TEST_REDIS": redis_url, "TRIDENT_TEST_STREAM": stream,
               "TRIDENT_TEST_KIND": kind, "TRIDENT_TEST_COUNT_TASKS": str(count_tasks),
               "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        env.pop("TRIDENT_CRASH_AT", None)
        if crash_at:
            env["TRIDENT_CRASH_AT"] = crash_at
        self.err = tmp / f"{name}.err"
        with open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "transactional.ops.cli", "run", str(TOPOLOGY), "--master", "local[2]",
                 "--set", f"executor={executor}", "--set", "micro_batch_size=30", "--set", "checkpoint_interval_ms=100",
                 "--set", f"commit_placement={placement}",
                 "--coordination", coordination, "--state", redis_url, "--idle-timeout", "1.5",
                 "--message-timeout", "10", "--lock-wait", "30", "-q"],
                cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL,
                start_new_session=True)

    def wait(self, timeout: float = 120) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self.kill()

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)

    def tail(self) -> str:
        return self.err.read_text(errors="replace")[-4000:]


def seeded_rng() -> random.Random:
    """A random generator seeded by ``TRIDENT_TEST_SEED`` (else at random), the seed printed."""
    seed = int(os.environ.get("TRIDENT_TEST_SEED", random.randrange(1 << 30)))
    print(f"TRIDENT_TEST_SEED={seed}")
    return random.Random(seed)


def sigkill_drivers(tmp_path: Path, r: Any, redis_url: str, stream: str, mode: str, coordination: str, name: str,
                    progress: str, marks: list[int]) -> None:
    """One driver per mark, each SIGKILLed once the Redis set ``progress`` holds that many
    members (it must still be running then)."""
    for kill, at in enumerate(marks):
        d = Driver(tmp_path, f"{name}{kill}", redis_url, stream, mode, coordination=coordination)
        deadline = time.monotonic() + 60
        while r.scard(progress) < at and d.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert d.proc.poll() is None, d.tail()
        d.kill()


def test_a_driver_killed_with_sigkill_and_restarted_loses_no_message(tmp_path: Path, redis_url: str,
                                                                      zk_url: str) -> None:
    """RedisStreamSpout -> split (anchored) -> record: three SIGKILLs of the driver at random
    moments, then a run to the end. Every message is processed at least once, none stays
    pending in the consumer group, and duplicates are bounded by what was in flight."""
    rng = seeded_rng()
    r = redis.Redis.from_url(redis_url)
    stream = f"s-{uuid.uuid4().hex[:8]}"
    ids = fill(r, stream, sentences(300))
    coordination = zk_url + "?session_timeout=1"
    sigkill_drivers(tmp_path, r, redis_url, stream, "reliable", coordination, "kill", f"{stream}:seen",
                    [rng.randint(10, 60) + kill * 70 for kill in range(3)])
    d = Driver(tmp_path, "last", redis_url, stream, "reliable", coordination=coordination)
    assert d.wait() == 0, d.tail()
    seen = {x.decode() for x in r.smembers(f"{stream}:seen")}
    assert seen == set(ids)                                            # nothing lost
    assert r.xpending(stream, "wc")["pending"] == 0                    # everything acked in the end
    processed = collections.Counter(x.decode() for x in r.lrange(f"{stream}:processed", 0, -1))
    assert all(4 <= n <= 4 * 4 for n in processed.values())           # every word; again at most once a run


def test_a_persistent_window_killed_with_sigkill_resumes_and_every_tuple_is_in_a_fired_window(
        tmp_path: Path, redis_url: str, zk_url: str) -> None:
    """RedisStreamSpout -> split -> a persistent windowed bolt (300 ms tumbling windows kept
    in its KeyValueState on Redis): two SIGKILLs of the driver while windows are open, then a
    run to the end. Every word's sentence is in some window that fired, and every message
    was acked."""
    rng = seeded_rng()
    r = redis.Redis.from_url(redis_url)
    stream = f"s-{uuid.uuid4().hex[:8]}"
    ids = fill(r, stream, sentences(150))
    coordination = zk_url + "?session_timeout=1"
    sigkill_drivers(tmp_path, r, redis_url, stream, "windowed", coordination, "wkill", f"{stream}:windowed",
                    [rng.randint(5, 40) + kill * 50 for kill in range(2)])
    d = Driver(tmp_path, "wlast", redis_url, stream, "windowed", coordination=coordination)
    assert d.wait() == 0, d.tail()
    assert {x.decode() for x in r.smembers(f"{stream}:windowed")} == set(ids)     # none lost
    assert r.xpending(stream, "wc")["pending"] == 0


@pytest.mark.spark_only
def test_the_reliable_topology_on_spark_processes_every_message(tmp_path: Path, redis_url: str, zk_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    stream = f"s-{uuid.uuid4().hex[:8]}"
    ids = fill(r, stream, sentences(200))
    d = Driver(tmp_path, "spark", redis_url, stream, "reliable", coordination=zk_url, executor="spark")
    assert d.wait(180) == 0, d.tail()
    processed = collections.Counter(x.decode() for x in r.lrange(f"{stream}:processed", 0, -1))
    assert processed == {i: 4 for i in ids}                            # no failure: each exactly once
    assert r.xpending(stream, "wc")["pending"] == 0
    st = subprocess.run([sys.executable, "-m", "transactional.ops.cli", "status", f"core-reliable-{stream}",
                         "--coordination", zk_url, "--json"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert st.returncode == 0, st.stderr
    run = json.loads(st.stdout)["run"]
    assert run["acked"] == {"sentences": 200} and run["failed"] == {"sentences": 0}
    assert run["pending"] == {"sentences": 0} and run["executed"]["record"] == 800 and run["errors"] == {}


def stored_counts(r: redis.Redis, stream: str) -> dict[str, int]:
    out: dict[str, int] = collections.Counter()
    for t in range(2):
        for k, v in r.hgetall(f"core-stateful-{stream}:count:{t}").items():
            out[k.decode().removeprefix("s:")] += int(v)
    return dict(out)


def truth(rows: list[str]) -> dict[str, int]:
    return dict(collections.Counter(w for s in rows for w in s.split()))


@pytest.mark.parametrize("crash_at, exact, placement", [
    (None, True, "driver"),
    ("checkpoint.preparing", True, "driver"),          # nothing prepared: rolled back, all replayed
    ("checkpoint.before_prepared", True, "driver"),    # all prepared, not recorded: rolled back, replayed
    ("checkpoint.prepared", False, "driver"),          # recorded prepared: the restart commits it; its tuples again
    ("checkpoint.after_commit", False, "driver"),      # one state committed: the restart commits the other
    ("checkpoint.preparing", True, "executors"),       # the tasks have not run: nothing to undo
    ("checkpoint.prepared", False, "executors"),       # the tasks prepared it on the executors: committed on restart
])
def test_stateful_word_count_killed_at_each_checkpoint_step(tmp_path: Path, redis_url: str, zk_url: str,
                                                           crash_at: str | None, exact: bool, placement: str) -> None:
    r = redis.Redis.from_url(redis_url)
    stream = f"s-{uuid.uuid4().hex[:8]}"
    rows = sentences(240, seed=len(crash_at or ""))
    fill(r, stream, rows)
    coordination = zk_url + "?session_timeout=1"
    if crash_at is not None:
        d = Driver(tmp_path, "crash", redis_url, stream, "stateful", coordination=coordination,
                   crash_at=f"{crash_at}:txid=2", placement=placement)
        assert d.wait() == -signal.SIGKILL, d.tail()
        assert f"crash point {crash_at}" in d.tail()
    d = Driver(tmp_path, "resume", redis_url, stream, "stateful", coordination=coordination, placement=placement)
    assert d.wait() == 0, d.tail()
    got, want = stored_counts(r, stream), truth(rows)
    assert set(got) == set(want)
    if exact:
        assert got == want
    else:
        assert all(got[w] >= want[w] for w in want) and got != want   # at least once: the replay counted again
    assert r.xpending(stream, "wc")["pending"] == 0
    assert not r.keys("core-stateful-*~prepare")                       # no prepared state left behind


@pytest.mark.parametrize("crash_at", [
    None,
    "rebalance.preparing",             # recorded "preparing", nothing prepared: moved again
    "rebalance.before_prepared",       # every state prepared, not recorded: rolled back, moved again
    "checkpoint.prepared",             # recorded prepared: the restart commits it, then finds nothing to move
    "checkpoint.after_commit",         # one state committed: the restart commits the others
    "rebalance.before_record",         # moved and committed, the new parallelism not recorded
])
def test_a_changed_parallelism_moves_the_state_to_the_new_tasks_even_if_killed_midway(
        tmp_path: Path, redis_url: str, zk_url: str, crash_at: str | None) -> None:
    """The stateful word count runs with 2 count tasks, then with 3: the restart moves every
    word's count to the task the fields grouping now sends it to, as one checkpoint before
    any tuple; a SIGKILL at any step of it loses and doubles nothing."""
    r = redis.Redis.from_url(redis_url)
    stream = f"s-{uuid.uuid4().hex[:8]}"
    first, second = sentences(120, seed=1), sentences(120, seed=2)
    fill(r, stream, first)
    coordination = zk_url + "?session_timeout=1"
    d = Driver(tmp_path, "two", redis_url, stream, "stateful", coordination=coordination, count_tasks=2)
    assert d.wait() == 0, d.tail()
    fill(r, stream, second)
    if crash_at is not None:
        d = Driver(tmp_path, "crash", redis_url, stream, "stateful", coordination=coordination, crash_at=crash_at,
                   count_tasks=3)
        assert d.wait() == -signal.SIGKILL, d.tail()
        assert f"crash point {crash_at}" in d.tail()
    d = Driver(tmp_path, "three", redis_url, stream, "stateful", coordination=coordination, count_tasks=3)
    assert d.wait() == 0, d.tail()
    from transactional.engine.task import stable_hash

    tasks = [{k.decode().removeprefix("s:"): int(v) for k, v in r.hgetall(f"core-stateful-{stream}:count:{t}").items()}
             for t in range(3)]
    for t, counts in enumerate(tasks):                                 # each word in the task it is sent to
        assert all(stable_hash(w) % 3 == t for w in counts), (t, counts)
    assert {w: n for counts in tasks for w, n in counts.items()} == truth(first + second)   # exact
    assert r.xpending(stream, "wc")["pending"] == 0
    assert not r.keys("core-stateful-*~prepare")


SEEN: set[tuple[int, int]] = set()
PROCESSED: list[tuple[int, int]] = []


class FailFirstSightOfEveryThird(BaseRichBolt):
    """Fails records with offset % 3 == 0 the first time they come (in-process executor:
    the module's globals are the driver's)."""

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tuple):
        key = (tuple["partition"], tuple["offset"])
        if key[1] % 3 == 0 and key not in SEEN:
            SEEN.add(key)
            self.collector.fail(tuple)
            return
        PROCESSED.append(key)
        self.collector.ack(tuple)


def test_kafka_spout_in_a_topology_replays_failed_records_and_commits_past_every_one(kafka_broker: Any) -> None:
    from spouts import KafkaSpout

    topic, group = f"t-{uuid.uuid4().hex[:10]}", f"g-{uuid.uuid4().hex[:6]}"
    kafka_broker.create_topic(topic, 2)
    kafka_broker.produce(topic, {0: [f"a{i}" for i in range(30)], 1: [f"b{i}" for i in range(20)]})
    SEEN.clear(), PROCESSED.clear()
    b = TopologyBuilder(f"kafka-core-{topic}")
    b.set_spout("records", KafkaSpout(kafka_broker.bootstrap, topic, group, fields=("partition", "offset", "value"),
                                      commit_interval_secs=0), 2)
    b.set_bolt("picky", FailFirstSightOfEveryThird(), 2).shuffle_grouping("records")
    r = run_topology(b, TopologyConfig(executor="in-process", progress=False, idle_timeout_secs=1.0,
                                       poll_interval_secs=0.05))
    want = {(0, i) for i in range(30)} | {(1, i) for i in range(20)}
    assert sorted(PROCESSED) == sorted(want)                            # each once, the failed ones on their replay
    assert r.failed == {"records": len(SEEN)} and len(SEEN) == 10 + 7 and r.acked == {"records": 50}
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": group})
    try:
        committed = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)
    finally:
        c.close()
    assert [tp.offset for tp in committed] == [30, 20]                   # past every record, none unacked


class CountOnExecutors(BaseStatefulBolt):
    """A stateful count whose first delivery of "apple" raises (a bug, not a FailedException)."""

    def prepare(self, conf, context, collector):
        self.collector = collector

    def init_state(self, state):
        self.counts = state

    def execute(self, tuple):
        if tuple["word"] == "apple" and tuple["delivery"] == 1:
            raise RuntimeError("database is down")
        self.counts.put(tuple["word"], self.counts.get(tuple["word"], 0) + 1)
        self.collector.ack(tuple)


class SplitKeepingDelivery(BaseRichBolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tuple):
        for w in tuple["sentence"].split():
            self.collector.emit((w, tuple["delivery"]), anchors=tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word", "delivery"))


@pytest.mark.spark_only
def test_stateful_bolts_on_the_executors_checkpoint_every_micro_batch_and_roll_back_a_failed_one(
        spark_context: Any, redis_url: str) -> None:
    """commit_placement="executors": the stateful tasks run in the commit job, each opening its
    Redis state there and preparing the micro-batch's checkpoint; the driver commits them all.
    A bolt raising in one micro-batch rolls what its tasks prepared back; the replay counts."""
    from spouts import MemorySpout

    tid = f"exec-state-{uuid.uuid4().hex[:8]}"
    rows = sentences(60, seed=9) + ["an apple a day"]
    b = TopologyBuilder(tid)
    b.set_spout("sentences", MemorySpout(rows, Fields("sentence"), name=tid, deliveries=True, per_call=10), 1)
    b.set_bolt("split", SplitKeepingDelivery(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", CountOnExecutors(), 2).fields_grouping("split", Fields("word"))
    r = run_topology(b, TopologyConfig(state=redis_url, commit_placement="executors", progress=False,
                                       micro_batch_size=15, retry_backoff_secs=0.05, poll_interval_secs=0.05))
    client = redis.Redis.from_url(redis_url)
    got: collections.Counter = collections.Counter()
    for t in range(2):
        for k, v in client.hgetall(f"{tid}:count:{t}").items():
            got[k.decode()] += int(v)
    assert dict(got) == truth(rows)
    assert r.checkpoints == r.batches_committed and any("database is down" in f for f in r.failures)
    assert r.acked == {"sentences": len(rows)} and not client.keys(f"{tid}:*~prepare")
