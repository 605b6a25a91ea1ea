"""Storm's reliable word count (guaranteed message processing, at least once): a spout
that replays what fails, the seed's SplitSentence anchoring every word to its sentence,
and WordCount acking the words -- and failing some on purpose, so you see them replayed.
The spout hears ``ack`` once a sentence's whole tree (the sentence and its words) was
processed; a failed word fails its sentence, which the spout emits again.

    trident run examples/reliable_word_count.py                       # sentences in memory
    trident run examples/reliable_word_count.py --set conf.fail_rate=0  # nothing fails
    SENTENCES_STREAM=redis://127.0.0.1:6379/0 trident run examples/reliable_word_count.py
                                                 # sentences from the Redis Stream "sentences"

sentences (spout, 2 tasks) -> split (SplitSentence, 3) -> count (WordCount, 3, fields grouping)
"""

import os
import random

from spouts import MEMORY_SPOUT_LOGS, MemorySpout, RedisStreamSpout
from transactional import BaseRichBolt, Fields, TopologyBuilder

SENTENCES = ["the cow jumped over the moon", "an apple a day keeps the doctor away",
             "four score and seven years ago", "snow white and the seven dwarfs", "i am at two with nature"]
CONFIG = {"conf": {"fail_rate": 0.05}}


class SplitSentence(BaseRichBolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tuple):                                  # ("the cow jumped over the moon", 1)
        delivery = tuple["delivery"] if tuple.contains("delivery") else 0   # 0: not known
        for word in tuple["sentence"].split():
            self.collector.emit((word, delivery), anchors=tuple)            # anchored: in the tree
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word", "delivery"))


class WordCount(BaseRichBolt):
    """Counts the words of its micro-batch; fails a word's first delivery at random with
    probability ``fail_rate``, which replays its whole sentence."""

    def prepare(self, conf, context, collector):
        self.collector, self.counts = collector, {}
        self.fail_rate = float(conf.get("fail_rate", 0))

    def execute(self, tuple):                                  # ("cow", 1)
        word = tuple["word"]
        if tuple["delivery"] == 1 and random.random() < self.fail_rate:
            self.collector.fail(tuple)                         # its sentence is replayed
            return
        self.counts[word] = self.counts.get(word, 0) + 1
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word", "count"))


def build_topology(topology_id="reliable-word-count"):
    stream = os.environ.get("SENTENCES_STREAM")
    builder = TopologyBuilder(topology_id)
    if stream:
        spout = RedisStreamSpout(stream, "sentences", "word-count", fields=Fields("id", "sentence"))
        builder.set_spout("sentences", spout, 1)
    else:
        rng = random.Random(3)
        sentences = [rng.choice(SENTENCES) for _ in range(2000)]
        builder.set_spout("sentences", MemorySpout(sentences, Fields("sentence"), name=topology_id,
                                                   deliveries=True), 2)
    builder.set_bolt("split", SplitSentence(), 3).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), 3).fields_grouping("split", Fields("word"))
    return builder


def report(result):
    log = MEMORY_SPOUT_LOGS.get(result.topology_id, [])
    acked = [m for e, m, _, _ in log if e == "ack"]
    print(f"sentences acked: {result.acked}, failed and replayed: {result.failed}, pending: {result.pending}")
    print(f"words counted: {result.executed.get('count', 0)} (failed first deliveries included)")
    if log:
        print("every sentence acked exactly once:", sorted(acked) == list(range(2000)))


if __name__ == "__main__":
    from transactional.ops.cli import run_example

    run_example(build_topology, report, defaults=CONFIG)
