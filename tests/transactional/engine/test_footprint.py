"""What the engine keeps grows boundedly (docs/operations.md, "What a topology keeps"):
a Trident topology runs 180 one-word txids on a real ZooKeeper and redis-server, its driver
SIGKILLed after txid 120 was recorded and before its metadata was dropped, then restarted;
the coordinator's nodes and the engine's Redis keys are counted exactly after each driver,
and every word is counted once. A core topology's 150 checkpoints likewise leave one
checkpoint record and its states' keys."""

from __future__ import annotations

import json
import signal
import uuid
from pathlib import Path

import pytest
import redis
from crash_plans import run_topology_file
from footprint_topology import TXIDS, WORDS, expected

from spouts.core import MemorySpout
from state.committed import CommittedReader
from state.zookeeper import ZooKeeperTransactionalState
from transactional import BaseStatefulBolt, Fields, TopologyBuilder, TopologyConfig, run_topology
from transactional.windowing import BaseStatefulWindowedBolt, Count

pytestmark = pytest.mark.integration
KEEP = 5
#: the coordinator's records of a transactional topology that ran (transactional/engine/store.py)
RECORDS = ["committed", "epoch", "kept", "layout", "lock", "maps", "meta", "runs", "state", "status"]


def coordinator(zk_url: str, tid: str) -> dict[str, list[str]]:
    """The topology's records, and the children of ``meta`` and ``kept``."""
    s = ZooKeeperTransactionalState.from_url(zk_url, tid, read_only=True)
    try:
        return {"records": sorted(s.children("")), "meta": sorted(s.children("meta"), key=int),
                "kept": sorted(s.children("kept"), key=int), "runs": [r["ended"] for r in s.get("runs")]}
    finally:
        s.close()


def redis_keys(url: str, tid: str) -> dict[str, int]:
    """The topology's Redis keys, each with its size (a hash's fields, a string's 1)."""
    c = redis.Redis.from_url(url)
    try:
        out = {}
        for k in c.keys(f"{tid}:*"):
            kind = c.type(k).decode()
            out[k.decode().removeprefix(f"{tid}:")] = c.hlen(k) if kind == "hash" else 1
        return out
    finally:
        c.close()


def test_a_long_run_keeps_bounded_records_and_a_kill_after_pruning_recovers_exact_counts(
        tmp_path: Path, zk_url: str, redis_url: str) -> None:
    tid = f"footprint-{uuid.uuid4().hex[:8]}"

    def run(crash_at: str | None):
        return run_topology_file(tmp_path, "footprint_topology.py", zk_url, crash_at, {"TRIDENT_TEST_TOPOLOGY": tid},
                                 ["--state", redis_url, "--set", f"keep_batch_meta={KEEP}"])

    p = run("commit.after_record:txid=120")
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    first = coordinator(zk_url, tid)
    # kept: txids 115..119 (120 was recorded, its metadata not yet kept nor dropped); every
    # older txid's kept and pending metadata already deleted
    assert first["kept"] == ["115", "116", "117", "118", "119"]
    assert "120" in first["meta"] and all(int(t) >= 120 for t in first["meta"]) and len(first["meta"]) <= 4

    p = run(None)
    assert p.returncode == 0, p.stderr[-3000:]
    after = coordinator(zk_url, tid)
    assert after["records"] == RECORDS
    assert after["meta"] == []                                            # every txid committed: none pending
    assert after["kept"] == [str(t) for t in range(TXIDS - KEEP + 1, TXIDS + 1)]
    assert after["runs"] == ["ended", "died"]
    keys = redis_keys(redis_url, tid)
    words = [f"w{i}" for i in range(WORDS)]
    # per map one key a word, and the map's markers; the window stage one record (task 0)
    assert sorted(keys) == sorted([*(f"{m}:{w}" for m in ("tcounts", "ocounts", "ccounts") for w in words),
                                   "ccounts:~applied", "ccounts:~prior", "ocounts:~written:driver",
                                   "win:window:0", "~fence"])
    assert keys["ccounts:~prior"] == 3                  # ~txid, batch, before: of the last txid only
    c = redis.Redis.from_url(redis_url)
    try:
        prior = c.hgetall(f"{tid}:ccounts:~prior")
        win = json.loads(c.get(f"{tid}:win:window:0"))
    finally:
        c.close()
    assert prior[b"~txid"] == str(TXIDS).encode() and len(json.loads(prior[b"before"])) == 1
    # the window's record holds only what a later window can hold: 180 = 60 windows of 3, none open
    assert (win["val"]["fired"], win["val"]["events"]) == (TXIDS // 3, [])
    reader = CommittedReader(zk_url, redis_url, tid)
    for m, kind in (("tcounts", "transactional"), ("ocounts", "opaque"), ("ccounts", "counter")):
        txid, values = reader.read(m, words, kind)
        assert (txid, dict(zip(words, values, strict=True))) == (TXIDS, expected()), m


class _WordCount(BaseStatefulBolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def init_state(self, state):
        self.counts = state

    def execute(self, tuple):
        self.counts.put(tuple["word"], self.counts.get(tuple["word"], 0) + 1)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word", "count"))


class _Windows(BaseStatefulWindowedBolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def init_state(self, state):
        self.state = state

    def execute(self, window):
        self.state.put("windows", self.state.get("windows", 0) + 1)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n"))


def test_a_long_core_run_keeps_one_checkpoint_record_and_its_states_keys(zk_url: str, redis_url: str) -> None:
    """A core topology, 150 micro-batches of one tuple each, a checkpoint after each: a
    stateful word count on 2 tasks and a persistent count window of 3 on Redis. The
    coordinator keeps one ``checkpoint`` record; each task's hash holds its words (and one
    ``~txid`` marker); the window's hash holds its trigger record and the micro-batches a
    later window can still hold, not 150."""
    tid = f"footprint-core-{uuid.uuid4().hex[:8]}"
    b = TopologyBuilder(tid)
    b.set_spout("s", MemorySpout([(f"w{i % WORDS}", i) for i in range(150)], Fields("word", "n"), per_call=1))
    b.set_bolt("count", _WordCount(), 2).fields_grouping("s", Fields("word"))
    b.set_bolt("win", _Windows().with_tumbling_window(Count(3)).with_persistence(), 1).shuffle_grouping("s")
    r = run_topology(b.create_topology(), TopologyConfig(
        executor="in-process", progress=False, coordination=zk_url, state=redis_url, micro_batch_size=1,
        checkpoint_interval_ms=0))
    assert r.batches_committed == 150
    s = ZooKeeperTransactionalState.from_url(zk_url, tid, read_only=True)
    try:
        assert sorted(s.children("")) == ["checkpoint", "committed", "epoch", "layout", "lock", "meta", "runs",
                                          "state", "stateful", "status"]
        assert s.children("meta") == [] and s.get("checkpoint")["phase"] == "committed"
    finally:
        s.close()
    keys = redis_keys(redis_url, tid)
    assert sorted(keys) == ["count:0", "count:0:~txid", "count:1", "count:1:~txid", "win:0", "win:0:~txid", "~kvfence"]
    assert keys["count:0"] + keys["count:1"] == WORDS                    # each word in the one task it goes to
    c = redis.Redis.from_url(redis_url)
    try:
        fields = sorted(f.decode() for f in c.hkeys(f"{tid}:win:0"))
        counts = {**c.hgetall(f"{tid}:count:0"), **c.hgetall(f"{tid}:count:1")}
    finally:
        c.close()
    assert {k.decode(): json.loads(v) for k, v in counts.items()} == {f"w{i}": 22 if i < 3 else 21 for i in range(7)}
    held = [f for f in fields if f.startswith("__window__:")]
    assert "__window__" in fields and "windows" in fields and 1 <= len(held) <= 3, fields
    assert len(fields) == 2 + len(held)
