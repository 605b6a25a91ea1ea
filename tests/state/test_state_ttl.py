"""State that expires (state/map/ttl.py): a map's keys expire by the txids' recorded times,
a replay of a txid decides the same, Redis deletes them with PEXPIREAT in the write's own
script, the memory backing on its writes; through the Trident API with a fake clock, and on
a real redis-server with a real short TTL."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from spouts import MemoryTransactionalSpout
from state.errors import ConfigError
from state.map import MemoryMapBacking, NonTransactionalMap, OpaqueMap, TransactionalMap
from state.map.ttl import Ttl, configure_ttl
from state.redis import RedisMapBacking
from transactional import Fields, TopologyConfig, run_topology
from trident import Count, TridentTopology, state

S = 1000     # ms


def ttl_map(cls: Any, backing: Any = None, secs: float = 10, ttl_from: str = "write", grace: float = 0) -> Any:
    m = cls(backing if backing is not None else MemoryMapBacking())
    return configure_ttl(m, Ttl.of(secs, ttl_from, grace))


def add(m: Any, txid: int, at_ms: int, *keys: str, attempt: int = 1) -> list[Any]:
    m.begin_commit(txid, attempt, epoch=1, time_ms=at_ms)
    out = m.multi_combine(list(keys), [1] * len(keys))
    m.commit(txid)
    return out


# -- the rule, on the memory backing, with the txids' times given --------------------------------

@pytest.mark.parametrize("cls", [TransactionalMap, OpaqueMap, NonTransactionalMap])
def test_a_key_expires_by_the_txids_time_and_comes_back_from_nothing(cls: Any) -> None:
    m = ttl_map(cls, secs=10)
    assert add(m, 1, 0, "a", "b") == [1, 1]
    assert add(m, 2, 5 * S, "a") == [2]              # a: written at 5 s, expires at 15 s
    assert add(m, 3, 12 * S, "c") == [1]             # b expired at 10 s (not read: it simply is)
    assert m.multi_get(["a", "b", "c"]) == [2, None, 1]
    assert add(m, 4, 15 * S, "a", "b") == [1, 1]     # a expired at 15 s: back from nothing
    assert m.multi_get(["a", "b", "c"]) == [1, 1, 1]


@pytest.mark.parametrize("cls", [TransactionalMap, OpaqueMap])
def test_a_replay_of_the_txid_decides_the_same_whenever_it_runs(cls: Any) -> None:
    m = ttl_map(cls, secs=10)
    add(m, 1, 0, "a")
    add(m, 2, 5 * S, "a")                            # a = 2, expires at 15 s
    first = add(m, 3, 20 * S, "a", attempt=1)        # a expired: 1; the driver dies before recording 3
    again = add(m, 3, 20 * S, "a", attempt=2)        # the replay, with txid 3's recorded time
    assert first == again == [1]
    m2 = ttl_map(cls, backing=m.backing, secs=10)    # a new driver's map object: no cache
    assert add(m2, 3, 20 * S, "a", attempt=3) == [1]
    assert add(m2, 4, 21 * S, "a") == [2]


def test_ttl_from_read_moves_the_expiry_of_keys_read_in_a_commit() -> None:
    m = ttl_map(TransactionalMap, secs=10, ttl_from="read")
    add(m, 1, 0, "a", "b")
    m.begin_commit(2, 1, epoch=1, time_ms=8 * S)
    assert m.multi_get(["a"]) == [1]                  # read, not updated: a now expires at 18 s
    m.commit(2)
    assert add(m, 3, 15 * S, "a", "b") == [2, 1]     # b (not read) expired at 10 s
    m = ttl_map(TransactionalMap, secs=10)           # ttl_from="write": a read does not
    add(m, 1, 0, "a")
    m.begin_commit(2, 1, epoch=1, time_ms=8 * S)
    m.multi_get(["a"])
    m.commit(2)
    assert add(m, 3, 15 * S, "a") == [1]


def test_the_memory_backing_deletes_expired_keys_after_the_grace() -> None:
    m = ttl_map(TransactionalMap, secs=10, grace=5)
    add(m, 1, 0, "a", "b")
    add(m, 2, 8 * S, "b")                             # a: expires at 10 s, deleted at 15 s
    add(m, 3, 14 * S, "c")
    assert sorted(m.backing.data) == ["a", "b", "c"]
    add(m, 4, 15 * S, "c")
    assert sorted(m.backing.data) == ["b", "c"]
    assert m.backing.data["b"]["exp"] == 18 * S


def test_bad_ttls_and_counters_are_refused_naming_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"ttl_secs is a number of seconds above 0 .* not -1"):
        state.transactional("c", ttl_secs=-1)
    with pytest.raises(ConfigError, match=r"ttl_from is 'write' or 'read', not 'access'"):
        state.opaque("c", ttl_secs=5, ttl_from="access")
    with pytest.raises(ConfigError, match=r"a counter map adds numbers without reading them.*use "
                                          r"transactional\(name, ttl_secs=\.\.\.\)"):
        state.counters("c", ttl_secs=5)
    m = ttl_map(TransactionalMap, secs=10)
    with pytest.raises(ConfigError, match=r"map .* is opened with ttl_secs=10, ttl_from='write', ttl_grace_secs=0 and "
                                          r"asked for with no TTL: one name, one TTL"):
        configure_ttl(m, None)
    assert configure_ttl(m, Ttl.of(10, "write", 0)) is m


# -- through the engine: the txids' times from the driver's clock ------------------------------------

class Clock:
    """The driver's clock of a test: ``times[i]`` seconds at the i-th call (one call per
    txid, when its first commit begins)."""

    def __init__(self, *times: float) -> None:
        self.times, self.calls = list(times), 0

    def __call__(self) -> float:
        self.calls += 1
        return self.times[self.calls - 1]


@pytest.mark.parametrize("flavour", ["transactional", "opaque", "non_transactional"])
def test_a_trident_count_with_a_ttl_under_a_fake_clock(flavour: str) -> None:
    words = [("a",), ("a",), ("b",), ("a",), ("b",)]
    t = TridentTopology(f"ttl-{uuid.uuid4().hex[:8]}")
    (t.new_stream("words", MemoryTransactionalSpout(words, Fields("word"), 1))
     .group_by(Fields("word"))
     .persistent_aggregate(getattr(state, flavour)("counts", ttl_secs=15), Count(), Fields("count")))
    clock = Clock(0, 10, 20, 40, 50)                  # txids 1..5
    r = run_topology(t.build(), TopologyConfig(executor="in-process", progress=False, max_spout_pending=1),
                     clock=clock)
    assert r.batches_committed == 5 and clock.calls == 5
    # a: 1 at 0 s, 2 at 10 s (expires 25 s), gone by 40 s: 1 again. b: 1 at 20 s (expires
    # 35 s), gone by 50 s: 1 again.
    assert r.map_state("counts").multi_get(["a", "b"]) == [1, 1]
    raw = r.map_state("counts").backing.data
    assert raw["a"]["exp"] == 55 * S and raw["b"]["exp"] == 65 * S


# -- on a real redis-server ----------------------------------------------------------------------------

@pytest.mark.integration
def test_redis_keys_expire_with_their_write_and_a_replay_decides_the_same(redis_url: str,
                                                                           redis_namespace: str) -> None:
    backing = RedisMapBacking.from_url(redis_url, redis_namespace)
    m = ttl_map(TransactionalMap, backing, secs=1, grace=0.5)
    r = backing.client
    now = int(time.time() * 1000)
    add(m, 1, now, "a", "b")
    key = f"{redis_namespace}:a"
    pexpiretime = r.execute_command("PEXPIRETIME", key)
    assert pexpiretime == now + 1500                          # in the write's own script
    assert json.loads(r.get(key))["exp"] == now + 1000
    add(m, 2, now + 200, "a")
    # a replay of txid 3 after a's logical expiry (1.2 s) but before Redis deleted it (1.7 s):
    # both attempts count a from nothing
    first = add(m, 3, now + 1300, "a", attempt=1)
    m2 = ttl_map(TransactionalMap, RedisMapBacking.from_url(redis_url, redis_namespace), secs=1, grace=0.5)
    assert first == add(m2, 3, now + 1300, "a", attempt=2) == [1]
    # b (written at txid 1 only) goes from Redis itself at now + 1.5 s: wait for it
    deadline = time.monotonic() + 10
    while r.exists(f"{redis_namespace}:b") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not r.exists(f"{redis_namespace}:b")
    assert r.exists(key) and r.execute_command("PEXPIRETIME", key) == now + 1300 + 1500
    assert add(m2, 4, now + 1400, "b") == [1]


@pytest.mark.integration
def test_a_trident_count_into_redis_with_a_ttl_sets_every_keys_expiry(redis_url: str) -> None:
    words = [("a",), ("b",), ("a",)]
    tid = f"ttl-redis-{uuid.uuid4().hex[:8]}"
    t = TridentTopology(tid)
    (t.new_stream("words", MemoryTransactionalSpout(words, Fields("word"), 1))
     .group_by(Fields("word"))
     .persistent_aggregate(state.transactional("counts", ttl_secs=3600, ttl_grace_secs=60), Count(),
                           Fields("count")))
    base = int(time.time())                   # Redis deletes by its own clock: times near it
    clock = Clock(base, base + 10, base + 20)
    r = run_topology(t.build(), TopologyConfig(executor="in-process", progress=False, max_spout_pending=1,
                                               state=redis_url), clock=clock)
    assert r.map_state("counts").multi_get(["a", "b"]) == [2, 1]
    client = r.map_state("counts").backing.client
    assert client.execute_command("PEXPIRETIME", f"{tid}:counts:a") == (base + 20 + 3600 + 60) * S
    assert client.execute_command("PEXPIRETIME", f"{tid}:counts:b") == (base + 10 + 3600 + 60) * S


@pytest.mark.integration
def test_a_txid_replayed_after_its_keys_expired_by_the_wall_clock_decides_by_its_recorded_time(
        tmp_path: Any, zk_url: str, redis_url: str, redis_server: Any) -> None:
    """The driver dies after txid 2 wrote ``a`` (2, expiring 1 s after txid 2's time) and
    before recording it; the next driver replays txid 2 after that second has passed by
    the wall clock. By txid 2's recorded time ``a`` is live: the replay stores what the
    first attempt stored (by the wall clock it would start ``a`` from nothing: 1)."""
    import signal

    from crash_plans import run_topology_file

    tid = f"ttl-kill-{uuid.uuid4().hex[:6]}"
    env = {"TRIDENT_TEST_TOPOLOGY": tid, "TRIDENT_TEST_TTL": "1"}
    p = run_topology_file(tmp_path, "ttl_kill_topology.py", zk_url, "commit.before_record:txid=2", env,
                          ["--state", redis_url, "--max-spout-pending", "1"])
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    client = redis_server.client()
    first = json.loads(client.get(f"{tid}:counts:a"))
    assert {k: first[k] for k in ("txid", "val", "prev")} == {"txid": 2, "val": 2, "prev": 1}
    while time.time() * 1000 <= first["exp"] + 50:      # a expired by the wall clock
        time.sleep(0.05)
    p = run_topology_file(tmp_path, "ttl_kill_topology.py", zk_url, None, env,
                          ["--state", redis_url, "--max-spout-pending", "1"])
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(client.get(f"{tid}:counts:a")) == first
    assert json.loads(client.get(f"{tid}:counts:b"))["txid"] == 5     # and the run went on to its end


@pytest.mark.integration
def test_committer_tasks_on_executors_take_the_txids_time(spark_context: Any, redis_url: str) -> None:
    words = [("a",), ("b",), ("a",)]
    tid = f"ttl-exec-{uuid.uuid4().hex[:8]}"
    t = TridentTopology(tid)
    (t.new_stream("words", MemoryTransactionalSpout(words, Fields("word"), 1))
     .group_by(Fields("word"))
     .persistent_aggregate(state.opaque("counts", ttl_secs=3600, ttl_grace_secs=60), Count(), Fields("count"))
     .parallelism_hint(2))
    base = int(time.time())
    cfg = TopologyConfig(spark_master="local[2]", state=redis_url, commit_placement="executors", progress=False,
                         max_spout_pending=1)
    r = run_topology(t.build(), cfg, spark_context=spark_context, clock=Clock(base, base + 10, base + 20))
    assert r.map_state("counts").multi_get(["a", "b"]) == [2, 1]
    client = r.map_state("counts").backing.client
    assert json.loads(client.get(f"{tid}:counts:a"))["exp"] == (base + 20 + 3600) * S
    assert client.execute_command("PEXPIRETIME", f"{tid}:counts:b") == (base + 10 + 3600 + 60) * S


# -- PostgreSQL: trident_expires_at, honoured by the upsert, the lookup and a sweep ----------------

@pytest.mark.integration
def test_postgres_rows_expire_by_the_txids_time_replays_included_and_a_sweep_deletes_them(pg_dsn: str) -> None:
    import psycopg

    from trident.postgres import PostgresStateFactory
    from trident.state import EPOCH, TOPOLOGY_ID

    f = PostgresStateFactory(pg_dsn, "wc", {"word": "text", "count": "bigint"}, key_columns=["word"],
                             add_columns=["count"], create_table=True, ttl_secs=10, ttl_grace_secs=5)
    st = f.make_state({EPOCH: 1, TOPOLOGY_ID: "t"}, None, 0, 1)
    base = 1_700_000_000_000

    def apply(txid: int, at: int, rows: list[tuple[str, int]]) -> None:
        st.begin_time(at)
        st.begin_commit(txid)
        st.add_rows(rows)
        st.commit(txid)

    def table() -> list[tuple[str, int, int]]:
        with psycopg.connect(pg_dsn) as c:
            return [(w, n, int(e.timestamp() * 1000)) for w, n, e in
                    c.execute("SELECT word, count, trident_expires_at FROM wc ORDER BY word").fetchall()]

    apply(1, base, [("a", 1), ("b", 1)])
    apply(2, base + 5 * S, [("a", 1)])                    # a = 2, expires at 15 s
    apply(3, base + 16 * S, [("a", 1), ("c", 1)])         # a expired: 1; b (expired at 10 s) swept
    assert table() == [("a", 1, base + 26 * S), ("c", 1, base + 26 * S)]
    apply(3, base + 16 * S, [("a", 1)])                   # a replay (another batch): a decided the same
    assert table() == [("a", 1, base + 26 * S)]
    st.begin_time(base + 25 * S)
    assert st.lookup(["a", "b"]) == [("a", 1), None]
    st.begin_time(base + 26 * S)
    assert st.lookup(["a"]) == [None]                     # expired: the lookup skips it
    st.close()


# -- what the engine keeps for itself stays bounded -----------------------------------------------------

def test_a_long_run_keeps_the_newest_failures_and_counts_the_rest() -> None:
    from transactional.engine.events import Tally, Transition
    from transactional.result import FAILURES_KEPT, RunResult

    class Failed:
        def __init__(self, txid: int) -> None:
            self.txid = txid

        def describe(self) -> str:
            return f"txid {self.txid}: boom"

    r = RunResult("t")
    tally = Tally(r)            # the listener that fills a RunResult (transactional.engine.events)
    for txid in range(1, FAILURES_KEPT + 6):
        tally(Transition("failed", txid, 1, float(txid), {"failure": Failed(txid)}))
    assert len(r.failures) == FAILURES_KEPT and r.failures_dropped == 5
    assert r.failures[0] == "txid 6: boom" and r.failures[-1] == f"txid {FAILURES_KEPT + 5}: boom"
    assert r.summary()["failed_attempts"] == FAILURES_KEPT + 5
