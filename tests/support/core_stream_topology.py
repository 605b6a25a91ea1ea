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
  which adds the entry id of every tuple of each window it fires to ``<stream>:windowed``;
* ``sessions``: RedisStreamSpout (entries ``{"user": ..., "ts": ...}``) -> Sessions (a
  persistent ``BaseStatefulWindowedBolt``, session windows per user, gap 3 s, lag 2 s, its
  sessions in the same Redis), which records each session it fires in its own state
  (``"<user>/<start>"`` -> ``{"ts": [...], "fired": n}``, checkpointed with the sessions)
  and adds the key to ``<stream>:sessions`` (the test's progress mark);
* ``winrb``: RedisStreamSpout (entries ``{"sentence": ..., "ts": ...}``) -> SplitTimed (one task) ->
  two persistent ``BaseStatefulWindowedBolt`` s fed by a fields grouping on the word, with
  ``TRIDENT_TEST_COUNT_TASKS`` tasks: ``tumbling`` (count windows of 3, in event time) and ``sliding``
  (event-time windows of 2 s every 1 s, lag 0.5 s); each records, in its own state under
  the word, ``[start, end, n]`` for each window the word was in (WindowWords).
"""

import os

from spouts import RedisStreamSpout
from transactional import (
    BaseRichBolt,
    BaseStatefulBolt,
    BaseStatefulWindowedBolt,
    Count,
    Duration,
    Fields,
    TopologyBuilder,
)

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


class Sessions(BaseStatefulWindowedBolt):
    """Each fired session into its state, once: ``"<user>/<start>"`` -> its times, fired count."""

    def prepare(self, conf, context, collector):
        import redis

        self.r = redis.Redis.from_url(URL)

    def init_state(self, state):
        self.state = state

    def execute(self, window):
        key = f"{window.get_key()}/{window.get_start_timestamp()}"
        old = self.state.get(key) or {"fired": 0}
        self.state.put(key, {"ts": [int(t["ts"]) for t in window.get()], "fired": old["fired"] + 1})
        self.r.sadd(f"{STREAM}:sessions", key)

    def cleanup(self):
        self.r.close()


class SplitTimed(BaseRichBolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tuple):
        for word in tuple["sentence"].split():
            self.collector.emit((tuple["id"], word, int(tuple["ts"])), anchors=tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "word", "ts"))


class WindowWords(BaseStatefulWindowedBolt):
    """Each fired window, per word in it: ``[start, end, n]`` appended under the word."""

    def init_state(self, state):
        self.state = state

    def execute(self, window):
        counts = {}
        for t in window.get():
            counts[t["word"]] = counts.get(t["word"], 0) + 1
        for word, n in sorted(counts.items()):
            self.state.put(word, [*self.state.get(word, []), [window.get_start_timestamp(),
                                                               window.get_end_timestamp(), n]])


def event_time(t):
    """A session tuple's time (ms): its entry's ``ts`` field."""
    return int(t["ts"])


def build_topology():
    b = TopologyBuilder(f"core-{KIND}-{STREAM}")
    fields = Fields("id", "user", "ts") if KIND == "sessions" else \
        Fields("id", "sentence", "ts") if KIND == "winrb" else Fields("id", "sentence")
    b.set_spout("sentences", RedisStreamSpout(URL, STREAM, "wc", fields=fields, count=20, block_ms=20,
                                              claim_idle_secs=1.0), 1)
    if KIND == "sessions":
        b.set_bolt("sessions", Sessions().with_session_window(Duration(3, "s"), key_field="user")
                   .with_timestamp_extractor(event_time).with_lag(Duration(2, "s")).with_persistence(), 1) \
            .fields_grouping("sentences", Fields("user"))
        return b
    if KIND == "winrb":
        b.set_bolt("split", SplitTimed(), 1).shuffle_grouping("sentences")   # one input partition: a task sees stream order
        b.set_bolt("tumbling", WindowWords().with_tumbling_window(Count(3)).with_timestamp_field("ts").with_persistence(), COUNT_TASKS) \
            .fields_grouping("split", Fields("word"))
        b.set_bolt("sliding", WindowWords().with_window(Duration(2000), Duration(1000))
                   .with_timestamp_field("ts").with_lag(Duration(500)).with_persistence(), COUNT_TASKS) \
            .fields_grouping("split", Fields("word"))
        return b
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
