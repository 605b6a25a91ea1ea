"""``trident verify``: it FAILs on the mistakes users make (a module-level counter without the
txid check, a committer appending to a file on every attempt, a bolt reading the clock) and
PASSes on the examples with replayable spouts; real drivers SIGKILLed at crash points, real
Redis and ZooKeeper, Spark for one example.

``TRIDENT_TEST_VERIFY_LONG=1`` adds the long runs: every crash point and ten random kills on
every example with a replayable spout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from transactional import Fields, TopologyBuilder, TransactionalTopologyBuilder
from transactional.engine.faults import fails
from transactional.ops.snapshot import compare
from transactional.ops.verify import (
    CRASH_POINTS,
    RunOutcome,
    VerifyError,
    VerifyOptions,
    VerifyReport,
    check_spouts,
    format_table,
    junit_xml,
    plan_random_kills,
    verify,
)
from transactional.testing import FaultPlan

REPO = Path(__file__).resolve().parents[3]
CASES = REPO / "tests" / "support" / "verify_cases"
EXAMPLES = REPO / "examples"


def options(zk_url: str, redis_url: str, **kw) -> VerifyOptions:
    kw.setdefault("crash_points", ("commit.before_record",))
    kw.setdefault("task_failures", False)
    kw.setdefault("executor", "in-process")
    return VerifyOptions(state=redis_url, coordination=zk_url + "?session_timeout=1", **kw)


# -- the parts, without servers ----------------------------------------------------------------------

def test_compare_sorts_each_difference_and_names_the_first_keys() -> None:
    ref = {"counts": {"cat": 2, "dog": 3, "cow": 1, "moon": {"n": 1}}}
    got = {"counts": {"cat": 4, "dog": 1, "moon": {"n": 2}, "sun": 1}}
    d = compare(ref, got)
    assert (d.compared, len(d.missing), len(d.doubled), len(d.extra), len(d.different)) == (5, 2, 1, 1, 1)
    assert d.examples() == ["missing counts['cow']: 1 -> None", "missing counts['dog']: 3 -> 1",
                            "doubled counts['cat']: 2 -> 4", "extra counts['sun']: None -> 1",
                            "different counts['moon']: {'n': 1} -> {'n': 2}"]
    assert compare(ref, ref).exact


def test_random_kills_are_seeded_and_in_the_order_a_run_reaches_them() -> None:
    kills = plan_random_kills(10, 7, 9)
    assert kills == plan_random_kills(10, 7, 9) and len(kills) == 10
    assert [(k.txid, CRASH_POINTS.index(k.point)) for k in kills] == sorted(
        (k.txid, CRASH_POINTS.index(k.point)) for k in kills)
    assert {k.point for k in kills} <= set(CRASH_POINTS) and all(1 <= k.txid <= 9 for k in kills)


def test_the_task_failure_rule_is_fault_plans() -> None:
    plan = FaultPlan(seed=3, rate=0.3, max_attempt=1)
    picks = [(c, t, x) for c in ("a", "b") for t in range(3) for x in range(1, 20)]
    assert [plan.should_fail(c, t, x, 1) for c, t, x in picks] == [fails(3, 0.3, c, t, x, 1) for c, t, x in picks]
    assert 0 < sum(fails(3, 0.3, c, t, x, 1) for c, t, x in picks) < len(picks)


def test_a_spout_that_cannot_replay_is_refused_saying_why_and_what_to_use() -> None:
    from spouts import RedisStreamSpout

    b = TopologyBuilder("reader")
    b.set_spout("events", RedisStreamSpout("redis://127.0.0.1:1/0", "events", "g", fields=Fields("e")), 1)
    with pytest.raises(VerifyError) as e:
        check_spouts(b.build())
    assert str(e.value) == (
        "spout 'events' (RedisStreamSpout) cannot be verified: it reads a Redis stream through a consumer group, "
        "which keeps what a run acknowledged: a second run finds the stream consumed and cannot read the same input "
        "again. trident verify compares runs from the same input, so it needs a spout that reads the same data in "
        "every run: MemoryTransactionalSpout or FixedBatchSpout over test data, or a KafkaTransactionalSpout on a "
        "topic that holds the data (docs/verify.md)")


def test_a_spout_that_does_not_say_is_run_and_reported_as_an_assumption() -> None:
    from spouts import MemoryTransactionalSpout

    class Mine(MemoryTransactionalSpout):
        replayable = None

    b = TransactionalTopologyBuilder("mine", "spout", Mine({0: ["a"]}, Fields("w"), 1), 1)
    assert check_spouts(b.build()) == [
        "spout 'spout' (Mine) does not say whether a fresh run reads the same input (class attribute replayable = "
        "True); verify assumes it does, so a difference may come from its input"]


def test_the_table_junit_and_json_say_the_same() -> None:
    report = VerifyReport("t.py", "words", "transactional (exactly once)", reference_keys=6, reference_txids=4)
    report.runs = [RunOutcome("kill at commit.before", 1, 1, 2, 1, 6, verdict="PASS", secs=1.0),
                   RunOutcome("kill at commit.before_record", 1, 1, 2, 2, 6, missing=1,
                              examples=["missing counts['cat']: 4 -> 2"], verdict="FAIL", secs=1.0),
                   RunOutcome("task failures (rate 0.2)", verdict="SKIP", note="not run: --budget 5s left too little")]
    table = format_table(report).splitlines()
    assert table[1].split() == ["fault", "kills", "restarts", "replays", "keys", "missing", "doubled", "different",
                                "verdict"]
    assert table[3].split()[-9:] == ["commit.before", "1/1", "0", "1", "6", "0", "0", "0", "PASS"]
    assert table[4].split()[-9:] == ["commit.before_record", "1/1", "0", "2", "6", "1", "0", "0", "FAIL"]
    assert "  kill at commit.before_record: missing counts['cat']: 4 -> 2" in table
    assert table[-1].startswith("FAIL: 1 of 3 runs matched the reference; 2 driver kills in ")
    xml = junit_xml(report)
    assert 'tests="3" failures="1" skipped="1"' in xml
    assert '<failure message="1 missing, 0 doubled, 0 different, 0 extra">missing counts[\'cat\']: 4 -&gt; 2' in xml
    assert report.to_json()["verdict"] == "FAIL" and not report.passed


# -- verify FAILs on the mistakes users make ---------------------------------------------------------


@pytest.mark.integration
def test_verify_fails_a_counter_in_a_module_level_dict_without_the_txid_check(zk_url: str, redis_url: str) -> None:
    report = verify(str(CASES / "dict_counter.py"), options(zk_url, redis_url))
    [row] = report.runs
    assert (row.fault, row.kills, row.verdict) == ("kill at commit.before_record", 1, "FAIL")
    assert report.reference_keys == 6 and row.compared == 6 and row.missing > 0 and row.doubled == 0
    assert row.examples[0].startswith("missing counts[")
    assert not report.passed
    # where: the map, its bolt, the kill that showed it, the likely mistake
    assert row.where == [
        f"map 'counts' of bolt 'count' differs after the kill at commit.before_record:txid=2 ({row.missing} missing); "
        "likely state kept outside the map (a module-level or instance variable carried across batches): a restarted "
        "driver loses it and a replayed batch adds to it again"]


@pytest.mark.integration
def test_the_status_of_a_verify_run_says_so(zk_url: str, redis_url: str) -> None:
    from transactional.ops.status import format_status, topology_list, topology_status
    from transactional.ops.webui.history import HistorySource

    verify(str(CASES / "dict_counter.py"), options(zk_url, redis_url, crash_points=()))
    ids = sorted(r["topology_id"] for r in topology_list(zk_url))
    assert len(ids) == 1 and ids[0].startswith("verify-") and ids[0].endswith("-reference")
    said = "verify run: a scratch copy of topology 'dict-counter' under fault 'reference' " \
           f"(trident verify {CASES / 'dict_counter.py'}), not a production run"
    assert f"    {said}" in format_status(topology_status(zk_url, ids[0])).splitlines()
    page = HistorySource(zk_url).snapshot(ids[0])
    assert page is not None and page["verify"] == {"of": "dict-counter", "fault": "reference",
                                                    "file": str(CASES / "dict_counter.py")}


@pytest.mark.integration
def test_verify_fails_a_committer_appending_to_a_file_on_every_attempt(zk_url: str, redis_url: str,
                                                                        tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TRIDENT_VERIFY_CASE_DIR", str(tmp_path))
    report = verify(str(CASES / "append_file.py"), options(zk_url, redis_url))
    [row] = report.runs
    assert (row.kills, row.verdict, row.missing, row.different) == (1, "FAIL", 0, 0)
    assert row.doubled > 0 and row.examples[0].startswith("doubled counts file (verify_outputs)[")
    assert row.where == [
        f"counts file (verify_outputs) of the file's verify_outputs (written by bolt 'append') differs after the kill "
        f"at commit.before_record:txid=2 ({row.doubled} doubled); likely state written outside a map or state, or a "
        "state that does not store the txid with its data: a replayed batch is written again (docs/states.md)"]
    assert report.unchecked == []          # the file defines verify_outputs; its spout says it replays


@pytest.mark.integration
def test_verify_fails_a_bolt_whose_output_depends_on_the_clock(zk_url: str, redis_url: str) -> None:
    report = verify(str(CASES / "clock_bolt.py"), options(zk_url, redis_url))
    [row] = report.runs
    assert (row.verdict, row.compared, row.missing) == ("FAIL", 6, 0)
    assert row.doubled + row.different == 6 and row.examples[0].startswith(("doubled last-seen[", "different last-seen["))
    [where] = row.where
    assert where.startswith("map 'last-seen' of bolt ") and where.endswith(
        "; likely a side effect in execute, or output that depends on more than the input (the clock, randomness): "
        "a replayed batch computes other values")


# -- and PASSes on the examples ------------------------------------------------------------------------

@pytest.mark.integration
def test_verify_passes_transactional_words_on_spark_under_kills_and_task_failures(zk_url: str,
                                                                                 redis_url: str) -> None:
    opts = options(zk_url, redis_url, crash_points=("commit.after_task", "commit.before_record"), kills=2,
                   task_failures=True, executor=None)
    report = verify(str(EXAMPLES / "transactional_words.py"), opts)
    assert [r.fault for r in report.runs] == ["kill at commit.after_task", "kill at commit.before_record",
                                              "2 random kills (seed 1)", "task failures (rate 0.2)"]
    assert [r.verdict for r in report.runs] == ["PASS"] * 4, format_table(report)
    assert report.reference_txids == 9 and report.reference_keys == 13
    assert [r.kills for r in report.runs[:3]] == [1, 1, 2] and all(r.compared == 13 for r in report.runs)
    assert report.runs[3].replays > 0           # the failed tasks' batches were replayed
    assert report.passed


@pytest.mark.integration
def test_verify_passes_trident_word_count(zk_url: str, redis_url: str) -> None:
    opts = options(zk_url, redis_url, crash_points=("commit.before", "commit.after_record"), task_failures=True)
    report = verify(str(EXAMPLES / "trident_word_count.py"), opts)
    assert [r.verdict for r in report.runs] == ["PASS"] * 3, format_table(report)
    assert report.reference_keys > 20 and all(r.compared == report.reference_keys for r in report.runs)
    assert report.passed


@pytest.mark.integration
def test_server_faults_restart_verifys_own_redis_and_zookeeper_mid_run_and_the_run_still_matches() -> None:
    said: list[str] = []
    opts = VerifyOptions(crash_points=(), task_failures=False, executor="in-process", server_faults=True)
    report = verify(str(EXAMPLES / "transactional_words.py"), opts, said.append)
    [row] = report.runs
    assert (row.fault, row.restarts, row.verdict) == ("server restarts (redis, zookeeper)", 2, "PASS"), \
        format_table(report)
    assert row.compared == report.reference_keys == 13 and row.missing == row.doubled == row.different == 0
    assert [line.split(" on port ")[0] for line in said if "restarted on port" in line] == [
        "  server faults: redis restarted", "  server faults: zookeeper restarted"]
    [line] = [x for x in format_table(report).splitlines() if x.startswith("server restarts")]   # below the spout line
    assert line.split()[-8:-6] == ["0", "2"]


@pytest.mark.integration
def test_server_faults_are_skipped_on_servers_verify_did_not_start(zk_url: str, redis_url: str) -> None:
    report = verify(str(CASES / "dict_counter.py"), options(zk_url, redis_url, crash_points=(), server_faults=True))
    [row] = report.runs
    assert (row.fault, row.verdict, row.restarts) == ("server restarts", "SKIP", 0)
    assert row.note == ("not run: --state and --coordination name servers verify did not start, and it restarts "
                        "only its own")


@pytest.mark.integration
def test_kafka_spouts_read_the_range_recorded_at_the_start_whatever_is_produced_meanwhile(
        zk_url: str, redis_url: str, kafka_broker, kafka_topic: str, monkeypatch) -> None:
    from confluent_kafka import Producer

    kafka_broker.create_topic(kafka_topic, 2)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})

    def produce(words: list[str]) -> None:
        for i, w in enumerate(words):
            producer.produce(kafka_topic, w.encode(), partition=i % 2)
        assert producer.flush(30) == 0

    produce(["cat", "dog", "cow", "cat", "moon", "cat", "dog", "sun", "cat", "dog"] * 2)
    monkeypatch.setenv("TRIDENT_VERIFY_KAFKA", kafka_broker.bootstrap)
    monkeypatch.setenv("TRIDENT_VERIFY_TOPIC", kafka_topic)
    produced: list[str] = []

    def say(line: str) -> None:        # more records: after the offsets are recorded, and after the reference run
        if "reference run" in line or line.startswith("run 1/"):
            produce(["late", "cat"] * 3)
            produced.append(line)

    opts = options(zk_url, redis_url, crash_points=("commit.before_record",), task_failures=True)
    report = verify(str(CASES / "kafka_words.py"), opts, say)
    assert len(produced) == 2
    assert report.fixed_ranges == {kafka_topic: {"0": 10, "1": 10}}
    assert [r.verdict for r in report.runs] == ["PASS", "PASS"], format_table(report)
    assert report.reference_keys == 5 and all(r.compared == 5 for r in report.runs)
    assert report.reference_txids == 3 and report.runs[0].kills == 1
    # one line says how the spout replays its input (no "does not say" beside it)
    assert report.spouts == [f"spout 'words' (KafkaTransactionalSpout, transactional): replays its input: Kafka topic "
                             f"{kafka_topic!r} up to the end offsets recorded at the start 0:10, 1:10"]
    assert f"  {report.spouts[0]}" in format_table(report).splitlines()
    assert not [n for n in report.unchecked if "does not say" in n]


@pytest.mark.integration
def test_verify_checks_a_core_topology_at_least_once_on_its_key_value_state(zk_url: str, redis_url: str) -> None:
    report = verify(str(EXAMPLES / "stateful_word_count.py"), options(zk_url, redis_url, crash_points=("commit.before",)))
    assert report.kind == "core (at least once)" and report.reference_keys > 0
    assert all(", core spout, at least once): " in s for s in report.spouts) and report.spouts, report.spouts
    assert not [line for line in format_table(report).splitlines() if "exactly once" in line]
    [row] = report.runs
    assert (row.kills, row.verdict, row.missing) == (1, "PASS", 0) and row.compared == report.reference_keys


@pytest.mark.integration
def test_the_command_exits_1_on_a_failure_and_writes_json_and_junit(zk_url: str, redis_url: str,
                                                                      tmp_path: Path) -> None:
    junit = tmp_path / "verify.xml"
    out = subprocess.run(
        [sys.executable, "-m", "transactional.ops.cli", "verify", str(CASES / "dict_counter.py"),
         "--crash-points", "commit.before_record", "--no-task-failures", "--executor", "in-process",
         "--state", redis_url, "--coordination", zk_url + "?session_timeout=1", "--json", "-q", "--junit", str(junit)],
        capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 1, out.stderr
    [line] = out.stdout.splitlines()
    got = json.loads(line)
    assert got["verdict"] == "FAIL" and got["kills"] == 1 and got["runs"][0]["verdict"] == "FAIL"
    assert 'failures="1"' in junit.read_text()


# -- long runs -------------------------------------------------------------------------------------------

#: TRIDENT_TEST_VERIFY_LONG=1: every replayable example, every crash point and ten random kills, on
#: Spark; without it one example, one crash point and one random kill, in-process (seconds)
LONG = bool(os.environ.get("TRIDENT_TEST_VERIFY_LONG"))


@pytest.mark.integration
@pytest.mark.parametrize("example", ["transactional_words.py", "trident_word_count.py", "global_count.py",
                                     "opaque_word_count.py", "trident_columnar_word_count.py"] if LONG
                         else ["opaque_word_count.py"])
def test_every_replayable_example_passes_every_crash_point_and_ten_random_kills(example: str, zk_url: str,
                                                                                 redis_url: str) -> None:
    if LONG:
        opts = options(zk_url, redis_url, crash_points=CRASH_POINTS, kills=10, task_failures=True, executor=None)
    else:
        opts = options(zk_url, redis_url, crash_points=("commit.after_task",), kills=1, seed=3)
    report = verify(str(EXAMPLES / example), opts)
    assert report.passed, format_table(report)
    assert report.kills == sum(r.kills_planned for r in report.runs) >= 2, format_table(report)   # every kill landed
