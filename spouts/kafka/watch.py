"""The Kafka coordinator's view of the partitions' ends between plans: one background
consumer that long-polls every watched partition just past its last planned offset
(docs/kafka.md, "Planning and waking the driver").

``HighWatermarkWatch`` keeps, per partition, the high watermark of the last Fetch response
(a lower bound of the log's end: Kafka's high watermark never decreases) and calls
``wake()`` once a partition has records beyond what was planned (its *frontier*). After a
response with records it seeks to that watermark, so it reads at most one record batch a
partition per look, never the data itself (a look every 20 ms at most while records
flow), and while nothing arrives it holds one
Fetch at the broker for up to ``wait_ms`` (``fetch.wait.max.ms``): an idle topic costs
one small request a partition set per ``wait_ms``, and a new record wakes the driver
within about one round trip.

One thread owns the consumer; the planner's thread only reads the watermarks and moves
frontiers (``planned``), under a lock.

>>> HighWatermarkWatch.__name__
'HighWatermarkWatch'
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

__all__ = ["HighWatermarkWatch"]

log = logging.getLogger("trident.kafka")

#: seconds between two looks while records flow (at most ~50 fetches a second)
_GAP = 0.02


class HighWatermarkWatch:
    """Watches ``topic``'s partitions from a background thread (see the module docstring).

    ``config`` is the consumer's librdkafka configuration (the spout's, for the
    coordinator); ``wake`` is called from the watch's thread, at most once between two
    ``planned`` calls, when a watched partition has a record at or past its frontier.
    ``limits``: partition -> an offset past which nothing is watched (fixed end offsets)."""

    def __init__(self, topic: str, config: dict[str, Any], wake: Callable[[], None], *,
                 wait_ms: int = 50, limits: dict[int, int] | None = None) -> None:
        cfg = dict(config)
        # one record batch a partition per fetch is enough to learn its watermark; the broker
        # holds the fetch up to wait_ms while there is nothing new
        cfg.update({"client.id": "trident-watch", "max.partition.fetch.bytes": 1, "queued.min.messages": 1,
                    "fetch.wait.max.ms": int(wait_ms), "fetch.queue.backoff.ms": 0})
        self.topic = topic
        self.wake = wake
        self.limits = dict(limits or {})
        self._consumer = Consumer(cfg)
        self._lock = threading.Lock()
        self._high: dict[int, int] = {}       # partition -> high watermark of its last Fetch answer
        self._frontier: dict[int, int] = {}   # partition -> end of its last plan (watched from here)
        self._assign: dict[int, int] = {}     # partitions to (re)start watching, for the thread
        self._armed = True                    # wake() not called since the last planned()
        self._stop = threading.Event()
        self._changed = threading.Event()     # a new partition to watch
        self._thread = threading.Thread(target=self._run, name=f"trident-kafka-watch-{topic}", daemon=True)
        self._thread.start()

    # -- the planner's side ------------------------------------------------------------------
    def high(self, partition: int) -> int | None:
        """The partition's high watermark as the last Fetch answered it (a lower bound of
        the log's end now), or None when it is not watched or has no answer yet."""
        with self._lock:
            return self._high.get(partition)

    def planned(self, partition: int, frontier: int) -> None:
        """The partition was planned up to ``frontier`` (the offset its next batch starts
        at): watch for records from there, and wake the driver again when one exists."""
        with self._lock:
            self._armed = True
            known = self._frontier.get(partition)
            self._frontier[partition] = frontier
            if known is None:
                self._assign[partition] = frontier
                self._changed.set()
            elif self._high.get(partition, frontier) > frontier and self._watched(partition, frontier):
                self._fire()                          # records past the plan already seen: say so

    def close(self) -> None:
        """Stop the thread and close the consumer."""
        self._stop.set()
        self._changed.set()
        self._thread.join(10)
        self._consumer.close()

    # -- the watch's thread -------------------------------------------------------------------
    def _watched(self, partition: int, frontier: int) -> bool:
        limit = self.limits.get(partition)
        return limit is None or frontier < limit

    def _fire(self) -> None:
        """Call ``wake`` once per plan (under the lock)."""
        if self._armed:
            self._armed = False
            self.wake()

    def _run(self) -> None:
        c = self._consumer
        while not self._stop.is_set():
            with self._lock:
                new, self._assign = self._assign, {}
            if new:
                c.incremental_assign([TopicPartition(self.topic, p, o) for p, o in new.items()])
            if not self._frontier:
                self._changed.wait(1.0)
                self._changed.clear()
                continue
            try:
                msgs = c.consume(num_messages=64, timeout=0.1)
            except KafkaException as e:
                log.debug("watch of %r: %s", self.topic, e)
                continue
            tops: dict[int, Any] = {}          # the last record fetched of each partition
            for m in msgs:
                if m.error() is not None or m.offset() is None:
                    self._event(m)
                else:
                    tops[int(m.partition() or 0)] = m
            for m in tops.values():
                tp = self._answer(m)
                try:
                    c.seek(tp)
                except KafkaException as e:
                    log.debug("watch of %r: seek to %s: %s", self.topic, tp, e)
            if tops:
                # records are flowing: look again in a while, not at every round trip (each
                # answer holds a record batch a partition, which the client decodes)
                self._stop.wait(_GAP)

    def _event(self, m: Any) -> None:
        """An event in place of a record: the partition's end (its watermark), or an error
        (the watermark is not known now: the planner asks the broker)."""
        p, off, err = m.partition(), m.offset(), m.error()
        if err is not None and err.code() == KafkaError._PARTITION_EOF and off is not None:
            self._learn(p, int(off))
        elif err is not None:
            log.debug("watch of %s[%s]: %s", self.topic, p, err)
            with self._lock:
                self._high.pop(p, None)

    def _answer(self, m: Any) -> TopicPartition:
        """Learn a partition's watermark from its last fetched record; the position to
        watch from next (that watermark: the records are not read)."""
        p = m.partition()
        hw = self._consumer.get_watermark_offsets(TopicPartition(self.topic, p), cached=True)[1]
        high = max(int(hw), int(m.offset()) + 1)
        self._learn(p, high)
        return TopicPartition(self.topic, p, high)

    def _learn(self, p: int, high: int) -> None:
        with self._lock:
            self._high[p] = max(high, self._high.get(p, 0))
            frontier = self._frontier.get(p)
            if frontier is not None and high > frontier and self._watched(p, frontier):
                self._fire()
