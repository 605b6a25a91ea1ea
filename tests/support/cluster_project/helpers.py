"""A sibling module of the topology file: its bolts call ``wordlib`` on the executors."""

import wordlib.norm

import transactional
from transactional import (
    BaseBatchBolt,
    BaseRichBolt,
    BaseStatefulBolt,
    BaseTransactionalBolt,
    Committer,
    Fields,
    Values,
)


class Split(BaseBatchBolt):
    """Emits (id, word, where wordlib and transactional were imported from)."""

    def prepare(self, conf, context, collector, attempt):
        self.collector, self.attempt = collector, attempt
        self.where = f"{wordlib.norm.where()}|{transactional.__file__}"

    def execute(self, tuple):
        for w in tuple[1].split():
            self.collector.emit(Values(self.attempt, wordlib.norm.normalize(w), self.where))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "word", "where"))


class Count(BaseTransactionalBolt, Committer):
    """Counts words into TransactionalMap "t" and OpaqueMap "o"; where the executors
    imported their code from into "where"."""

    def prepare(self, conf, context, collector, attempt):
        self.t, self.o = context.map_state("t"), context.map_state("o", opaque=True)
        self.places = context.map_state("where")
        self.counts, self.seen, self.task = {}, set(), context.task_index

    def execute(self, tuple):
        self.counts[tuple[1]] = self.counts.get(tuple[1], 0) + 1
        self.seen.add(tuple[2])

    def finish_batch(self):
        words = list(self.counts)
        self.t.multi_combine(words, [self.counts[w] for w in words], "sum")
        self.o.multi_combine(words, [self.counts[w] for w in words], "sum")
        places = sorted(f"{self.task}|{w}" for w in self.seen)   # one key per committer task
        self.places.multi_combine(places, [1] * len(places), "sum")


class CoreSplit(BaseRichBolt):
    """A core topology's split, on the executors: each word anchored to its sentence."""

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tuple):
        for w in tuple["sentence"].split():
            self.collector.emit((wordlib.norm.normalize(w),), anchors=tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))


class CoreCount(BaseStatefulBolt):
    """Counts into the task's KeyValueState (a Redis hash per task)."""

    def prepare(self, conf, context, collector):
        self.collector = collector

    def init_state(self, state):
        self.counts = state

    def execute(self, tuple):
        self.counts.put(tuple["word"], self.counts.get(tuple["word"], 0) + 1)
        self.collector.ack(tuple)
