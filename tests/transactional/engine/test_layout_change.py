"""A task count changed across a driver SIGKILL never doubles or loses a user state's rows
(transactional/engine/layout.py): the driver dies after every state wrote txid 3 and before
3 was recorded (``commit.before_record``), and the next driver runs the states with another
``parallelism_hint``. Read back: PostgreSQL (upsert adding, upsert replacing, append),
Parquet, Kafka and a user's own ``StateFactory`` hold exactly the fault-free rows."""

from __future__ import annotations

import signal
import uuid
from collections import Counter
from pathlib import Path

import psycopg
import pytest
import retask_topology as rt
from crash_plans import run_topology_file

from trident.parquet import read_committed

from trident_kill_topology import expected

pytestmark = pytest.mark.integration

SENTENCES = sorted(s for rows in rt.DATA.values() for (s,) in rows)


def select(dsn: str, sql: str) -> list[tuple]:
    with psycopg.connect(dsn) as c:
        return [tuple(r) for r in c.execute(sql).fetchall()]


@pytest.mark.parametrize(("before", "after"), [(2, 1), (1, 3)])
def test_a_txid_written_with_other_task_counts_is_replayed_with_them(
        tmp_path: Path, pg_dsn: str, zk_url: str, kafka_broker, before: int, after: int) -> None:
    topic = f"retask-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, partitions=4)
    env = {"TRIDENT_TEST_PG": pg_dsn, "TRIDENT_TEST_PARQUET": str(tmp_path / "parquet"),
           "TRIDENT_TEST_FILES": str(tmp_path / "files"), "TRIDENT_TEST_KAFKA": kafka_broker.bootstrap,
           "TRIDENT_TEST_OUT": topic, "TRIDENT_TEST_TOPOLOGY": f"retask-{uuid.uuid4().hex[:6]}"}

    def run(tasks: int, crash_at: str | None):
        return run_topology_file(tmp_path, "retask_topology.py", zk_url, crash_at,
                                 {**env, "TRIDENT_TEST_TASKS": str(tasks)})

    p = run(before, "commit.before_record:txid=3")
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    p = run(after, None)
    assert p.returncode == 0, p.stderr[-3000:]

    assert dict(select(pg_dsn, "SELECT word, count FROM word_counts")) == expected()
    assert sorted(r[0] for r in select(pg_dsn, "SELECT sentence FROM sentences")) == SENTENCES
    seen = dict(select(pg_dsn, "SELECT word, sentence FROM word_seen"))
    assert set(seen) == set(expected()) and all(w in s.split() for w, s in seen.items())
    assert sorted(read_committed(str(tmp_path / "parquet")).column("sentence").to_pylist()) == SENTENCES
    assert rt.read_files(str(tmp_path / "files")) == [[s] for s in SENTENCES]
    records = Counter((k.decode(), v.decode()) for q in range(4) for k, v in kafka_broker.read(topic, q))
    assert records == Counter((w, s) for s in SENTENCES for w in s.split())
    assert "began to commit with task counts" in p.stderr
