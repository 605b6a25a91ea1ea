"""The Delta Lake state (trident.delta) on real tables, read back by an independent reader
(DuckDB over the Delta log and its Parquet files): Delta's own ``txn`` marker per task and
txid, replays replaced, the epoch fence and concurrent writers refused by the table's
conflict check, bad input, and drivers SIGKILLed at every commit crash point."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from pathlib import Path

import delta_reader as dr
import lake_kill_topology as lk
import lake_pause as lp
import pytest
from crash_plans import crash_plan, run_topology_file

from state.errors import ConfigError, LeadershipLostError, StateAheadError, UnstorableValueError
from transactional import Fields, TopologyConfig, run_topology
from trident.delta import DeltaStateFactory
from trident.state import EPOCH, TOPOLOGY_ID, forget_states

COUNTS = lk.COUNTS


def make(f: DeltaStateFactory, epoch: int = 1, part: int = 0, parts: int = 1):
    return f.make_state({EPOCH: epoch, TOPOLOGY_ID: "t"}, None, part, parts)


def apply(st, txid: int, rows) -> None:
    st.begin_commit(txid)
    st.add_rows(rows)
    st.commit(txid)


def counts(root: Path) -> dict[str, int]:
    return dict(dr.rows(root, "word, count"))


def test_add_mode_counts_once_and_a_replay_rebuilds_from_the_values_before(tmp_path: Path) -> None:
    f = DeltaStateFactory(str(tmp_path), COUNTS, mode="add", key_fields=["word"], create=True)
    st = make(f)
    apply(st, 1, [("a", 1), ("b", 2), ("a", 3)])           # a's rows of one batch summed
    assert counts(tmp_path) == {"a": 4, "b": 2}
    apply(st, 2, [("a", 10), ("c", 1)])
    apply(st, 2, [("b", 5)])                                # txid 2 again, another batch (opaque replay)
    assert counts(tmp_path) == {"a": 4, "b": 7}
    apply(st, 2, [("b", 5)])                                # the same batch again: no change
    assert counts(tmp_path) == {"a": 4, "b": 7}
    apply(st, 3, [("c", 1)])
    assert counts(tmp_path) == {"a": 4, "b": 7, "c": 1}
    assert dr.txn_versions(tmp_path) == {f"trident:t:{tmp_path.name}:task0": 3, f"trident:t:{tmp_path.name}:epoch": 1}
    assert [t for _, t in f.commits()] == [3, 2, 2, 2, 1]  # one Delta commit per txid and attempt
    assert sorted((r["word"], r["count"]) for r in f.read_as_of(2).to_pylist()) == [("a", 4), ("b", 7)]
    assert f.committed_txid() == 3


def test_upsert_replaces_by_key(tmp_path: Path) -> None:
    st = make(DeltaStateFactory(str(tmp_path), COUNTS, mode="upsert", key_fields=["word"], create=True))
    apply(st, 1, [("a", 1), ("b", 2), ("a", 3)])           # the last row of a key wins
    apply(st, 2, [("a", 5), ("c", 9)])
    apply(st, 2, [("b", 6)])                                # a replay with another batch
    assert counts(tmp_path) == {"a": 3, "b": 6}


def test_append_on_a_file_uri_a_replay_replaces_its_rows(tmp_path: Path) -> None:
    f = DeltaStateFactory(f"file://{tmp_path}", lk.SENTENCES, create=True)
    a, b = make(f, part=0, parts=2), make(f, part=1, parts=2)
    apply(a, 1, [("x",), ("y",)])
    apply(b, 1, [("v",)])
    apply(a, 2, [("z",)])
    apply(a, 2, [("z",), ("w",)])                            # a replay: txid 2's rows of task 0 replaced
    assert dr.rows(tmp_path, "sentence, trident_txid, trident_partition") == [
        ("v", 1, 1), ("w", 2, 0), ("x", 1, 0), ("y", 1, 0), ("z", 2, 0)]
    apply(a, 2, [])                                          # a replay with nothing here: its rows go
    assert dr.rows(tmp_path, "sentence") == [("v",), ("x",), ("y",)]
    apply(b, 2, [])                                          # no rows, no earlier attempt: no commit
    assert dr.txn_versions(tmp_path)[f.app_id(a.state_id, 1)] == 1


def test_a_stale_driver_writes_nothing(tmp_path: Path) -> None:
    f = DeltaStateFactory(str(tmp_path), lk.SENTENCES, create=True)
    old, new = make(f, epoch=1), make(f, epoch=2)
    apply(old, 1, [("a",)])
    apply(new, 2, [("b",)])
    with pytest.raises(LeadershipLostError, match=r"a newer driver \(epoch 2\) writes state 't:.*'; this driver \(epoch 1\)"):
        apply(old, 3, [("c",)])
    assert dr.rows(tmp_path, "sentence") == [("a",), ("b",)]


def test_a_table_ahead_of_the_batch_stops(tmp_path: Path) -> None:
    f = DeltaStateFactory(str(tmp_path), lk.SENTENCES, create=True)
    apply(make(f), 5, [("a",)])
    with pytest.raises(StateAheadError, match=r"holds txid 5, newer than the batch's 3: another topology writes it"):
        apply(make(f), 3, [("b",)])
    assert dr.rows(tmp_path, "sentence") == [("a",)]


def test_a_missing_table_is_created_only_when_asked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"there is no Delta table at '.*/t'; pass create=True"):
        make(DeltaStateFactory(str(tmp_path / "t"), COUNTS))
    assert not (tmp_path / "t").exists()
    with pytest.raises(ConfigError, match=r"creating the table needs every column's type; declare them: "
                                          r"Fields\('word', 'count', types=\{'count': 'string'\}\)"):
        make(DeltaStateFactory(str(tmp_path / "t"), Fields("word", "count", types={"word": "string"}), create=True))
    make(DeltaStateFactory(str(tmp_path / "t"), COUNTS, create=True))
    assert (tmp_path / "t" / "_delta_log").is_dir()


def test_a_table_whose_schema_differs_names_both(tmp_path: Path) -> None:
    make(DeltaStateFactory(str(tmp_path), COUNTS, create=True))
    other = Fields("word", "count", types={"word": "string", "count": "float64"})
    with pytest.raises(ConfigError, match=r"(?s)schema does not match the stream's: column\(s\) \['count'\] differ.\n"
                                          r"  table:  word: string, count: int64, trident_txid: int64, .*\n"
                                          r"  stream: word: string, count: double, trident_txid: int64"):
        make(DeltaStateFactory(str(tmp_path), other))
    with pytest.raises(ConfigError, match=r"column\(s\) \['trident_prev_count', 'trident_prev_exists'\] differ"):
        make(DeltaStateFactory(str(tmp_path), COUNTS, mode="add", key_fields=["word"]))


def test_an_unwritable_location_and_an_unstorable_value(tmp_path: Path) -> None:
    target = "/sys/trident-delta" if os.geteuid() == 0 else "/proc/trident-delta"
    with pytest.raises(ConfigError, match=r"the table cannot be created at '/(sys|proc)/trident-delta' .*give a location"):
        make(DeltaStateFactory(target, COUNTS, create=True))
    st = make(DeltaStateFactory(str(tmp_path), COUNTS, create=True))
    st.begin_commit(1)
    st.add_rows([("a", 1), ("b", "seven")])
    with pytest.raises(UnstorableValueError, match=r"column 'count' \(int64\) of txid 1: cannot store 'seven'"):
        st.commit(1)
    assert dr.rows(tmp_path, "word") == []


def test_a_concurrent_writer_is_caught_by_the_tables_conflict_check_and_nothing_is_lost(tmp_path: Path) -> None:
    from deltalake import DeltaTable

    f = DeltaStateFactory(str(tmp_path), COUNTS, mode="add", key_fields=["word"], create=True)
    apply(make(f), 1, [("a", 1), ("z", 5)])
    # while the task waits to commit txid 2, another writer deletes z: the task's MERGE read
    # the file z was in, Delta refuses its commit, the task reads again and commits on top
    p = lp.commit_paused("delta", tmp_path, lambda: DeltaTable(str(tmp_path)).delete("word = 'z'"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert counts(tmp_path) == {"a": 11, "b": 1}
    ops = [h["operation"] for h in DeltaTable(str(tmp_path)).history()]
    assert ops[:2] == ["MERGE", "DELETE"]


def test_a_driver_paused_between_its_check_and_its_commit_is_refused_by_the_table(tmp_path: Path) -> None:
    f = DeltaStateFactory(str(tmp_path), COUNTS, mode="add", key_fields=["word"], create=True)
    apply(make(f), 1, [("a", 1)])
    # a new driver (epoch 2) takes over and commits txid 2 while the old one is paused
    p = lp.commit_paused("delta", tmp_path, lambda: apply(make(f, epoch=2), 2, [("a", 100)]))
    assert p.returncode == 3
    assert p.stdout.startswith("LeadershipLostError") and "a newer driver (epoch 2)" in p.stdout
    assert counts(tmp_path) == {"a": 101}


@pytest.mark.parametrize("flavour", ["transactional", "opaque"])
def test_a_topology_into_delta_is_exact(tmp_path: Path, flavour: str) -> None:
    os.environ.update(TRIDENT_TEST_LAKE="delta", TRIDENT_TEST_LAKE_DIR=str(tmp_path), TRIDENT_TEST_FLAVOUR=flavour,
                      TRIDENT_TEST_TOPOLOGY=f"delta-{uuid.uuid4().hex[:6]}")
    try:
        topo = lk.build_topology()
    finally:
        for k in ("TRIDENT_TEST_LAKE", "TRIDENT_TEST_LAKE_DIR", "TRIDENT_TEST_FLAVOUR", "TRIDENT_TEST_TOPOLOGY"):
            os.environ.pop(k)
    run_topology(topo, TopologyConfig(executor="in-process", progress=False, max_spout_pending=3))
    forget_states(topo.topology_id)
    assert [s for (s,) in dr.rows(tmp_path / "sentences", "sentence")] == lk.sentences()
    assert counts(tmp_path / "counts") == lk.expected()


@pytest.mark.integration
@pytest.mark.parametrize("flavour", ["transactional", "opaque"])
def test_drivers_killed_at_every_commit_crash_point_leave_the_tables_exact(
        tmp_path: Path, zk_url: str, flavour: str) -> None:
    out = tmp_path / "out"
    tid = f"delta-kill-{flavour}-{uuid.uuid4().hex[:6]}"

    def run(spec: str | None) -> subprocess.CompletedProcess[str]:
        return run_topology_file(tmp_path, "lake_kill_topology.py", zk_url, spec,
                                 {"TRIDENT_TEST_LAKE": "delta", "TRIDENT_TEST_LAKE_DIR": str(out),
                                  "TRIDENT_TEST_FLAVOUR": flavour, "TRIDENT_TEST_TOPOLOGY": tid})
    # inside a task's Delta commit (txids 1 and 3), and the engine's commit steps (txids 2, 4 ...)
    plan = crash_plan()
    for spec in ["delta.before_commit:txid=1,task=1", plan[0], "delta.before_commit:txid=3,task=0", *plan[1:]]:
        p = run(spec)
        assert p.returncode == -signal.SIGKILL and f"crash point {spec.split(':')[0]}" in p.stderr, (spec, p.stderr)
    assert run(None).returncode == 0
    assert [s for (s,) in dr.rows(out / "sentences", "sentence")] == lk.sentences()
    assert counts(out / "counts") == lk.expected()


@pytest.mark.integration
def test_commits_on_spark_executors_reach_the_same_table(tmp_path: Path, spark_context, redis_url: str) -> None:
    """commit_placement='executors': the tasks' Delta commits run at once in executor
    processes (each writes the epoch ``txn``: Delta refuses all but one, the others read
    the table again and commit on top)."""
    os.environ.update(TRIDENT_TEST_LAKE="delta", TRIDENT_TEST_LAKE_DIR=str(tmp_path), TRIDENT_TEST_FLAVOUR="opaque",
                      TRIDENT_TEST_TOPOLOGY=f"delta-ex-{uuid.uuid4().hex[:6]}")
    try:
        topo = lk.build_topology()
    finally:
        for k in ("TRIDENT_TEST_LAKE", "TRIDENT_TEST_LAKE_DIR", "TRIDENT_TEST_FLAVOUR", "TRIDENT_TEST_TOPOLOGY"):
            os.environ.pop(k)
    run_topology(topo, TopologyConfig(executor="spark", spark_master="local[2]", commit_placement="executors",
                                      state=redis_url, progress=False, max_spout_pending=3),
                 spark_context=spark_context)
    assert [s for (s,) in dr.rows(tmp_path / "sentences", "sentence")] == lk.sentences()
    assert counts(tmp_path / "counts") == lk.expected()
