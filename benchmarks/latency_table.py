"""The docs table of ``benchmarks/latency.py --bench kafka`` (docs/performance.md, "Latency:
Kafka to Redis") from its JSON lines: one row per (offered rate, system) with the achieved
rate, p50/p99, the p50 breakdown (polling/waiting, planning, job, commit), the load average
at the case's start and end, the cores each part used and whether the case is valid.

    python benchmarks/latency_table.py RUN.jsonl [MORE.jsonl ...]     # or the lines on stdin
    python benchmarks/latency.py --bench kafka ... --markdown          # the same, after the run

Lines that are not JSON objects of ``"benchmark": "latency-kafka"`` are skipped, so the
output of a ``--markdown`` run can be fed back in.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from typing import Any

NAMES = {"trident": "**spark-trident**", "bytewax": "bytewax", "sss": "Structured Streaming",
         "sss-realtime": "Structured Streaming real-time mode"}
ORDER = ["trident", "bytewax", "sss", "sss-realtime"]
STEPS = ("polling_waiting", "planning", "job", "commit")
HEADER = ("| offered/s | system | achieved/s | p50 ms | p99 ms | polling / waiting | planning | job | commit "
          "| load | cores: system · producer · broker | valid |")


def parse(lines: Iterable[str]) -> list[dict[str, Any]]:
    """The latency-kafka cases among ``lines`` (other lines and other benchmarks skipped)."""
    out = []
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            case = json.loads(line)
        except ValueError:
            continue
        if isinstance(case, dict) and case.get("benchmark") == "latency-kafka":
            out.append(case)
    return out


def _n(v: Any) -> str:
    """A figure as the docs write it: thousands separated, no decimals; ``—`` when absent."""
    return "—" if v is None else f"{round(v):,}"


def _load(case: dict[str, Any]) -> str:
    a, b = case.get("load_1min_before"), case.get("load_1min_after")
    return "—" if a is None else f"{a} → {b}"


def _cores(case: dict[str, Any]) -> str:
    c = case.get("cpu_cores")
    if not c:
        return "—"
    return " · ".join("—" if c.get(k) is None else f"{c[k]:.2f}" for k in ("system", "producer", "broker"))


def _error(msg: str) -> str:
    """A refusal in a cell: Spark's error class when there is one, else the first 80 characters."""
    m = re.search(r"\[[A-Z][A-Z_.]+\]", msg)
    if m is not None:
        return f"refused: `{m.group(0)}`"
    return msg[:80].replace("|", "/")


def row(case: dict[str, Any]) -> str:
    """One table row for one case."""
    name = NAMES.get(case.get("system", ""), str(case.get("system")))
    rate = _n(case.get("offered_per_sec"))
    if "error" in case:
        return f"| {rate} | {name} | — | {_error(case['error'])} | | | | | | {_load(case)} | | no |"
    summary = case.get("summary_p50_ms") or {}
    steps = " | ".join(_n(summary.get(k)) for k in STEPS)
    valid = "yes" if case.get("valid") else "**no**"
    if not case.get("completed", True):
        valid += " (not all committed)"
    return (f"| {rate} | {name} | {_n(case.get('achieved_per_sec'))} | {_n(case.get('p50_ms'))} "
            f"| {_n(case.get('p99_ms'))} | {steps} | {_load(case)} | {_cores(case)} | {valid} |")


def table(cases: list[dict[str, Any]]) -> str:
    """The markdown table, rows by offered rate then system (trident, bytewax, sss, real-time)."""
    def key(c: dict[str, Any]) -> tuple[int, int, str]:
        s = str(c.get("system"))
        return int(c.get("offered_per_sec") or 0), ORDER.index(s) if s in ORDER else len(ORDER), s

    lines = [HEADER, "|" + " --- |" * HEADER.count(" | ") + " --- |"]
    lines += [row(c) for c in sorted(cases, key=key)]
    methods = sorted({str(c["method"]) for c in cases if c.get("method")})
    if methods:
        lines += ["", "Method: " + "; ".join(methods)]
    return "\n".join(lines)


def main() -> None:
    """Print the table of the files named (or of stdin)."""
    if len(sys.argv) > 1:
        lines: list[str] = []
        for path in sys.argv[1:]:
            with open(path) as f:
                lines += f.readlines()
    else:
        lines = sys.stdin.readlines()
    print(table(parse(lines)))


if __name__ == "__main__":
    main()
