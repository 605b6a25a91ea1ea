"""A mistake ``trident verify`` catches: the counts live in a module-level dict that every
attempt adds to, without checking whether its txid was already applied, and the map only
receives a copy. A restarted driver starts from an empty dict; a replayed commit adds
twice."""

from _words import spout

from transactional import BaseTransactionalBolt, Committer, Fields, TransactionalTopologyBuilder

COUNTS: dict[str, int] = {}          # the mistake: state outside the map, no txid check


class CountInADict(BaseTransactionalBolt, Committer):
    def prepare(self, conf, context, collector, attempt):
        self.batch, self.counts = {}, context.map_state("counts")

    def execute(self, tuple):
        self.batch[tuple[1]] = self.batch.get(tuple[1], 0) + 1

    def finish_batch(self):
        for word, n in self.batch.items():
            COUNTS[word] = COUNTS.get(word, 0) + n
        keys = sorted(self.batch)
        self.counts.multi_combine(keys, [COUNTS[k] for k in keys], "replace")

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id"))


def build_topology():
    b = TransactionalTopologyBuilder("dict-counter", "spout", spout(), 2)
    b.set_bolt("count", CountInADict(), 1).global_grouping("spout")
    return b
