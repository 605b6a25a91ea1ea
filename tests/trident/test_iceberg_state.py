"""The Iceberg state (trident.iceberg) on a real SQL catalog (SQLite) and local warehouse,
read back by pyiceberg's own scan (DuckDB's iceberg extension is downloaded at first use,
which this machine cannot do): the txid in each snapshot's summary, replays replaced, the
epoch fence and concurrent writers refused by the catalog's compare-and-swap, bad input,
and drivers SIGKILLed at every commit crash point."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from pathlib import Path

import lake_kill_topology as lk
import lake_pause as lp
import pytest
from crash_plans import crash_plan, run_topology_file

from state.errors import ConfigError, LeadershipLostError, StateAheadError, UnstorableValueError
from transactional import Fields, TopologyConfig, run_topology
from trident.iceberg import IcebergStateFactory, sql_catalog
from trident.state import EPOCH, TOPOLOGY_ID, forget_states

COUNTS = lk.COUNTS


def make(f: IcebergStateFactory, epoch: int = 1, part: int = 0, parts: int = 1):
    return f.make_state({EPOCH: epoch, TOPOLOGY_ID: "t"}, None, part, parts)


def apply(st, txid: int, rows) -> None:
    st.begin_commit(txid)
    st.add_rows(rows)
    st.commit(txid)


def read(cat: dict, table: str, columns: str) -> list[tuple]:
    """``SELECT columns`` with DuckDB over pyiceberg's scan of the table's current snapshot."""
    import duckdb
    from pyiceberg.catalog import load_catalog

    props = dict(cat)
    arrow = load_catalog(props.pop("name"), **props).load_table(table).scan().to_arrow()  # noqa: F841 - read by DuckDB
    return sorted(duckdb.connect().sql(f"SELECT {columns} FROM arrow").fetchall())


def test_add_mode_counts_once_and_a_replay_rebuilds_from_the_values_before(tmp_path: Path) -> None:
    cat = sql_catalog(str(tmp_path))
    f = IcebergStateFactory(cat, "trident.counts", COUNTS, mode="add", key_fields=["word"], create=True)
    st = make(f)
    apply(st, 1, [("a", 1), ("b", 2), ("a", 3)])
    apply(st, 2, [("a", 10), ("c", 1)])
    apply(st, 2, [("b", 5)])                                # txid 2 again, another batch (opaque replay)
    assert read(cat, "trident.counts", "word, count") == [("a", 4), ("b", 7)]
    apply(st, 2, [("b", 5)])                                # the same batch again: no change
    apply(st, 3, [("c", 1)])
    assert read(cat, "trident.counts", "word, count") == [("a", 4), ("b", 7), ("c", 1)]
    assert [t for _, t in f.snapshots()] == [1, 2, 2, 2, 2, 2, 2, 3]   # an overwrite of rows: a delete and an append snapshot
    assert sorted((r["word"], r["count"]) for r in f.read_as_of(2).to_pylist()) == [("a", 4), ("b", 7)]
    assert f.committed_txid() == 3


def test_upsert_and_append_replays(tmp_path: Path) -> None:
    cat = sql_catalog(str(tmp_path))
    st = make(IcebergStateFactory(cat, "trident.latest", COUNTS, mode="upsert", key_fields=["word"], create=True))
    apply(st, 1, [("a", 1), ("b", 2), ("a", 3)])
    apply(st, 2, [("a", 5), ("c", 9)])
    apply(st, 2, [("b", 6)])
    assert read(cat, "trident.latest", "word, count") == [("a", 3), ("b", 6)]
    log = make(IcebergStateFactory(cat, "trident.log", lk.SENTENCES, create=True))
    apply(log, 1, [("x",), ("y",)])
    apply(log, 2, [("z",)])
    apply(log, 2, [("z",), ("w",)])
    assert read(cat, "trident.log", "sentence, trident_txid") == [("w", 2), ("x", 1), ("y", 1), ("z", 2)]
    apply(log, 2, [])
    assert read(cat, "trident.log", "sentence") == [("x",), ("y",)]


def test_a_stale_driver_and_a_table_ahead_are_refused(tmp_path: Path) -> None:
    cat = sql_catalog(str(tmp_path))
    f = IcebergStateFactory(cat, "trident.log", lk.SENTENCES, create=True)
    old, new = make(f, epoch=1), make(f, epoch=2)
    apply(old, 1, [("a",)])
    apply(new, 5, [("b",)])
    with pytest.raises(LeadershipLostError, match=r"a newer driver \(epoch 2\) writes state 't:trident.log'; this driver \(epoch 1\)"):
        apply(old, 6, [("c",)])
    with pytest.raises(StateAheadError, match=r"holds txid 5, newer than the batch's 3"):
        apply(make(f, epoch=2), 3, [("d",)])
    assert read(cat, "trident.log", "sentence") == [("a",), ("b",)]


def test_bad_input(tmp_path: Path) -> None:
    cat = sql_catalog(str(tmp_path))
    with pytest.raises(ConfigError, match=r"there is no Iceberg table 'trident.t' in the catalog; pass create=True"):
        make(IcebergStateFactory(cat, "trident.t", COUNTS))
    make(IcebergStateFactory(cat, "trident.t", COUNTS, create=True))
    other = Fields("word", "count", types={"word": "string", "count": "float64"})
    with pytest.raises(ConfigError, match=r"(?s)column\(s\) \['count'\] differ.\n  table:  word: large_string, count: int64.*"
                                          r"\n  stream: word: string, count: double"):
        make(IcebergStateFactory(cat, "trident.t", other))
    st = make(IcebergStateFactory(cat, "trident.t", COUNTS))
    st.begin_commit(1)
    st.add_rows([("a", "seven")])
    with pytest.raises(UnstorableValueError, match=r"column 'count' \(int64\) of txid 1: cannot store 'seven'"):
        st.commit(1)
    assert read(cat, "trident.t", "word") == []
    ro = {**sql_catalog(str(tmp_path)), "warehouse": "file:///sys/trident-iceberg" if os.geteuid() == 0
          else "file:///proc/trident-iceberg"}
    with pytest.raises(ConfigError, match=r"iceberg:trident.u: the table cannot be created .*give a warehouse location"):
        make(IcebergStateFactory(ro, "trident.u", COUNTS, create=True))


def test_a_concurrent_writer_is_caught_by_the_catalogs_compare_and_swap_and_nothing_is_lost(tmp_path: Path) -> None:
    cat = sql_catalog(str(tmp_path))
    f = IcebergStateFactory(cat, "trident.counts", COUNTS, mode="add", key_fields=["word"], create=True)
    apply(make(f), 1, [("a", 1), ("z", 5)])

    def delete_z() -> None:        # another writer commits while the task waits to commit txid 2
        f.load_catalog().load_table("trident.counts").delete("word == 'z'")
    p = lp.commit_paused("iceberg", tmp_path, delete_z)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "retrying" not in p.stderr                # pyiceberg did not replay it on its own: the state did
    assert read(cat, "trident.counts", "word, count") == [("a", 11), ("b", 1)]


def test_a_driver_paused_between_its_check_and_its_commit_is_refused(tmp_path: Path) -> None:
    cat = sql_catalog(str(tmp_path))
    f = IcebergStateFactory(cat, "trident.counts", COUNTS, mode="add", key_fields=["word"], create=True)
    apply(make(f), 1, [("a", 1)])
    p = lp.commit_paused("iceberg", tmp_path, lambda: apply(make(f, epoch=2), 2, [("a", 100)]))
    assert p.returncode == 3
    assert p.stdout.startswith("LeadershipLostError") and "a newer driver (epoch 2)" in p.stdout
    assert read(cat, "trident.counts", "word, count") == [("a", 101)]


@pytest.mark.parametrize("flavour", ["transactional"])     # opaque: the kill test below
def test_a_topology_into_iceberg_is_exact(tmp_path: Path, flavour: str) -> None:
    os.environ.update(TRIDENT_TEST_LAKE="iceberg", TRIDENT_TEST_LAKE_DIR=str(tmp_path), TRIDENT_TEST_FLAVOUR=flavour,
                      TRIDENT_TEST_TOPOLOGY=f"ice-{uuid.uuid4().hex[:6]}")
    try:
        topo = lk.build_topology()
    finally:
        for k in ("TRIDENT_TEST_LAKE", "TRIDENT_TEST_LAKE_DIR", "TRIDENT_TEST_FLAVOUR", "TRIDENT_TEST_TOPOLOGY"):
            os.environ.pop(k)
    run_topology(topo, TopologyConfig(executor="in-process", progress=False, max_spout_pending=3))
    forget_states(topo.topology_id)
    cat = sql_catalog(str(tmp_path))
    assert [s for (s,) in read(cat, "trident.sentences", "sentence")] == lk.sentences()
    assert dict(read(cat, "trident.counts", "word, count")) == lk.expected()


@pytest.mark.integration
@pytest.mark.parametrize("flavour", ["opaque"])           # transactional: the same path, tested on Delta
def test_drivers_killed_at_every_commit_crash_point_leave_the_tables_exact(
        tmp_path: Path, zk_url: str, flavour: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    tid = f"ice-kill-{flavour}-{uuid.uuid4().hex[:6]}"

    def run(spec: str | None) -> subprocess.CompletedProcess[str]:
        return run_topology_file(tmp_path, "lake_kill_topology.py", zk_url, spec,
                                 {"TRIDENT_TEST_LAKE": "iceberg", "TRIDENT_TEST_LAKE_DIR": str(out),
                                  "TRIDENT_TEST_FLAVOUR": flavour, "TRIDENT_TEST_TOPOLOGY": tid})
    plan = crash_plan()
    for spec in ["iceberg.before_commit:txid=1,task=1", plan[0], "iceberg.before_commit:txid=3,task=0", *plan[1:]]:
        p = run(spec)
        assert p.returncode == -signal.SIGKILL and f"crash point {spec.split(':')[0]}" in p.stderr, (spec, p.stderr)
    assert run(None).returncode == 0
    cat = sql_catalog(str(out))
    assert [s for (s,) in read(cat, "trident.sentences", "sentence")] == lk.sentences()
    assert dict(read(cat, "trident.counts", "word, count")) == lk.expected()
