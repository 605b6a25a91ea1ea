"""Sliding-window word count over the reference corpus: windows of 60 s of event time,
sliding every 10 s, lag 1 s, in a core topology and in Trident; and, in Trident, sessions
of each word (gap 5 s) and an interval join of each word with its occurrences within 1 s.

    python benchmarks/windowed_wordcount.py [--sentences 20000] [--span-secs 600]
           [--mode core|trident|sessions|join|all] [--executor in-process|spark] [--master local[2]]

Sentence ``i`` carries event time ``i * span / n`` (ms), so the corpus covers ``--span-secs``
of event time (60 windows for 600 s). ``core``: a spout on the driver -> SplitSentence
(executors) -> a windowed bolt (sliding Duration windows on the word's time) counting each
window's words. ``trident``: ``each(Split)`` -> ``sliding_window(...)`` with a ``Count`` per
window. Prints one JSON line per mode: words per second end to end, and the latency from a
window's end to its result -- the wall time from the moment the first sentence that moves
the watermark past the window's end was emitted (core: by the spout; Trident: seen by the
stage before the window) to the moment the window's result was computed, p50/p99.
``sessions``: ``group_by(word).session_window(5 s)`` counting each session's words (latency
from a session's end, as for windows). ``join``: ``interval_join`` of the words with
themselves on the word, within 1 s either way (latency: from the emission of the later
word's sentence to the joined pair's output).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from spouts import MemoryTransactionalSpout
from spouts.core import BaseRichSpout
from transactional import (
    BaseRichBolt,
    BaseWindowedBolt,
    Duration,
    Fields,
    TopologyBuilder,
    TopologyConfig,
    run_topology,
)
from transactional.testing import make_corpus
from trident import BaseAggregator, BaseFunction, TridentTopology
from trident.windowing import WindowsStoreFactory

LENGTH, SLIDE, LAG = 60_000, 10_000, 1_000
EMITTED: dict[int, float] = {}          # sentence index -> wall time it was emitted / seen
FIRED: list[tuple[int, float]] = []     # (window end, wall time its result was computed)


class Sentences(BaseRichSpout):
    def __init__(self, rows: list[tuple[str, int]]) -> None:
        self.rows = rows

    def open(self, conf, context, collector):
        self.collector, self.next, self.replay = collector, 0, []

    def next_tuple(self):
        now = time.time()
        for _ in range(1000):
            if self.replay:
                i = self.replay.pop()
            elif self.next < len(self.rows):
                i, self.next = self.next, self.next + 1
            else:
                if self.next == len(self.rows):   # end markers, untracked, an hour later: every window fires
                    self.next += 1
                    for _ in range(8):
                        self.collector.emit(("<end>", self.rows[-1][1] + 3_600_000, -1))
                return
            EMITTED.setdefault(i, now)
            self.collector.emit((*self.rows[i], i), msg_id=i)

    def fail(self, msg_id):
        self.replay.append(msg_id)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("sentence", "ts", "i"))


class SplitSentence(BaseRichBolt):
    def prepare(self, conf, context, collector):
        self.emit, self.ack = collector.emit, collector.ack

    def execute(self, tuple):
        ts = tuple[1]
        for word in tuple[0].split():
            self.emit((word, ts), tuple)
        self.ack(tuple)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word", "ts"))


class WindowCount(BaseWindowedBolt):
    def prepare(self, conf, context, collector):
        pass

    def execute(self, window):
        counts: dict[str, int] = {}
        for t in window.get():
            counts[t[0]] = counts.get(t[0], 0) + 1
        FIRED.append((window.get_end_timestamp(), time.time()))


class Split(BaseFunction):
    def execute(self, tuple, collector):
        EMITTED.setdefault(tuple[2], time.time())
        ts = tuple[1]
        for word in tuple[0].split():
            collector.emit((word, ts))


class CountWords(BaseAggregator):
    def init(self, batch_id, collector):
        return {}

    def aggregate(self, acc, tuple, collector):
        acc[tuple[0]] = acc.get(tuple[0], 0) + 1
        acc[None] = max(acc.get(None, 0), tuple[1])

    def complete(self, acc, collector):
        top = acc.pop(None, 0)
        FIRED.append(((top // SLIDE + 1) * SLIDE, time.time()))
        collector.emit((len(acc),))


class SessionWords(BaseAggregator):
    def init(self, batch_id, collector):
        return [0]

    def aggregate(self, acc, tuple, collector):
        acc[0] += 1

    def complete(self, acc, collector):
        FIRED.append((collector.window.get_end_timestamp(), time.time()))
        collector.emit((acc[0],))


JOINED: list[float] = []                 # ms from the later row's sentence emission to the pair's output


class JoinLatency(BaseFunction):
    def execute(self, tuple, collector):
        JOINED.append((time.time() - EMITTED[max(tuple[2], tuple[5])]) * 1000)


def _trident(mode: str, rows: list[tuple[str, int]]) -> Any:
    t = TridentTopology(f"bench-windowed-{mode}")
    words = (t.new_stream("sentences", MemoryTransactionalSpout([(*row, i) for i, row in enumerate(rows)],
                                                                Fields("sentence", "ts", "i"), 1000))
             .each(Fields("sentence", "ts", "i"), Split(), Fields("word", "wts")))
    if mode == "trident":
        words.sliding_window(Duration(LENGTH), Duration(SLIDE), WindowsStoreFactory("bench-windows"),
                             Fields("word", "wts"), CountWords(), Fields("distinct"), timestamp_field="wts",
                             lag=Duration(LAG))
    elif mode == "sessions":
        words.group_by(Fields("word")).session_window(Duration(5_000), WindowsStoreFactory("bench-sessions"),
                                                      Fields("wts"), SessionWords(), Fields("n"),
                                                      timestamp_field="wts", lag=Duration(LAG))
    else:
        a = words.project(Fields("word", "wts", "i"))
        b = words.project(Fields("word", "wts", "i"))
        out = Fields("word", "wts", "i", "word_b", "wts_b", "i_b")
        t.interval_join(a, Fields("word"), "wts", b, Fields("word"), "wts", Duration(1_000), Duration(1_000),
                        WindowsStoreFactory("bench-join"), out, lag=Duration(LAG)) \
            .each(out, JoinLatency(), Fields())
    return t.build()


def percentile(xs: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q / 100 * len(s)) - 1))]


def latencies(rows: list[tuple[str, int]]) -> list[float]:
    """Per fired window end e: fire time - emit time of the first sentence with ts - lag >= e."""
    out = []
    times = [ts for _, ts in rows]
    j = 0
    for end, fired in sorted(FIRED):
        while j < len(times) and times[j] - LAG < end:
            j += 1
        if j < len(times) and j in EMITTED:
            out.append((fired - EMITTED[j]) * 1000)
    return out


def run(mode: str, rows: list[tuple[str, int]], executor: str, master: str) -> dict[str, Any]:
    EMITTED.clear()
    FIRED.clear()
    words = sum(len(s.split()) for s, _ in rows)
    cfg = TopologyConfig(executor=executor, spark_master=master, progress=False, message_timeout_secs=300,
                         idle_timeout_secs=0.5, micro_batch_size=1000)
    t0 = time.monotonic()
    if mode == "core":
        b = TopologyBuilder("bench-windowed-core")
        b.set_spout("sentences", Sentences(rows), 1)
        b.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
        b.set_bolt("window", WindowCount().with_window(Duration(LENGTH), Duration(SLIDE)).with_timestamp_field("ts")
                   .with_lag(Duration(LAG)), 1).global_grouping("split")
        r = run_topology(b.build(), cfg)
    else:
        JOINED.clear()
        r = run_topology(_trident(mode, rows), cfg)
    secs = time.monotonic() - t0
    lat = JOINED if mode == "join" else latencies(rows)
    return {"mode": mode, "executor": executor, "sentences": len(rows), "words": words, "seconds": round(secs, 3),
            "words_per_s": round(words / secs), "windows": len(FIRED), "pairs": len(JOINED),
            "batches": r.batches_committed,
            "latency_ms_p50": round(percentile(lat, 50), 1) if lat else None,
            "latency_ms_p99": round(percentile(lat, 99), 1) if lat else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sentences", type=int, default=20_000)
    p.add_argument("--span-secs", type=int, default=600)
    p.add_argument("--mode", choices=["core", "trident", "sessions", "join", "all"], default="all")
    p.add_argument("--executor", choices=["in-process", "spark"], default="in-process")
    p.add_argument("--master", default="local[2]")
    a = p.parse_args()
    corpus = make_corpus(a.sentences, vocab=5000)
    step = a.span_secs * 1000 / a.sentences
    rows = [(s, int(i * step)) for i, s in enumerate(corpus)]
    for mode in (["core", "trident", "sessions", "join"] if a.mode == "all" else [a.mode]):
        print(json.dumps(run(mode, rows, a.executor, a.master)), flush=True)


if __name__ == "__main__":
    main()
