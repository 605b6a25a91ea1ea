"""The floor of one Spark job on ``local[2]``: a one-task job that returns 1 KB, run
``--jobs`` times after a warm-up, with the CPU each process spent on it read from
``/proc`` (Linux). Each micro-batch of a topology is at least one such job, so this is
the fixed cost a batch pays before any work of its own:

    python benchmarks/spark_job_floor.py [--jobs 40]

Prints one JSON line: wall ms per job and CPU ms per job of the JVM, the Python workers
(the daemon and its forks) and the driver (docs/performance.md, "Kafka in, columns all
the way")."""
from __future__ import annotations

import argparse
import json
import os
import time

from transactional import TopologyConfig
from transactional.engine.spark import get_or_create_context

TICK = os.sysconf("SC_CLK_TCK")


def cpu_by_kind() -> dict[str, float]:
    """CPU seconds so far of the JVM, the Python workers and this driver."""
    out = {"jvm": 0.0, "python_workers": 0.0, "driver": 0.0}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline") as f:
                cmd = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        secs = (int(fields[11]) + int(fields[12])) / TICK
        if pid == str(os.getpid()):
            out["driver"] += secs
        elif "java" in stat[:stat.rindex(")")] and "spark" in cmd.lower():
            out["jvm"] += secs
        elif "daemon" in cmd and "python" in cmd:
            out["python_workers"] += secs
    return out


def one_kb(_: int, __: object) -> object:
    yield b"x" * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=40)
    args = ap.parse_args()
    sc = get_or_create_context(TopologyConfig(spark_master="local[2]", spark_ui=False, progress=False))
    for _ in range(10):
        sc.parallelize(range(1), 1).mapPartitionsWithIndex(one_kb).collect()
    before, t0 = cpu_by_kind(), time.monotonic()
    for _ in range(args.jobs):
        sc.parallelize(range(1), 1).mapPartitionsWithIndex(one_kb).collect()
    wall, after = time.monotonic() - t0, cpu_by_kind()
    print(json.dumps({"benchmark": "spark_job_floor", "jobs": args.jobs, "master": "local[2]",
                      "wall_ms_per_job": round(wall / args.jobs * 1000, 1),
                      **{f"{k}_cpu_ms_per_job": round((after[k] - before[k]) / args.jobs * 1000, 1) for k in after}}))
    sc.stop()


if __name__ == "__main__":
    main()
