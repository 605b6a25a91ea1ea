"""``KeyValueState`` with a time to live (``state/keyvalue.py``): a key expires by its
checkpoint's time, a recovery that commits a prepared checkpoint decides as the first
attempt did, the store deletes keys a grace after they expired; on ``memory://``, a real
redis-server and Redis Cluster, through a core stateful bolt with a fixed clock, and a
driver SIGKILLed with a prepared checkpoint whose keys then expire by the wall clock."""

from __future__ import annotations

import collections
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from state.keyvalue import RedisKeyValueState, open_key_value_state
from state.map.ttl import Ttl
from transactional import Fields, TopologyBuilder, run_topology
from transactional.exceptions import ConfigError
from transactional.windowing import BaseStatefulWindowedBolt, Count

S = 1000     # ms


@pytest.fixture(params=["memory", "redis"])
def reopen(request: pytest.FixtureRequest) -> Any:
    """A function opening (again) this test's state with a TTL: as a restarted process would."""
    namespace = f"kvttl-{uuid.uuid4().hex[:10]}:count:0"
    url = "memory://" if request.param == "memory" else request.getfixturevalue("redis_url")
    return lambda secs=10, ttl_from="write", grace=0: open_key_value_state(url, namespace,
                                                                            ttl=Ttl.of(secs, ttl_from, grace))


def checkpoint(s: Any, txid: int, at_ms: int, **puts: int) -> None:
    s.at(at_ms)
    for k, v in puts.items():
        s.put(k, v)
    s.prepare_commit(txid)
    s.commit(txid)


def test_a_key_expires_by_its_checkpoints_time_and_comes_back_from_nothing(reopen: Any) -> None:
    s = reopen(secs=10)
    checkpoint(s, 1, 0, a=1, b=1)
    checkpoint(s, 2, 5 * S, a=2)                     # a expires at 15 s, b at 10 s
    s.at(12 * S)
    assert (s.get("a"), s.get("b", 0)) == (2, 0)
    assert sorted(s.items()) == [("a", 2)]
    r = reopen(secs=10)                              # another process: the stored expiries
    r.at(12 * S)
    assert (r.get("a"), r.get("b")) == (2, None)
    r.at(15 * S)
    assert r.get("a") is None and r.items() == []
    checkpoint(r, 3, 15 * S, a=1)                    # back from nothing
    assert sorted(r.expiring_items()) == [("a", 1, 25 * S)]


def test_ttl_from_read_writes_a_key_read_again(reopen: Any) -> None:
    s = reopen(secs=10, ttl_from="read")
    checkpoint(s, 1, 0, a=1, b=1)
    s.at(8 * S)
    assert s.get("a") == 1                           # read, not put: a now expires at 18 s
    s.prepare_commit(2), s.commit(2)
    s = reopen(secs=10, ttl_from="read")
    s.at(15 * S)
    assert (s.get("a"), s.get("b")) == (1, None)


def test_the_recovery_commits_a_prepared_checkpoint_by_its_own_time(reopen: Any) -> None:
    """Checkpoint 2 is prepared at 5 s and the driver dies; its recovery runs at 100 s, long
    after every key expired by the wall clock: it commits what was prepared, with the
    expiries of 5 s, and deletes nothing that was not due by 5 s."""
    s = reopen(secs=10)
    checkpoint(s, 1, 0, a=1, b=1)
    s.at(5 * S)
    s.put("a", 2)
    s.prepare_commit(2)
    del s
    r = reopen(secs=10)
    r.at(100 * S)
    assert r.prepared_txid() == 2 and r.prepared_time() == 5 * S
    r.commit(2)
    r.at(9 * S)                                       # as of 9 s: both live, a with txid 2's expiry
    assert sorted(reopen(secs=10).expiring_items()) == [("a", 2, 15 * S), ("b", 1, 10 * S)]


def test_the_store_deletes_a_key_a_grace_after_it_expired(reopen: Any) -> None:
    s = reopen(secs=10, grace=5)
    checkpoint(s, 1, 0, a=1, b=1)
    checkpoint(s, 2, 8 * S, b=2)                      # a: expires at 10 s, deleted at 15 s
    checkpoint(s, 3, 14 * S, c=1)
    assert sorted(k for k, _, _ in reopen(secs=10, grace=5).expiring_items()) == ["a", "b", "c"]
    checkpoint(s, 4, 15 * S, c=2)
    assert sorted(k for k, _, _ in reopen(secs=10, grace=5).expiring_items()) == ["b", "c"]
    if isinstance(s, RedisKeyValueState):             # the sorted set of deletion times follows
        got = {f.decode(): int(x) for f, x in s.client.zrange(f"{s.namespace}:~expires", 0, -1, withscores=True)}
        assert got == {"b": 23 * S, "c": 30 * S}


def test_a_key_put_with_its_own_expiry_keeps_it_and_deletes_drop_it(reopen: Any) -> None:
    s = reopen(secs=10)
    s.at(5 * S)
    s.put_expiring("moved", 7, 12 * S)                # a rebalance moves a key with its expiry
    s.put("new", 1)
    s.prepare_commit(1), s.commit(1)
    assert sorted(reopen(secs=10).expiring_items()) == [("moved", 7, 12 * S), ("new", 1, 15 * S)]
    s.delete("new")
    s.prepare_commit(2), s.commit(2)
    assert reopen(secs=10).expiring_items() == [("moved", 7, 12 * S)]
    checkpoint(s, 3, 12 * S)                          # due: deleted by the store (grace 0)
    assert reopen(secs=10).expiring_items() == []


def test_a_state_without_a_ttl_reads_a_ttl_states_values_and_writes_none() -> None:
    ns = f"kvttl-{uuid.uuid4().hex[:10]}:count:0"
    checkpoint(open_key_value_state("memory://", ns, ttl=Ttl.of(10)), 1, 0, a=1)
    plain = open_key_value_state("memory://", ns)
    assert plain.expiring_items() == [("a", 1, 0 + 10 * S)]
    checkpoint(plain, 2, 50 * S, a=2)
    assert plain.expiring_items() == [("a", 2, None)]


@pytest.mark.integration
def test_redis_stores_the_expiry_with_the_value_in_one_field(redis_url: str) -> None:
    ns = f"kvttl-{uuid.uuid4().hex[:10]}:count:0"
    s = open_key_value_state(redis_url, ns, ttl=Ttl.of(10, "write", 5))
    checkpoint(s, 1, 1_000, a=[1, 2])
    client = redis.Redis.from_url(redis_url)
    assert client.hget(ns, "a") == b"\x0111000\x01[1, 2]"
    assert client.zrange(f"{ns}:~expires", 0, -1, withscores=True) == [(b"a", 16_000.0)]


@pytest.mark.integration
def test_on_redis_cluster_the_expiries_share_the_states_slot(redis_cluster_url: str) -> None:
    ns = f"kvttl{uuid.uuid4().hex[:6]}:count:0"

    def opened() -> Any:
        return open_key_value_state(redis_cluster_url, ns, fence_scope=ns.split(":")[0], epoch=1,
                                    ttl=Ttl.of(10, "write", 5))

    s = opened()
    checkpoint(s, 1, 0, a=1, b=1)
    checkpoint(s, 2, 8 * S, b=2)
    checkpoint(s, 3, 15 * S, c=1)                     # a deleted (10 s + 5 s grace)
    assert sorted(opened().expiring_items()) == [("b", 2, 18 * S), ("c", 1, 25 * S)]


# -- through a core stateful bolt --------------------------------------------------------------------

def run_counts(name: str, sentences: list[str], at_secs: float, **conf: Any) -> dict[str, int]:
    """tests/transactional/engine/test_core_topology.py's stateful word count, its ``count`` bolt given ``conf``,
    the driver's wall clock stopped at ``at_secs``."""
    from test_core_topology import AckAll, MemorySpout, SplitWithDelivery, WordCount, config

    b = TopologyBuilder(name)
    b.set_spout("sentences", MemorySpout(sentences, Fields("sentence"), name=name, deliveries=True, per_call=2), 2)
    b.set_bolt("split", SplitWithDelivery(), 2).shuffle_grouping("sentences")
    count = b.set_bolt("count", WordCount(), 3).fields_grouping("split", Fields("word"))
    for k, v in conf.items():
        count.add_configuration(k, v)
    b.set_bolt("after", AckAll(), 1).shuffle_grouping("count")
    r = run_topology(b, config(checkpoint_interval_ms=0, micro_batch_size=4, executor="in-process"),
                     clock=lambda: at_secs)
    return dict(r.key_value_state("count"))


def test_a_stateful_bolt_with_a_ttl_counts_from_nothing_once_its_keys_expired() -> None:
    name = f"kvttl-{uuid.uuid4().hex[:8]}"
    sentences = ["the cow jumped", "over the moon", "the man"]
    truth = dict(collections.Counter(w for s in sentences for w in s.split()))
    ttl = {"topology.state.ttl.secs": 60}
    assert run_counts(name, sentences, 1000, **ttl) == truth
    assert run_counts(name, sentences, 1059, **ttl) == {w: 2 * n for w, n in truth.items()}   # live: adds
    assert run_counts(name, sentences, 1059 + 60, **ttl) == truth                             # expired
    for t in range(3):
        kv = open_key_value_state("memory://", f"{name}:count:{t}")
        assert {x for _, _, x in kv.expiring_items()} <= {(1059 + 60 + 60) * S}


def test_bad_ttl_settings_are_refused_before_any_write() -> None:
    name = f"kvttl-{uuid.uuid4().hex[:8]}"
    with pytest.raises(ConfigError, match=r"bolt 'count': ttl_secs is a number of seconds above 0 .* not -5"):
        run_counts(name, ["a b"], 0, **{"topology.state.ttl.secs": -5})
    with pytest.raises(ConfigError, match=r"bolt 'count': ttl_from is 'write' or 'read', not 'touch'"):
        run_counts(name, ["a b"], 0, **{"topology.state.ttl.secs": 5, "topology.state.ttl.from": "touch"})
    assert open_key_value_state("memory://", f"{name}:count:0").committed_txid() is None


# -- a driver SIGKILLed with a prepared checkpoint ---------------------------------------------------------

@pytest.mark.integration
def test_a_prepared_checkpoint_recovered_after_its_keys_expired_by_the_wall_clock_keeps_its_time(
        tmp_path: Path, redis_url: str, zk_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stateful word count (TTL 3 s, grace 0) is killed after checkpoint 2 was recorded
    prepared. Once its keys expired by the wall clock, a second driver commits it in its
    recovery -- the values and expiries it prepared, nothing swept -- and is killed before its
    own first checkpoint. A third runs to the end: every key expired before its first
    checkpoint, so each word counts exactly the sentences not acked by checkpoint 1."""
    from test_core_servers import Driver, fill, sentences

    r = redis.Redis.from_url(redis_url)
    stream = f"s-{uuid.uuid4().hex[:8]}"
    rows = sentences(240, seed=3)
    ids = fill(r, stream, rows)
    coordination = zk_url + "?session_timeout=1"
    hashes = [f"core-stateful-{stream}:count:{t}" for t in range(2)]
    monkeypatch.setenv("TRIDENT_TEST_TTL", "3")

    def drive(name: str, crash_at: str | None) -> None:
        d = Driver(tmp_path, name, redis_url, stream, "stateful", coordination=coordination, crash_at=crash_at)
        assert d.wait() == (0 if crash_at is None else -signal.SIGKILL), d.tail()

    drive("first", "checkpoint.prepared:txid=2")
    prepared = [r.hgetall(f"{h}:~prepare") for h in hashes]
    times = {p.pop(b"~time") for p in prepared if p}
    assert len(times) == 1 and all(p.pop(b"~txid") == b"2" for p in prepared if p)
    time_ms = int(times.pop())
    assert {int(v[1:].split(b"\x01")[0]) for p in prepared for v in p.values()} == {time_ms + 3 * S}
    group = r.xinfo_groups(stream)[0]
    pending = {e["message_id"].decode() for e in r.xpending_range(stream, "wc", "-", "+", 1000)}
    last = group["last-delivered-id"].decode()
    acked = {i for i in ids if tuple(map(int, i.split("-"))) <= tuple(map(int, last.split("-")))} - pending
    assert acked and pending                             # checkpoint 1 acked some, checkpoint 2 holds some
    while time.time() * 1000 <= time_ms + 3 * S + 50:     # checkpoint 2's keys expired by the wall clock
        time.sleep(0.05)
    drive("second", "checkpoint.preparing:txid=3")
    for h, p in zip(hashes, prepared, strict=True):
        assert {k: v for k, v in r.hgetall(h).items() if k in p} == p     # as prepared, expiries included
        assert not r.exists(f"{h}:~prepare")
    drive("third", None)
    want = collections.Counter(w for i, s in zip(ids, rows, strict=True) if i not in acked for w in s.split())
    got: collections.Counter[str] = collections.Counter()
    for h in hashes:                                      # what the third driver wrote
        for k, v, exp in open_key_value_state(redis_url, h).expiring_items():
            if exp > time_ms + 3 * S:
                got[k] += v
    assert dict(got) == dict(want)
    assert r.xpending(stream, "wc")["pending"] == 0


def test_stateful_tasks_on_executors_stamp_the_checkpoints_time_and_the_driver_commits_it() -> None:
    """``commit_placement="executors"``: the checkpoint's time and each bolt's TTL travel with
    the pickled ``ExecutorKeyValueStates``; the task prepares with them, the driver's commit
    keeps what the task stamped."""
    import pickle

    from state.base import MemoryTransactionalState
    from transactional.engine.core.checkpoint import Checkpointer

    from test_core_topology import AckAll, MemorySpout, SplitWithDelivery, WordCount

    name = f"kvttl-{uuid.uuid4().hex[:8]}"
    b = TopologyBuilder(name)
    b.set_spout("sentences", MemorySpout(["a b"], Fields("sentence"), name=name), 1)
    b.set_bolt("split", SplitWithDelivery(), 1).shuffle_grouping("sentences")
    (b.set_bolt("count", WordCount(), 1).fields_grouping("split", Fields("word"))
     .add_configuration("topology.state.ttl.secs", 30))
    b.set_bolt("after", AckAll(), 1).shuffle_grouping("count")
    cp = Checkpointer(b.build(), "memory://", {}, MemoryTransactionalState(name), 0, time.monotonic, epoch=1,
                      wall_clock=lambda: 100.0)
    cp.recover()
    shipped = pickle.loads(pickle.dumps(cp.on_executors()))       # as the commit job carries it
    task = shipped.for_task("count", 0)
    task.key_value_state().put("a", 1)
    task.finish()                                                 # prepared on the executor
    cp.commit_prepared(shipped)
    kv = open_key_value_state("memory://", f"{name}:count:0")
    assert kv.expiring_items() == [("a", 1, 130 * S)] and kv.committed_txid() == 1


class CountWindows(BaseStatefulWindowedBolt):
    """A persistent windowed bolt: its window lives in its KeyValueState."""

    def init_state(self, state: Any) -> None:
        self.state = state

    def execute(self, window: Any) -> None:
        self.state.put("windows", self.state.get("windows", 0) + 1)


def windows_topology(name: str, items: list[tuple[str]], **conf: Any) -> Any:
    from test_core_topology import MemorySpout

    b = TopologyBuilder(name)
    b.set_spout("s", MemorySpout(items, Fields("word"), name=f"{name}-{items[0][0]}"), 1)
    w = b.set_bolt("w", CountWindows().with_tumbling_window(Count(2)).with_persistence(), 1).global_grouping("s")
    for k, v in conf.items():
        w.add_configuration(k, v)
    return b


def test_a_ttl_on_a_stateful_windowed_bolt_expires_its_keys_by_the_checkpoint_time_never_its_window() -> None:
    """The bolt's own key expires by the checkpoints' recorded times (a fake clock); the
    tuple its window holds across the expiry is still there and fires."""
    from test_core_topology import config

    name = f"kvttl-{uuid.uuid4().hex[:8]}"
    cfg = config(executor="in-process", checkpoint_interval_ms=0)
    ttl = {"topology.state.ttl.secs": 60, "topology.state.ttl.grace.secs": 0}
    kv = lambda: open_key_value_state("memory://", f"{name}:w:0")  # noqa: E731
    run_topology(windows_topology(name, [("a",), ("b",), ("c",)], **ttl), cfg, clock=lambda: 1000)
    assert kv().get("windows") == 1                                  # (a, b) fired; c held
    run_topology(windows_topology(name, [("d",), ("e",)], **ttl), cfg, clock=lambda: 1059)
    assert kv().get("windows") == 2                                  # live: (c, d) added; e held
    run_topology(windows_topology(name, [("f",)], **ttl), cfg, clock=lambda: 1059 + 61)
    assert kv().get("windows") == 1                                  # expired: from nothing; (e, f) fired
    exps = {k: x for k, _, x in kv().expiring_items()}
    assert exps.pop("windows") == (1059 + 61 + 60) * S
    assert sorted(exps) == ["__window__", "__window__:4", "__window__:6"]   # e (held since run 2), f
    assert set(exps.values()) == {None}                              # a window's records never expire


def test_a_prepared_windowed_checkpoint_recovered_later_decides_by_its_own_time() -> None:
    """A driver prepared a checkpoint of a stateful windowed bolt at t=1000 s and died; the
    next, at t=5000 s, commits it in its recovery with the values and expiries the first
    prepared (the same decision), and the window's records without an expiry."""
    from state.base import MemoryTransactionalState
    from transactional.engine.core.checkpoint import Checkpointer

    name = f"kvttl-{uuid.uuid4().hex[:8]}"
    topo = windows_topology(name, [("a",)], **{"topology.state.ttl.secs": 60}).build()
    store = MemoryTransactionalState(name)
    first = Checkpointer(topo, "memory://", {}, store, 0, lambda: 0.0, wall_clock=lambda: 1000.0)
    first.recover()
    st = first.key_value_task("w", 0).key_value_state()
    st.put("windows", 3)
    st.put("__window__", {"seq": 1})
    st.prepare_commit(7)
    store.set("checkpoint", {"txid": 7, "phase": "prepared", "states": [st.namespace]})
    later = Checkpointer(topo, "memory://", {}, store, 0, lambda: 0.0, wall_clock=lambda: 5000.0)
    later.recover()
    items = {k: (v, x) for k, v, x in open_key_value_state("memory://", st.namespace).expiring_items()}
    assert items == {"windows": (3, 1060 * S), "__window__": ({"seq": 1}, None)}
    assert store.get("checkpoint")["phase"] == "committed"
