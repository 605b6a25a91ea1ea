"""Peer benchmark: the Kafka word count in bytewax 0.21, recovery on, counts into Redis
exactly once.

    flock /tmp/heavy.lock python benchmarks/peers/bytewax_kafka_wordcount.py --bootstrap HOST:PORT --topic T \
        [--sentences 1000000] [--batch 50000] [--redis redis://HOST:PORT/0]

Reads the topic ``benchmarks/kafka_wordcount.py --produce-only`` filled (``make_corpus(
--sentences)`` over 4 partitions), with ``bytewax.connectors.kafka.KafkaSource`` (1
worker, ``tail=False``: the run ends at the partitions' ends; ``batch_size`` = ``--batch``
/ 4 records per partition fetch). Dataflow:

    input  "kafka"  KafkaSource (its snapshot: each partition's next offset)
    map    "count"  ``flat_map_batch``: a ``Counter`` of the words of each source batch,
                    with each partition's last offset in it
    output "redis"  one Lua call per batch (``LUA_APPLY``): the batch is applied only if
                    every partition's last offset is beyond the one stored; then HINCRBY
                    per word into ``wordcount`` and the partitions' last offsets stored in
                    ``wordcount:offsets``, atomically. A batch replayed after a resume
                    from the recovery snapshot is skipped.

Recovery: ``RecoveryConfig`` on a fresh sqlite db (``init_db_dir``), ``--epoch-ms``
(default 0: a snapshot per activation). Words/s = words / wall time from ``run_main`` to
the last Redis write; batch latency = from the batch's counting to its write returning.
Every key is checked against the corpus (``exact``). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from datetime import timedelta
from importlib.metadata import version
from itertools import chain
from pathlib import Path

import bytewax.operators as op
from bytewax.connectors.kafka import KafkaSource
from bytewax.dataflow import Dataflow
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from bytewax.recovery import RecoveryConfig, init_db_dir
from bytewax.testing import run_main

from transactional.testing import make_corpus

from peer_common import COUNTS_KEY, connect, emit, percentile_ms, true_counts, verify

OFFSETS_KEY = "wordcount:offsets"

LUA_APPLY = """
local n = tonumber(ARGV[1])
for i = 2, 2 * n, 2 do
  local stored = redis.call('HGET', KEYS[2], ARGV[i])
  if stored and tonumber(stored) >= tonumber(ARGV[i + 1]) then return 0 end
end
for i = 2, 2 * n, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
for i = 2 * n + 2, #ARGV, 2 do redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 1
"""


class _Partition(StatelessSinkPartition):
    def __init__(self, sink: Sink):
        self.sink, self.client = sink, connect(sink.url)
        self.script = self.client.register_script(LUA_APPLY)

    def write_batch(self, items) -> None:
        for at, last, counts in items:
            args: list[object] = [len(last)]
            for p, o in last.items():
                args += (p, o)
            for w, n in counts.items():
                args += (w, n)
            applied = self.script(keys=[COUNTS_KEY, OFFSETS_KEY], args=args)
            self.sink.applied += int(applied)
            self.sink.last_write = time.monotonic()
            self.sink.latencies.append(self.sink.last_write - at)

    def close(self) -> None:
        self.client.close()


class Sink(DynamicSink):
    def __init__(self, url: str):
        self.url, self.applied, self.last_write, self.latencies = url, 0, 0.0, []

    def build(self, step_id, worker_index, worker_count):
        return _Partition(self)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--sentences", type=int, default=1_000_000, help="the corpus the topic holds (to verify)")
    ap.add_argument("--batch", type=int, default=50_000, help="sentences per batch over the 4 partitions")
    ap.add_argument("--redis", help="redis://host:port/db (default: start redis-server)")
    ap.add_argument("--epoch-ms", type=int, default=0)
    args = ap.parse_args()

    expected = true_counts(make_corpus(args.sentences))
    words = sum(expected.values())
    server = None
    url = args.redis
    if url is None:
        from transactional.testing import ManagedRedis

        server = ManagedRedis(appendonly=False).start()
        url = server.url
    try:
        client = connect(url)
        client.delete(COUNTS_KEY, OFFSETS_KEY)
        with tempfile.TemporaryDirectory(prefix="bytewax-recovery-") as db:
            init_db_dir(Path(db), 1)
            flow = Dataflow("peer-kafka-wordcount")
            src = KafkaSource([args.bootstrap], [args.topic], tail=False, batch_size=max(1, args.batch // 4),
                              add_config={"group.id": "bytewax-peer", "fetch.wait.max.ms": "20"})
            msgs = op.input("kafka", flow, src)
            counts = op.flat_map_batch("count", msgs, count_batch)
            sink = Sink(url)
            op.output("redis", counts, sink)
            t0 = time.monotonic()
            run_main(flow, epoch_interval=timedelta(milliseconds=args.epoch_ms), recovery_config=RecoveryConfig(Path(db)))
            wall = sink.last_write - t0
        exact = verify(client, expected)
        client.close()
    finally:
        if server is not None:
            server.destroy()
    emit({"benchmark": "kafka_wordcount", "system": "bytewax", "version": version("bytewax"),
          "sentences": args.sentences, "words": words, "batches_applied": sink.applied,
          "batch_sentences": args.batch, "wall_secs": round(wall, 2), "words_per_sec": round(words / wall),
          "batch_latency_p50_ms": percentile_ms(sink.latencies, 50),
          "batch_latency_p99_ms": percentile_ms(sink.latencies, 99), "exact": exact, "workers": 1,
          "recovery": f"RecoveryConfig (sqlite), epoch_interval {args.epoch_ms} ms; one Lua call per batch "
                      "checks and stores each partition's last offset with the counts"})


def count_batch(msgs):
    """One source batch: (count time, {partition: last offset}, Counter of its words)."""
    last: dict[int, int] = {}
    for m in msgs:
        last[m.partition] = m.offset
    words = Counter(chain.from_iterable(m.value.decode().split() for m in msgs))
    return [(time.monotonic(), last, words)]


if __name__ == "__main__":
    main()
