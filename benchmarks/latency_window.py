"""A window's end -> its result committed in Redis (docs/performance.md, "Latency: Kafka to
Redis"). Run through ``python benchmarks/latency.py --bench window``.

Records go to a 4-partition topic at ``--rate``/s (a producer thread); a Trident topology
as a user writes it (``parallelism_hint(2)``, ``TopologyConfig`` defaults) reads them with
the Kafka spout, counts them in tumbling processing-time windows of ``--window-ms``
(``tumbling_window(Duration(...))``: a window's time is the txid's, taken when its first
commit begins) and stores each window's result under ``e<window end ms>`` in a ``counters``
map in Redis, in the commit that fires it. A reader thread polls Redis for the next
window's key every 0.5 ms: the latency is the time the key appeared less the window's end
(wall clock, the driver's and the reader's one clock). The breakdown splits it at the
commit that fired the window: ``to_commit`` (the window's end until the next commit
began: a batch launched, processed and its turn reached) and ``commit`` (that commit
began until the result was visible). Prints one JSON line.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from typing import Any

import redis

HERE = os.path.dirname(os.path.abspath(__file__))


def _topology(tid: str, bootstrap: str, topic: str, window_ms: int) -> Any:
    """Kafka (``parallelism_hint(2)``) -> tumbling processing-time windows counting the
    records -> each window's result under ``e<end>`` in a ``counters`` map."""
    from spouts.kafka import KafkaTransactionalSpout
    from transactional import Fields
    from trident import BaseAggregator, Count, Duration, TridentTopology
    from trident import state as trident_state
    from trident.windowing import WindowsStoreFactory

    class EndCount(BaseAggregator):
        def init(self, batch_id: Any, collector: Any) -> list[int]:
            return [0]

        def aggregate(self, acc: list[int], tuple: Any, collector: Any) -> None:
            acc[0] += 1

        def complete(self, acc: list[int], collector: Any) -> None:
            collector.emit((f"e{collector.window.get_end_timestamp()}", acc[0]))

    t = TridentTopology(tid)
    s = t.new_stream("spout", KafkaTransactionalSpout(bootstrap, topic, max_records_per_partition=12_500,
                                                      field_names=("sentence",))).parallelism_hint(2)
    w = s.tumbling_window(Duration(window_ms), WindowsStoreFactory("windows"), Fields("sentence"), EndCount(),
                          Fields("end", "n"))
    w.group_by(Fields("end")).persistent_aggregate(trident_state.counters("results"), Count(), Fields("c"))
    return t.build()


class _Windows(threading.Thread):
    """Polls Redis for the next window's result key from the first commit on; ``seen``:
    window end (ms) -> wall time its key appeared."""

    def __init__(self, url: str, prefix: str, window_ms: int, first: threading.Event) -> None:
        super().__init__(daemon=True)
        self.client, self.prefix, self.window_ms, self.first = redis.Redis.from_url(url), prefix, window_ms, first
        self.seen: dict[int, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.first.wait(0.1) and not self.stop.is_set():
            pass                                # windows before the first commit hold nothing
        step = self.window_ms
        end = (int(time.time() * 1000) // step + 1) * step
        while not self.stop.is_set():
            if self.client.exists(f"{self.prefix}e{end}"):
                self.seen[end] = time.time()
                end += step
            elif end < time.time() * 1000 - 5 * step:
                end += step                     # a window with no records fires nothing
            time.sleep(0.0005)


def run(rate: int, seconds: float, window_ms: int, poll_interval: float | None) -> dict[str, Any]:
    """One case: the JSON line's dict."""
    sys.path.insert(0, HERE)
    from latency_kafka import PARTITIONS, Producer, pct

    from transactional import TopologyConfig
    from transactional.engine import driver
    from transactional.engine.spark import get_or_create_context
    from transactional.ops.run import OperatorWatch
    from transactional.testing.kafka import ManagedKafka, create_topic
    from transactional.testing.redis import ManagedRedis

    commits: list[float] = []                  # wall time each commit began
    first = threading.Event()

    def listen(tr: Any) -> None:
        if tr.kind == "committing":
            commits.append(time.time())
        elif tr.kind == "committed":
            first.set()

    class Watch(OperatorWatch):
        def started(self, engine: Any) -> None:
            super().started(engine)
            engine.listeners.append(listen)

    broker, server = ManagedKafka().start(), ManagedRedis(appendonly=False).start()
    try:
        topic, tid = f"latency-window-{uuid.uuid4().hex[:8]}", f"latency-window-{uuid.uuid4().hex[:8]}"
        create_topic(broker.bootstrap, topic, PARTITIONS)
        overrides = {"poll_interval_secs": poll_interval} if poll_interval is not None else {}
        cfg = TopologyConfig(spark_ui=False, state=server.url, progress=False, idle_timeout_secs=3.0, **overrides)
        sc = get_or_create_context(cfg)
        sc.parallelize(range(4), 2).count()
        producer = Producer(broker.bootstrap, topic, rate, int(rate * seconds))
        reader = _Windows(server.url, f"{tid}:results:", window_ms, first)
        load0 = os.getloadavg()[0]
        producer.start()
        reader.start()
        r = driver.run_topology(_topology(tid, broker.bootstrap, topic, window_ms), cfg, None, spark_context=sc,
                                watch=Watch())
        reader.stop.set()
        reader.join()
    finally:
        server.destroy()
        broker.destroy()
    seen = reader.seen
    ends = sorted(seen)[:-1]                   # the last: the end of the input
    lat = [seen[e] - e / 1000 for e in ends]
    to_commit, commit = [], []
    for e in ends:
        began = [c for c in commits if e / 1000 <= c <= seen[e]]
        if began:
            to_commit.append(began[0] - e / 1000)
            commit.append(seen[e] - began[0])
    return {"benchmark": "latency-window", "system": "trident", "window_ms": window_ms, "offered_per_sec": rate,
            "seconds": seconds, "windows": len(lat), "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
            "breakdown_p50_ms": {"to_commit": pct(to_commit, 50), "commit": pct(commit, 50)},
            "batches_committed": r.batches_committed, "load_1min_before": round(load0, 2),
            "load_1min_after": round(os.getloadavg()[0], 2),
            "config": {"parallelism_hint": 2, "max_spout_pending": cfg.max_spout_pending,
                       "poll_interval_secs": cfg.poll_interval_secs}}
