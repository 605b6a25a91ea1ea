"""The Kafka latency harness's pure parts: the valid rule, the CPU accounting from /proc and
the docs table built from its JSON lines (benchmarks/latency_kafka.py, latency_table.py,
proc_cpu.py). No servers: the cases are JSON lines as a run prints them."""

from __future__ import annotations

import json
import os
import sys

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks")
sys.path.insert(0, BENCH)

import latency_kafka  # noqa: E402
import latency_table  # noqa: E402
import proc_cpu  # noqa: E402

TRIDENT = {"benchmark": "latency-kafka", "system": "trident", "offered_per_sec": 10000, "achieved_per_sec": 9912,
           "valid": True, "completed": True, "p50_ms": 412.6, "p99_ms": 1015.2,
           "summary_p50_ms": {"polling_waiting": 132.0, "planning": 91.4, "job": 157.0, "commit": 24.3},
           "load_1min_before": 3.53, "load_1min_after": 3.23,
           "cpu_cores": {"system": 1.31, "producer": 0.14, "broker": 0.42, "redis": 0.05, "harness": 0.16},
           "method": "M"}
BYTEWAX = {"benchmark": "latency-kafka", "system": "bytewax", "offered_per_sec": 1000, "achieved_per_sec": 741,
           "valid": False, "completed": True, "p50_ms": 211.0, "p99_ms": 3433.0,
           "summary_p50_ms": {"job": 210.2, "commit": 1.0}, "load_1min_before": 2.6, "load_1min_after": 3.2,
           "method": "M"}
REFUSED = {"benchmark": "latency-kafka", "system": "sss-realtime", "offered_per_sec": 1000, "valid": False,
           "error": "RuntimeError: sss-realtime did not commit the primer records (exit code 0): "
                    "['[STREAMING_REAL_TIME_MODE.INPUT_STREAM_NOT_SUPPORTED] Streaming real-time mode ...']",
           "load_1min_before": 1.0, "load_1min_after": 1.1, "method": "M"}


def test_valid_rule_is_ninety_percent_of_the_offered_rate():
    assert latency_kafka.VALID_SHARE == 0.9
    assert latency_kafka.is_valid(900, 1000) is True
    assert latency_kafka.is_valid(899.9, 1000) is False
    assert latency_kafka.is_valid(99_958, 100_000) is True
    assert latency_kafka.is_valid(4_460, 10_000) is False
    assert latency_kafka.is_valid(0, 0) is False


def test_table_rows_by_rate_then_system_with_the_breakdown():
    lines = ["not json", json.dumps({"benchmark": "latency-drpc", "p50_ms": 1}), json.dumps(REFUSED),
             json.dumps(TRIDENT), json.dumps(BYTEWAX), ""]
    out = latency_table.table(latency_table.parse(lines)).splitlines()
    assert out[0] == ("| offered/s | system | achieved/s | p50 ms | p99 ms | polling / waiting | planning | job "
                      "| commit | load | cores: system · producer · broker | valid |")
    assert out[1] == "|" + " --- |" * 12
    assert out[2:] == [
        "| 1,000 | bytewax | 741 | 211 | 3,433 | — | — | 210 | 1 | 2.6 → 3.2 | — | **no** |",
        "| 1,000 | Structured Streaming real-time mode | — | refused: "
        "`[STREAMING_REAL_TIME_MODE.INPUT_STREAM_NOT_SUPPORTED]` | | | | | | 1.0 → 1.1 | | no |",
        "| 10,000 | **spark-trident** | 9,912 | 413 | 1,015 | 132 | 91 | 157 | 24 | 3.53 → 3.23 "
        "| 1.31 · 0.14 · 0.42 | yes |",
        "",
        "Method: M",
    ]
    assert all(row.count("|") == 13 for row in out[:5])


def test_a_case_not_all_committed_says_so():
    case = {**TRIDENT, "completed": False}
    assert latency_table.row(case).endswith("| yes (not all committed) |")


def test_cpu_of_a_process_tree_from_proc():
    before = proc_cpu.Snapshot(10.0, {1: 0, 5: 1, 6: 5, 7: 1}, {1: 1.0, 5: 2.0, 6: 3.0, 7: 50.0})
    after = proc_cpu.Snapshot(12.0, {1: 0, 5: 1, 6: 5, 7: 1, 8: 6}, {1: 1.0, 5: 3.0, 6: 4.0, 7: 52.0, 8: 0.5})
    assert proc_cpu.tree(after, [5]) == {5, 6, 8}
    assert proc_cpu.used(before, after, {"system": [5], "other": [7], "gone": [99]}) == {
        "system": 1.25, "other": 1.0, "gone": 0.0, "all": 2.25}
    me = proc_cpu.snapshot()
    assert os.getpid() in me.cpu and me.parent[os.getpid()] == os.getppid()
