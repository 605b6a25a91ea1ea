"""The reference word count on a Spark standalone cluster: the corpus of
benchmarks/wordcount.py in a 4-partition Kafka topic, counted exactly once into Redis, on
1 and 2 one-core workers, with commits on the driver and on the executors; then a run
through a worker kill, plotted.

    python benchmarks/cluster_wordcount.py [--sentences 400000] [--batch 20000] [--workers 1,2]
        [--placements driver,executors] [--kill-plot benchmarks/cluster_kill.png] [--kill-batch 4000]
        [--no-kill | --only-kill]

Starts its own Tansu broker, redis-server and cluster (``ManagedSparkCluster``: a master
and one-core workers on loopback); the driver is this process. Each measured run reads the
whole topic under a new topology id and checks every count. Prints one JSON line per run:
words/s, commit latency p50/p99 (launch to commit), commit-phase p50/p99, workers,
placement. The kill run (2 workers, commits on the driver, ``--kill-batch`` sentences a
batch so that it lasts long enough to see the dip) kills a worker with SIGKILL
(its JVM and executor) a third of the way in and starts a new worker 5 s later; it prints
one JSON line with the throughput per second and writes a PNG of it (matplotlib; without
it, a CSV next to the PNG's name).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kafka_wordcount import PARTITIONS, build  # noqa: E402 - the reference topology

from state.map import TransactionalMap  # noqa: E402
from state.redis import RedisMapBacking  # noqa: E402
from transactional import TopologyConfig, run_topology  # noqa: E402
from transactional.engine.spark import get_or_create_context  # noqa: E402
from transactional.ops.ship import code_zip  # noqa: E402
from transactional.result import percentile  # noqa: E402
from transactional.testing import make_corpus  # noqa: E402
from transactional.testing._process import wait_until  # noqa: E402
from transactional.testing.kafka import ManagedKafka, create_topic, produce  # noqa: E402
from transactional.testing.redis import ManagedRedis  # noqa: E402
from transactional.testing.spark_cluster import ManagedSparkCluster  # noqa: E402


def executors(sc) -> int:
    """Executors the application has now (the driver not counted)."""
    return sc._jsc.sc().getExecutorMemoryStatus().size() - 1


def measured_run(sc, cfg: TopologyConfig, bootstrap: str, topic: str, args, corpus_words: Counter,
                 on_commit=None, batch: int | None = None) -> tuple[dict, float]:
    tid = f"bench-cluster-{uuid.uuid4().hex[:8]}"
    topo = build(tid, bootstrap, topic, batch or args.batch, args.parallelism, args.committers, False)
    t0 = time.monotonic()
    r = run_topology(topo, cfg, spark_context=sc, on_commit=on_commit)
    wall = time.monotonic() - t0
    keys = list(corpus_words)
    got = TransactionalMap(RedisMapBacking.from_url(cfg.state, f"{tid}:word-counts")).multi_get(keys)
    exact = all(g == corpus_words[k] for k, g in zip(keys, got, strict=True))
    words = sum(corpus_words.values())
    return {
        "words": words, "batches": r.batches_committed, "wall_secs": round(wall, 2),
        "words_per_sec": round(words / wall), "commit_latency_p50_ms": round(r.latency_ms(50) or 0, 1),
        "commit_latency_p99_ms": round(r.latency_ms(99) or 0, 1),
        "commit_phase_p50_ms": round(percentile(r.commit_phase_secs, 50) * 1000, 1),
        "commit_phase_p99_ms": round(percentile(r.commit_phase_secs, 99) * 1000, 1),
        "processing_p50_ms": round(percentile(r.processing_secs, 50) * 1000, 1),
        "exact": exact, "failed_attempts": len(r.failures),
    }, t0


def kill_run(sc, cluster: ManagedSparkCluster, cfg: TopologyConfig, bootstrap: str, topic: str, args,
             corpus_words: Counter, words_per_sentence: float) -> dict:
    """2 workers; kill worker 0 a third of the way in, a new worker 5 s later."""
    commits: list[tuple[float, int]] = []
    batches = -(-args.sentences // args.kill_batch)
    events: dict[str, float] = {}

    def on_commit(txid, result):
        commits.append((time.monotonic(), result.tuples))
        if txid == max(1, batches // 3) and "kill" not in events:
            events["kill"] = time.monotonic()
            victim = next(i for i, w in enumerate(cluster.workers) if w.running)
            cluster.kill_worker(victim)

            def replace():
                time.sleep(5)
                events["new worker"] = time.monotonic()
                cluster.add_worker()
                events["registered"] = time.monotonic()
            threading.Thread(target=replace, daemon=True).start()

    line, t0 = measured_run(sc, cfg, bootstrap, topic, args, corpus_words, on_commit, args.kill_batch)
    # words per 1-second bucket, from the sentences of each committed batch
    series: dict[int, float] = {}
    prev = 0
    for t, sentences in commits:
        series[int(t - t0)] = series.get(int(t - t0), 0) + (sentences - prev) * words_per_sentence
        prev = sentences
    end = max(series, default=0)
    xs = list(range(end + 1))
    ys = [series.get(x, 0.0) for x in xs]
    marks = {k: round(v - t0, 2) for k, v in events.items()}
    out = {**line, "kill_at_secs": marks.get("kill"), "new_worker_at_secs": marks.get("new worker"),
           "registered_at_secs": marks.get("registered"), "words_per_sec_series": [round(y) for y in ys]}
    plot(args.kill_plot, xs, ys, marks)
    return out


def plot(path: str, xs: list[int], ys: list[float], marks: dict[str, float]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        csv = os.path.splitext(path)[0] + ".csv"
        with open(csv, "w") as f:
            f.write("second,words\n" + "".join(f"{x},{round(y)}\n" for x, y in zip(xs, ys, strict=True)))
        print(f"matplotlib is not installed (pip install matplotlib): wrote {csv}", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(9, 4))
    window = 5                                  # a batch commits 1-2 times a second: smooth over 5 s
    smooth = [sum(ys[max(0, i - window + 1):i + 1]) / min(window, i + 1) for i in range(len(ys))]
    ax.step(xs, ys, where="post", color="lightsteelblue", label="words committed in each second")
    ax.plot(xs, smooth, color="navy", label=f"{window}-second average")
    for name, at in marks.items():
        ax.axvline(at, linestyle="--", color={"kill": "red"}.get(name, "gray"))
        ax.text(at, max(ys or [1]) * 0.95, f" {name}", rotation=90, va="top", fontsize=8)
    ax.set_xlabel("seconds since the run started")
    ax.set_ylabel("words / s")
    ax.set_title("exactly-once word count, 2 one-core workers: kill -9 of a worker and its executor")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=400_000)
    ap.add_argument("--batch", type=int, default=20_000, help="sentences per batch (over all partitions)")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--placements", default="driver,executors")
    ap.add_argument("--max-spout-pending", type=int, default=3)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--committers", type=int, default=1)
    ap.add_argument("--kill-plot", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "cluster_kill.png"))
    ap.add_argument("--kill-batch", type=int, default=4000, help="sentences per batch in the kill run")
    ap.add_argument("--no-kill", action="store_true")
    ap.add_argument("--only-kill", action="store_true")
    args = ap.parse_args()
    counts = [int(x) for x in args.workers.split(",")]

    servers: list = []
    cluster = ManagedSparkCluster(workers=counts[0])
    try:
        broker = ManagedKafka().start()
        servers.append(broker)
        redis = ManagedRedis(appendonly=False).start()
        servers.append(redis)
        cluster.start()
        corpus = make_corpus(args.sentences)
        corpus_words = Counter(w for s in corpus for w in s.split())
        topic = f"bench-cluster-{uuid.uuid4().hex[:8]}"
        create_topic(broker.bootstrap, topic, PARTITIONS)
        produce(broker.bootstrap, topic, {p: corpus[p::PARTITIONS] for p in range(PARTITIONS)})

        base = TopologyConfig(spark_master=cluster.master_url, spark_ui=False, state=redis.url,
                              max_spout_pending=args.max_spout_pending, progress=False,
                              message_timeout_secs=120, py_files=[str(code_zip())])
        sc = get_or_create_context(base)
        for n in [] if args.only_kill else counts:
            while len([w for w in cluster.workers if w.running]) < n:
                cluster.add_worker()
            wait_until(lambda n=n: executors(sc) >= n, 60, 0.2, what=f"{n} executors")
            sc.parallelize(range(8), 8).count()     # Python workers up on every executor
            for placement in args.placements.split(","):
                cfg = base.model_copy(update={"commit_placement": placement})
                line, _ = measured_run(sc, cfg, broker.bootstrap, topic, args, corpus_words)
                print(json.dumps({"benchmark": "cluster_wordcount", "workers": n, "commit_placement": placement,
                                  **line, "sentences": args.sentences, "batch_sentences": args.batch,
                                  "partitions": PARTITIONS, "parallelism": args.parallelism,
                                  "max_spout_pending": args.max_spout_pending, "master": "standalone (loopback)",
                                  "cores_per_worker": 1}), flush=True)
        if not args.no_kill:
            while len([w for w in cluster.workers if w.running]) < 2:
                cluster.add_worker()
            wait_until(lambda: executors(sc) >= 2, 60, 0.2, what="2 executors")
            line = kill_run(sc, cluster, base, broker.bootstrap, topic, args, corpus_words,
                            sum(corpus_words.values()) / len(corpus))
            print(json.dumps({"benchmark": "cluster_wordcount_kill", "workers": 2, "commit_placement": "driver",
                              **line, "batch_sentences": args.kill_batch, "plot": args.kill_plot}), flush=True)
        sc.stop()
    finally:
        cluster.destroy()
        for s in reversed(servers):
            s.destroy()


if __name__ == "__main__":
    main()
