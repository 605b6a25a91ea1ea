"""storm-starter's RollingTopWords, with Storm's windowed bolts: the words of the last 9
seconds, every 3 seconds, and the top 5 of them (core topology, at least once).

    trident run examples/rolling_top_words.py

words (spout, event time in field ts)
  -> rolling (RollingCount: a sliding window of 9 s every 3 s, per word; fields grouping, 2 tasks)
  -> rankings (TotalRankings: a tumbling 3 s window over the rolling windows' end; global)

The windows are event time: each word carries its time in milliseconds (here 10 words a
second of a made-up clock), the watermark trails the newest time by one second, and a word
later than the watermark goes to the ``late`` stream. ``rankings`` sees the counts of the
rolling tasks' windows once both tasks' watermark passed their end.

The stream here is finite: after its last word the spout sends untracked end markers
(to every rolling task) an hour later, whose time moves the watermark past every rolling
window, so that they all fire (the words of an open window are acked only when it
closes). The last rankings window has no later input to close it: its words time out and
come back late, and it is not ranked.
"""

import random

from spouts import BaseRichSpout
from transactional import BaseRichBolt, BaseWindowedBolt, Duration, Fields, TopologyBuilder

WORDS = ["nathan", "mike", "jackson", "golda", "bertels", "storm", "spark", "trident"]
CONFIG = {"message_timeout_secs": 15}
TOP_N = 5
RANKINGS: list = []     # (window end, [(word, count), ...]) as the driver saw them


def make_words(n=600, seed=7):
    rng = random.Random(seed)
    weights = [8, 5, 4, 3, 2, 2, 1, 1]
    return [(rng.choices(WORDS, weights)[0], i * 100) for i in range(n)]


class WordSpout(BaseRichSpout):
    """The words in order, each tracked (a failed one is sent again), then the end marker."""

    def __init__(self, words):
        self.words = words

    def open(self, conf, context, collector):
        self.collector, self.next, self.replay, self.ended = collector, 0, [], False

    def next_tuple(self):
        for _ in range(50):
            if self.replay:
                i = self.replay.pop()
            elif self.next < len(self.words):
                i, self.next = self.next, self.next + 1
            else:
                if not self.ended:
                    self.ended = True
                    for k in range(8):            # to every rolling task (fields grouping on word)
                        self.collector.emit((f"<end{k}>", self.words[-1][1] + 3_600_000))   # untracked
                return
            self.collector.emit(self.words[i], msg_id=i)

    def fail(self, msg_id):
        self.replay.append(msg_id)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word", "ts"))


class RollingCount(BaseWindowedBolt):
    """Per window: how often each of this task's words was seen, with the window's end."""

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, window):
        counts = {}
        for t in window.get():
            counts[t["word"]] = counts.get(t["word"], 0) + 1
        for word, n in counts.items():
            if word.startswith("<end"):
                continue
            self.collector.emit((word, n, window.get_end_timestamp()), anchors=window.get())

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word", "count", "end"))


class TotalRankings(BaseWindowedBolt):
    """The top N words of one rolling window (all of its counts arrive in one tumbling window)."""

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, window):
        by_end = {}
        for t in window.get():
            by_end.setdefault(t["end"], []).append((t["word"], t["count"]))
        for end, counts in sorted(by_end.items()):
            top = sorted(counts, key=lambda wc: (-wc[1], wc[0]))[:TOP_N]
            RANKINGS.append((end, top))
            self.collector.emit((end, top), anchors=window.get())

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("end", "rankings"))


class Late(BaseRichBolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tuple):                 # ("late_tuple": (word, ts))
        self.collector.ack(tuple)


def build_topology(topology_id="rolling-top-words"):
    b = TopologyBuilder(topology_id)
    b.set_spout("words", WordSpout(make_words()), 1)
    rolling = (RollingCount().with_window(Duration(9, "seconds"), Duration(3, "seconds"))
               .with_timestamp_field("ts").with_lag(Duration(1, "seconds")).with_late_tuple_stream("late"))
    b.set_bolt("rolling", rolling, 2).fields_grouping("words", Fields("word"))
    rankings = TotalRankings().with_tumbling_window(Duration(3, "seconds")).with_timestamp_field("end")
    b.set_bolt("rankings", rankings, 1).global_grouping("rolling")
    b.set_bolt("late", Late(), 1).shuffle_grouping("rolling", "late")
    return b


def report(result):
    for end, top in RANKINGS:
        print(f"window ending {end / 1000:>5.1f} s: {top}")
    print(f"windows ranked: {len(RANKINGS)}; words acked: {result.acked}, failed: {result.failed}")


if __name__ == "__main__":
    from transactional.ops.cli import run_example

    run_example(build_topology, report, defaults=CONFIG)
