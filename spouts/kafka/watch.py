"""The Kafka coordinator's watch for new records between plans: one background consumer
that long-polls every partition at the end of its last plan and wakes the driver when a
record is there (docs/kafka.md, "Planning and waking the driver").

``HighWatermarkWatch`` keeps each watched partition assigned at its *frontier* (where its
next batch starts) with ``fetch.wait.max.ms`` = ``wait_ms``: the broker holds the one
Fetch for all partitions until a record arrives or ``wait_ms`` passes, so an idle topic
costs one small request per ``wait_ms`` and no Python work. The first record at or past a
frontier calls ``wake()`` (at most once between two ``planned`` calls) and pauses that
partition until the next plan moves its frontier: while records flow the watch fetches one
record batch a partition per plan, not the data.

One thread owns the consumer; the planner's thread only moves frontiers (``planned``),
under a lock.

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


class HighWatermarkWatch:
    """Watches ``topic``'s partitions from a background thread (see the module docstring).

    ``config`` is the consumer's librdkafka configuration (the spout's, for the
    coordinator); ``wake`` is called from the watch's thread, at most once between two
    ``planned`` calls, when a watched partition has a record at or past its frontier.
    ``limits``: partition -> an offset past which nothing is watched (fixed end offsets)."""

    def __init__(self, topic: str, config: dict[str, Any], wake: Callable[[], None], *,
                 wait_ms: int = 50, limits: dict[int, int] | None = None) -> None:
        cfg = dict(config)
        # one record batch a partition per fetch is enough to see that records are there; the
        # broker holds the fetch up to wait_ms while there is nothing new. Brokers that size
        # an answer by the request's total (Tansu) would send up to fetch.max.bytes: keep it
        # small (a larger record batch still comes whole, as Kafka's protocol says)
        cfg.update({"client.id": "trident-watch", "max.partition.fetch.bytes": 1, "queued.min.messages": 1,
                    "fetch.wait.max.ms": int(wait_ms), "fetch.queue.backoff.ms": 0,
                    "fetch.max.bytes": 65_536, "message.max.bytes": 65_536, "queued.max.messages.kbytes": 64})
        self.topic = topic
        self.wake = wake
        self.limits = dict(limits or {})
        self._consumer = Consumer(cfg)
        self._lock = threading.Lock()
        self._frontier: dict[int, int] = {}   # partition -> end of its last plan (watched from here)
        self._moves: dict[int, int] = {}      # partitions to watch from a new frontier, for the thread
        self._assigned: set[int] = set()      # (the thread's) partitions assigned
        self._paused: set[int] = set()        # (the thread's) partitions with a record past the frontier
        self._armed = True                    # wake() not called since the last planned()
        self._stop = threading.Event()
        self._changed = threading.Event()     # a frontier moved
        self._thread = threading.Thread(target=self._run, name=f"trident-kafka-watch-{topic}", daemon=True)
        self._thread.start()

    # -- the planner's side ------------------------------------------------------------------
    def planned(self, partition: int, frontier: int) -> None:
        """The partition was planned up to ``frontier`` (the offset its next batch starts
        at): watch for records from there, and wake the driver again when one exists."""
        with self._lock:
            self._armed = True
            if self._frontier.get(partition) == frontier:
                return                            # watched from there already
            self._frontier[partition] = frontier
            self._moves[partition] = frontier
        self._changed.set()

    def close(self) -> None:
        """Stop the thread and close the consumer."""
        self._stop.set()
        self._changed.set()
        self._thread.join(10)
        self._consumer.close()

    # -- the watch's thread -------------------------------------------------------------------
    def _run(self) -> None:
        c = self._consumer
        while not self._stop.is_set():
            self._move(c)
            if not self._assigned - self._paused:
                self._changed.wait(1.0)           # nothing to watch until a plan moves a frontier
                self._changed.clear()
                continue
            try:
                m = c.poll(0.05)
            except KafkaException as e:
                log.debug("watch of %r: %s", self.topic, e)
                continue
            if m is not None:
                self._answer(c, m)

    def _move(self, c: Consumer) -> None:
        """Watch the partitions whose frontier moved from there (resumed if paused)."""
        with self._lock:
            moves, self._moves = self._moves, {}
        new = [TopicPartition(self.topic, p, o) for p, o in moves.items() if p not in self._assigned]
        old = [TopicPartition(self.topic, p, o) for p, o in moves.items() if p in self._assigned]
        try:
            if new:
                c.incremental_assign(new)
                self._assigned.update(tp.partition for tp in new)
            for tp in old:
                c.seek(tp)
            back = [tp for tp in old if tp.partition in self._paused]
            if back:
                c.resume(back)
                self._paused.difference_update(tp.partition for tp in back)
        except KafkaException as e:
            log.debug("watch of %r: moving to %s: %s", self.topic, moves, e)

    def _answer(self, c: Consumer, m: Any) -> None:
        """One fetched record or event: a record at or past its partition's frontier wakes
        the driver (once per plan) and pauses the partition; one below it (fetched before
        the frontier moved) moves the watch there."""
        p, off, err = m.partition(), m.offset(), m.error()
        if err is not None:
            if err.code() != KafkaError._PARTITION_EOF:
                log.debug("watch of %s[%s]: %s", self.topic, p, err)
            return
        if p is None or off is None:
            return
        with self._lock:
            frontier = self._frontier.get(p)
            if frontier is None:
                return
            limit = self.limits.get(p)
            past = off >= frontier and (limit is None or frontier < limit)
            if past and self._armed:
                self._armed = False
                self.wake()
        tp = TopicPartition(self.topic, p, frontier)
        try:
            if past or (limit is not None and frontier >= limit):
                c.pause([tp])
                self._paused.add(p)
            elif off < frontier:
                c.seek(tp)
        except KafkaException as e:
            log.debug("watch of %s[%s]: %s", self.topic, p, e)
