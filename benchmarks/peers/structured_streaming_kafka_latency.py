"""Peer of ``benchmarks/latency.py --bench kafka``: Spark Structured Streaming reading the
harness's topic, word counts into Redis exactly once, as fast as it triggers.

    python benchmarks/peers/structured_streaming_kafka_latency.py --bootstrap HOST:PORT --topic T
        --redis URL --records N --out FILE [--realtime] [--master local[2]]

Spark's own Kafka source (``spark-sql-kafka-0-10``) is a JVM package on Maven Central, which
this machine cannot reach (only PyPI, Debian and npm are reachable; ``pyspark`` ships no
Kafka jars), so the source here is a Python data source (``pyspark.sql.datasource``, Spark
4's streaming reader API) with the connector's design: offsets are each partition's high
watermark (read as the project's Kafka spout reads it: ``KafkaCoordinator``, Tansu's
ListOffsets being short), one input partition (a Spark task) per Kafka partition, the
records of ``[start, end)`` read with confluent-kafka and handed over as one Arrow batch.

The query: ``readStream.format("kafka_lite") -> foreachBatch(count and write)`` with
``trigger(processingTime="0 seconds")`` (a micro-batch as soon as the last one ended), a
checkpoint location in a temp dir. ``foreachBatch``: ``explode(split(value, " "))``,
``groupBy("word").count().toArrow()``, then one Lua call (``peer_common.LUA_APPLY``:
``batch_id`` fence + HINCRBY per word into ``wordcount``). ``--realtime``: the same query
with ``trigger(realTime=...)``, Spark 4.1's real-time mode; the error Spark gives is
reported as the case's result when it refuses the query.

Prints ``{"ready": true, "hash": "wordcount"}`` once the session is up; stops when
``--records`` records were applied and writes each micro-batch's times to ``--out``
(monotonic s): ``plan_started`` (the trigger), ``planned`` (foreachBatch called: offsets,
planning and the offset log done), ``counted`` (the batch's job returned),
``committing`` (the Redis write began), and Spark's ``durationMs`` figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from datetime import datetime
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.functions import col, explode, split

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import COUNTS_KEY, FENCE_KEY, LUA_APPLY, connect  # noqa: E402

PARTITIONS = 4


class _Range(InputPartition):
    def __init__(self, partition: int, start: int, end: int) -> None:
        super().__init__(partition)
        self.partition, self.start, self.end = partition, start, end




class _Reader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.bootstrap, self.topic = options["bootstrap"], options["topic"]
        self._coord: Any = None

    def initialOffset(self) -> dict:
        return {str(p): 0 for p in range(PARTITIONS)}

    def latestOffset(self, start: dict, limit: Any) -> dict:     # noqa: ARG002 - no read limit
        from spouts.kafka import KafkaCoordinator, KafkaTransactionalSpout

        if self._coord is None:
            self._coord = KafkaCoordinator(KafkaTransactionalSpout(self.bootstrap, self.topic))
        c = self._coord
        out = {}
        for p in range(PARTITIONS):
            wm = c.watermarks(p)
            out[str(p)] = c.high_watermark(p, wm[1]) if wm is not None else int(start[str(p)])
        return out

    def partitions(self, start: dict, end: dict) -> list[_Range]:
        return [_Range(p, int(start[str(p)]), int(end[str(p)])) for p in range(PARTITIONS)
                if int(end[str(p)]) > int(start[str(p)])]

    def read(self, partition: _Range) -> Any:
        import confluent_kafka
        import pyarrow as pa
        from confluent_kafka import Consumer, TopicPartition

        # one consumer per Python worker, kept on an imported module (this class travels by value)
        cache = confluent_kafka.__dict__.setdefault("_sss_latency_consumers", {})
        c = cache.get(self.bootstrap)
        if c is None:
            c = cache[self.bootstrap] = Consumer({
                "bootstrap.servers": self.bootstrap, "group.id": "sss-latency", "enable.auto.commit": False,
                "fetch.wait.max.ms": 20, "fetch.max.bytes": 1 << 20})
        c.assign([TopicPartition(self.topic, partition.partition, partition.start)])
        values: list[bytes] = []
        want = partition.end - partition.start
        deadline = time.monotonic() + 30
        while len(values) < want and time.monotonic() < deadline:
            for m in c.consume(min(10_000, want - len(values)), 1.0):
                if m.error() is None and m.offset() < partition.end:
                    values.append(m.value())
        c.unassign()
        yield pa.RecordBatch.from_arrays([pa.array(values, pa.binary()).cast(pa.string())], names=["value"])

    def commit(self, end: dict) -> None:
        pass


class KafkaLite(DataSource):
    """A Kafka topic's records as ``value`` strings (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        return "kafka_lite"

    def schema(self) -> str:
        return "value string"

    def streamReader(self, schema: Any) -> _Reader:     # noqa: ARG002
        return _Reader(self.options)


class CountAndWrite:
    def __init__(self, url: str, records: int) -> None:
        self.client = connect(url)
        self.script = self.client.register_script(LUA_APPLY)
        self.records, self.applied = records, 0
        self.times: dict[int, dict[str, float]] = {}
        self.done = threading.Event()

    def __call__(self, df: Any, batch_id: int) -> None:
        t = {"planned": time.monotonic()}
        table = df.select(explode(split(col("value"), " ")).alias("word")).groupBy("word").count().toArrow()
        t["counted"] = time.monotonic()
        args: list[Any] = [batch_id]
        for w, n in zip(table.column("word").to_pylist(), table.column("count").to_pylist(), strict=True):
            args += (w, n)
            if w.startswith("mark"):
                self.applied += n
        t["committing"] = time.monotonic()
        self.script(keys=[COUNTS_KEY, FENCE_KEY], args=args)
        t["written"] = time.monotonic()
        self.times[batch_id] = t
        if self.applied >= self.records:
            self.done.set()


class RowWriter:
    """Real-time mode's sink: each record's words added as it arrives (at least once: only
    to see whether Spark runs the query; the refusal is what the case reports)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def open(self, partition_id: int, epoch_id: int) -> bool:
        self.client = connect(self.url)
        return True

    def process(self, row: Any) -> None:
        for w in row.value.split():
            self.client.hincrby(COUNTS_KEY, w, 1)

    def close(self, error: Any) -> None:
        self.client.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    for a in ("--bootstrap", "--topic", "--redis", "--out"):
        ap.add_argument(a, required=True)
    ap.add_argument("--records", type=int, required=True)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--realtime", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)     # the workers need pyarrow, confluent-kafka
    spark = (SparkSession.builder.master(args.master).appName("peer-latency-sss")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
             # real-time mode allows only its own sinks: let it try foreachBatch (it says so if it cannot)
             .config("spark.sql.streaming.realTimeMode.allowlistCheck", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(KafkaLite)
    spark.range(4).count()
    sink = CountAndWrite(args.redis, args.records)
    with tempfile.TemporaryDirectory(prefix="sss-latency-") as tmp:
        stream = (spark.readStream.format("kafka_lite").option("bootstrap", args.bootstrap)
                  .option("topic", args.topic).load())
        if args.realtime:       # real-time mode takes a foreach sink (not foreachBatch) and update output
            writer = (stream.writeStream.foreach(RowWriter(args.redis)).option("checkpointLocation", tmp)
                      .outputMode("update").trigger(realTime="5 seconds"))
        else:
            writer = (stream.writeStream.foreachBatch(sink).option("checkpointLocation", tmp)
                      .trigger(processingTime="0 seconds"))
        try:
            query = writer.start()
        except Exception as e:  # noqa: BLE001 - the refusal is the case's result
            print(json.dumps({"ready": False, "error": f"{type(e).__name__}: {str(e).splitlines()[0]}"}), flush=True)
            spark.stop()
            sys.exit(2)
        print(json.dumps({"ready": True, "hash": COUNTS_KEY, "config": {
            "trigger": "realTime" if args.realtime else "processingTime=0", "master": args.master,
            "source": "Python data source over confluent-kafka (no spark-sql-kafka jar reachable)"}}), flush=True)
        while not sink.done.wait(0.5):
            if query.exception() is not None:
                error = str(query.exception()).splitlines()[0][:600]
                print(json.dumps({"ready": False, "error": error}), flush=True)
                break
        progress = query.recentProgress
        query.stop()
    shift = time.monotonic() - time.time()
    batches = []
    for p in progress:
        t = sink.times.get(p.batchId)
        if t is None:
            continue
        started = datetime.fromisoformat(p.timestamp.replace("Z", "+00:00")).timestamp() + shift
        batches.append({"txid": p.batchId, "plan_started": started, **t,
                        "spark_ms": {k: v for k, v in p.durationMs.items()}})
    with open(args.out, "w") as f:
        json.dump({"batches": batches, "batches_committed": len(sink.times)}, f)
    spark.stop()


if __name__ == "__main__":
    main()
