"""Reference workload: exactly-once word count vs. the same counting as bare PySpark.

    python benchmarks/wordcount.py [--sentences 1000000] [--batch 50000] [--master local[2]]
           [--api bolt|trident|trident-columnar] [--state memory://|redis://host:port/db|local-redis]
           [--commit-placement driver|executors|both] [--ttl-secs SECS]

Topology (default ``--topology split-count``): spout -> split (splits sentences and counts
words of its share of the batch, Storm's BatchCount idiom) -> fields grouping on word ->
commit (committer; sums partial counts and updates a TransactionalMap once per txid).
``--topology per-word`` emits one tuple per word from a BaseBasicBolt split instead, to
show the cost of the per-tuple path. The bare job: per batch, ``flatMap`` +
``reduceByKey`` + ``collect`` into a dict. ``--state local-redis`` starts a private
redis-server for the run; ``--commit-placement both`` runs the topology with commits on
the driver and on executors (which needs Redis) in one process. Prints one JSON line per
run.

``--api trident`` runs Storm's TridentWordCount instead (``each(Split)`` one tuple per
word -> ``group_by(word).persistent_aggregate(transactional, Count())``, partial counts
before the shuffle); ``--api trident-columnar`` the same with the split as one Arrow
kernel per batch (``map_batches``) and the counts as Arrow hash aggregations, moved as
Arrow IPC buffers. Both default to ``--state local-redis`` and check every key against
the true counts (``exact``); ``--trident-state`` picks the map flavour (``counters``: the
``CounterMap``, one atomic add per batch with no read of the keys). ``--ttl-secs`` gives
the map a time to live (docs/operations.md, "State that expires": each value carries its
expiry, and Redis a ``PEXPIREAT`` per key in the write's script): run with and without to
see what it costs a commit.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from operator import add

from spouts import MemoryTransactionalSpout
from transactional import (
    BaseBasicBolt,
    BaseBatchBolt,
    BaseTransactionalBolt,
    Committer,
    Fields,
    TopologyConfig,
    TransactionalTopologyBuilder,
    run_topology,
)
from transactional.engine.spark import get_or_create_context
from transactional.result import percentile
from transactional.testing import make_corpus
from trident import BaseFunction, Count, TridentTopology
from trident import state as trident_state


def sentence_spout(corpus, batch, parallelism):
    """The corpus in ``parallelism`` partitions, ``batch`` sentences per batch in all. Each
    partition is a one-column Arrow table (as a file would be read): it ships to the
    workers as Arrow buffers, a batch is a zero-copy slice, and Trident stages take it as
    columns (``transactional.columns``); bolts get one tuple per sentence."""
    import pyarrow as pa

    per_partition = -(-len(corpus) // parallelism)
    data = {p: pa.table({"sentence": corpus[p * per_partition:(p + 1) * per_partition]})
            for p in range(parallelism)}
    return MemoryTransactionalSpout(data, Fields("sentence"), max(1, batch // parallelism))


class SplitCount(BaseBatchBolt):
    """Splits its sentences and counts the words of its share of the batch."""

    def prepare(self, conf, context, collector, id):
        self.collector, self.id, self.counts = collector, id, Counter()

    def execute(self, tuple):                      # ("tx", "sentence")
        self.counts.update(tuple[1].split())

    def finish_batch(self):
        emit, id = self.collector.emit, self.id
        for w, n in self.counts.items():
            emit((id, w, n))                       # ("id", "word", "count")

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "word", "count"))


class Split(BaseBasicBolt):
    def execute(self, tuple, collector):           # ("tx", "sentence")
        tx, emit = tuple[0], collector.emit
        for w in tuple[1].split():
            emit((tx, w, 1))                       # ("id", "word", "count")

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "word", "count"))


class PartialCount(BaseBatchBolt):
    def prepare(self, conf, context, collector, id):
        self.collector, self.id, self.counts = collector, id, Counter()

    def execute(self, tuple):
        self.counts[tuple[1]] += tuple[2]

    def finish_batch(self):
        for w, n in self.counts.items():
            self.collector.emit((self.id, w, n))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "word", "count"))


class CommitCounts(BaseTransactionalBolt, Committer):
    """Sums partial counts per word; applies them to the map once per txid."""

    def __init__(self, ttl_secs=None):
        self.ttl_secs = ttl_secs

    def prepare(self, conf, context, collector, attempt):
        self.counts = {}
        self.map = context.map_state("word-counts", ttl_secs=self.ttl_secs)

    def execute(self, tuple):                      # ("id", "word", "count")
        w = tuple[1]
        self.counts[w] = self.counts.get(w, 0) + tuple[2]

    def finish_batch(self):
        self.map.multi_combine(list(self.counts), list(self.counts.values()), "sum")


def build(topology_id, corpus, batch, parallelism, committers, kind, ttl_secs=None):
    spout = sentence_spout(corpus, batch, parallelism)
    b = TransactionalTopologyBuilder(topology_id, "spout", spout, parallelism)
    if kind == "split-count":
        b.set_bolt("split", SplitCount(), parallelism).local_or_shuffle_grouping("spout")
        last = "split"
    else:
        b.set_bolt("split", Split(), parallelism).local_or_shuffle_grouping("spout")
        b.set_bolt("count", PartialCount(), parallelism).fields_grouping("split", Fields("word"))
        last = "count"
    b.set_bolt("commit", CommitCounts(ttl_secs), committers).fields_grouping(last, Fields("word"))
    return b


class SplitWords(BaseFunction):
    """Trident's Split: one tuple per word."""

    def execute(self, tuple, collector):
        for w in tuple[0].split():
            collector.emit((w,))


def split_batch(batch):
    """The columnar split: a batch of sentences -> a batch of words (Arrow kernels)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    words = pc.list_flatten(pc.utf8_split_whitespace(batch.column(0)))
    return pa.RecordBatch.from_arrays([words], names=["word"])


def build_trident(topology_id, corpus, batch, parallelism, committers, columnar, flavour="transactional",
                  ttl_secs=None):
    """Storm's TridentWordCount: sentences -> split -> group_by word -> persistent Count."""
    spout = sentence_spout(corpus, batch, parallelism)
    t = TridentTopology(topology_id)
    s = t.new_stream("spout", spout).parallelism_hint(parallelism)
    if columnar:
        s = s.map_batches(split_batch, Fields("word"))
    else:
        s = s.each(Fields("sentence"), SplitWords(), Fields("word"))
    factory = getattr(trident_state, flavour)("word-counts", **({"ttl_secs": ttl_secs} if ttl_secs else {}))
    s.group_by(Fields("word")).persistent_aggregate(factory, Count(), Fields("count")).parallelism_hint(committers)
    return t.build()


def bare(sc, corpus, batch, parallelism):
    counts: dict[str, int] = {}
    lat = []
    t0 = time.monotonic()
    for i in range(0, len(corpus), batch):
        b0 = time.monotonic()
        part = (sc.parallelize(corpus[i:i + batch], parallelism)
                .flatMap(str.split).map(lambda w: (w, 1)).reduceByKey(add).collect())
        for w, n in part:
            counts[w] = counts.get(w, 0) + n
        lat.append(time.monotonic() - b0)
    return time.monotonic() - t0, counts, lat


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=50_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--max-spout-pending", type=int, default=3)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--committers", type=int, default=1)
    ap.add_argument("--topology", choices=["split-count", "per-word"], default="split-count")
    ap.add_argument("--api", choices=["bolt", "trident", "trident-columnar"], default="bolt",
                    help="bolt: the --topology of batch bolts; trident: Storm's TridentWordCount (one "
                         "tuple per word, partial counts); trident-columnar: the same over Arrow batches")
    ap.add_argument("--trident-state", choices=["transactional", "opaque", "counters"], default="transactional",
                    help="the map flavour of the Trident word counts (counters: CounterMap, no reads)")
    ap.add_argument("--state", default=None,
                    help="memory://, redis://..., or local-redis (the default for the trident APIs)")
    ap.add_argument("--commit-placement", choices=["driver", "executors", "both"], default="driver")
    ap.add_argument("--skip-bare", action="store_true")
    ap.add_argument("--ttl-secs", type=float, default=None, help="the map's time to live (default: none)")
    args = ap.parse_args()

    server = None
    if args.state is None:
        args.state = "memory://" if args.api == "bolt" else "local-redis"
    if args.state == "local-redis":
        from transactional.testing import ManagedRedis

        server = ManagedRedis(appendonly=False)
        server.start()
        args.state = server.url
    try:
        corpus = make_corpus(args.sentences)
        placements = ["driver", "executors"] if args.commit_placement == "both" else [args.commit_placement]
        bare_line = None
        for placement in placements:
            bare_line = run_one(args, corpus, placement, bare_line)
    finally:
        if server is not None:
            server.destroy()


def run_one(args, corpus, placement, bare_line):
    words = sum(s.count(" ") + 1 for s in corpus)
    cfg = TopologyConfig(spark_master=args.master, spark_ui=False, max_spout_pending=args.max_spout_pending,
                         state=args.state, progress=False, message_timeout_secs=600,
                         commit_placement=placement)
    sc = get_or_create_context(cfg)
    sc.parallelize(range(4), 2).count()  # start the Python workers before timing
    tid = f"bench-wordcount-{int(time.time())}-{placement}"
    if args.api == "bolt":
        topo = build(tid, corpus, args.batch, args.parallelism, args.committers, args.topology, args.ttl_secs)
    else:
        topo = build_trident(tid, corpus, args.batch, args.parallelism, args.committers,
                             args.api == "trident-columnar", args.trident_state, args.ttl_secs)
    t0 = time.monotonic()
    r = run_topology(topo, cfg)
    wall = time.monotonic() - t0

    truth = Counter(w for s in corpus for w in s.split())
    check = list(truth) if args.api != "bolt" else ["w0", "w1", "w77", "w4999"]
    got = dict(zip(check, r.map_state("word-counts").multi_get(check), strict=True))
    line = {
        "benchmark": "wordcount", "api": args.api,
        "topology": args.topology if args.api == "bolt" else "trident-wordcount",
        "sentences": args.sentences, "words": words,
        "keys_verified": len(check), "exact": all(got[w] == truth[w] for w in check),
        "trident_state": None if args.api == "bolt" else args.trident_state, "ttl_secs": args.ttl_secs,
        "batches": r.batches_committed, "batch_sentences": args.batch, "wall_secs": round(wall, 2),
        "words_per_sec": round(words / wall), "commit_latency_p50_ms": round(r.latency_ms(50), 1),
        "commit_latency_p99_ms": round(r.latency_ms(99), 1),
        "commit_phase_p50_ms": round(percentile(r.commit_phase_secs, 50) * 1000, 1),
        "processing_job_p50_ms": round(percentile(r.processing_secs, 50) * 1000, 1),
        "first_job_ms": round((r.first_processing_secs or 0) * 1000, 1),
        "max_spout_pending": args.max_spout_pending, "master": args.master, "parallelism": args.parallelism,
        "state": cfg.redacted()["state"], "commit_placement": placement, "failed_attempts": len(r.failures),
    }
    if not args.skip_bare:
        if bare_line is None:
            bwall, bcounts, blat = bare(sc, corpus, args.batch, args.parallelism)
            bare_line = (bwall, bcounts, blat)
        bwall, bcounts, blat = bare_line
        exact = all(got[w] == bcounts.get(w) for w in check)
        line.update({"bare_wall_secs": round(bwall, 2), "bare_words_per_sec": round(words / bwall),
                     "bare_batch_p50_ms": round(percentile(blat, 50) * 1000, 1),
                     "ratio_framework_to_bare": round(bwall / wall, 2), "counts_match_bare": exact})
    print(json.dumps(line), flush=True)
    return bare_line


if __name__ == "__main__":
    main()
