"""The Kafka spouts' emitter (Spark task side): reads exactly the planned offset ranges of
one or several partitions with one ``assign`` (each partition at its start offset) and one
round of fetches, and tells a range that is gone (``SpoutError``) from one that is not
readable now (opaque: emit less; transactional: retry the batch), partition by partition."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from transactional.extras import missing_extra

try:
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
except ModuleNotFoundError as e:
    raise missing_extra(e, "spouts.kafka (the Kafka spouts)") from None

from spouts.base import EmitCollector, Meta, PartitionedEmitter
from spouts.kafka.columns import Records, Scheme
from transactional.exceptions import FailedException, SpoutError
from transactional.tuples import TransactionAttempt

if TYPE_CHECKING:
    from spouts.kafka import _KafkaSpout

log = logging.getLogger("trident.kafka")

_GONE = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC}
_OUT_OF_RANGE = {KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET}
_FAULT = "fetch fault injected"
#: a partition that delivered nothing this long is asked whether its range is gone
_QUIET_SECS = 0.5


class _Range:
    """One partition's planned range in a read, and where its read stands: ``pos`` the next
    offset wanted, ``limit`` where the fault seam cut it (else ``end``), ``why`` the read may
    stop short, ``got`` the messages kept, ``error`` the exception the range ended with
    (raised when the partition is emitted)."""

    __slots__ = ("partition", "start", "end", "limit", "pos", "why", "got", "done", "error", "heard")

    def __init__(self, partition: int, start: int, end: int) -> None:
        self.partition, self.start, self.end = partition, start, end
        self.limit, self.pos, self.why = end, start, ""
        self.got: list[Any] = []
        self.done = end <= start
        self.error: BaseException | None = None
        self.heard = 0.0

    def stop(self, pos: int, why: str) -> None:
        self.pos, self.why, self.done = pos, why, True


class KafkaEmitter(PartitionedEmitter):
    """Reads planned offset ranges with assign + seek, in Spark tasks. Created by
    ``get_emitter``; users do not subclass it."""

    def __init__(self, spout: _KafkaSpout) -> None:
        self.spout = spout
        self.consumer: Consumer | None = None
        self._scheme = Scheme(spout.deserializer, spout.json_fields)
        self._key_scheme = Scheme(spout.key_deserializer, None)
        self._names = spout.output_names()
        #: partitions this consumer paused and has not resumed yet
        self._still_paused: set[int] = set()
        #: one read at a time: the driver's in-process runs may share an emitter between the
        #: threads of batches in flight, and a read owns the consumer's assignment
        self._lock = threading.RLock()

    def _consumer(self) -> Consumer:
        if self.consumer is None:
            self.consumer = Consumer(self.spout.consumer_config("emitter"))
        return self.consumer

    def emit_partition_batch(self, tx: TransactionAttempt, collector: EmitCollector,
                             partition: int, meta: Meta) -> Meta | None:
        """Emit the records of ``partition`` at offsets ``[meta["start"], meta["end"])``:
        as one Arrow record batch when every consumer takes columns and the scheme has an
        Arrow type (``spouts.kafka.columns``), else each as ``(tx, *fields)``.
        Transactional: all of them or an exception; returns None. Opaque: returns
        ``{"start", "end"}`` of what was emitted."""
        return self.fetch_partitions(tx, {partition: meta})[partition](collector)

    def fetch_partitions(self, tx: TransactionAttempt,
                         metas: Mapping[int, Meta]) -> dict[int, Callable[[EmitCollector], Meta | None]]:
        """Read the planned ranges of every partition in ``metas`` together: one ``assign``
        of them all at their start offsets, fetched until each reaches its end (the engine's
        optional ``fetch_partitions`` capability, ``transactional.spout.PartitionedEmitter``).
        Returns partition -> a function that emits that partition's records to a collector
        exactly as ``emit_partition_batch`` does (same records, order, result, exceptions:
        a range that is gone or short fails that partition only)."""
        ranges = {int(p): _Range(int(p), int(m["start"]), int(m["end"])) for p, m in metas.items()}
        with self._lock:
            try:
                self._read(tx, ranges)
            finally:
                if not self.spout.reuse_consumer:
                    self.close()
        return {p: functools.partial(self._finish, tx, r) for p, r in ranges.items()}

    def _finish(self, tx: TransactionAttempt, r: _Range, collector: EmitCollector) -> Meta | None:
        """Emit what was read of ``r`` (or raise why it cannot be): a partition's part of
        ``fetch_partitions``."""
        if r.error is not None:
            raise r.error
        if r.pos < r.end:
            with self._lock:
                self._short(tx, r.partition, r.start, r.end, r.pos, r.why)
        got, r.got = r.got, []
        if got:
            self._emit(tx, collector, r.partition, got)
        return {"start": r.start, "end": r.pos} if self.spout.opaque else None

    def _emit(self, tx: TransactionAttempt, collector: EmitCollector, partition: int, got: list[Any]) -> None:
        """The read messages, as one record batch or as tuples; bad records by the policy."""
        s = self.spout
        rec = Records(s.topic, partition, tx.txid, s.fields, self._scheme, self._key_scheme, s.bad_records_stream)
        columnar = getattr(collector, "columnar", None)
        batch = None
        if self._scheme.columnar and columnar is not None and columnar("default"):
            batch = rec.record_batch(got, self._names)
        if batch is not None:
            if batch.num_rows:
                collector.emit_columns(batch)  # type: ignore[attr-defined]
        else:
            rec.bad.clear()
            rec.emit_rows(tx, collector.emit, got)
        if s.bad_records_stream is not None:
            for bad in rec.bad:
                collector.emit((tx, *bad), s.bad_records_stream)

    # Reading: 1. ask the fault seam for each range; 2. assign every range left at its start;
    # 3. consume until each range reached its end offset, its partition's EOF at or past it, a
    # definite error, or the fetch deadline; 4. unassign.
    def _read(self, tx: TransactionAttempt, ranges: dict[int, _Range]) -> None:
        s = self.spout
        for r in ranges.values():
            # Step 1. the fault-injection seam: unfetchable from `limit` on.
            if not r.done and s.fetch_fault is not None:
                f = s.fetch_fault(tx, r.partition, r.start, r.end)
                if f is not None:
                    r.limit = max(r.start, min(r.end, int(f)))
                    if r.limit <= r.start:
                        r.stop(r.start, _FAULT)
        todo = {p: r for p, r in ranges.items() if not r.done}
        if not todo:
            return
        # Step 2. assign at the start offsets: no group membership, no committed offsets.
        c = self._consumer()
        self._assign(c, [TopicPartition(s.topic, p, r.start) for p, r in todo.items()])
        if self._still_paused & todo.keys():    # not resumed after an earlier read
            self._pause(c, sorted(self._still_paused & todo.keys()), resume=True)
        paused: list[int] = []
        try:
            # Step 3. consume the ranges.
            self._consume(c, tx, todo, paused)
        finally:
            # Step 4. leave nothing assigned (buffered messages are dropped) and nothing
            # paused (librdkafka keeps a partition paused across assignments)
            if paused:
                self._pause(c, paused, resume=True)
            c.unassign()

    def _assign(self, c: Consumer, partitions: list[Any]) -> None:
        """Assign ``partitions`` (TopicPartitions at their start offsets) to ``c``: one call per read."""
        c.assign(partitions)

    def _consume(self, c: Consumer, tx: TransactionAttempt, todo: dict[int, _Range], paused: list[int]) -> None:
        """Step 3 of ``_read``: keep each range's records from its start below its limit;
        each range ends where its read stopped and why (empty: it did not stop short). A
        partition whose range is read while others still are is paused (listed in ``paused``)."""
        s = self.spout
        start = time.monotonic()
        deadline = start + s.fetch_timeout_secs
        for r in todo.values():
            r.heard = start
        active = dict(todo)
        while active:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                for r in active.values():
                    r.stop(r.pos, f"not fetched within fetch_timeout_secs={s.fetch_timeout_secs:g}")
                return
            want = sum(r.limit - r.pos for r in active.values())
            msgs = c.consume(min(want, 10_000), min(remaining, 0.5))
            self._take(msgs, tx, active)
            # nothing for a while: a range that is gone need not wait for the deadline
            self._quiet(tx, active, not msgs)
            finished = [p for p, r in active.items() if r.done]
            for p in finished:
                del active[p]
            if finished and active:
                self._pause(c, finished)
                paused.extend(finished)
        for r in todo.values():
            if r.error is None and r.pos < r.end and r.limit < r.end and not r.why:
                r.why = _FAULT

    def _pause(self, c: Consumer, partitions: list[int], resume: bool = False) -> None:
        """Stop fetching the partitions whose ranges are read while others still are (or,
        ``resume``, undo that before they are unassigned)."""
        tps = [TopicPartition(self.spout.topic, p) for p in partitions]
        try:
            if resume:
                c.resume(tps)
                self._still_paused.difference_update(partitions)
            else:
                self._still_paused.update(partitions)
                c.pause(tps)
        except KafkaException as e:   # a pause only saves fetches; a resume is tried again at the next read
            log.debug("%s %s %s: %s", "resuming" if resume else "pausing", self.spout.topic, partitions, e)

    def _quiet(self, tx: TransactionAttempt, active: dict[int, _Range], nothing: bool) -> None:
        """Ask the watermarks about the ranges that heard nothing (``nothing``: no message at
        all came in the last consume) for ``_QUIET_SECS``: a range that is gone ends with its
        ``SpoutError``."""
        now = time.monotonic()
        for r in active.values():
            if r.done or not (nothing or now - r.heard >= _QUIET_SECS):
                continue
            r.heard = now
            try:
                self._check_gone(tx, r.partition, r.start, r.end, r.pos)
            except SpoutError as e:
                r.error, r.done = e, True

    def _take(self, msgs: list[Any], tx: TransactionAttempt, active: dict[int, _Range]) -> None:
        """Keep the records among ``msgs`` (one ``consume``) that each range wants, from its
        position below its limit (the per-record hot path: records come in runs of one
        partition, so the range is looked up once a run)."""
        now = time.monotonic()
        part: int | None = None
        r: _Range | None = None
        for m in msgs:
            if m.error() is not None:
                self._take_event(m, tx, active, now)
                continue
            p = m.partition()
            if p != part:
                part, r = p, active.get(p)
                if r is not None:
                    r.heard = now
            if r is None or r.done:
                continue
            off = m.offset()
            if off < r.pos:
                continue
            if off >= r.limit:
                r.pos, r.done = r.limit, True
                continue
            r.got.append(m)
            r.pos = off + 1
            if r.pos >= r.limit:
                r.done = True

    def _take_event(self, m: Any, tx: TransactionAttempt, active: dict[int, _Range], now: float) -> None:
        """An event among the messages: for its partition's range, or, without a partition
        of ours, for every range."""
        r = active.get(m.partition()) if m.topic() == self.spout.topic else None
        for each in (r,) if r is not None else tuple(active.values()):
            if each.done:
                continue
            each.heard = now
            try:
                self._event(m.error(), m, tx, each)
            except SpoutError as e:
                each.error, each.done = e, True

    def _event(self, err: Any, m: Any, tx: TransactionAttempt, r: _Range) -> None:
        """An event of the consumer in place of a record: the partition's end (the range
        stops there), a range that is gone or a fatal error (raised), or a retriable error
        (kept as why; the read goes on)."""
        s = self.spout
        code = err.code()
        if code == KafkaError._PARTITION_EOF:
            # every record below the high watermark m.offset() was delivered
            hw = m.offset()
            if hw is not None and hw >= r.limit:
                r.pos, r.done = r.limit, True
            elif hw is not None and hw < r.end:
                r.stop(max(r.pos, hw) if s.opaque else r.pos, f"the partition ends at offset {hw}")
            return
        if code in _OUT_OF_RANGE:
            self._gone(tx, r.partition, r.start, r.end, f"offset out of range ({err.str()})")
        if code in _GONE:
            self._gone(tx, r.partition, r.start, r.end, f"the partition is gone ({err.str()})")
        if err.fatal():
            msg = f"Kafka client error reading {s.topic}[{r.partition}] in txid {tx.txid}: {err.str()}"
            raise SpoutError(msg)
        r.why = err.str()  # retriable (transport, leader change ...): keep trying

    def _check_gone(self, tx: TransactionAttempt, partition: int, start: int, end: int, pos: int) -> None:
        """Raise SpoutError if the watermarks say offsets from ``pos`` to ``end`` are gone
        (below the log start; or, transactional, above the log end)."""
        tp = TopicPartition(self.spout.topic, partition)
        try:
            low, high = self._consumer().get_watermark_offsets(
                tp, timeout=min(self.spout.metadata_timeout_secs, 2.0), cached=False)
            # ListOffsets may answer short (docs/kafka.md): the fetches' watermark counts too
            high = max(high, self._consumer().get_watermark_offsets(tp, cached=True)[1])
        except KafkaException as e:
            if e.args and e.args[0].code() in _GONE and self._partition_missing(partition):
                self._gone(tx, partition, start, end, "the topic or partition no longer exists")
            return  # the broker does not answer: unavailable, not gone
        if low > pos:
            self._gone(tx, partition, start, end, f"the log now starts at offset {low} (retention)")
        if high < end and not self.spout.opaque:
            self._gone(tx, partition, start, end, f"the partition ends at offset {high}")

    def _partition_missing(self, partition: int) -> bool:
        """True if fresh metadata from the broker lacks the topic or the partition."""
        try:
            md = self._consumer().list_topics(self.spout.topic, timeout=min(self.spout.metadata_timeout_secs, 2.0))
        except KafkaException:
            return False
        t = md.topics.get(self.spout.topic)
        if t is None or (t.error is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            return True
        return t.error is None and partition not in t.partitions

    def _short(self, tx: TransactionAttempt, partition: int, start: int, end: int, pos: int, why: str) -> None:
        """The read stopped at ``pos`` before ``end``: decide whether the range is gone
        (SpoutError), or unavailable now (opaque: fine; transactional: fail the batch)."""
        s = self.spout
        if why != "fetch fault injected":
            self._check_gone(tx, partition, start, end, pos)
        if s.opaque:
            log.warning("%s[%d] txid %d: emitted offsets %d..%d of %d..%d (%s); the rest follows in "
                        "later batches", s.topic, partition, tx.txid, start, pos, start, end, why)
            return
        msg = (
            f"Kafka topic {s.topic!r} partition {partition}: offsets {start}..{end - 1} "
            f"of txid {tx.txid} read only up to {pos} ({why}); the batch is retried"
        )
        raise FailedException(msg)

    def _gone(self, tx: TransactionAttempt, partition: int, start: int, end: int, why: str) -> None:
        msg = (
            f"Kafka topic {self.spout.topic!r} partition {partition}: offsets {start}..{end - 1} "
            f"of txid {tx.txid} can no longer be read: {why}. The batch cannot be replayed "
            f"exactly; restore the data or start a new topology id"
        )
        raise SpoutError(msg)

    def close(self) -> None:
        """Close the consumer, if one is open."""
        with self._lock:
            if self.consumer is not None:
                c, self.consumer = self.consumer, None
                self._still_paused.clear()
                c.close()
