"""End-to-end latency of one DRPC call under concurrency, with the engine's own breakdown
(docs/performance.md, "Latency"); with ``--bench kafka``, of a Kafka record to its count
committed in Redis (``latency_kafka.py``, "Latency: Kafka to Redis").

    python benchmarks/latency.py [--clients 1,16,256] [--calls 512] [--kind linear,trident]
                                 [--executor in-process,spark] [--master local[2]] [--on-driver auto|N]
    python benchmarks/latency.py --bench kafka [--systems trident,bytewax,sss,sss-realtime]
                                 [--rates 1000,10000,100000] [--seconds 10] [--warmup 3] [--markdown]
    python benchmarks/latency.py --bench window [--rates 1000] [--seconds 10] [--window-ms 1000]

``linear`` is storm-starter's ReachTopology (examples/reach.py) on Linear DRPC; ``trident``
is Storm's TridentWordCount query stream (examples/trident_drpc_word_count.py). Each client
is a thread calling ``LocalDRPC.execute`` in a loop; ``--calls`` calls in all per case (at
least 2 per client). One JSON line per (kind, executor, clients): the client-side p50/p99
(ms) and, from the run's ``RunResult`` (the coordinator's transitions), the p50 of the
committed batches' processing job, commit phase and launch -> committed time; ``wait_ms`` is
the client p50 less that launch -> committed p50: time a request spends queued, waiting
for the driver to wake and plan (or, before the wakeup, for its next poll) or for a batch
ahead of it. ``calls_per_batch``: the calls the DRPC spout took per batch that had any
(mean and most), counted at the function's queue; ``driver_batches``/``spark_batches``: the
measured batches whose processing ran in the driver's process or as a Spark job
(``transactional.engine.placement``).

Before the measured calls the run is warmed: one call (the run is up, and Spark's workers),
and for ``trident`` calls until the word count's finite sentence stream is all counted (its
batches are Spark jobs; a call that shares a txid with one, or comes after one, waits for it).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from examples import reach, trident_drpc_word_count
from transactional import LocalCluster, TopologyConfig
from transactional.drpc import LocalDRPC
from transactional.engine import placement
from transactional.engine.drpc import local_queues
from transactional.result import percentile

from drpc import concurrent_calls

REACH = {"foo.com/blog/1": "16", "engineering.twitter.com/blog/5": "14", "tech.backtype.com/blog/123": "7",
         "notaurl.com": "0"}
WORDS = ["cat the dog jumped", "the man", "apples and candy"]


def _topology(kind: str, drpc: LocalDRPC) -> tuple[Any, str, list[str], Callable[[str, str], bool]]:
    if kind == "linear":
        return (reach.construct().create_local_topology(drpc), "reach", list(REACH),
                lambda arg, got: got == REACH[arg])
    return (trident_drpc_word_count.build_topology(drpc), "words", WORDS,
            lambda arg, got: got.startswith("[["))


def _ms(h: Any, q: float = 50) -> float | None:
    v = percentile(h, q)
    return None if v is None else round(v * 1000, 1)


#: the word count's answer to WORDS[0] once every sentence is counted (examples/trident_drpc_word_count.py)
COUNTED = "[[24]]"


def run(kind: str, executor: str, master: str, clients: int, calls: int, on_driver: int | None = None) -> dict[str, Any]:
    """One case: ``clients`` threads making ``calls`` calls in all; the figures as a dict.
    ``on_driver``: ``drpc_on_driver_max_calls`` (None: the default, "auto")."""
    drpc = LocalDRPC()
    topology, function, args, ok = _topology(kind, drpc)
    config = TopologyConfig(executor=executor, spark_master=master, progress=False, spark_ui=False,
                            drpc_on_driver_max_calls=on_driver)
    per_client = max(2, calls // clients)
    taken = _count_takes(drpc, function)
    placed = _count_placements()
    cluster = LocalCluster()
    cluster.submit_topology("latency-bench", config, topology)
    got = drpc.execute(function, args[0])     # warm: the run is up (and Spark's workers)
    deadline = time.monotonic() + 120
    while kind == "trident" and got != COUNTED and time.monotonic() < deadline:
        got = drpc.execute(function, args[0])  # ... and the sentences are all counted
    taken.clear()
    placed.clear()
    latencies, wrong, secs = concurrent_calls(lambda arg: drpc.execute(function, arg), args, ok, clients,
                                              per_client)
    sizes = [n for n in taken if n > 0]
    result = cluster.kill_topology("latency-bench")
    p50 = _ms(latencies)
    launch_to_commit = _ms(result.commit_latencies) if result is not None else None
    return {"benchmark": "latency-drpc", "kind": kind, "executor": executor,
            "master": master if executor == "spark" else None,
            "on_driver": "auto" if on_driver is None else on_driver, "clients": clients,
            "calls": len(latencies), "seconds": round(secs, 3), "p50_ms": p50, "p99_ms": _ms(latencies, 99),
            "batches": result.batches_committed if result is not None else None,
            "processing_ms": _ms(result.processing_secs) if result is not None else None,
            "commit_ms": _ms(result.commit_phase_secs) if result is not None else None,
            "launch_to_commit_ms": launch_to_commit,
            "wait_ms": round(p50 - launch_to_commit, 1) if p50 is not None and launch_to_commit else None,
            "calls_per_batch": round(sum(sizes) / len(sizes), 1) if sizes else None,
            "most_calls_per_batch": max(sizes, default=None), "driver_batches": placed.count(True),
            "spark_batches": placed.count(False) if executor == "spark" else None, "wrong_answers": len(wrong)}


def _count_placements() -> list[bool]:
    """Where each batch's processing ran (True: the driver's process), for the batches of Spark runs."""
    placed: list[bool] = []
    decide = placement.SmallBatches.__call__

    def counted(self: placement.SmallBatches, meta: Any) -> bool:
        here = decide(self, meta)
        placed.append(here)
        return here
    placement.SmallBatches.__call__ = counted  # type: ignore[method-assign]
    return placed


def _count_takes(drpc: LocalDRPC, function: str) -> list[int]:
    """How many calls each batch of ``function`` took from ``drpc``'s queue (appended to the list returned)."""
    q = local_queues(drpc.source)[function]
    sizes: list[int] = []
    take = q.take

    def counted(n: int, wait_secs: float = 0.0, *more: Any) -> Any:
        got = take(n, wait_secs, *more)
        sizes.append(len(got))
        return got
    q.take = counted  # type: ignore[method-assign]
    return sizes


def main() -> None:
    """Runs every (kind, executor, clients) case and prints one JSON line each."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--clients", default="1,16,256", help="comma-separated numbers of concurrent clients")
    p.add_argument("--calls", type=int, default=512, help="calls per case (at least 2 per client)")
    p.add_argument("--kind", default="linear,trident", help="comma-separated: linear, trident")
    p.add_argument("--executor", default="in-process,spark", help="comma-separated: in-process, spark")
    p.add_argument("--master", default="local[2]", help="Spark master for --executor spark")
    p.add_argument("--bench", default="drpc", choices=["drpc", "kafka", "window"])
    p.add_argument("--window-ms", type=int, default=1000, help="--bench window: tumbling window length")
    p.add_argument("--systems", default="trident,bytewax,sss,sss-realtime", help="--bench kafka: who to measure")
    p.add_argument("--rates", default="1000,10000,100000", help="--bench kafka: records/s offered")
    p.add_argument("--seconds", type=float, default=10.0, help="--bench kafka: measured seconds a case")
    p.add_argument("--warmup", type=float, default=3.0, help="--bench kafka: seconds produced before measuring")
    p.add_argument("--trident-args", default="", help="--bench kafka: extra arguments of the trident system")
    p.add_argument("--bytewax-args", default="", help="--bench kafka: extra arguments of the bytewax system")
    p.add_argument("--markdown", action="store_true",
                   help="--bench kafka: after the JSON lines, print the docs table (benchmarks/latency_table.py)")
    p.add_argument("--on-driver", default="auto",
                   help="drpc_on_driver_max_calls: 'auto' (the default), or N: batches of at most N calls run in the "
                        "driver's process (0: none)")
    a = p.parse_args()
    if a.bench == "window":
        import latency_window

        for rate in (int(r) for r in a.rates.split(",")):
            print(json.dumps(latency_window.run(rate, a.seconds, a.window_ms, None)), flush=True)
        return
    if a.bench == "kafka":
        import latency_kafka

        lines = latency_kafka.run_all(a.systems.split(","), [int(r) for r in a.rates.split(",")], a.seconds,
                                      a.warmup, {"trident": a.trident_args.split(), "bytewax": a.bytewax_args.split()})
        if a.markdown:
            import latency_table

            print("\n" + latency_table.table(lines), flush=True)
        return
    for kind in a.kind.split(","):
        for executor in a.executor.split(","):
            for clients in (int(c) for c in a.clients.split(",")):
                on_driver = None if a.on_driver == "auto" else int(a.on_driver)
                print(json.dumps(run(kind, executor, a.master, clients, a.calls, on_driver)), flush=True)


if __name__ == "__main__":
    main()
