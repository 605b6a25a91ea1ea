"""``trident rebalance`` 2 -> 3 -> 1 under driver SIGKILLs (transactional/engine/layout.py):
a Trident word count into a Redis map and PostgreSQL (counts added, sentences appended),
its sentences into Parquet, Kafka and a user's own state;
one driver is killed right after a rebalance asked before it started was recorded, another
during a run, right before the rebalance it was asked there is recorded. The Redis map and
the tables end with every word counted once and every sentence once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
import rebalance_kill_topology as rk
from crash_plans import REPO, run_topology_file
from retask_topology import read_files

from state.base import open_transactional_state
from transactional.ops.control import request
from transactional.ops.snapshot import read_snapshot
from trident.parquet import read_committed

from trident_kill_topology import expected

pytestmark = pytest.mark.integration


def select(dsn: str, sql: str) -> list[tuple]:
    with psycopg.connect(dsn) as c:
        return [tuple(r) for r in c.execute(sql).fetchall()]


def test_a_rebalance_2_3_1_under_driver_sigkills_counts_every_word_once(
        tmp_path: Path, pg_dsn: str, zk_url: str, redis_url: str, kafka_broker: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    tid = f"rbk-{uuid.uuid4().hex[:6]}"
    topic = f"rbk-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, partitions=4)
    env = {"TRIDENT_TEST_PG": pg_dsn, "TRIDENT_TEST_TOPOLOGY": tid, "TRIDENT_TEST_SLEEP": "0.03",
           "TRIDENT_TEST_PARQUET": str(tmp_path / "parquet"), "TRIDENT_TEST_FILES": str(tmp_path / "files"),
           "TRIDENT_TEST_KAFKA": kafka_broker.bootstrap, "TRIDENT_TEST_OUT": topic}
    for k, v in env.items():                    # the stages' ids are built from them (the parquet path)
        monkeypatch.setenv(k, v)
    stages = rk.stages()
    state_args = ["--state", redis_url]
    coordination = zk_url + "?session_timeout=1"

    def run(crash_at: str | None, *args: str) -> subprocess.CompletedProcess[str]:
        return run_topology_file(tmp_path, "rebalance_kill_topology.py", zk_url, crash_at, env, [*state_args, *args])

    def committed() -> int:
        st = open_transactional_state(coordination, tid, read_only=True)
        try:
            return int((st.get("committed") or {}).get("txid") or 0)
        finally:
            st.close()

    def tasks() -> dict[str, int]:
        st = open_transactional_state(coordination, tid, read_only=True)
        try:
            return {c: st.get("layout")["components"][c]["tasks"] for c in stages}
        finally:
            st.close()

    assert run(None, "--max-batches", "3").returncode == 0
    # 2 -> 3, asked between runs: the next start records it and is killed right after
    request(coordination, tid, "rebalance", tasks=dict.fromkeys(stages, 3))
    p = run("rebalance.recorded")
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    p = run(None, "--max-batches", "3")
    assert p.returncode == 0, p.stderr[-3000:]
    assert committed() == 6 and tasks() == dict.fromkeys(stages, 3)
    # 3 -> 1, asked during a run: killed right before the new counts are recorded
    child = subprocess.Popen(
        [sys.executable, "-m", "transactional.ops.cli", "run", str(REPO / "tests" / "support" / "rebalance_kill_topology.py"),
         "--set", "executor=in-process", "--coordination", coordination, *state_args, "--max-spout-pending", "3",
         "--lock-wait", "30", "-q"],
        cwd=tmp_path, env={**os.environ, **env, "TRIDENT_CRASH_AT": "rebalance.before_record",
                           "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "support"), str(REPO), os.environ.get("PYTHONPATH", "")])},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while committed() < 8 and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    request(coordination, tid, "rebalance", tasks=dict.fromkeys(stages, 1))
    _out, err = child.communicate(timeout=120)
    assert child.returncode == -signal.SIGKILL, err[-2000:]
    assert tasks() == dict.fromkeys(stages, 3)               # the old layout, whole
    p = run(None)                                               # finishes the rebalance, runs to the end
    assert p.returncode == 0, p.stderr[-3000:]
    assert "finishing the rebalance" in p.stderr and tasks() == dict.fromkeys(stages, 1)
    assert committed() == 15
    want = expected()
    counts = read_snapshot(redis_url, coordination, tid)["counts"]
    assert {str(k): v for k, v in counts.items()} == want
    assert dict(select(pg_dsn, "SELECT word, count FROM word_counts")) == want
    sentences = sorted(s for rows in rk.DATA.values() for (s,) in rows)
    assert sorted(r[0] for r in select(pg_dsn, "SELECT sentence FROM sentences")) == sentences
    assert sorted(read_committed(str(tmp_path / "parquet")).column("sentence").to_pylist()) == sentences
    assert read_files(str(tmp_path / "files")) == [[s] for s in sentences]
    assert sorted(v.decode() for q in range(4) for _k, v in kafka_broker.read(topic, q)) == sentences
