"""Core topologies over a Redis Stream, for the driver-SIGKILL tests (``trident run`` loads
this file in a child process).

``TRIDENT_TEST_REDIS``: the Redis URL; ``TRIDENT_TEST_STREAM``: the stream of sentences
(entries ``{"sentence": ...}``); ``TRIDENT_TEST_KIND``:

* ``reliable``: RedisStreamSpout -> SplitSentence (anchored) -> Record, which pushes
  ``<entry id>`` to ``<stream>:processed`` for every word it processes and adds it to the
  set ``<stream>:seen``, then acks;
* ``stateful``: RedisStreamSpout -> SplitSentence -> WordCount (a ``BaseStatefulBolt``
  on ``KeyValueState`` in the same Redis: hashes ``core-stateful-<stream>:count:<task>``),
  with ``TRIDENT_TEST_COUNT_TASKS`` tasks (default 2) and, when ``TRIDENT_TEST_TTL`` is set, a
  time to live of that many seconds (grace 0);
* ``windowed``: RedisStreamSpout -> SplitSentence -> Windowed (a persistent
  ``BaseStatefulWindowedBolt``, tumbling windows of 300 ms, its window in the same Redis),
  which adds the entry id of every tuple of each window it fires to ``<stream>:windowed``.
"""

import os

from spouts import RedisStreamSpout
from transactional import BaseRichBolt, BaseStatefulBolt, BaseStatefulWindowedBolt, Duration, Fields, TopologyBuilder

URL = os.environ.get("TRIDENT_TEST_REDIS", "redis://127.0.0.1:6379/0")
STREAM = os.environ.get("TRIDENT_TEST_STREAM", "sentences")
KIND = os.environ.get("TRIDENT_TEST_KIND", "reliable")
COUNT_TASKS = int(os.environ.get("TRIDENT_TEST_COUNT_TASKS", "2"))


class SplitSentence(BaseRichBolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tuple):
        for word in tuple["sentence"].split():
            self.collector.emit((tuple["id"], word), anchors=tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "word"))


class Record(BaseRichBolt):
    """Each word's processing leaves a trace in Redis (one pipeline per micro-batch)."""

    def prepare(self, conf, context, collector):
        import redis

        self.collector, self.r, self.done = collector, redis.Redis.from_url(URL), []

    def execute(self, tuple):
        self.done.append(tuple)

    def cleanup(self):
        pipe = self.r.pipeline(transaction=False)
        for t in self.done:
            pipe.rpush(f"{STREAM}:processed", t["id"])
            pipe.sadd(f"{STREAM}:seen", t["id"])
        pipe.execute()
        for t in self.done:                       # acked once its trace is written
            self.collector.ack(t)
        self.r.close()


class WordCount(BaseStatefulBolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def init_state(self, state):
        self.counts = state

    def execute(self, tuple):
        self.counts.put(tuple["word"], self.counts.get(tuple["word"], 0) + 1)
        self.collector.ack(tuple)


class Windowed(BaseStatefulWindowedBolt):
    def prepare(self, conf, context, collector):
        import redis

        self.r = redis.Redis.from_url(URL)

    def execute(self, window):
        self.r.sadd(f"{STREAM}:windowed", *{t["id"] for t in window.get()})

    def cleanup(self):
        self.r.close()


def build_topology():
    b = TopologyBuilder(f"core-{KIND}-{STREAM}")
    b.set_spout("sentences", RedisStreamSpout(URL, STREAM, "wc", fields=Fields("id", "sentence"), count=20,
                                              block_ms=20, claim_idle_secs=1.0), 1)
    b.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
    if KIND == "windowed":
        b.set_bolt("window", Windowed().with_tumbling_window(Duration(300)).with_persistence(), 1) \
            .global_grouping("split")
    elif KIND == "stateful":
        count = b.set_bolt("count", WordCount(), COUNT_TASKS).fields_grouping("split", Fields("word"))
        if os.environ.get("TRIDENT_TEST_TTL"):
            count.add_configuration("topology.state.ttl.secs", float(os.environ["TRIDENT_TEST_TTL"]))
            count.add_configuration("topology.state.ttl.grace.secs", 0)
    else:
        b.set_bolt("record", Record(), 2).shuffle_grouping("split")
    return b
