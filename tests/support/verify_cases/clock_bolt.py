"""A mistake ``trident verify`` catches: a bolt stamps each word with the clock
(``time.time()``) and a transactional map keeps the latest stamp per word, so a replay of
a batch (or any second run) stores other values than the first."""

import time

from _words import spout

from transactional import BaseBasicBolt, BaseTransactionalBolt, Committer, Fields, TransactionalTopologyBuilder, Values


class Stamp(BaseBasicBolt):
    def execute(self, tuple, collector):
        collector.emit(Values(tuple[0], tuple[1], time.time()))      # the mistake: output depends on the clock

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "word", "seen"))


class LastSeen(BaseTransactionalBolt, Committer):
    def prepare(self, conf, context, collector, attempt):
        self.batch, self.seen = {}, context.map_state("last-seen")

    def execute(self, tuple):
        self.batch[tuple["word"]] = max(self.batch.get(tuple["word"], 0.0), tuple["seen"])

    def finish_batch(self):
        keys = sorted(self.batch)
        self.seen.multi_combine(keys, [self.batch[k] for k in keys], "replace")

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id"))


def build_topology():
    b = TransactionalTopologyBuilder("clock-bolt", "spout", spout(), 2)
    b.set_bolt("stamp", Stamp(), 2).shuffle_grouping("spout")
    b.set_bolt("last-seen", LastSeen(), 1).fields_grouping("stamp", Fields("word"))
    return b
