"""The Kafka spouts' driver side: ``KafkaCoordinator`` plans offset ranges from the
partitions' high watermarks (``spouts.kafka``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

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
    partition and at most one fetch for all partitions per plan: ``plan_partitions``), up to ``end_offsets`` when given; while the engine listens
    (``wake_on_input``) it wakes the driver when records arrive. Created by ``get_coordinator``;
    users do not subclass it."""

    def __init__(self, spout: _KafkaSpout, end_offsets: dict[int, int] | None = None, *,
                 consumer_factory: Callable[[dict[str, Any]], Consumer] = Consumer) -> None:
        self.spout = spout
        self.end_offsets = end_offsets
        #: makes the coordinator's consumers from their configuration (a seam: tests count
        #: the requests of a plan through a subclass of ``Consumer``)
        self.consumer_factory = consumer_factory
        self.consumer = consumer_factory(spout.consumer_config("coordinator"))
        self._unplaced: dict[int, Meta] = {}   # plan_partition(p, None) outside the engine
        self._high: dict[int, int] = {}        # partition -> high watermark at its last plan (lag)
        self._done: dict[int, int] = {}        # partition -> end of its last committed batch (lag)
        # partition -> (ListOffsets answer, the Fetch high watermark probed for it)
        self._probed: dict[int, tuple[int, int]] = {}
        self._prober: Consumer | None = None
        self._watch: HighWatermarkWatch | None = None   # while the engine listens (wake_on_input)
        self._wake: Callable[[], None] | None = None
        self._planned: dict[int, int] = {}     # partition -> end of its last planned range
        self._round: dict[int, int | None] | None = None   # log ends asked by plan_partitions, while it plans
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
        ListOffsets' answer (a lower bound: Kafka's high watermark never decreases): one
        partition of ``high_watermarks``."""
        return self.high_watermarks({partition: listed})[partition]

    def high_watermarks(self, listed: dict[int, int]) -> dict[int, int]:
        """Each partition's high watermark as a Fetch response reports it, given ``listed``
        (partition -> ListOffsets' answer, a lower bound: Kafka's high watermark never
        decreases), from ONE fetch round for all of them.

        A Fetch from ``listed`` returns the true high watermark in its response (the
        partition-EOF event, or the watermark cached with the first record). Some brokers
        (Tansu) answer ListOffsets with the base offset of the last record batch + 1, short
        of the records in that batch; planning from it would stall them until the next
        produce. The probe assigns every partition that needs it to one consumer at once
        (one Fetch request for all, at most one record batch each) and is skipped for a
        partition while ListOffsets' answer has not moved since its last probe (no batch
        was appended). A partition the broker does not answer for within 2 s keeps
        ``listed``."""
        out: dict[int, int] = {}
        ask: dict[int, int] = {}
        for p, low in listed.items():
            last = self._probed.get(p)
            if last is not None and last[0] == low:
                out[p] = max(last[1], low)
            else:
                ask[p] = low
        if ask:
            found = self._probe(ask)
            for p, low in ask.items():
                high = found.get(p)
                if high is not None:
                    self._probed[p] = (low, high)
                out[p] = low if high is None else max(high, low)
        return out

    def _prober_consumer(self) -> Consumer:
        if self._prober is None:
            cfg = self.spout.consumer_config("coordinator")
            # one record batch per partition and fetch is enough to learn the watermark
            cfg.update({"max.partition.fetch.bytes": 1, "queued.min.messages": 1,
                        "fetch.wait.max.ms": 10})
            self._prober = self.consumer_factory(cfg)
        return self._prober

    def _probe(self, offsets: dict[int, int]) -> dict[int, int]:
        """One fetch round: every partition of ``offsets`` assigned at its offset to one
        consumer, polled until each answered (a record or the partition-EOF event) or 2 s
        passed; partition -> the high watermark its Fetch response reported (absent: no
        answer)."""
        s = self.spout
        c = self._prober_consumer()
        c.incremental_assign([TopicPartition(s.topic, p, o) for p, o in offsets.items()])
        want: set[int] = set(offsets)
        out: dict[int, int] = {}
        deadline = time.monotonic() + min(s.metadata_timeout_secs, 2.0)
        try:
            while want and (remaining := deadline - time.monotonic()) > 0:
                m = c.poll(min(remaining, 0.5))
                p = None if m is None else m.partition()
                if p is None or p not in want:
                    continue
                high = self._answer(c, m)
                if high is not None:
                    want.discard(p)
                    # fetch no more of it: the broker's answers go to the partitions still asked
                    c.incremental_unassign([TopicPartition(s.topic, p)])
                    if high >= 0:
                        out[p] = high
            if want:
                log.warning("no fetch answer for %s%s within 2s: planning from ListOffsets", s.topic, sorted(want))
            return out
        finally:
            c.unassign()

    def _answer(self, c: Consumer, m: Any) -> int | None:
        """What one polled event says of its partition's high watermark: the watermark
        (>= 0), -1 when the partition cannot be probed (out of range, gone, fatal), None
        when it says nothing yet."""
        p, err, off = m.partition(), m.error(), m.offset()
        if err is None and off is not None:
            # the fetch response's high watermark is cached before its records are queued
            hw = c.get_watermark_offsets(TopicPartition(self.spout.topic, p), cached=True)[1]
            return max(int(hw), int(off) + 1)
        if err is None:
            return None
        if err.code() == KafkaError._PARTITION_EOF and off is not None:
            return int(off)
        if err.code() in _OUT_OF_RANGE or err.code() in _GONE or err.fatal():
            return -1
        return None

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
        without a batch), through ``plan_partitions``. Called with None directly, the start
        is ``initial_meta``'s for this coordinator's life only (partitions there when it
        was created count as present at the start): nothing durable, not for restarts."""
        start = self._start(partition, last_meta)
        if start is None:
            return None
        self._capped[partition] = False
        ends = self._round
        high = ends[partition] if ends is not None and partition in ends else self._log_ends({partition: start})[partition]
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

    def plan_partitions(self, last_metas: dict[int, Meta | None]) -> dict[int, Meta | None]:
        """Every partition's ``plan_partition`` answer, with the broker asked in one round:
        one ListOffsets per partition (a small request each) and, for the partitions whose
        plan reaches the log's end and whose answer moved, ONE fetch for all of them
        (``high_watermarks``), instead of a fetch per partition (docs/kafka.md, "Planning
        and waking the driver")."""
        starts = {p: self._start(p, last) for p, last in last_metas.items()}
        self._round = self._log_ends({p: s for p, s in starts.items() if s is not None})
        try:
            return {p: self.plan_partition(p, last) for p, last in last_metas.items()}
        finally:
            self._round = None

    def _start(self, partition: int, last_meta: Meta | None) -> int | None:
        """Where the partition's next batch starts (None: cannot be placed now)."""
        if last_meta is None:
            if partition not in self._unplaced:
                first = self.initial_meta(partition, partition >= self._created_with)
                if first is None:
                    return None
                self._unplaced[partition] = first
            last_meta = self._unplaced[partition]
        return int(last_meta["end"])

    def _log_ends(self, starts: dict[int, int]) -> dict[int, int | None]:
        """Where each partition's log ends now, as far as a plan from its start needs it
        (None: the broker does not answer): ListOffsets, corrected by one fetch round for
        the partitions where it may be short (``high_watermarks``). A partition whose
        fixed end offset (``end_offsets``) is at or before its start is not asked."""
        limits, cap = self.end_offsets, self.spout.max_records_per_partition
        out: dict[int, int | None] = {}
        short: dict[int, int] = {}
        for p, start in starts.items():
            if limits is not None and limits.get(p, start) <= start:
                out[p] = start                 # nothing more is planned there
                continue
            wm = self.watermarks(p)
            out[p] = None if wm is None else wm[1]
            if wm is not None and wm[1] < start + cap:
                short[p] = wm[1]               # the plan reaches the log's end
        if short:
            out.update(self.high_watermarks(short))
        return out

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


