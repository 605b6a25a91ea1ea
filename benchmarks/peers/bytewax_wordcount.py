"""Peer benchmark: the reference word count in bytewax 0.21, recovery on, counts into Redis.

    pip install -e '.[peers]'                  # bytewax>=0.21,<0.22
    flock /tmp/heavy.lock python benchmarks/peers/bytewax_wordcount.py [--sentences 1000000] [--batch 50000]

The workload of ``benchmarks/wordcount.py``: ``make_corpus(--sentences)`` (10 Zipf words
per sentence), in batches of ``--batch`` sentences. The dataflow, 1 worker, run with
``bytewax.testing.run_main`` (the dataflow in the calling thread):

    input  "corpus"  a FixedPartitionedSource, one partition; each ``next_batch`` emits one
                     item ``(batch_index, emit_time, sentences)``; its snapshot is the index
                     of the next batch, so a resume starts at the first batch after the
                     last completed epoch
    map    "count"   ``Counter`` of the batch's words (``str.split``; C-speed counting)
    output "redis"   ``peer_common.apply_batch``: one MULTI/EXEC pipeline per batch, HINCRBY
                     per distinct word into the hash ``wordcount`` plus the fence
                     ``wordcount:applied = batch_index``; a replayed batch is skipped
                     (``--write lua``: the same as one atomic EVALSHA)

Recovery: ``bytewax.recovery.init_db_dir(<temp dir>, 1)`` (what ``python -m bytewax.recovery
<dir> 1`` does) and ``RecoveryConfig(<temp dir>)``; ``--epoch-ms`` (default 0: an epoch,
and so a snapshot of the source position into the recovery db, per batch, like one
checkpoint per micro-batch or txid) sets ``epoch_interval``. bytewax alone is
at-least-once (a restart replays the epochs after the last snapshot); the fence in Redis
makes the counts exactly-once. ``--abort-after N`` aborts the first execution after N
batches were emitted and runs the dataflow again on the same recovery db (a check that
recovery works; its wall time includes both executions).

Measures wall time from ``run_main`` to the end of the last Redis write (a private
``redis-server`` without AOF, started before and flushed); words/s = words / wall; batch
latency = from the source emitting a batch to its transaction returning. The corpus is
built before timing. Then every field of the hash is compared with a ``Counter`` over the
corpus (``exact``). Prints one JSON line.
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
from bytewax.dataflow import Dataflow
from bytewax.inputs import AbortExecution, FixedPartitionedSource, StatefulSourcePartition
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from bytewax.recovery import RecoveryConfig, init_db_dir
from bytewax.testing import run_main

from transactional.testing import ManagedRedis, make_corpus

from peer_common import WRITES, apply_batch, connect, emit, percentile_ms, true_counts, verify


class _CorpusPartition(StatefulSourcePartition):
    def __init__(self, source: CorpusSource, resume_state: int | None):
        self.source = source
        self.next_index = resume_state or 0

    def next_batch(self):
        src, i = self.source, self.next_index
        start = i * src.batch
        if start >= len(src.corpus):
            raise StopIteration
        if src.abort_after is not None and src.emitted >= src.abort_after:
            src.abort_after, src.aborted = None, True   # abort once; the resumed run goes on
            raise AbortExecution
        self.next_index = i + 1
        src.emitted += 1
        return [(i, time.monotonic(), src.corpus[start:start + src.batch])]

    def snapshot(self) -> int:
        return self.next_index


class CorpusSource(FixedPartitionedSource):
    """The corpus in batches of ``batch`` sentences, one item per batch, resumable by index."""

    def __init__(self, corpus: list[str], batch: int, abort_after: int | None = None):
        self.corpus, self.batch, self.abort_after = corpus, batch, abort_after
        self.emitted, self.aborted = 0, False

    def list_parts(self) -> list[str]:
        return ["corpus"]

    def build_part(self, step_id: str, for_part: str, resume_state: int | None) -> _CorpusPartition:
        return _CorpusPartition(self, resume_state)


class _RedisPartition(StatelessSinkPartition):
    def __init__(self, sink: RedisCountSink):
        self.sink = sink
        self.client = connect(sink.url)

    def write_batch(self, items) -> None:
        sink = self.sink
        for index, emitted_at, counts in items:
            if apply_batch(self.client, index, counts.items(), sink.write):
                sink.applied += 1
            else:
                sink.skipped += 1
            sink.last_write = time.monotonic()
            sink.latencies.append(sink.last_write - emitted_at)

    def close(self) -> None:
        self.client.close()


class RedisCountSink(DynamicSink):
    """Each ``(batch_index, emit_time, Counter)`` applied once to Redis; records timings."""

    def __init__(self, url: str, write: str = "pipeline"):
        self.url, self.write = url, write
        self.applied = self.skipped = 0
        self.last_write = 0.0
        self.latencies: list[float] = []

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _RedisPartition:
        return _RedisPartition(self)


def count_words(item):
    index, emitted_at, sentences = item
    return index, emitted_at, Counter(chain.from_iterable(map(str.split, sentences)))


def build_flow(source: CorpusSource, sink: RedisCountSink) -> Dataflow:
    flow = Dataflow("peer-wordcount")
    batches = op.input("corpus", flow, source)
    counts = op.map("count", batches, count_words)
    op.output("redis", counts, sink)
    return flow


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=50_000)
    ap.add_argument("--epoch-ms", type=int, default=0, help="epoch_interval (0: one epoch per batch)")
    ap.add_argument("--write", choices=WRITES, default="pipeline",
                    help="Redis write: MULTI/EXEC pipeline of HINCRBY, or one Lua script (peer_common.py)")
    ap.add_argument("--abort-after", type=int, default=None,
                    help="abort after N batches and resume from the recovery db (a recovery check)")
    args = ap.parse_args()

    corpus = make_corpus(args.sentences)
    expected = true_counts(corpus)
    words = sum(expected.values())
    server = ManagedRedis(appendonly=False)
    server.start()
    try:
        client = connect(server.url)
        client.flushdb()
        with tempfile.TemporaryDirectory(prefix="bytewax-recovery-") as db_dir:
            init_db_dir(Path(db_dir), 1)
            recovery = RecoveryConfig(Path(db_dir))
            source = CorpusSource(corpus, args.batch, args.abort_after)
            sink = RedisCountSink(server.url, args.write)
            flow = build_flow(source, sink)
            epoch = timedelta(milliseconds=args.epoch_ms)
            t0 = time.monotonic()
            run_main(flow, epoch_interval=epoch, recovery_config=recovery)
            executions = 1
            if source.aborted:                     # AbortExecution ends run_main quietly
                run_main(flow, epoch_interval=epoch, recovery_config=recovery)
                executions = 2
            wall = sink.last_write - t0
        exact = verify(client, expected)
        client.close()
    finally:
        server.destroy()

    line = {
        "benchmark": "wordcount", "system": "bytewax", "version": version("bytewax"),
        "sentences": args.sentences, "words": words, "batches": sink.applied,
        "batch_sentences": args.batch, "wall_secs": round(wall, 2), "words_per_sec": round(words / wall),
        "batch_latency_p50_ms": percentile_ms(sink.latencies, 50),
        "batch_latency_p99_ms": percentile_ms(sink.latencies, 99),
        "exact": exact, "workers": 1,
        "recovery": (f"bytewax RecoveryConfig (sqlite db, 1 partition, temp dir), epoch_interval "
                     f"{args.epoch_ms} ms ({'one snapshot per batch' if args.epoch_ms == 0 else 'time-based'}); "
                     f"Redis write '{args.write}': HINCRBY per word + batch-index fence, atomic, replays skipped"),
    }
    if args.abort_after is not None:
        line.update({"executions": executions, "aborted_after_batches": args.abort_after,
                     "replayed_batches_skipped": sink.skipped})
    emit(line)


if __name__ == "__main__":
    main()
