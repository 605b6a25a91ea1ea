"""The exactly-once holes an adversary found, each against real servers (Redis, ZooKeeper,
Spark): a stale driver resumed after a takeover, reads in a replay, one key updated
several times in one txid, colliding map names, a txid half written across its maps, and
what a failed attempt leaves behind.

This file is also a topology file (``trident run tests/transactional/engine/test_exactly_once.py``), configured
by environment, for the tests that run drivers as processes:
``TRIDENT_TEST_TOPOLOGY`` (id), ``TRIDENT_TEST_COMMITTER`` ("rmw": read-modify-write
committer; default: the word counter of tests/transactional/engine/test_redis_engine.py), and the settings of
that file (``TRIDENT_TEST_SPOUT``, ``TRIDENT_TEST_SHORT_TXID``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from spouts import MemoryTransactionalSpout
from state.base import MemoryTransactionalState, open_transactional_state
from state.map import TransactionalMap, open_map_backing
from state.redis import RedisMapBacking
from state.zookeeper import ZooKeeperTransactionalState
from transactional import (
    BaseTransactionalBolt,
    Committer,
    Fields,
    TopologyConfig,
    TopologyFailedError,
    TransactionalTopologyBuilder,
    Values,
    run_topology,
)
from transactional.exceptions import SpoutError
from transactional.testing import SINKS, ListSink
from transactional.testing._process import wait_until

import test_redis_engine as words

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


def new_id(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def config(state: str, **kw) -> TopologyConfig:
    kw.setdefault("max_spout_pending", 3)
    kw.setdefault("progress", False)
    return TopologyConfig(spark_master="local[2]", state=state, **kw)


# -- topologies --------------------------------------------------------------------------------

class ReadAddWrite(BaseTransactionalBolt, Committer):
    """Reads each word's count, adds the batch's, writes it back (``"replace"``): the
    committer shape that double counts if a replay reads a failed attempt's value."""

    def __init__(self, opaque: bool) -> None:
        self.opaque = opaque

    def prepare(self, conf, context, collector, attempt):
        self.collector, self.attempt, self.batch = collector, attempt, {}
        self.map = context.map_state("rmw", opaque=self.opaque)

    def execute(self, tuple):
        self.batch[tuple["word"]] = self.batch.get(tuple["word"], 0) + tuple["n"]

    def finish_batch(self):
        keys = sorted(self.batch)
        olds = self.map.multi_get(keys)
        self.map.multi_combine(keys, [(o or 0) + self.batch[k] for k, o in zip(keys, olds, strict=True)], "replace")
        for k in keys:
            self.collector.emit(Values(self.attempt, k))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "word"))


def rmw_topology(topology_id: str, data, *, opaque: bool, fail_at=None):
    b = TransactionalTopologyBuilder(topology_id, "spout", MemoryTransactionalSpout(data, Fields("word"), 4), 3)
    b.set_bolt("partial", words.PartialCount(), 3).fields_grouping("spout", Fields("word"))
    b.set_bolt("rmw", ReadAddWrite(opaque), 2).fields_grouping("partial", Fields("word"))
    b.set_bolt("after", words.After(fail_at), 2).shuffle_grouping("rmw")
    return b


def build_topology():
    """For driver processes: see the module docstring."""
    tid = os.environ["TRIDENT_TEST_TOPOLOGY"]
    if os.environ.get("TRIDENT_TEST_COMMITTER") == "rmw":
        return rmw_topology(tid, words.make_data(1), opaque=True)
    return words.build_topology(tid)


class Driver:
    """``trident run`` of this file in its own process group."""

    def __init__(self, tmp_path: Path, name: str, tid: str, state: str, coordination: str, *,
                 env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> None:
        self.err_path = tmp_path / f"{name}.err"
        full_env = {**os.environ, "TRIDENT_TEST_TOPOLOGY": tid, **(env or {}),
                    "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests" / "support"), str(Path(__file__).parent),
                                                   os.environ.get("PYTHONPATH", "")])}
        for k in ("TRIDENT_CRASH_AT", "TRIDENT_PAUSE_AT"):
            if k not in (env or {}):
                full_env.pop(k, None)
        with open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "transactional.ops.cli", "run", __file__, "--master", "local[2]",
                 "--state", state, "--coordination", coordination, "--max-spout-pending", "3",
                 "--lock-wait", "60", "-q", *args],
                cwd=REPO, env=full_env, stdout=subprocess.DEVNULL, stderr=err,
                stdin=subprocess.DEVNULL, start_new_session=True)

    @property
    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def wait(self, timeout: float = 180) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def committed_txid(coordination: str, tid: str) -> int:
    s = ZooKeeperTransactionalState.from_url(coordination, tid, read_only=True)
    try:
        return (s.get("committed") or {}).get("txid", 0)
    finally:
        s.close()


# -- 1. a stale driver resumed after a takeover writes nothing -----------------------------------

@pytest.mark.slow
def test_a_paused_driver_resumed_after_a_takeover_cannot_overwrite_the_new_drivers_commit(
        tmp_path, redis_server, redis_url, zk_url):
    """Driver A stops (SIGSTOP: a GC pause, a frozen VM) in the commit of the last txid,
    after its lock check and after ``commit_started`` is durable, before its Redis write.
    Its ZooKeeper session expires; driver B takes the lock, replays the txid (the opaque
    spout now delivers a different batch) and commits it. A resumes: its same-txid write
    must be refused by B's epoch, whatever its txid. Driver C finishes. Both maps exact."""
    tid = new_id("stale")
    zk_url += "?session_timeout=1"
    env = {"TRIDENT_TEST_SPOUT": "short-replay", "TRIDENT_TEST_SHORT_TXID": "5"}
    a = Driver(tmp_path, "a", tid, redis_url, zk_url,
               env={**env, "TRIDENT_PAUSE_AT": "commit.before_write:txid=5"})
    try:
        wait_until(lambda: "pause point commit.before_write" in a.stderr or a.proc.poll() is not None,
                   180, what="driver A to pause in the commit of txid 5")
        assert a.proc.poll() is None, a.stderr[-3000:]
        assert committed_txid(zk_url, tid) == 4
        b = Driver(tmp_path, "b", tid, redis_url, zk_url, env=env, args=("--max-batches", "1"))
        assert b.wait() == 0, b.stderr[-3000:]
        assert committed_txid(zk_url, tid) == 5          # B replayed txid 5 (short) and committed it
        fence = redis_server.client().get(f"{tid}:~fence")
        assert fence == b"2:5", fence                     # B's epoch 2 wrote txid 5
        os.kill(a.proc.pid, signal.SIGCONT)
        assert a.wait() != 0
        assert "newer epoch (2)" in a.stderr and "epoch is 1" in a.stderr, a.stderr[-3000:]
    finally:
        a.wait(1) if a.proc.poll() is not None else (os.killpg(a.proc.pid, signal.SIGKILL), a.wait())
    c = Driver(tmp_path, "c", tid, redis_url, zk_url, env=env)
    assert c.wait() == 0, c.stderr[-3000:]
    t, o = words.stored_counts(redis_url, tid)
    assert t == words.exact(words.make_data(1)) and o == words.exact(words.make_data(1))


# -- 2. reads in a replay see the committed base --------------------------------------------------

@pytest.mark.parametrize("opaque", [True, False], ids=["opaque", "transactional"])
def test_a_read_modify_write_committer_replayed_after_a_failure_counts_once(spark_context, redis_url, opaque):
    """Attempt 1 of txid 2 reads, adds and writes back; a bolt after the committer fails
    it. Attempt 2 reads again: it must see the committed base, not attempt 1's sum."""
    data = words.make_data(5, per_partition=16)
    tid = new_id("rmw")
    r = run_topology(rmw_topology(tid, data, opaque=opaque, fail_at=(2, 1)), config(redis_url),
                     spark_context=spark_context)
    assert any("txid 2" in f for f in r.failures), r.failures
    m = r.map_state("rmw")
    assert dict(zip(words.WORDS, m.multi_get(words.WORDS), strict=True)) == {
        w: words.exact(data).get(w) for w in words.WORDS}


@pytest.mark.slow
def test_a_read_modify_write_replay_after_a_write_that_was_never_recorded(tmp_path, redis_url, zk_url):
    """The driver dies after the OpaqueMap write of txid 2, before recording it. The
    restarted driver's replay of txid 2 reads the committed base, not its own earlier sum."""
    tid = new_id("rmw-kill")
    zk_url += "?session_timeout=1"
    env = {"TRIDENT_TEST_COMMITTER": "rmw"}
    d = Driver(tmp_path, "crash", tid, redis_url, zk_url,
               env={**env, "TRIDENT_CRASH_AT": "commit.before_record:txid=2"})
    assert d.wait() == -9, d.stderr[-3000:]
    d = Driver(tmp_path, "resume", tid, redis_url, zk_url, env=env)
    assert d.wait() == 0, d.stderr[-3000:]
    m = RedisMapBacking.from_url(redis_url, f"{tid}:rmw")
    from state.map import OpaqueMap

    got = OpaqueMap(m).multi_get(words.WORDS)
    assert {w: n for w, n in zip(words.WORDS, got, strict=True) if n} == words.exact(words.make_data(1))


# -- 3. one key updated several times in one txid --------------------------------------------------

class CountInto(BaseTransactionalBolt, Committer):
    """Adds 1 per tuple to key "w" of map "shared": one ``multi_combine`` with the key
    repeated once per tuple."""

    def __init__(self, opaque: bool) -> None:
        self.opaque = opaque

    def prepare(self, conf, context, collector, attempt):
        self.n = 0
        self.map = context.map_state("shared", opaque=self.opaque)

    def execute(self, tuple):
        self.n += 1

    def finish_batch(self):
        if self.n:
            self.map.multi_combine(["w"] * self.n, [1] * self.n, "sum")

    def declare_output_fields(self, declarer):
        pass


@pytest.mark.parametrize("opaque", [True, False], ids=["opaque", "transactional"])
def test_a_key_updated_by_two_tasks_two_committers_and_repeated_in_a_call_keeps_every_update(
        spark_context, redis_server, redis_url, opaque):
    """24 tuples a batch reach committer "c1" (2 tasks behind a shuffle grouping: both
    update "w") and committer "c2" (the same map name): "w" must grow by 48 a batch."""
    tid = new_id("twice")
    spout = MemoryTransactionalSpout({0: ["x"] * 48}, Fields("word"), 24)
    b = TransactionalTopologyBuilder(tid, "spout", spout, 1)
    b.set_bolt("c1", CountInto(opaque), 2).shuffle_grouping("spout")
    b.set_bolt("c2", CountInto(opaque), 1).global_grouping("spout")
    before = redis_server.client().info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    r = run_topology(b, config(redis_url), spark_context=spark_context)
    assert r.batches_committed == 2
    assert r.map_state("shared").get("w") == 96
    writes = redis_server.client().info("commandstats")["cmdstat_evalsha"]["calls"] - before
    assert writes == 1 + 2   # the epoch raised at start, then one write of the map per txid


# -- 5. map names never share keys; 6. one txid is visible in all of its maps or in none -------------

class TwoMaps(BaseTransactionalBolt, Committer):
    """Adds the batch's tuple count to key ``k1`` of map ``m1``, and ten times it to key
    ``k2`` of map ``m2``; in txid ``bad_at`` it puts ``{"seen": {n}}`` in ``m2`` instead (a
    set: JSON cannot store it)."""

    def __init__(self, m1: str, k1: str, m2: str, k2: str, bad_at: int | None = None) -> None:
        self.m1, self.k1, self.m2, self.k2, self.bad_at = m1, k1, m2, k2, bad_at

    def prepare(self, conf, context, collector, attempt):
        self.attempt, self.n = attempt, 0
        self.first, self.second = context.map_state(self.m1), context.map_state(self.m2)

    def execute(self, tuple):
        self.n += 1

    def finish_batch(self):
        self.first.multi_combine([self.k1], [self.n])
        if self.attempt.txid == self.bad_at:
            self.second.multi_combine([self.k2], [{"seen": {self.n}}], "replace")
        else:
            self.second.multi_combine([self.k2], [10 * self.n])

    def declare_output_fields(self, declarer):
        pass


def two_maps(tid: str, bolt: TwoMaps) -> TransactionalTopologyBuilder:
    """Two batches of 3 tuples into one ``bolt`` task."""
    b = TransactionalTopologyBuilder(tid, "spout", MemoryTransactionalSpout({0: ["w"] * 6}, Fields("w"), 3), 1)
    b.set_bolt("c", bolt, 1).global_grouping("spout")
    return b


PLACES = pytest.mark.parametrize(("placement", "state"), [("driver", "memory"), ("driver", "redis"),
                                                          ("executors", "redis")])


def _data_keys(client, tid: str) -> list[str]:
    return sorted(k.decode() for k in client.keys(f"{tid}:*") if not k.decode().startswith(f"{tid}:~claims:"))


@PLACES
def test_map_names_holding_the_separator_keep_their_own_keys(spark_context, redis_server, redis_url, placement,
                                                             state):
    """Map "a:b" key "x" and map "a" key "b:x" were one Redis key (so such names were
    refused): each now keeps its own, on memory and Redis, on the driver and executors."""
    tid = new_id("names")
    url = redis_url if state == "redis" else "memory://"
    r = run_topology(two_maps(tid, TwoMaps("a:b", "x", "a", "b:x")), config(url, commit_placement=placement),
                     spark_context=spark_context)
    assert r.batches_committed == 2
    assert (r.map_state("a:b").get("x"), r.map_state("a").get("b:x")) == (6, 60)
    if state == "redis":
        client = redis_server.client()
        assert _data_keys(client, tid) == sorted([f"{tid}:~a%3Ab:x", f"{tid}:a:b:x", f"{tid}:~fence"])
        assert json.loads(client.get(f"{tid}:~a%3Ab:x"))["val"] == 6
        assert json.loads(client.get(f"{tid}:a:b:x"))["val"] == 60


@PLACES
def test_a_txid_whose_second_map_cannot_store_a_value_shows_in_no_map(spark_context, redis_server, redis_url,
                                                                     placement, state):
    """Txid 2 adds to map "first" and puts a value JSON cannot store in map "second": the
    run stops naming the map and the value, and a reader of "first" sees it as txid 1
    left it -- no trace of txid 2, which the coordinator never committed."""
    tid = new_id("unstorable")
    url = redis_url if state == "redis" else "memory://"
    with pytest.raises(TopologyFailedError) as e:
        run_topology(two_maps(tid, TwoMaps("first", "a", "second", "k", bad_at=2)),
                     config(url, commit_placement=placement), spark_context=spark_context)
    assert ("map 'second', txid 2: the value {'seen': {3}} (dict) of key 'k' cannot be stored (TypeError: "
            "Object of type set is not JSON serializable)") in str(e.value)
    assert "none of the maps committed with it was written" in str(e.value)
    backing = open_map_backing(url, f"{tid}:first", fence_scope=tid)
    [stored] = backing.multi_get(["a"])
    assert stored["txid"] == 1 and TransactionalMap(backing).get("a") == 3
    if state == "redis":
        client = redis_server.client()
        assert _data_keys(client, tid) == sorted([f"{tid}:first:a", f"{tid}:second:k", f"{tid}:~fence"])
        assert [json.loads(client.get(k))["txid"] for k in (f"{tid}:first:a", f"{tid}:second:k")] == [1, 1]
        assert client.get(f"{tid}:~fence").decode().endswith(":1")     # no write of txid 2 at all


# -- 8. what a failed attempt wrote is rolled back, not remembered forever ----------------------------

@pytest.mark.slow
def test_a_failed_attempts_leftovers_are_rolled_back_before_another_attempt_commits(
        tmp_path, redis_server, redis_url, zk_url):
    """The driver dies after attempt 1 of txid 2 wrote its (4 words a partition) batch;
    the restarted driver's replay of txid 2 delivers 1 word a partition. Once txid 2 is
    committed, a plain Redis GET of every key shows a committed value (no attempt-1
    value), and no record of superseded attempts exists in ZooKeeper."""
    tid = new_id("repair")
    zk_url += "?session_timeout=1"
    env = {"TRIDENT_TEST_SPOUT": "short-replay"}
    d = Driver(tmp_path, "crash", tid, redis_url, zk_url,
               env={**env, "TRIDENT_CRASH_AT": "commit.before_record:txid=2"})
    assert d.wait() == -9, d.stderr[-3000:]
    client = redis_server.client()
    raw = {k.decode(): json.loads(client.get(k)) for k in client.keys(f"{tid}:ocounts:*")
           if "~written" not in k.decode()}
    assert {(v["txid"], v["attempt"]) for v in raw.values()} >= {(2, 1)}   # attempt 1 wrote
    d = Driver(tmp_path, "resume", tid, redis_url, zk_url, env=env, args=("--max-batches", "1"))
    assert d.wait() == 0, d.stderr[-3000:]
    assert committed_txid(zk_url, tid) == 2
    # what txids 1 and 2 (the short replay: 1 word a partition) counted, nothing else
    data = words.make_data(1)
    want = words.exact({p: rows[:4] + rows[4:5] for p, rows in data.items()})
    raw = {k.decode().rsplit(":", 1)[1]: json.loads(client.get(k))
           for k in client.keys(f"{tid}:ocounts:*") if "~written" not in k.decode()}
    assert all(v["txid"] < 2 or v["attempt"] in (None, 2) for v in raw.values()), raw
    assert {w: v["curr"] for w, v in raw.items() if v["curr"]} == want
    s = ZooKeeperTransactionalState.from_url(zk_url, tid, read_only=True)
    try:
        assert "superseded" not in s.children("")
        assert s.get("maps") == {"tcounts": "transactional", "ocounts": "opaque"}
    finally:
        s.close()
    d = Driver(tmp_path, "finish", tid, redis_url, zk_url, env=env)
    assert d.wait() == 0, d.stderr[-3000:]
    assert words.stored_counts(redis_url, tid)[1] == words.exact(data)


# -- 9. metadata JSON cannot hold stops the run before anything of its txid is written -----------------

class SetMetaSpout(MemoryTransactionalSpout):
    """Partitioned: its coordinator's metadata for the third batch (rows 4..6) holds a set."""

    def get_coordinator(self, conf, context):
        inner = super().get_coordinator(conf, context)

        class Coordinator(type(inner)):   # type: ignore[misc]
            def plan_partition(self, partition, last_meta):
                m = super().plan_partition(partition, last_meta)
                return {**m, "seen": {m["start"]}} if m is not None and m["start"] == 4 else m

        return Coordinator(inner.sizes, inner.take)


@pytest.mark.parametrize("coordination", ["memory", "zk"])
def test_spout_metadata_json_cannot_hold_stops_the_run_naming_spout_txid_and_field(request, coordination):
    """On memory and ZooKeeper coordination alike: a SpoutError naming the spout, the txid,
    the field and the fix; txids 1 and 2 committed, nothing of txid 3 written or counted."""

    url = "memory://" if coordination == "memory" else request.getfixturevalue("zk_url")
    tid = new_id("set-meta")
    b = TransactionalTopologyBuilder(tid, "numbers", SetMetaSpout({0: list(range(10))}, Fields("n"), 2), 1)
    b.set_bolt("sink", ListSink(tid)).shuffle_grouping("numbers")
    cfg = TopologyConfig(executor="in-process", coordination=url, max_spout_pending=1, progress=False)
    with pytest.raises(SpoutError) as e:
        run_topology(b, cfg)
    assert str(e.value) == (
        "spout 'numbers': Coordinator.plan_partition() planned metadata for txid 3 that JSON cannot hold: "
        "meta['0']['seen'] is a set ({4}). Batch metadata is stored as JSON in the coordinator state "
        "(memory:// and zk:// alike): plan dicts with string keys, lists, strings, finite numbers, booleans and "
        "None (e.g. a sorted list instead of a set). Nothing of txid 3 was written")
    s = open_transactional_state(url, tid)
    try:
        assert s.get("committed")["txid"] == 2
        assert s.children("meta") == [] and s.lock_holder() is None
    finally:
        s.close()
        MemoryTransactionalState.reset(tid)
    assert SINKS.pop(tid) == [(1, (0,)), (1, (1,)), (2, (2,)), (2, (3,))]
