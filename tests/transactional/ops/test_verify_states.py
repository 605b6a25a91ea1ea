"""``trident verify`` and the user's own systems: every State API state runs against scratch
copies verify owns (a PostgreSQL schema, a directory, Kafka topics), compared row by row and
dropped; the user's table, directory and topic are left exactly as they were; a state that
cannot be redirected is refused before anything runs; nothing compared is not a pass; and
a FAIL says where (component, fault, likely mistake). Real PostgreSQL, Tansu, directories,
Redis and ZooKeeper; real driver SIGKILLs.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from transactional.ops.verify import VerifyError, VerifyOptions, format_table, verify

REPO = Path(__file__).resolve().parents[3]
CASES = REPO / "tests" / "support" / "verify_cases"


def options(zk_url: str, redis_url: str, **kw) -> VerifyOptions:
    kw.setdefault("crash_points", ("commit.before_record",))
    kw.setdefault("task_failures", False)
    kw.setdefault("executor", "in-process")
    return VerifyOptions(state=redis_url, coordination=zk_url + "?session_timeout=1", **kw)


def dir_digest(root: Path) -> list[tuple[str, str]]:
    """Every file under ``root`` with the SHA-256 of its bytes."""
    return sorted((str(p.relative_to(root)), hashlib.sha256(p.read_bytes()).hexdigest())
                  for p in root.rglob("*") if p.is_file())


def pg_state(dsn: str) -> tuple[list, list, list]:
    """The user's database as a user sees it: its schemas, its tables, every row of word_counts."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as c:
        schemas = [r[0] for r in c.execute("SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg_%' "
                                           "AND nspname <> 'information_schema' ORDER BY 1")]
        tables = [tuple(r) for r in c.execute("SELECT schemaname, tablename FROM pg_tables WHERE schemaname NOT IN "
                                              "('pg_catalog', 'information_schema') ORDER BY 1, 2")]
        rows = [tuple(r) for r in c.execute("SELECT word, n FROM word_counts ORDER BY word")]
    return schemas, tables, rows


def topic_state(bootstrap: str, topic: str) -> list:
    """Every record of the user's topic, partition by partition, and the end offsets."""
    from confluent_kafka import Consumer, TopicPartition

    from trident.kafka import read_partition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify-test"})
    try:
        ends = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False) for p in range(2)]
    finally:
        c.close()
    return [ends, [read_partition(bootstrap, topic, p) for p in range(2)]]


@pytest.mark.integration
def test_verify_never_writes_the_users_table_directory_or_topic_and_compares_their_scratch_copies(
        zk_url: str, redis_url: str, pg_dsn: str, kafka_broker, kafka_topic: str, tmp_path: Path,
        monkeypatch) -> None:
    import psycopg
    from confluent_kafka import Producer

    # the user's real systems, with data of their own
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        c.execute("CREATE TABLE word_counts (word text PRIMARY KEY, n bigint)")
        c.execute("INSERT INTO word_counts VALUES ('cat', 100), ('zebra', 7)")
    out = tmp_path / "parquet-out"
    (out / "data").mkdir(parents=True)
    (out / "data" / "mine.txt").write_text("the user's own file\n")
    kafka_broker.create_topic(kafka_topic, 2)
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    p.produce(kafka_topic, b"42", key=b"cat", partition=1)
    assert p.flush(30) == 0
    before = (pg_state(pg_dsn), dir_digest(tmp_path), topic_state(kafka_broker.bootstrap, kafka_topic))
    monkeypatch.setenv("TRIDENT_VERIFY_PG_DSN", pg_dsn)
    monkeypatch.setenv("TRIDENT_VERIFY_PARQUET", str(out))
    monkeypatch.setenv("TRIDENT_VERIFY_KAFKA", kafka_broker.bootstrap)
    monkeypatch.setenv("TRIDENT_VERIFY_TOPIC", kafka_topic)

    report = verify(str(CASES / "user_sinks.py"), options(zk_url, redis_url))

    assert report.passed and report.verdict == "PASS", format_table(report)
    # the rows of all three states were compared: 6 words in PostgreSQL, Parquet (6 rows) and Kafka (6 records)
    assert report.reference_keys == 18 and report.runs[0].compared == 18 and report.runs[0].kills == 1
    assert [s.split(":")[0] + ":" + s.split(":")[1].split(" of ")[0] for s in report.states] == [
        "state 'postgres:word_counts'", "state 'parquet:" + str(out) + "'", f"state 'kafka:{kafka_topic}'"]
    after = (pg_state(pg_dsn), dir_digest(tmp_path), topic_state(kafka_broker.bootstrap, kafka_topic))
    assert after == before          # the user's table, schemas, directory and topic: exactly as they were
    assert before[0][0] == ["public"] and before[0][2] == [("cat", 100), ("zebra", 7)]
    assert before[2][1] == [[], [(b"cat", b"42")]]
    # the scratch topics went too (Tansu deletes topics)
    assert [t for t in kafka_broker.admin().list_topics(timeout=10).topics if t.startswith(kafka_topic)] == [kafka_topic]


@pytest.mark.integration
def test_a_users_state_that_doubles_rows_in_postgresql_under_a_crash_fails_naming_it_and_the_mistake(
        zk_url: str, redis_url: str, pg_dsn: str, monkeypatch) -> None:
    import psycopg

    monkeypatch.setenv("TRIDENT_VERIFY_PG_DSN", pg_dsn)
    report = verify(str(CASES / "naive_postgres.py"), options(zk_url, redis_url))
    [row] = report.runs
    assert (row.fault, row.kills, row.verdict) == ("kill at commit.before_record", 1, "FAIL"), format_table(report)
    assert report.reference_keys == 6 and row.compared == 6 and row.doubled > 0 and row.missing == 0
    assert row.examples[0].startswith("doubled naive:naive_counts (state)[")
    assert row.where == [
        f"state 'naive:naive_counts' of component 'count-into-postgres' differs after the kill at "
        f"commit.before_record:txid=2 ({row.doubled} doubled); likely state written outside a map or state, or a "
        "state that does not store the txid with its data: a replayed batch is written again (docs/states.md)"]
    assert f"  kill at commit.before_record: where: {row.where[0]}" in format_table(report).splitlines()
    with psycopg.connect(pg_dsn, autocommit=True) as c:       # no table of the user's, scratch ones dropped
        assert c.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()[0] == 0


def test_a_state_that_cannot_be_redirected_is_refused_before_anything_runs(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TRIDENT_VERIFY_CASE_DIR", str(tmp_path))
    with pytest.raises(VerifyError) as e:
        verify(str(CASES / "no_scratch.py"), VerifyOptions(state="redis://127.0.0.1:1/0",
                                                           coordination="zk://127.0.0.1:1/x"))
    assert str(e.value) == (
        "component 'into-nowhere' writes the state 'Nowhere' (Nowhere), which cannot be redirected to a scratch "
        "copy: trident verify never writes into your real systems, so it runs every state against copies it owns. "
        "Implement scratch(namespace) on Nowhere, returning a factory that writes into a copy named by namespace "
        "(and read_scratch() / drop_scratch() on that copy, so verify compares and removes it; docs/verify.md)")
    assert not (tmp_path / "setup-ran").exists()       # setup() did not run, nor anything after it


@pytest.mark.integration
def test_nothing_compared_is_not_a_pass_and_exits_non_zero(zk_url: str, redis_url: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "transactional.ops.cli", "verify", str(CASES / "nothing_compared.py"),
         "--crash-points", "commit.before", "--no-task-failures", "--executor", "in-process",
         "--state", redis_url, "--coordination", zk_url + "?session_timeout=1", "-q"],
        capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 1, out.stderr
    lines = out.stdout.splitlines()
    assert lines[1] == "  spout 'spout' (MemoryTransactionalSpout, transactional): replays its input (replayable = True)"
    assert lines[4].split() == ["kill", "at", "commit.before", "0/1", "0", "0", "0", "0", "0", "0", "UNCHECKED"]
    assert "not checked: nothing was compared: the reference run left no key in any map or KeyValueState, no row " \
           "in any State API state and nothing in verify_outputs, so no run can show a difference; verify does " \
           "not see what the topology writes elsewhere. Write the results through a map or a StateFactory, or " \
           "define verify_outputs(topology_id)" in lines
    assert lines[-1].startswith("UNCHECKED: nothing was compared in 1 runs, so nothing is proven (not a pass); ")


@pytest.mark.integration
def test_a_non_transactional_map_under_replays_is_named_as_the_likely_mistake(zk_url: str, redis_url: str) -> None:
    report = verify(str(CASES / "non_transactional_map.py"), options(zk_url, redis_url))
    [row] = report.runs
    assert (row.verdict, row.missing) == ("FAIL", 0) and row.doubled > 0, format_table(report)
    assert row.where == [
        f"map 'counts' of Trident operation 'persistent_aggregate(counts)' differs after the kill at "
        f"commit.before_record:txid=3 ({row.doubled} doubled); likely a non-transactional map under replays: a "
        "replayed batch is applied again (use a transactional or opaque map)"]


@pytest.mark.integration
def test_random_kills_that_hit_no_commit_step_are_reported_as_such(zk_url: str, redis_url: str) -> None:
    report = verify(str(CASES / "dict_counter.py"), options(zk_url, redis_url, crash_points=(), kills=1, seed=14))
    [row] = report.runs
    assert (row.fault, row.kills, row.landed) == ("1 random kills (seed 14)", 1, ["process.after_meta:txid=2"])
    assert row.note == ("no kill hit a commit step: the kills landed outside the commit protocol "
                        "(process.after_meta:txid=2)")
