"""Word count over an *opaque* spout, kept exactly once in an ``OpaqueMap``.

An opaque spout does not promise that a replayed txid holds the same tuples: here one
partition is "unavailable" now and then, so a batch may come with fewer of its words and
the rest follow in a later batch. ``OpaqueMap`` stores ``{txid, curr, prev}`` per word,
so a replay of a txid rebuilds on ``prev`` instead of trusting the first attempt -- the
counts stay exact whatever each attempt emitted. (A ``TransactionalMap`` would keep the
first attempt's numbers and count the late words twice.)

    trident run examples/opaque_word_count.py --state redis://127.0.0.1:6379/0 \
        [--coordination zk://127.0.0.1:2181/trident]

spout (opaque, 3 partitions) -> partial (fields on word) -> counts (committer, OpaqueMap)

With ``--state redis://`` the counts are at ``opaque-word-count:counts:<word>``, e.g.
``{"txid":9,"curr":41,"prev":38}``. Re-running the same topology id against the same
Redis resumes only with durable coordination (``--coordination zk://...``); with the
default ``memory://`` coordinator the second run starts again at txid 1 and stops with
``StateAheadError`` rather than double counting -- delete the keys first.
"""

import random

from spouts import OpaqueMemoryTransactionalSpout
from transactional import BaseBatchBolt, BaseTransactionalBolt, Committer, Fields, TransactionalTopologyBuilder, Values

WORDS = ["the", "cow", "jumped", "over", "moon", "apple", "storm", "spark"]
RNG = random.Random(7)
DATA = {p: [RNG.choice(WORDS) for _ in range(40)] for p in range(3)}   # partition -> words
TAKE_PER_BATCH = 4   # per partition


class FlakySpout(OpaqueMemoryTransactionalSpout):
    """The words of DATA, ``TAKE_PER_BATCH`` per partition and batch; partition 1 is down
    on the first attempt of every third txid (delivers nothing then)."""

    def __init__(self):
        super().__init__(DATA, Fields("word"), TAKE_PER_BATCH, deliver=self.available)

    def available(self, tx, partition, start, end):
        """How far ``partition`` really delivers of the planned ``[start, end)``."""
        if partition == 1 and tx.txid % 3 == 0 and tx.attempt_id == 1:
            return start
        return end


class PartialCount(BaseBatchBolt):
    """Counts the words of its share of the batch."""

    def prepare(self, conf, context, collector, id):
        self.collector, self.id, self.counts = collector, id, {}

    def execute(self, tuple):                         # ("tx", "word")
        w = tuple["word"]
        self.counts[w] = self.counts.get(w, 0) + 1

    def finish_batch(self):
        for w, n in self.counts.items():
            self.collector.emit(Values(self.id, w, n))  # ("id", "word", "n")

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "word", "n"))


class UpdateCounts(BaseTransactionalBolt, Committer):
    """Adds the batch's counts to the store: one MGET and one atomic write per task."""

    def prepare(self, conf, context, collector, attempt):
        self.counts = context.map_state("counts", opaque=True)   # an OpaqueMap
        self.batch = {}

    def execute(self, tuple):                         # ("id", "word", "n")
        self.batch[tuple["word"]] = self.batch.get(tuple["word"], 0) + tuple["n"]

    def finish_batch(self):
        if self.batch:
            self.counts.multi_combine(list(self.batch), list(self.batch.values()), "sum")


def build_topology(topology_id="opaque-word-count"):
    spout = FlakySpout()
    builder = TransactionalTopologyBuilder(topology_id, "spout", spout, 3)
    builder.set_bolt("partial", PartialCount(), 3).fields_grouping("spout", Fields("word"))
    builder.set_bolt("counts", UpdateCounts(), 2).fields_grouping("partial", Fields("word"))
    return builder


def expected():
    """word -> count over all of DATA."""
    out = {}
    for rows in DATA.values():
        for w in rows:
            out[w] = out.get(w, 0) + 1
    return out


def report(result):
    counts = result.map_state("counts", opaque=True)
    got = {w: n for w, n in zip(WORDS, counts.multi_get(WORDS), strict=True) if n is not None}
    print("word counts:", dict(sorted(got.items())))
    print("exact:", got == expected())


if __name__ == "__main__":
    from transactional.ops.cli import run_example

    run_example(build_topology, report)
