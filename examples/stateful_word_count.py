"""Storm's stateful word count (state management, at least once): the seed's
WordCountBolt keeps its counts in a ``KeyValueState`` that the framework checkpoints --
prepare, then commit, across every stateful bolt -- and acks a sentence only once the
counts it changed are committed; a failure rolls the state back to its last checkpoint
and the spout replays what was not acked.

    trident run examples/stateful_word_count.py                                   # state in memory
    trident run examples/stateful_word_count.py --state redis://127.0.0.1:6379/0 \\
        --coordination zk://127.0.0.1:2181/trident                                 # durable: run it again
    SENTENCES_STREAM=redis://127.0.0.1:6379/0 trident run examples/stateful_word_count.py \\
        --state redis://127.0.0.1:6379/0 --coordination zk://127.0.0.1:2181/trident \\
        --idle-timeout -1                                                           # a Redis Stream, forever

sentences (spout) -> split (SplitSentence, 2) -> count (WordCountBolt, stateful, 3, fields grouping on word)
"""

import collections
import os
import random

from spouts import MemorySpout, RedisStreamSpout
from transactional import BaseRichBolt, BaseStatefulBolt, Fields, TopologyBuilder

SENTENCES = ["the cow jumped over the moon", "an apple a day keeps the doctor away",
             "four score and seven years ago", "snow white and the seven dwarfs", "i am at two with nature"]
CONFIG = {"checkpoint_interval_ms": 500}


def make_sentences(n=1000, seed=3):
    rng = random.Random(seed)
    return [rng.choice(SENTENCES) for _ in range(n)]


class SplitSentence(BaseRichBolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tuple):                                   # ("the cow jumped over the moon",)
        for word in tuple["sentence"].split():
            self.collector.emit((word,), anchors=tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))


class WordCountBolt(BaseStatefulBolt):
    """The seed's WordCountBolt: counts in the task's KeyValueState (word -> count)."""

    def prepare(self, conf, context, collector):
        self.collector = collector

    def init_state(self, state):                                # the last checkpoint, plus changes since
        self.word_counts = state

    def execute(self, tuple):                                   # ("cow",)
        word = tuple["word"]
        count = self.word_counts.get(word, 0) + 1
        self.word_counts.put(word, count)
        self.collector.emit((word, count), anchors=tuple)        # ("cow", 17)
        self.collector.ack(tuple)                               # acked for real at the checkpoint

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word", "count"))


def build_topology(topology_id="stateful-word-count"):
    builder = TopologyBuilder(topology_id)
    stream = os.environ.get("SENTENCES_STREAM")
    if stream:
        builder.set_spout("sentences", RedisStreamSpout(stream, "sentences", "word-count",
                                                        fields=Fields("id", "sentence")), 1)
    else:
        builder.set_spout("sentences", MemorySpout(make_sentences(), Fields("sentence"), name=topology_id), 2)
    builder.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCountBolt(), 3).fields_grouping("split", Fields("word"))
    return builder


def report(result):
    counts = result.key_value_state("count")
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:8]
    print("top words:", dict(top))
    print(f"checkpoints: {result.checkpoints}; sentences acked: {result.acked}, failed: {result.failed}")
    if not os.environ.get("SENTENCES_STREAM"):
        want = collections.Counter(w for s in make_sentences() for w in s.split())
        runs = max(1, round(sum(counts.values()) / sum(want.values())))   # a durable state counts every run
        print("exact:", counts == {w: n * runs for w, n in want.items()})


if __name__ == "__main__":
    from transactional.ops.cli import run_example

    run_example(build_topology, report, defaults=CONFIG)
