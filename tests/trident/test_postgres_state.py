"""The PostgreSQL state (trident.postgres) on a real PostgreSQL 15 server: one SQL
transaction per task and batch holding the rows and the txid, undo-and-redo of a replayed
txid, the epoch fence, the checks before anything is written, and drivers SIGKILLed at
every commit crash point, read back with SELECT."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pg_kill_topology as pgk
import psycopg
import pytest
from crash_plans import kill_at_every_crash_point, run_topology_file

from spouts import MemoryTransactionalSpout
from state.errors import (
    ConfigError,
    LeadershipLostError,
    StateAheadError,
    StateUnavailableError,
    UnstorableValueError,
)
from transactional import Fields, TopologyConfig, run_topology
from transactional.testing import free_port
from trident import TridentTopology
from trident.postgres import PostgresLookup, PostgresStateFactory
from trident.state import EPOCH, TOPOLOGY_ID, forget_states

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def select(dsn: str, sql: str) -> list[tuple]:
    with psycopg.connect(dsn) as c:
        return [tuple(r) for r in c.execute(sql).fetchall()]


def counts(dsn: str) -> dict:
    return dict(select(dsn, "SELECT word, count FROM word_counts"))


def make(f: PostgresStateFactory, epoch: int = 1, part: int = 0):
    return f.make_state({EPOCH: epoch, TOPOLOGY_ID: "t"}, None, part, 1)


def apply(st, txid: int, rows) -> None:
    st.begin_commit(txid)
    st.add_rows(rows)
    st.commit(txid)


# -- the mechanism, state by state call ----------------------------------------------------------

def test_upsert_adds_exactly_once_and_a_replayed_txid_is_undone_then_redone(pg_dsn: str) -> None:
    st = make(pgk.counts_factory(pg_dsn))
    apply(st, 1, [("a", 1), ("b", 2), ("a", 3)])          # a's rows of one batch summed
    assert counts(pg_dsn) == {"a": 4, "b": 2}
    apply(st, 2, [("a", 10), ("c", 1)])
    # txid 2 again, another batch (an opaque replay): txid 2's first write is taken back
    apply(st, 2, [("b", 5)])
    assert counts(pg_dsn) == {"a": 4, "b": 7}
    apply(st, 2, [("b", 5)])                              # the same batch again: no change
    assert counts(pg_dsn) == {"a": 4, "b": 7}
    apply(st, 3, [("c", 1)])
    assert counts(pg_dsn) == {"a": 4, "b": 7, "c": 1}
    assert select(pg_dsn, "SELECT part, txid, epoch FROM trident_txids WHERE state = 't:word_counts' ORDER BY part") \
        == [(-1, 0, 1), (0, 3, 1)]
    st.close()


def test_append_rows_carry_their_batch_and_a_replay_replaces_them(pg_dsn: str) -> None:
    st = make(pgk.log_factory(pg_dsn))
    apply(st, 1, [("x",), ("y",)])
    apply(st, 2, [("z",)])
    apply(st, 2, [("z",), ("w",)])
    assert select(pg_dsn, "SELECT sentence, trident_txid, trident_partition FROM sentences ORDER BY sentence") == [
        ("w", 2, 0), ("x", 1, 0), ("y", 1, 0), ("z", 2, 0)]
    apply(st, 2, [])       # a replay that gives this task no rows still takes txid 2's back
    assert select(pg_dsn, "SELECT sentence FROM sentences ORDER BY sentence") == [("x",), ("y",)]
    st.close()


def test_a_stale_driver_writes_nothing(pg_dsn: str) -> None:
    f = pgk.counts_factory(pg_dsn)
    old, new = make(f, epoch=1), make(f, epoch=2)
    apply(old, 1, [("a", 1)])
    apply(new, 2, [("a", 1)])
    with pytest.raises(LeadershipLostError, match=r"a newer driver \(epoch above 1\) writes state 't:word_counts'"):
        apply(old, 3, [("a", 100)])
    assert counts(pg_dsn) == {"a": 2}
    assert select(pg_dsn, "SELECT txid, epoch FROM trident_txids WHERE part = 0") == [(2, 2)]
    old.close()
    new.close()


def test_a_state_ahead_of_the_batch_stops(pg_dsn: str) -> None:
    st = make(pgk.counts_factory(pg_dsn))
    apply(st, 5, [("a", 1)])
    with pytest.raises(StateAheadError, match="holds txid 5, newer than the batch's 3"):
        apply(st, 3, [("a", 1)])
    assert counts(pg_dsn) == {"a": 1}
    st.close()


# -- bad input: each stops before anything is written, naming the fix -----------------------------

def test_a_missing_table_gives_the_create_table_statement(pg_dsn: str) -> None:
    f = PostgresStateFactory(pg_dsn, "wc", {"word": "text", "count": "bigint"}, key_columns=["word"])
    with pytest.raises(ConfigError, match=r"table 'wc' does not exist; create it:\n  CREATE TABLE \"wc\" \(\"word\" "
                                          r"text, \"count\" bigint, PRIMARY KEY \(\"word\"\)\);\nor pass "
                                          r"create_table=True"):
        make(f)
    assert select(pg_dsn, "SELECT to_regclass('wc')") == [(None,)]


def test_names_are_used_as_written_mixed_case_and_reserved_words(pg_dsn: str) -> None:
    f = PostgresStateFactory(pg_dsn, "WordCounts", {"Word": "text", "order": "bigint", "count": "bigint"},
                             key_columns=["Word", "order"], add_columns=["count"], create_table=True)
    st = make(f)
    apply(st, 1, [("a", 1, 2), ("b", 1, 1)])
    apply(st, 2, [("a", 1, 5)])
    apply(st, 2, [("a", 1, 7)])                            # a replay: undone by the quoted key names
    assert select(pg_dsn, 'SELECT "Word", "order", count FROM "WordCounts" ORDER BY 1') == [("a", 1, 9), ("b", 1, 1)]
    assert st.lookup([("a", 1), ("z", 1)]) == [("a", 1, 9), None]
    assert select(pg_dsn, "SELECT to_regclass('wordcounts')") == [(None,)]
    st.close()
    log = PostgresStateFactory(pg_dsn, "public.Log Lines", {"select": "text"}, mode="append", create_table=True)
    st = make(log)
    apply(st, 1, [("x",)])
    apply(st, 1, [("y",)])
    assert select(pg_dsn, 'SELECT "select", trident_txid FROM public."Log Lines"') == [("y", 1)]
    st.close()


def test_a_name_postgres_cannot_hold_is_refused_and_folding_is_explained(pg_dsn: str) -> None:
    for table, why in [("a.b.c", "has more than one '.'"), ("", "is empty"), ("x" * 64, "is longer than 63 bytes"),
                       ("a\x00b", "holds a NUL character")]:
        with pytest.raises(ConfigError, match=f"table '.*' {re.escape(why)}.*give a name PostgreSQL can hold"):
            PostgresStateFactory(pg_dsn, table, ["word"], mode="append")
    with pytest.raises(ConfigError, match=r"column 'é+' is longer than 63 bytes"):
        PostgresStateFactory(pg_dsn, "t", ["é" * 32], mode="append")
    with psycopg.connect(pg_dsn) as c:
        c.execute("CREATE TABLE wordcounts (word text PRIMARY KEY, count bigint)")
    f = PostgresStateFactory(pg_dsn, "WordCounts", ["word", "count"], key_columns=["word"])
    with pytest.raises(ConfigError, match=r"table 'WordCounts' does not exist \(names are used as written; a table "
                                          r"wordcounts exists: name it 'wordcounts'\)"):
        make(f)


def test_a_null_upsert_key_is_refused_before_anything_is_written(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as c:      # a unique index allows NULLs: ON CONFLICT never matches one
        c.execute("CREATE TABLE wc (word text, count bigint)")
        c.execute("CREATE UNIQUE INDEX ON wc (word)")
    st = make(PostgresStateFactory(pg_dsn, "wc", ["word", "count"], key_columns=["word"], add_columns=["count"]))
    st.begin_commit(1)
    st.add_rows([("a", 1)])
    with pytest.raises(UnstorableValueError, match=r"table 'wc': key column\(s\) \['word'\] of row \(None, 2\) are "
                                                   r"None; an upsert key cannot be NULL"):
        st.add_rows([(None, 2)])
    st.commit(1)
    apply(st, 1, [("a", 1)])                                 # the replay
    assert select(pg_dsn, "SELECT word, count FROM wc") == [("a", 1)]
    st.close()


def test_a_column_that_does_not_match(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as c:
        c.execute("CREATE TABLE wc (word text PRIMARY KEY, n bigint)")
    f = PostgresStateFactory(pg_dsn, "wc", ["word", "count"], key_columns=["word"])
    with pytest.raises(ConfigError, match=r"table 'wc' has no column\(s\) \['count'\] \(it has \['n', 'word'\]\)"):
        make(f)
    f = PostgresStateFactory(pg_dsn, "wc", {"word": "text", "n": "text"}, key_columns=["word"])
    with pytest.raises(ConfigError, match="column 'n' of table 'wc' is bigint, but this state declares it text"):
        make(f)
    f = PostgresStateFactory(pg_dsn, "wc", ["word", "n"], key_columns=["n"])
    with pytest.raises(ConfigError, match=r"needs a primary key or unique index on \['n'\]; add one: ALTER TABLE"):
        make(f)


def test_a_value_the_table_cannot_store(pg_dsn: str) -> None:
    st = make(pgk.counts_factory(pg_dsn))
    st.begin_commit(1)
    with pytest.raises(UnstorableValueError, match=r"column 'count': psycopg cannot send <object object"):
        st.add_rows([("a", object())])
    st.begin_commit(1)
    st.add_rows([("a", 1), ("b", "not a number")])
    with pytest.raises(UnstorableValueError, match="PostgreSQL refused a value of txid 1: .*nothing of the batch"):
        st.commit(1)
    assert counts(pg_dsn) == {}
    assert select(pg_dsn, "SELECT count(*) FROM trident_txids WHERE part = 0 AND txid > 0") == [(0,)]
    st.close()


def test_an_unreachable_server() -> None:
    f = PostgresStateFactory(f"postgresql://postgres@127.0.0.1:{free_port()}/x", "wc", ["word"], mode="append",
                             connect_timeout=1)
    with pytest.raises(StateUnavailableError, match=r"PostgreSQL for table 'wc' cannot be reached at "
                                                    r"postgresql://postgres@127.0.0.1:\d+/x: .*Start the server"):
        make(f)


# -- in a topology ----------------------------------------------------------------------------------

@pytest.mark.parametrize("flavour", ["transactional", "opaque"])
def test_a_word_count_into_postgres_is_exact(pg_dsn: str, flavour: str) -> None:
    os.environ["TRIDENT_TEST_PG"] = pg_dsn
    os.environ["TRIDENT_TEST_FLAVOUR"] = flavour
    os.environ["TRIDENT_TEST_TOPOLOGY"] = f"pg-{uuid.uuid4().hex[:6]}"
    try:
        topo = pgk.build_topology()
    finally:
        for k in ("TRIDENT_TEST_PG", "TRIDENT_TEST_FLAVOUR", "TRIDENT_TEST_TOPOLOGY"):
            os.environ.pop(k)
    run_topology(topo, TopologyConfig(executor="in-process", progress=False, max_spout_pending=3))
    forget_states(topo.topology_id)
    assert counts(pg_dsn) == pgk.expected()
    assert sorted(r[0] for r in select(pg_dsn, "SELECT sentence FROM sentences")) == sorted(
        s for rows in pgk.DATA.values() for (s,) in rows)


def test_state_query_reads_the_table(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as c:
        c.execute("CREATE TABLE prices (item text PRIMARY KEY, price bigint)")
        c.execute("INSERT INTO prices VALUES ('apple', 3), ('pear', 5)")
    t = TridentTopology(f"pgq-{uuid.uuid4().hex[:6]}")
    prices = t.new_static_state(PostgresStateFactory(pg_dsn, "prices", ["item", "price"], key_columns=["item"]))
    seen: list = []
    (t.new_stream("s", MemoryTransactionalSpout({0: [("apple",), ("kiwi",), ("pear",)]}, Fields("item"), 2))
     .state_query(prices, Fields("item"), PostgresLookup(["price"]), Fields("price"))
     .filter(Fields("item", "price"), lambda tp: seen.append(tuple(tp)) or True))
    run_topology(t.build(), TopologyConfig(executor="in-process", progress=False))
    forget_states(t.topology_id)
    assert sorted(seen) == [("apple", 3), ("kiwi", None), ("pear", 5)]


# -- drivers SIGKILLed at every commit crash point ---------------------------------------------------



def run_child(tmp_path: Path, dsn: str, tid: str, flavour: str, zk_url: str, crash_at: str | None,
              args: tuple[str, ...] = ()):
    return run_topology_file(tmp_path, "pg_kill_topology.py", zk_url, crash_at,
                             {"TRIDENT_TEST_FLAVOUR": flavour, "TRIDENT_TEST_PG": dsn, "TRIDENT_TEST_TOPOLOGY": tid}, args)


@pytest.mark.parametrize("flavour", ["transactional", "opaque"])
def test_drivers_killed_at_every_commit_crash_point_leave_the_tables_exact(
        tmp_path: Path, pg_dsn: str, zk_url: str, flavour: str) -> None:
    """One driver per crash point (txid 2, 4, 6 ...), each SIGKILLed there; then one runs to
    the end. SELECT gives the fault-free counts and every sentence once."""
    tid = f"pg-kill-{flavour}-{uuid.uuid4().hex[:6]}"
    kill_at_every_crash_point(lambda spec: run_child(tmp_path, pg_dsn, tid, flavour, zk_url, spec))
    assert counts(pg_dsn) == pgk.expected()
    got = sorted(r[0] for r in select(pg_dsn, "SELECT sentence FROM sentences"))
    assert got == sorted(s for rows in pgk.DATA.values() for (s,) in rows)


def test_commits_on_spark_executors_reach_the_same_table(pg_dsn: str, spark_context, redis_url: str) -> None:
    """commit_placement='executors': each committer task opens its state in its executor
    process (the factory pickled there), the epoch shipped with the commit job."""
    os.environ.update(TRIDENT_TEST_PG=pg_dsn, TRIDENT_TEST_FLAVOUR="opaque",
                      TRIDENT_TEST_TOPOLOGY=f"pg-ex-{uuid.uuid4().hex[:6]}")
    try:
        topo = pgk.build_topology()
    finally:
        for k in ("TRIDENT_TEST_PG", "TRIDENT_TEST_FLAVOUR", "TRIDENT_TEST_TOPOLOGY"):
            os.environ.pop(k)
    run_topology(topo, TopologyConfig(executor="spark", spark_master="local[2]", commit_placement="executors",
                                      state=redis_url, progress=False, max_spout_pending=3),
                 spark_context=spark_context)
    assert counts(pg_dsn) == pgk.expected()
    assert select(pg_dsn, "SELECT DISTINCT epoch FROM trident_txids WHERE part >= 0") == [(1,)]


def test_a_paused_driver_resumed_after_a_takeover_writes_nothing(tmp_path: Path, pg_dsn: str, zk_url: str) -> None:
    """Driver A stops (SIGSTOP: a GC pause, a frozen VM) at the start of txid 5's commit,
    before its committers write. Its ZooKeeper session expires; driver B takes the lock
    and commits txid 5 and 6. A resumes: its tables' fence row holds B's epoch, so its
    write of txid 5 is refused and A stops. Driver C finishes: the counts are exact."""
    from transactional.testing._process import wait_until

    tid = f"pg-stale-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "TRIDENT_TEST_FLAVOUR": "transactional", "TRIDENT_TEST_PG": pg_dsn,
           "TRIDENT_TEST_TOPOLOGY": tid, "TRIDENT_PAUSE_AT": "commit.before:txid=5",
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "support"), str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("TRIDENT_CRASH_AT", None)
    err = tmp_path / "a.err"
    cmd = [sys.executable, "-m", "transactional.ops.cli", "run", str(REPO / "tests" / "support" / "pg_kill_topology.py"),
           "--set", "executor=in-process", "--coordination", zk_url + "?session_timeout=1", "--state", "memory://",
           "--max-spout-pending", "1", "--lock-wait", "30", "-q"]
    with open(err, "wb") as e:
        a = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=e, start_new_session=True)
    try:
        wait_until(lambda: "pause point commit.before" in err.read_text() or a.poll() is not None, 120,
                   what="driver A to pause in the commit of txid 5")
        assert a.poll() is None, err.read_text()[-3000:]
        before = counts(pg_dsn)
        b = run_child(tmp_path, pg_dsn, tid, "transactional", zk_url, None, ("--max-batches", "2"))
        assert b.returncode == 0, b.stderr[-3000:]
        after_b = counts(pg_dsn)
        assert after_b != before
        os.kill(a.pid, signal.SIGCONT)
        assert a.wait(120) != 0
        text = err.read_text()
        assert "lost its lock and writes nothing" in text, text[-3000:]
        assert counts(pg_dsn) == after_b                      # A wrote nothing
    finally:
        if a.poll() is None:
            os.killpg(a.pid, signal.SIGKILL)
            a.wait()
    c = run_child(tmp_path, pg_dsn, tid, "transactional", zk_url, None)
    assert c.returncode == 0, c.stderr[-3000:]
    assert counts(pg_dsn) == pgk.expected()
