"""Distributed RPC throughput and latency: storm-starter's ReachTopology answering calls
from concurrent clients (docs/drpc.md).

    python benchmarks/drpc.py [--clients 1,16,256] [--calls 2000] [--executor in-process,spark]
                              [--master local[2]] [--batch 256]

Each client is a thread calling ``LocalDRPC.execute("reach", url)`` in a loop, over the
URLs of the example (answers checked); ``--calls`` calls in all per configuration (at least
4 per client). One JSON line per (executor, clients): calls per second, latency p50/p99
(ms), batches committed and requests per batch. Requests share batches, so throughput
grows with concurrency until a batch holds ``--batch`` requests; each batch costs one
processing job (one Spark job on the Spark executor) and a commit, which sets the floor of
the latency.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Callable, Sequence

from examples import reach
from transactional import LocalCluster, TopologyConfig
from transactional.drpc import LocalDRPC
from transactional.result import percentile

WANT = {"foo.com/blog/1": "16", "engineering.twitter.com/blog/5": "14", "tech.backtype.com/blog/123": "7",
        "notaurl.com": "0"}
URLS = list(WANT)


def concurrent_calls(call: Callable[[str], str], args: Sequence[str], ok: Callable[[str, str], bool], clients: int,
                     per_client: int) -> tuple[list[float], list[tuple[str, str]], float]:
    """``clients`` threads, started together, each making ``per_client`` calls ``call(arg)``
    over ``args``: every call's latency (s), the wrong answers (``ok`` false) and the seconds
    they all took (benchmarks/latency.py uses it too)."""
    latencies: list[float] = []
    wrong: list[tuple[str, str]] = []
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)

    def client(i: int) -> None:
        mine = []
        start.wait()
        for k in range(per_client):
            arg = args[(i + k) % len(args)]
            t0 = time.perf_counter()
            got = call(arg)
            mine.append(time.perf_counter() - t0)
            if not ok(arg, got):
                wrong.append((arg, got))
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return latencies, wrong, time.perf_counter() - t0


def run(executor: str, master: str, clients: int, calls: int, batch: int) -> dict:
    drpc = LocalDRPC()
    topology = reach.construct().create_local_topology(drpc)
    config = TopologyConfig(executor=executor, spark_master=master, progress=False, spark_ui=False,
                            drpc_batch_size=batch)
    per_client = max(4, calls // clients)
    cluster = LocalCluster()
    cluster.submit_topology("reach-bench", config, topology)
    drpc.execute("reach", "notaurl.com")          # warm: the run is up (and Spark's workers)
    latencies, wrong, secs = concurrent_calls(lambda url: drpc.execute("reach", url), URLS,
                                              lambda url, got: got == WANT[url], clients, per_client)
    result = cluster.kill_topology("reach-bench")
    batches = (result.batches_committed - 1) if result is not None else 0
    return {"benchmark": "drpc-reach", "executor": executor, "master": master if executor == "spark" else None,
            "clients": clients, "calls": len(latencies), "seconds": round(secs, 3),
            "calls_per_sec": round(len(latencies) / secs, 1),
            "p50_ms": round((percentile(latencies, 50) or 0) * 1000, 1),
            "p99_ms": round((percentile(latencies, 99) or 0) * 1000, 1),
            "batches": batches, "requests_per_batch": round(len(latencies) / max(1, batches), 1),
            "drpc_batch_size": batch, "wrong_answers": len(wrong)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", default="1,16,256", help="comma-separated numbers of concurrent clients")
    p.add_argument("--calls", type=int, default=2000, help="calls per configuration (at least 4 per client)")
    p.add_argument("--executor", default="in-process,spark", help="comma-separated: in-process, spark")
    p.add_argument("--master", default="local[2]", help="Spark master for --executor spark")
    p.add_argument("--batch", type=int, default=256, help="drpc_batch_size: the most requests in one batch")
    a = p.parse_args()
    for executor in a.executor.split(","):
        for clients in (int(c) for c in a.clients.split(",")):
            print(json.dumps(run(executor, a.master, clients, a.calls, a.batch)), flush=True)


if __name__ == "__main__":
    main()
