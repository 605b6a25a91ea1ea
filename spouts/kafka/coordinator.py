"""The Kafka spouts' driver side: ``KafkaCoordinator`` plans offset ranges from the
partitions' high watermarks (``spouts.kafka``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from spouts.base import Meta, PartitionedCoordinator
from spouts.kafka.emitter import _GONE, _OUT_OF_RANGE
from spouts.kafka.watch import HighWatermarkWatch
from transactional.engine.wakeup import WakesDriver
from transactional.exceptions import SpoutError

if TYPE_CHECKING:
    from spouts.kafka import _KafkaSpout

__all__ = ["END_OFFSETS_CONF", "KafkaCoordinator"]

log = logging.getLogger("trident.kafka")

#: the topology conf key of fixed end offsets, ``{topic: {partition: offset}}`` (``trident
#: verify``): the coordinator plans no offset at or past them (a partition not named: none)
END_OFFSETS_CONF = "trident.kafka.end_offsets"


class KafkaCoordinator(PartitionedCoordinator, WakesDriver):
    """Plans offset ranges on the driver from high watermarks (one ListOffsets per
    partition per plan), up to ``end_offsets`` when given; while the engine listens
    (``wake_on_input``) it wakes the driver when records arrive. Created by ``get_coordinator``;
    users do not subclass it."""

    def __init__(self, spout: _KafkaSpout, end_offsets: dict[int, int] | None = None) -> None:
        self.spout = spout
        self.end_offsets = end_offsets
        self.consumer = Consumer(spout.consumer_config("coordinator"))
        self._unplaced: dict[int, Meta] = {}   # plan_partition(p, None) outside the engine
        self._high: dict[int, int] = {}        # partition -> high watermark at its last plan (lag)
        self._done: dict[int, int] = {}        # partition -> end of its last committed batch (lag)
        # partition -> (ListOffsets answer, the Fetch high watermark probed for it)
        self._probed: dict[int, tuple[int, int]] = {}
        self._prober: Consumer | None = None
        self._watch: HighWatermarkWatch | None = None   # while the engine listens (wake_on_input)
        self._wake: Callable[[], None] | None = None
        self._planned: dict[int, int] = {}     # partition -> end of its last planned range
        self._capped: dict[int, bool] = {}     # partition -> its last plan stopped short of the log's end
        try:
            self._known = self._created_with = self._partition_count()
        except SpoutError:
            self.consumer.close()
            raise

    def _partition_count(self) -> int:
        s = self.spout
        t0 = time.monotonic()
        try:
            md = self.consumer.list_topics(s.topic, timeout=s.metadata_timeout_secs)
        except KafkaException as e:
            msg = (
                f"cannot reach Kafka at bootstrap_servers={s.bootstrap_servers!r} (topic {s.topic!r}) "
                f"within {s.metadata_timeout_secs:g}s: {e.args[0] if e.args else e}; check the address "
                f"and that the broker is up"
            )
            raise SpoutError(msg) from None
        t = md.topics.get(s.topic)
        if t is None or (t.error is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            msg = f"Kafka topic {s.topic!r} does not exist at {s.bootstrap_servers!r}; create it first"
            raise SpoutError(msg)
        if t.error is not None:
            msg = (
                f"metadata of Kafka topic {s.topic!r} at {s.bootstrap_servers!r}: {t.error} "
                f"(after {time.monotonic() - t0:.1f}s)"
            )
            raise SpoutError(msg)
        return len(t.partitions)

    def num_partitions(self) -> int:
        """Partitions of the topic now (Kafka never removes partitions, so this never
        decreases; while the broker is unreachable, the last count seen)."""
        try:
            n = self._partition_count()
        except SpoutError as e:
            log.warning("keeping %d partitions of %r: %s", self._known, self.spout.topic, e)
            return self._known
        if n > self._known:
            log.info("Kafka topic %r grew from %d to %d partitions", self.spout.topic, self._known, n)
        self._known = max(self._known, n)
        return self._known

    def watermarks(self, partition: int) -> tuple[int, int] | None:
        """``(low, high)`` of a partition from ListOffsets, or None if the broker does not
        answer in time. ``high`` may be short of the log's end on some brokers: see
        ``high_watermark``."""
        try:
            return self.consumer.get_watermark_offsets(
                TopicPartition(self.spout.topic, partition), timeout=self.spout.metadata_timeout_secs,
                cached=False)
        except KafkaException as e:
            log.warning("no watermarks for %s[%d]: %s", self.spout.topic, partition, e)
            return None

    def high_watermark(self, partition: int, listed: int) -> int:
        """The partition's high watermark as a Fetch response reports it, given ``listed``,
        ListOffsets' answer (a lower bound: Kafka's high watermark never decreases).

        A Fetch from ``listed`` returns the true high watermark in its response (the
        partition-EOF event, or the watermark cached with the first record). Some brokers
        (Tansu) answer ListOffsets with the base offset of the last record batch + 1, short
        of the records in that batch; planning from it would stall them until the next
        produce. The probe is one fetch of at most one record batch, and is skipped while
        ListOffsets' answer has not moved since the last probe (no batch was appended).
        Falls back to ``listed`` when the broker does not answer within 2 s."""
        last = self._probed.get(partition)
        if last is not None and last[0] == listed:
            return max(last[1], listed)
        high = self._probe(partition, listed)
        if high is None:
            return listed
        self._probed[partition] = (listed, high)
        return max(high, listed)

    def _probe(self, partition: int, offset: int) -> int | None:
        s = self.spout
        if self._prober is None:
            cfg = s.consumer_config("coordinator")
            # one record batch per fetch is enough to learn the watermark
            cfg.update({"max.partition.fetch.bytes": 1, "queued.min.messages": 1,
                        "fetch.wait.max.ms": 10})
            self._prober = Consumer(cfg)
        c = self._prober
        tp = TopicPartition(s.topic, partition, offset)
        c.assign([tp])
        deadline = time.monotonic() + min(s.metadata_timeout_secs, 2.0)
        try:
            while (remaining := deadline - time.monotonic()) > 0:
                m = c.poll(min(remaining, 0.5))
                if m is None or m.partition() != partition:
                    continue
                err, off = m.error(), m.offset()
                if err is None and off is not None:
                    # the fetch response's high watermark is cached before its records are queued
                    hw = c.get_watermark_offsets(TopicPartition(s.topic, partition), cached=True)[1]
                    return max(int(hw), off + 1)
                if err is None:
                    continue
                if err.code() == KafkaError._PARTITION_EOF and off is not None:
                    return off
                if err.code() in _OUT_OF_RANGE or err.code() in _GONE or err.fatal():
                    return None
            log.warning("no fetch answer for %s[%d] within 2s: planning from ListOffsets", s.topic, partition)
            return None
        finally:
            c.unassign()

    def initial_meta(self, partition: int, new_partition: bool) -> Meta | None:
        """Where ``partition`` begins when it has no batch yet, as the empty range
        ``{"start": s, "end": s}``: for the partitions present when the topology first
        planned (``new_partition`` False) the ``start`` option (``"earliest"``: the log
        start, ``"latest"``: the high watermark now, ``{partition: offset}``: that offset,
        earliest for partitions not named); for partitions added later, earliest. None
        when the broker does not answer now.

        The engine stores the answer with the coordinator state and asks once per
        partition and topology, so ``"latest"`` is where the topology began, also after a
        driver restart (spouts/base.py, ``PartitionedCoordinator``)."""
        wm = self.watermarks(partition)
        if wm is None:
            return None
        low, high = wm
        start = self.spout.start
        if new_partition or start == "earliest":
            s = low
        elif start == "latest":
            s = self.high_watermark(partition, high)
        else:
            s = cast("dict[int, int]", start).get(partition, low)
        return {"start": s, "end": s}

    def plan_partition(self, partition: int, last_meta: Meta | None) -> Meta | None:
        """``{"start": a, "end": b}`` with ``a`` = where the partition's last batch ended
        (or where ``initial_meta`` placed it) and ``b = min(a + max_records_per_partition,
        high watermark)``; None when the partition has nothing new (or the broker does not
        answer now).

        The engine always passes ``last_meta`` (from ``initial_meta`` for a partition
        without a batch). Called with None directly, the start is ``initial_meta``'s for
        this coordinator's life only (partitions there when it was created count as
        present at the start): nothing durable, not for restarts."""
        if last_meta is None:
            if partition not in self._unplaced:
                first = self.initial_meta(partition, partition >= self._created_with)
                if first is None:
                    return None
                self._unplaced[partition] = first
            last_meta = self._unplaced[partition]
        start = int(last_meta["end"])
        self._capped[partition] = False
        high = self._log_end(partition, start)
        if high is None:
            return None
        if self.end_offsets is not None:
            high = min(high, self.end_offsets.get(partition, start))   # a fixed range (trident verify)
        self._high[partition] = high
        self._done.setdefault(partition, start)
        end = min(start + self.spout.max_records_per_partition, high)
        self._capped[partition] = end < high
        if self._watch is not None:
            self._watch.planned(partition, max(start, end))
        if end <= start:
            return None
        self._planned[partition] = end
        return {"start": start, "end": end}

    def _log_end(self, partition: int, start: int) -> int | None:
        """Where the partition's log ends now, as far as a plan from ``start`` needs it
        (None: the broker does not answer): ListOffsets, corrected by a Fetch probe when it
        may be short (``high_watermark``)."""
        wm = self.watermarks(partition)
        if wm is None:
            return None
        high = wm[1]
        if high < start + self.spout.max_records_per_partition:
            high = self.high_watermark(partition, high)   # the plan reaches the log's end
        return high

    def wake_on_input(self, wake: Callable[[], None] | None) -> None:
        """Wake the driver when a partition has records past its last plan
        (``transactional.engine.wakeup.WakesDriver``): a background consumer long-polls the
        partitions from there (``spouts.kafka.watch``). None stops it. With
        ``reuse_consumer=False`` nothing watches (no consumer stays assigned between plans:
        the driver polls the topic every ``poll_interval_secs``)."""
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        self._wake = wake
        if wake is not None and self.spout.reuse_consumer:
            self._watch = HighWatermarkWatch(self.spout.topic, self.spout.consumer_config("coordinator"), self._woken,
                                             wait_ms=self.spout.watch_wait_ms, limits=self.end_offsets)

    def _woken(self) -> None:
        """The watch saw records past the plans (its thread): wake the driver when no
        planned range is waiting for its commit. While one is, the commit makes the driver
        plan anyway; waking it on every record would launch many small batches at once,
        which on few cores slow each other (measured: docs/performance.md, "Latency: Kafka
        to Redis")."""
        wake = self._wake
        if wake is not None and all(self._done.get(p, end) >= end for p, end in list(self._planned.items())):
            wake()

    def backlogged(self) -> bool:
        """True when the last plan of some partition stopped at ``max_records_per_partition``
        short of its log's end (``transactional.spout.PartitionedCoordinator.backlogged``):
        the engine then plans further batches at once instead of one at a time."""
        return any(self._capped.values())

    @staticmethod
    def planned_records(meta: dict[str, Meta] | None) -> int:
        """How many records a batch's planned metadata (``{"<partition>": {"start", "end"}}``)
        reads: known on the driver before any task runs (a placement that runs small
        batches on the driver can decide from it).

        >>> KafkaCoordinator.planned_records({"0": {"start": 5, "end": 9}, "3": {"start": 0, "end": 1}})
        5
        """
        return sum(int(m["end"]) - int(m["start"]) for m in (meta or {}).values())

    def committed(self, txid: int, meta: dict[str, Meta]) -> None:
        """Write each partition's end offset to Kafka under ``group_id`` (information for
        lag monitors only), asynchronously."""
        for p, m in meta.items():
            self._done[int(p)] = int(m["end"])
        if not self.spout.group_id or not meta:
            return
        offsets = [TopicPartition(self.spout.topic, int(p), int(m["end"])) for p, m in meta.items()]
        try:
            self.consumer.commit(offsets=offsets, asynchronous=True)
            self.consumer.poll(0)  # serve earlier commits' callbacks
        except KafkaException as e:
            log.warning("informational offset commit of txid %d to group %r failed: %s",
                        txid, self.spout.group_id, e)

    def lag(self) -> dict[str, int]:
        """Records not yet committed, per partition (``"<partition>" -> high watermark
        minus the end offset of its last committed batch``), for the driver's metrics
        (``trident_spout_lag``, transactional.ops.webui).

        No I/O: the figures of the last plan and commit, so it may be called from another
        thread at any time. The high watermark is the one seen when the partition was last
        planned (the engine plans while fewer than ``max_spout_pending`` txids are in
        flight, and every ``poll_interval_secs`` while idle); before the first commit of
        this driver a partition counts from where its first batch here started. A partition
        not planned yet is absent."""
        highs, done = dict(self._high), dict(self._done)      # copies: the engine's thread adds partitions
        return {str(p): max(0, high - done.get(p, high)) for p, high in sorted(highs.items())}

    def close(self) -> None:
        """Close the coordinator's consumers (serving pending offset commits first)."""
        if self.spout.group_id:
            try:
                self.consumer.poll(0)
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
        self.wake_on_input(None)
        if self._prober is not None:
            self._prober.close()
            self._prober = None
        self.consumer.close()


