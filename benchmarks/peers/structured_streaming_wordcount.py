"""Peer benchmark: the reference word count in Spark Structured Streaming, foreachBatch into Redis.

    source scripts/env.sh
    flock /tmp/heavy.lock python benchmarks/peers/structured_streaming_wordcount.py [--sentences 1000000] [--batch 50000]

The workload of ``benchmarks/wordcount.py``: ``make_corpus(--sentences)`` (10 Zipf words
per sentence), in batches of ``--batch`` sentences. Before timing, the corpus is written as
one text file per batch (``batch-00000.txt``, ..., oldest first) into a temp dir and a
``local[2]`` SparkSession is started (loopback only, UI off, ``spark.sql.shuffle.partitions``
= 2, one warm-up job). The query:

    spark.readStream.option("maxFilesPerTrigger", 1).text(<dir>)      # one file per micro-batch
    .writeStream.foreachBatch(count_and_write)
    .option("checkpointLocation", <temp dir>).trigger(availableNow=True).start()

``count_and_write(df, batch_id)``: ``df.select(explode(split(value, " ")).alias("word"))
.groupBy("word").count().toArrow()`` (a batch job per micro-batch, in the JVM; the result
comes back as Arrow, 2-3x cheaper than ``collect()``'s Rows for 34,000 words), then
``peer_common.apply_batch(batch_id, ...)`` on the driver: one MULTI/EXEC pipeline of
HINCRBY per distinct word into the hash ``wordcount`` plus the fence ``wordcount:applied =
batch_id`` (``--write lua``: the same as one atomic EVALSHA). Spark's checkpoint (offset log
before, commit log after each micro-batch) replays a micro-batch that has no commit entry
with the same files and the same ``batch_id``: foreachBatch is at-least-once, the fence
makes the counts exactly-once. ``--abort-after N`` fails the query once, in foreachBatch
right after micro-batch N-1 was written to Redis (before Spark commits it), and starts the
query again on the same checkpoint (a check that recovery works; its wall time includes
both runs).

Measures wall time from ``writeStream.start()`` to the end of ``awaitTermination()`` (a
private ``redis-server`` without AOF); words/s = words / wall; batch latency = each
micro-batch's ``durationMs.triggerExecution`` from the query's progress reports
(planning, the batch job, the Redis write, the offset and commit logs). Then every field of
the hash is compared with a ``Counter`` over the corpus (``exact``). Prints one JSON line
(Spark's own log goes to stderr).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import pyspark
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.functions import col, explode, split

from transactional.testing import ManagedRedis, make_corpus

from peer_common import WRITES, apply_batch, connect, emit, percentile_ms, true_counts, verify


def write_batches(corpus: list[str], batch: int, directory: Path) -> int:
    """One text file per batch; modification times in batch order (the file source reads
    the oldest first). Returns the number of files."""
    n = 0
    now = time.time()
    for n, start in enumerate(range(0, len(corpus), batch)):
        path = directory / f"batch-{n:05d}.txt"
        path.write_text("\n".join(corpus[start:start + batch]) + "\n")
        os.utime(path, (now - 100_000 + n, now - 100_000 + n))
    return n + 1


class CountAndWrite:
    """The foreachBatch function: count the micro-batch's words, apply them to Redis once."""

    def __init__(self, url: str, write: str, abort_after: int | None):
        self.client = connect(url)
        self.write, self.abort_after = write, abort_after
        self.applied = self.skipped = 0
        self.last_write = 0.0

    def __call__(self, df, batch_id: int) -> None:
        table = df.select(explode(split(col("value"), " ")).alias("word")).groupBy("word").count().toArrow()
        pairs = zip(table.column("word").to_pylist(), table.column("count").to_pylist(), strict=True)
        if apply_batch(self.client, batch_id, pairs, self.write):
            self.applied += 1
        else:
            self.skipped += 1
        self.last_write = time.monotonic()
        if self.abort_after is not None and batch_id + 1 >= self.abort_after:
            self.abort_after = None                # once: the restarted query goes on
            msg = f"planned failure after micro-batch {batch_id}, before Spark commits it"
            raise RuntimeError(msg)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=50_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--write", choices=WRITES, default="pipeline",
                    help="Redis write: MULTI/EXEC pipeline of HINCRBY, or one Lua script (peer_common.py)")
    ap.add_argument("--abort-after", type=int, default=None,
                    help="fail the query after N micro-batches and restart it on the checkpoint (a recovery check)")
    args = ap.parse_args()

    corpus = make_corpus(args.sentences)
    expected = true_counts(corpus)
    words = sum(expected.values())
    server = ManagedRedis(appendonly=False)
    server.start()
    spark = None
    try:
        client = connect(server.url)
        client.flushdb()
        with tempfile.TemporaryDirectory(prefix="sss-wordcount-") as tmp:
            input_dir, checkpoint = Path(tmp, "input"), Path(tmp, "checkpoint")
            input_dir.mkdir()
            files = write_batches(corpus, args.batch, input_dir)
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")   # loopback only, before the JVM starts
            spark = (SparkSession.builder.master(args.master).appName("peer-wordcount-sss")
                     .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                     .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                     .config("spark.sql.shuffle.partitions", "2")
                     .getOrCreate())
            spark.sparkContext.setLogLevel("WARN")
            spark.range(4).count()                 # start the JVM side before timing
            sink = CountAndWrite(server.url, args.write, args.abort_after)

            def start():
                return (spark.readStream.option("maxFilesPerTrigger", 1).text(str(input_dir))
                        .writeStream.foreachBatch(sink)
                        .option("checkpointLocation", str(checkpoint))
                        .trigger(availableNow=True).start())

            progress = []
            executions = 0
            t0 = time.monotonic()
            while True:
                executions += 1
                query = start()
                try:
                    query.awaitTermination()
                    break
                except StreamingQueryException:
                    if executions > 1 or args.abort_after is None:
                        raise
                finally:
                    progress += query.recentProgress
            wall = time.monotonic() - t0
        exact = verify(client, expected)
        client.close()
    finally:
        if spark is not None:
            spark.stop()
        server.destroy()

    latencies = [p.durationMs["triggerExecution"] / 1000 for p in progress
                 if p.numInputRows and "triggerExecution" in p.durationMs]
    line = {
        "benchmark": "wordcount", "system": "spark-structured-streaming", "version": pyspark.__version__,
        "sentences": args.sentences, "words": words, "batches": sink.applied, "input_files": files,
        "batch_sentences": args.batch, "wall_secs": round(wall, 2), "words_per_sec": round(words / wall),
        "batch_latency_p50_ms": percentile_ms(latencies, 50), "batch_latency_p99_ms": percentile_ms(latencies, 99),
        "exact": exact, "master": args.master,
        "recovery": (f"checkpointLocation in a temp dir (offset + commit log per micro-batch), "
                     f"trigger availableNow, maxFilesPerTrigger 1; Redis write '{args.write}': HINCRBY per "
                     "word + batch_id fence, atomic, replayed micro-batches skipped"),
    }
    if args.abort_after is not None:
        line.update({"executions": executions, "aborted_after_batches": args.abort_after,
                     "replayed_batches_skipped": sink.skipped})
    emit(line)


if __name__ == "__main__":
    main()
