"""A topology ``trident verify`` cannot judge: its committer keeps nothing in a map, a
state or ``verify_outputs``, so no run has anything to compare (not a PASS)."""

from _words import spout

from transactional import BaseTransactionalBolt, Committer, Fields, TransactionalTopologyBuilder


class Print(BaseTransactionalBolt, Committer):
    def prepare(self, conf, context, collector, attempt):
        self.n = 0

    def execute(self, tuple):
        self.n += 1

    def finish_batch(self):
        print("batch of", self.n)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id"))


def build_topology():
    b = TransactionalTopologyBuilder("nothing-compared", "spout", spout(), 2)
    b.set_bolt("print", Print(), 1).global_grouping("spout")
    return b
