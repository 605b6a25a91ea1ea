"""Peer of ``benchmarks/latency.py --bench kafka``: bytewax 0.21's ``KafkaSource`` reading
the harness's topic as it is produced, word counts into Redis exactly once.

    python benchmarks/peers/bytewax_kafka_latency.py --bootstrap HOST:PORT --topic T --redis URL
        --records N --out FILE [--batch 12500] [--epoch-ms 0] [--fetch-wait-ms 500]

The dataflow of ``bytewax_kafka_wordcount.py`` with ``tail=True`` (1 worker, recovery on,
a snapshot per activation by default): ``KafkaSource`` -> a ``Counter`` per source batch
with each partition's last offset -> one Lua call per batch that checks and stores the
offsets with the counts (``bytewax_kafka_wordcount.LUA_APPLY``) into the hash
``wordcount``. Prints ``{"ready": true, "hash": "wordcount"}`` before ``run_main``; stops
(by raising out of the sink) once ``--records`` records are applied, and writes each
batch's ``counted`` (its Counter built) and ``committing`` / ``written`` (the Lua call)
times to ``--out`` (monotonic s).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from datetime import timedelta
from itertools import chain
from pathlib import Path
from typing import Any

import bytewax.operators as op
from bytewax.connectors.kafka import KafkaSource
from bytewax.dataflow import Dataflow
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from bytewax.recovery import RecoveryConfig, init_db_dir
from bytewax.testing import run_main

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bytewax_kafka_wordcount import LUA_APPLY, OFFSETS_KEY  # noqa: E402

from peer_common import COUNTS_KEY, connect  # noqa: E402

#: librdkafka's fetch.wait.max.ms for bytewax's consumers (one per partition, each polled in
#: a loop): how long the broker may hold a fetch while nothing new is there. librdkafka's own
#: default, which bytewax's KafkaSource keeps: with 20, the four consumers' fetches made the
#: broker (Tansu) fall ~1 s behind acknowledging the producer within seconds at 1k records/s
#: (docs/performance.md, "Latency: Kafka to Redis")
FETCH_WAIT_MS = 500


class Enough(Exception):
    """Every record was applied: ends ``run_main``."""


class _Partition(StatelessSinkPartition):
    def __init__(self, sink: Sink) -> None:
        self.sink, self.client = sink, connect(sink.url)
        self.script = self.client.register_script(LUA_APPLY)

    def write_batch(self, items: list[Any]) -> None:
        for counted, last, counts, n in items:
            args: list[Any] = [len(last)]
            for p, o in last.items():
                args += (p, o)
            for w, c in counts.items():
                args += (w, c)
            t0 = time.monotonic()
            self.script(keys=[COUNTS_KEY, OFFSETS_KEY], args=args)
            self.sink.batches.append({"txid": len(self.sink.batches), "counted": counted, "committing": t0,
                                      "written": time.monotonic()})
            self.sink.applied += n
        if self.sink.applied >= self.sink.records:
            raise Enough


class Sink(DynamicSink):
    def __init__(self, url: str, records: int) -> None:
        self.url, self.records, self.applied = url, records, 0
        self.batches: list[dict[str, float]] = []

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _Partition:
        return _Partition(self)


def count_batch(msgs: list[Any]) -> list[Any]:
    """One source batch: (count time, {partition: last offset}, Counter, records)."""
    last: dict[int, int] = {}
    for m in msgs:
        last[m.partition] = m.offset
    words = Counter(chain.from_iterable(m.value.decode().split() for m in msgs))
    return [(time.monotonic(), last, words, len(msgs))]


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    for a in ("--bootstrap", "--topic", "--redis", "--out"):
        ap.add_argument(a, required=True)
    ap.add_argument("--records", type=int, required=True)
    ap.add_argument("--batch", type=int, default=12_500, help="KafkaSource batch_size (records per fetch)")
    ap.add_argument("--epoch-ms", type=int, default=0)
    ap.add_argument("--fetch-wait-ms", type=int, default=FETCH_WAIT_MS, help="librdkafka fetch.wait.max.ms")
    args = ap.parse_args()
    sink = Sink(args.redis, args.records)
    with tempfile.TemporaryDirectory(prefix="bytewax-latency-") as db:
        init_db_dir(Path(db), 1)
        flow = Dataflow("peer-kafka-latency")
        src = KafkaSource([args.bootstrap], [args.topic], tail=True, batch_size=args.batch,
                          add_config={"group.id": "bytewax-latency",
                                                "fetch.wait.max.ms": str(args.fetch_wait_ms)})
        counts = op.flat_map_batch("count", op.input("kafka", flow, src), count_batch)
        op.output("redis", counts, sink)
        print(json.dumps({"ready": True, "hash": COUNTS_KEY, "config": {
            "workers": 1, "recovery": f"RecoveryConfig, epoch_interval {args.epoch_ms} ms",
            "batch_size": args.batch, "fetch.wait.max.ms": args.fetch_wait_ms}}), flush=True)
        try:
            run_main(flow, epoch_interval=timedelta(milliseconds=args.epoch_ms),
                     recovery_config=RecoveryConfig(Path(db)))
        except Exception:
            if sink.applied < sink.records:
                raise
    with open(args.out, "w") as f:
        json.dump({"batches": sink.batches, "batches_committed": len(sink.batches)}, f)


if __name__ == "__main__":
    main()
