"""Storm's TransactionalWords: the exact count of every word, and how many words fall in
each bucket of 10 counts (0-9, 10-19, ...), both updated idempotently by committers.

    trident run examples/transactional_words.py [--state redis://127.0.0.1:6379/0]

spout -> count (committer, fields grouping on word) -> bucketize -> buckets (committer)
"""

import os
import random

from spouts import MemoryTransactionalSpout
from transactional import BaseBasicBolt, BaseTransactionalBolt, Committer, Fields, TransactionalTopologyBuilder, Values

BUCKET_SIZE = 10
WORDS = ["cat", "dog", "chicken", "apple", "banana", "zebra", "mouse", "horse", "goat", "lamb"]


def make_data(partitions=3, per_partition=60, seed=7):
    """Deterministic words: partition -> [word, ...]."""
    rng = random.Random(seed)
    return {p: [rng.choice(WORDS) for _ in range(per_partition)] for p in range(partitions)}


DATA = make_data(per_partition=int(os.environ.get("TRIDENT_WORDS_PER_PARTITION", "60")))
PARTITION_TAKE_PER_BATCH = int(os.environ.get("TRIDENT_WORDS_TAKE", "7"))


class KeyedCountUpdater(BaseTransactionalBolt, Committer):
    """Counts each word of the batch; in the commit phase adds the counts to the store,
    once per txid, and emits (id, word, count, prev_count)."""

    def prepare(self, conf, context, collector, attempt):
        self.collector, self.attempt, self.counts = collector, attempt, {}
        self.words = context.map_state("words")               # word -> {"count", "prev"}

    def execute(self, tuple):                                   # ("tx", "word")
        w = tuple[1]
        self.counts[w] = self.counts.get(w, 0) + 1

    def finish_batch(self):
        keys = list(self.counts)
        updaters = [lambda old, n=self.counts[k]: {"count": (old["count"] if old else 0) + n,
                                                   "prev": old["count"] if old else None} for k in keys]
        for word, v in zip(keys, self.words.multi_update(keys, updaters), strict=True):
            self.collector.emit(Values(self.attempt, word, v["count"], v["prev"]))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "key", "count", "prev-count"))


class Bucketize(BaseBasicBolt):
    """A word moving from one bucket to another: +1 for the new bucket, -1 for the old."""

    def execute(self, tuple, collector):                        # ("id", "key", "count", "prev-count")
        attempt, _, count, prev = tuple.values
        curr_bucket = count // BUCKET_SIZE
        if prev is None:
            collector.emit(Values(attempt, curr_bucket, 1))
        elif prev // BUCKET_SIZE != curr_bucket:
            collector.emit(Values(attempt, curr_bucket, 1))
            collector.emit(Values(attempt, prev // BUCKET_SIZE, -1))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("attempt", "bucket", "delta"))


class BucketCountUpdater(BaseTransactionalBolt, Committer):
    """Sums the deltas per bucket and applies them once per txid."""

    def prepare(self, conf, context, collector, attempt):
        self.deltas = {}
        self.buckets = context.map_state("buckets")

    def execute(self, tuple):                                   # ("attempt", "bucket", "delta")
        b = tuple["bucket"]
        self.deltas[b] = self.deltas.get(b, 0) + tuple["delta"]

    def finish_batch(self):
        if self.deltas:
            self.buckets.multi_combine(list(self.deltas), list(self.deltas.values()), "sum")


def build_topology(topology_id="transactional-words"):
    spout = MemoryTransactionalSpout(DATA, Fields("word"), PARTITION_TAKE_PER_BATCH)
    builder = TransactionalTopologyBuilder(topology_id, "spout", spout, 2)
    builder.set_bolt("count", KeyedCountUpdater(), 3).fields_grouping("spout", Fields("word"))
    builder.set_bolt("bucketize", Bucketize(), 2).shuffle_grouping("count")
    builder.set_bolt("buckets", BucketCountUpdater(), 2).fields_grouping("bucketize", Fields("bucket"))
    return builder


def expected():
    """(word -> count, bucket -> number of words) for all of DATA."""
    counts = {}
    for rows in DATA.values():
        for w in rows:
            counts[w] = counts.get(w, 0) + 1
    buckets = {}
    for c in counts.values():
        buckets[c // BUCKET_SIZE] = buckets.get(c // BUCKET_SIZE, 0) + 1
    return counts, buckets


def read_results(result):
    words = result.map_state("words")
    counts = {w: v["count"] for w, v in zip(WORDS, words.multi_get(WORDS), strict=True) if v is not None}
    bmap = result.map_state("buckets")
    keys = list(range(0, 1 + max(expected()[0].values()) // BUCKET_SIZE + 1))
    buckets = {b: n for b, n in zip(keys, bmap.multi_get(keys), strict=True) if n}
    return counts, buckets


def report(result):
    counts, buckets = read_results(result)
    want_counts, want_buckets = expected()
    print("word counts:  ", dict(sorted(counts.items())))
    print("bucket sizes: ", dict(sorted(buckets.items())))
    print("exact:", counts == want_counts and buckets == want_buckets)


if __name__ == "__main__":
    from transactional.ops.cli import run_example

    run_example(build_topology, report)
