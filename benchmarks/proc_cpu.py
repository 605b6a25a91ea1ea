"""CPU time of process trees from ``/proc`` (Linux), for benchmarks that run several processes
on one machine and must say who used the cores: ``latency_kafka.py`` reports, per case, the
cores the system under test, the producer, the broker, Redis and the harness used while
the records were produced.

    before = snapshot()
    ...
    cores = used(before, snapshot(), {"system": [pid], "broker": [pid2]})   # {"system": 1.3, ...}
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass
class Snapshot:
    """Every process's parent and CPU seconds (user + system; not its reaped children's,
    which would land in the window whole when a long job of someone else's ends) at ``at``
    (monotonic s)."""

    at: float
    parent: dict[int, int] = field(default_factory=dict)
    cpu: dict[int, float] = field(default_factory=dict)


def snapshot() -> Snapshot:
    """Read ``/proc/<pid>/stat`` of every process (an empty snapshot where there is no /proc)."""
    snap = Snapshot(time.monotonic())
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return snap
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue                         # gone since the listing
        fields = stat[stat.rfind(")") + 2:].split()
        snap.parent[pid] = int(fields[1])
        snap.cpu[pid] = (int(fields[11]) + int(fields[12])) / HZ     # utime + stime
    return snap


def tree(snap: Snapshot, roots: list[int]) -> set[int]:
    """``roots`` and all their descendants alive in ``snap``."""
    children: dict[int, list[int]] = {}
    for pid, ppid in snap.parent.items():
        children.setdefault(ppid, []).append(pid)
    out: set[int] = set()
    todo = [r for r in roots if r in snap.parent]
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(children.get(pid, []))
    return out


def used(before: Snapshot, after: Snapshot, roles: dict[str, list[int]]) -> dict[str, float]:
    """Cores each role's process trees used between the snapshots (CPU seconds / wall
    seconds); ``"all"``: every process on the machine (other work included). A process
    born between the snapshots counts from its start; one that ended between them is not
    counted."""
    wall = max(1e-9, after.at - before.at)
    out: dict[str, float] = {}
    for role, roots in roles.items():
        pids = tree(after, roots)
        out[role] = round(sum(after.cpu[p] - before.cpu.get(p, 0.0) for p in pids) / wall, 2)
    out["all"] = round(sum(c - before.cpu.get(p, 0.0) for p, c in after.cpu.items()) / wall, 2)
    return out
