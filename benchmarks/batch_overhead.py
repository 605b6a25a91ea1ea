"""The fixed cost of one small batch's processing job on ``local[2]``: the Trident word count
of the latency benchmark (``map_batches`` split, ``group_by(word).persistent_aggregate(Count())``,
``parallelism_hint(2)``) over an in-memory spout, one batch in flight, batches of 1, 100 and
2,500 sentences:

    python benchmarks/batch_overhead.py [--records 1,100,2500] [--batches 40]

For each size, the processing job of every committed batch from the driver deciding to run it
to its result on the driver (``RunResult.processing_secs``): p50/p99, and what Spark ran for it
(jobs and stages per batch, from Spark's status tracker), the Py4J calls the driver made per
batch, and the broadcasts of the whole run. Prints one JSON line (docs/performance.md,
"Latency: Kafka to Redis")."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from transactional import TopologyConfig, run_topology  # noqa: E402
from transactional.engine.spark import get_or_create_context  # noqa: E402
from transactional.result import percentile  # noqa: E402

from wordcount import build_trident  # noqa: E402

CALLS = {"py4j": 0, "broadcasts": 0}


def count_py4j() -> None:
    """Count every command the driver sends to the JVM over Py4J."""
    from py4j import clientserver, java_gateway

    for cls in (java_gateway.GatewayClient, clientserver.JavaClient):
        send = cls.send_command

        def counted(self: Any, *a: Any, _send: Any = send, **kw: Any) -> Any:
            CALLS["py4j"] += 1
            return _send(self, *a, **kw)
        cls.send_command = counted  # type: ignore[method-assign]


def spark_counts(sc: Any, tid: str) -> dict[str, int]:
    """Jobs and stages Spark ran for ``tid``'s processing jobs (their descriptions name it),
    from Spark's status store."""
    store = sc._jsc.sc().statusStore()
    listed = store.jobsList(None)
    jobs = stages = 0
    for i in range(listed.size()):
        j = listed.apply(i)
        desc = "" if j.description().isEmpty() else str(j.description().get())
        if f"trident {tid} txid" in desc and "(processing)" in desc:
            jobs += 1
            stages += j.stageIds().size()
    return {"jobs": jobs, "stages": stages}


def count_broadcasts(sc: Any) -> None:
    """Count the broadcasts the driver makes (``CALLS["broadcasts"]``)."""
    broadcast = sc.broadcast

    def counted(value: Any) -> Any:
        CALLS["broadcasts"] += 1
        return broadcast(value)
    sc.broadcast = counted


def one_size(sc: Any, cfg: TopologyConfig, records: int, batches: int) -> dict[str, Any]:
    per_batch = max(records, 2)       # the spout's 2 partitions give at least one record each
    corpus = [f"w{i % 97} w{i % 13} the quick brown fox" for i in range(per_batch * batches)]
    tid = f"overhead-{records}-{uuid.uuid4().hex[:6]}"
    topo = build_trident(tid, corpus, records, 2, 1, True, "counters")
    calls0, broadcasts0 = CALLS["py4j"], CALLS["broadcasts"]
    t0 = time.monotonic()
    r = run_topology(topo, cfg, spark_context=sc)
    wall = time.monotonic() - t0
    n = r.batches_committed
    counts = spark_counts(sc, tid)
    return {"records": records, "sentences_per_batch": per_batch, "batches": n, "wall_secs": round(wall, 2),
            "job_p50_ms": round((percentile(r.processing_secs, 50) or 0) * 1000, 1),
            "job_p99_ms": round((percentile(r.processing_secs, 99) or 0) * 1000, 1),
            "spark_jobs_per_batch": round(counts["jobs"] / max(1, n), 2),
            "spark_stages_per_batch": round(counts["stages"] / max(1, n), 2),
            "py4j_calls_per_batch": round((CALLS["py4j"] - calls0) / max(1, n), 1),
            "broadcasts_per_run": CALLS["broadcasts"] - broadcasts0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", default="1,100,2500", help="sentences per batch, comma-separated")
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    count_py4j()
    cfg = TopologyConfig(spark_master=args.master, spark_ui=False, progress=False, max_spout_pending=1,
                         idle_timeout_secs=0.5)
    sc = get_or_create_context(cfg)
    sc.parallelize(range(4), 2).count()      # the Python workers started before timing
    count_broadcasts(sc)
    one_size(sc, cfg, 100, 5)                # and the task modules imported
    cases = [one_size(sc, cfg, int(x), args.batches) for x in args.records.split(",")]
    print(json.dumps({"benchmark": "batch_overhead", "master": args.master, "max_spout_pending": 1,
                      "parallelism_hint": 2, "cases": cases,
                      "load_avg_1m": round(os.getloadavg()[0], 2)}))
    sc.stop()


if __name__ == "__main__":
    main()
