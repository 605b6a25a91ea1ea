"""The Parquet state (trident.parquet) on real files read back with pyarrow and DuckDB:
deterministic names, markers published last, a replay overwrites, the reader rule, the
epoch fence, bad input, and drivers SIGKILLed at every commit crash point."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import parquet_kill_topology as pqk
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from crash_plans import kill_at_every_crash_point, run_topology_file

from state.errors import ConfigError, LeadershipLostError, UnstorableValueError
from transactional import TopologyConfig, run_topology
from trident.parquet import ParquetStateFactory, committed_files, read_committed
from trident.states import EPOCH, forget_states


def make(path: Path, part: int = 0, parts: int = 1, epoch: int = 1, **kw):
    return ParquetStateFactory(str(path), ["word", "n"], **kw).make_state({EPOCH: epoch}, None, part, parts)


def apply(st, txid: int, rows) -> None:
    st.begin_commit(txid)
    st.add_rows(rows)
    st.commit(txid)


def rows(path: Path) -> list[tuple]:
    t = read_committed(str(path))
    return sorted(zip(t.column("word").to_pylist(), t.column("n").to_pylist(), strict=True)) if t.num_rows else []


def test_replays_overwrite_and_a_txid_is_visible_only_with_all_its_tasks(tmp_path: Path) -> None:
    a, b = make(tmp_path, 0, 2), make(tmp_path, 1, 2)
    apply(a, 1, [("x", 1)])
    apply(b, 1, [("y", 2)])
    apply(a, 2, [("z", 3)])
    assert rows(tmp_path) == [("x", 1), ("y", 2)]        # txid 2: task 1's marker is missing
    apply(a, 2, [("z", 4), ("w", 5)])                   # a replay: the same names, overwritten
    apply(b, 2, [])
    assert rows(tmp_path) == [("w", 5), ("x", 1), ("y", 2), ("z", 4)]
    apply(a, 2, [])                                      # a replay with no rows here: txid 2's file goes
    assert rows(tmp_path) == [("x", 1), ("y", 2)]
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == [
        "_committed/000000000001-00000.json", "_committed/000000000001-00001.json",
        "_committed/000000000002-00000.json", "_committed/000000000002-00001.json", "_epoch",
        "data/000000000001-00000.parquet", "data/000000000001-00001.parquet"]
    m = json.loads((tmp_path / "_committed/000000000001-00001.json").read_text())
    assert m == {"txid": 1, "partition": 1, "num_partitions": 2, "rows": 1, "epoch": 1,
                 "file": "data/000000000001-00001.parquet"}


def test_one_line_reads_with_pyarrow_and_duckdb(tmp_path: Path) -> None:
    import duckdb

    st = make(tmp_path)
    apply(st, 1, [("a", 1), ("b", 2)])
    apply(st, 2, [("c", 3)])
    assert pq.read_table(committed_files(str(tmp_path))).num_rows == 3
    assert duckdb.read_parquet(committed_files(str(tmp_path))).aggregate("sum(n)").fetchall() == [(6,)]


def test_an_fsspec_filesystem(tmp_path: Path) -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    f = ParquetStateFactory(f"/trident-{uuid.uuid4().hex[:6]}", ["word", "n"], filesystem=fs)
    st = f.make_state({EPOCH: 1}, None, 0, 1)
    apply(st, 1, [("a", 1)])
    assert read_committed(f.path, fs).to_pylist() == [{"word": "a", "n": 1}]


def test_a_stale_driver_writes_nothing(tmp_path: Path) -> None:
    old, new = make(tmp_path, epoch=1), make(tmp_path, epoch=2)
    apply(old, 1, [("a", 1)])
    apply(new, 2, [("b", 1)])
    with pytest.raises(LeadershipLostError, match=r"a newer driver \(epoch 2\) writes here; this driver \(epoch 1\)"):
        apply(old, 3, [("c", 1)])
    assert rows(tmp_path) == [("a", 1), ("b", 1)]
    assert not (tmp_path / "data/000000000003-00000.parquet").exists()


def test_a_value_parquet_cannot_store_stops_before_any_file(tmp_path: Path) -> None:
    st = make(tmp_path)
    st.begin_commit(1)
    st.add_rows([("a", 1), ("b", object())])
    with pytest.raises(UnstorableValueError, match=r"column 'n' of txid 1: Parquet cannot store <object object"):
        st.commit(1)
    st.begin_commit(1)
    st.add_rows([("a", 1)])
    schema = pa.schema([("word", pa.string()), ("n", pa.int64())])
    st2 = make(tmp_path / "typed", schema=schema)
    st2.begin_commit(1)
    st2.add_rows([("a", "seven")])
    with pytest.raises(UnstorableValueError, match="column 'n' of txid 1: Parquet cannot store 'seven'"):
        st2.commit(1)
    assert not list(tmp_path.rglob("*.parquet")) and not list(tmp_path.rglob("*.json"))


def test_a_read_only_directory_is_refused_before_any_batch(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        target = "/sys/trident-out"          # root writes through file modes; sysfs refuses it
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        target = str(ro / "out")
    with pytest.raises(ConfigError, match=r"Parquet state directory '.*' cannot be written .*give a directory"):
        ParquetStateFactory(target, ["word"]).make_state({EPOCH: 1}, None, 0, 1)


@pytest.mark.parametrize("flavour", ["transactional", "opaque"])
def test_a_topology_into_parquet_is_exact(tmp_path: Path, flavour: str) -> None:
    os.environ.update(TRIDENT_TEST_PARQUET=str(tmp_path), TRIDENT_TEST_FLAVOUR=flavour,
                      TRIDENT_TEST_TOPOLOGY=f"pq-{uuid.uuid4().hex[:6]}")
    try:
        topo = pqk.build_topology()
    finally:
        for k in ("TRIDENT_TEST_PARQUET", "TRIDENT_TEST_FLAVOUR", "TRIDENT_TEST_TOPOLOGY"):
            os.environ.pop(k)
    run_topology(topo, TopologyConfig(executor="in-process", progress=False, max_spout_pending=3))
    forget_states(topo.topology_id)
    assert sorted(read_committed(str(tmp_path)).column("sentence").to_pylist()) == pqk.sentences()




def run_child(tmp_path: Path, out: Path, tid: str, flavour: str, zk_url: str, crash_at: str | None):
    return run_topology_file(tmp_path, "parquet_kill_topology.py", zk_url, crash_at,
                             {"TRIDENT_TEST_FLAVOUR": flavour, "TRIDENT_TEST_PARQUET": str(out),
                              "TRIDENT_TEST_TOPOLOGY": tid})


@pytest.mark.integration
@pytest.mark.parametrize("flavour", ["transactional", "opaque"])
def test_drivers_killed_at_every_commit_crash_point_leave_the_dataset_exact(
        tmp_path: Path, zk_url: str, flavour: str) -> None:
    out = tmp_path / "out"
    tid = f"pq-kill-{flavour}-{uuid.uuid4().hex[:6]}"
    kill_at_every_crash_point(lambda spec: run_child(tmp_path, out, tid, flavour, zk_url, spec))
    assert sorted(read_committed(str(out)).column("sentence").to_pylist()) == pqk.sentences()
