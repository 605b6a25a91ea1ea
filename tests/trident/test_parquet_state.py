"""The Parquet state (trident.parquet) on real files read back with pyarrow and DuckDB:
deterministic names, markers published last, a replay overwrites, the reader rule, the
epoch fence, bad input, and drivers SIGKILLed at every commit crash point."""

from __future__ import annotations

import json
import os
import re
import threading
import uuid
from pathlib import Path
from typing import Any

import parquet_kill_topology as pqk
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from crash_plans import kill_at_every_crash_point, run_topology_file
from fsspec.implementations.local import LocalFileSystem

from state.errors import ConfigError, LeadershipLostError, UnstorableValueError
from transactional import TopologyConfig, run_topology
from trident.parquet import ParquetStateFactory, committed_files, read_committed
from trident.state import EPOCH, forget_states


def make(path: Path, part: int = 0, parts: int = 1, epoch: int = 1, **kw):
    return ParquetStateFactory(str(path), ["word", "n"], **kw).make_state({EPOCH: epoch}, None, part, parts)


def apply(st, txid: int, rows) -> None:
    st.begin_commit(txid)
    st.add_rows(rows)
    st.commit(txid)


def rows(path: Path) -> list[tuple]:
    t = read_committed(str(path))
    return sorted(zip(t.column("word").to_pylist(), t.column("n").to_pylist(), strict=True)) if t.num_rows else []


def files(path: Path) -> list[str]:
    """The files under ``path``, a data file's random part as ``*``."""
    return sorted(re.sub(r"-[0-9a-f]{8}\.parquet$", "-*.parquet", p.relative_to(path).as_posix())
                  for p in path.rglob("*") if p.is_file())


def test_replays_replace_and_a_txid_is_visible_only_with_all_its_tasks(tmp_path: Path) -> None:
    a, b = make(tmp_path, 0, 2), make(tmp_path, 1, 2)
    apply(a, 1, [("x", 1)])
    apply(b, 1, [("y", 2)])
    apply(a, 2, [("z", 3)])
    assert rows(tmp_path) == [("x", 1), ("y", 2)]        # txid 2: task 1's marker is missing
    apply(a, 2, [("z", 4), ("w", 5)])                   # a replay: a new file, the same marker name
    apply(b, 2, [])
    assert rows(tmp_path) == [("w", 5), ("x", 1), ("y", 2), ("z", 4)]
    apply(a, 2, [])                                      # a replay with no rows here: txid 2's rows go
    assert rows(tmp_path) == [("x", 1), ("y", 2)]
    # The superseded files of txid 2 stay (a reader may hold a list naming them) ...
    assert files(tmp_path) == [
        "_committed/000000000001-00000-e1.json", "_committed/000000000001-00001-e1.json",
        "_committed/000000000002-00000-e1.json", "_committed/000000000002-00001-e1.json", "_epoch",
        "data/000000000001-00000-e1-*.parquet", "data/000000000001-00001-e1-*.parquet",
        "data/000000000002-00000-e1-*.parquet", "data/000000000002-00000-e1-*.parquet"]
    apply(a, 3, [])                                      # ... until the task's next txid commits
    assert [f for f in files(tmp_path) if f.startswith("data/")] == [
        "data/000000000001-00000-e1-*.parquet", "data/000000000001-00001-e1-*.parquet"]
    m = json.loads((tmp_path / "_committed/000000000001-00001-e1.json").read_text())
    assert m == {"txid": 1, "partition": 1, "num_partitions": 2, "rows": 1, "epoch": 1,
                 "file": m["file"]}
    assert re.fullmatch(r"data/000000000001-00001-e1-[0-9a-f]{8}\.parquet", m["file"])


class PausingFS(LocalFileSystem):
    """The local file system, but a write of a data file stops half way (its first part
    flushed to disk) until ``go`` is set; ``paused`` is set when it stops."""

    def __init__(self) -> None:
        super().__init__()
        self.paused, self.go = threading.Event(), threading.Event()

    def _open(self, path: str, mode: str = "rb", block_size: Any = None, **kwargs: Any) -> Any:
        f = super()._open(path, mode, block_size, **kwargs)
        if "w" not in mode or not str(path).endswith(".parquet"):
            return f
        write, state = f.write, {"n": 0}

        def half_then_wait(data: Any) -> int:
            state["n"] += 1
            if state["n"] == 2:                          # the magic bytes went already
                f.flush()
                self.paused.set()
                assert self.go.wait(30)
            return int(write(data))

        f.write = half_then_wait
        return f


def test_a_reader_never_sees_a_file_a_replay_is_rewriting(tmp_path: Path) -> None:
    fs = PausingFS()
    st = ParquetStateFactory(str(tmp_path), ["word", "n"], filesystem=fs).make_state({EPOCH: 1}, None, 0, 1)
    fs.go.set()
    apply(st, 1, [("a", 1), ("b", 2)])
    fs.paused.clear()
    fs.go.clear()
    replay = threading.Thread(target=apply, args=(st, 1, [("a", 10), ("b", 20), ("c", 30)]))
    replay.start()
    assert fs.paused.wait(30)
    assert rows(tmp_path) == [("a", 1), ("b", 2)]        # the old rows, read through the markers
    assert len(committed_files(str(tmp_path))) == 1
    assert len(list((tmp_path / "data").iterdir())) == 2   # the first attempt's file and the half-written one
    fs.go.set()
    replay.join(30)
    assert rows(tmp_path) == [("a", 10), ("b", 20), ("c", 30)]


def test_a_takeover_replay_switches_a_txid_for_all_its_tasks_at_once(tmp_path: Path) -> None:
    a1, b1 = make(tmp_path, 0, 2, epoch=1), make(tmp_path, 1, 2, epoch=1)
    apply(a1, 1, [("x", 1)])
    apply(b1, 1, [("y", 1)])                             # txid 1 written, not recorded; the driver dies
    a2, b2 = make(tmp_path, 0, 2, epoch=2), make(tmp_path, 1, 2, epoch=2)
    apply(a2, 1, [("x", 2)])                             # the new driver's replay (an opaque spout's other batch)
    assert rows(tmp_path) == [("x", 1), ("y", 1)]        # all of the first attempt, not a mix
    apply(b2, 1, [("y", 2)])
    assert rows(tmp_path) == [("x", 2), ("y", 2)]        # all of the replay
    apply(a2, 2, [])
    apply(b2, 2, [])
    assert [f for f in files(tmp_path) if "000000000001" in f] == [
        "_committed/000000000001-00000-e2.json", "_committed/000000000001-00001-e2.json",
        "data/000000000001-00000-e2-*.parquet", "data/000000000001-00001-e2-*.parquet"]


def test_a_stale_driver_paused_between_its_check_and_its_write_is_ignored_by_readers(tmp_path: Path) -> None:
    fs = PausingFS()
    fs.go.set()
    make_pq = ParquetStateFactory(str(tmp_path), ["word", "n"], filesystem=fs).make_state
    old = make_pq({EPOCH: 1}, None, 0, 1)
    apply(old, 1, [("a", 1)])
    fs.paused.clear()
    fs.go.clear()
    stale = threading.Thread(target=apply, args=(old, 2, [("stale", 1)]))
    stale.start()
    assert fs.paused.wait(30)                            # epoch checked, data file half written
    new = ParquetStateFactory(str(tmp_path), ["word", "n"]).make_state({EPOCH: 2}, None, 0, 1)
    apply(new, 2, [("b", 1)])
    fs.go.set()
    stale.join(30)
    assert rows(tmp_path) == [("a", 1), ("b", 1)]        # readers ignore ...
    assert (tmp_path / "_committed/000000000002-00000-e1.json").exists()   # ... what it can leave


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
    assert not list((tmp_path / "data").glob("000000000003-*"))


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
