"""The Kafka spouts' emitter (Spark task side): reads exactly a planned offset range of
one partition with ``assign`` + ``seek``, and tells a range that is gone (``SpoutError``)
from one that is not readable now (opaque: emit less; transactional: retry the batch)."""

from __future__ import annotations

import logging
import time
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


class KafkaEmitter(PartitionedEmitter):
    """Reads planned offset ranges with assign + seek, in Spark tasks. Created by
    ``get_emitter``; users do not subclass it."""

    def __init__(self, spout: _KafkaSpout) -> None:
        self.spout = spout
        self.consumer: Consumer | None = None
        self._scheme = Scheme(spout.deserializer, spout.json_fields)
        self._key_scheme = Scheme(spout.key_deserializer, None)
        self._names = spout.output_names()

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
        start, end = int(meta["start"]), int(meta["end"])
        got: list[Any] = []
        try:
            pos, why = self._read(tx, got, partition, start, end)
        finally:
            if not self.spout.reuse_consumer:
                self.close()
        if pos < end:
            self._short(tx, partition, start, end, pos, why)
        if got:
            self._emit(tx, collector, partition, got)
        return {"start": start, "end": pos} if self.spout.opaque else None

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

    # Reading: 1. ask the fault seam; 2. assign at start; 3. consume until the end offset,
    # the partition EOF at or past it, a definite error, or the fetch deadline; 4. unassign.
    def _read(self, tx: TransactionAttempt, got: list[Any], partition: int,
              start: int, end: int) -> tuple[int, str]:
        if end <= start:
            return end, ""
        s = self.spout
        # Step 1. the fault-injection seam: unfetchable from `limit` on.
        limit = end
        if s.fetch_fault is not None:
            f = s.fetch_fault(tx, partition, start, end)
            if f is not None:
                limit = max(start, min(end, int(f)))
        if limit <= start:
            return start, "fetch fault injected"
        # Step 2. assign at the start offset: no group membership, no committed offsets.
        c = self._consumer()
        c.assign([TopicPartition(s.topic, partition, start)])
        try:
            # Step 3. consume the range.
            return self._consume(c, tx, got, partition, start, end, limit)
        finally:
            # Step 4. leave nothing assigned (buffered messages are dropped).
            c.unassign()

    def _consume(self, c: Consumer, tx: TransactionAttempt, got: list[Any], partition: int,
                 start: int, end: int, limit: int) -> tuple[int, str]:
        """Step 3 of ``_read``: emit the records from ``start`` below ``limit``; returns where
        the read stopped and why (empty: it did not stop short)."""
        s = self.spout
        pos, why = start, ""
        deadline = time.monotonic() + s.fetch_timeout_secs
        while pos < limit:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return pos, f"not fetched within fetch_timeout_secs={s.fetch_timeout_secs:g}"
            msgs = c.consume(min(limit - pos, 10_000), min(remaining, 0.5))
            if not msgs:
                # nothing for a while: a range that is gone need not wait for the deadline
                self._check_gone(tx, partition, start, end, pos)
            pos, why, ended = self._take(msgs, tx, got, partition, start, end, limit, pos, why)
            if ended:
                return pos, why
        if pos < end and limit < end and not why:
            why = "fetch fault injected"
        return pos, why

    def _take(self, msgs: list[Any], tx: TransactionAttempt, got: list[Any], partition: int,
              start: int, end: int, limit: int, pos: int, why: str) -> tuple[int, str, bool]:
        """Keep the records among ``msgs`` (one ``consume``) from ``pos`` below ``limit``;
        returns the new position, why the read may stop short, and whether the partition
        ended below ``end`` (the read stops there)."""
        keep = got.append
        for m in msgs:
            err = m.error()
            if err is not None:
                pos, why, ended = self._event(err, m, tx, partition, start, end, limit, pos, why)
                if ended:
                    return pos, why, True
                continue
            off = m.offset()
            if off is None or off < pos:
                continue
            if off >= limit:
                return limit, why, False
            keep(m)
            pos = off + 1
        return pos, why, False

    def _event(self, err: Any, m: Any, tx: TransactionAttempt, partition: int, start: int, end: int, limit: int,
               pos: int, why: str) -> tuple[int, str, bool]:
        """An event of the consumer in place of a record: the partition's end (returns the
        position, why, and whether the read stops there), a range that is gone or a fatal
        error (raised), or a retriable error (kept as why; the read goes on)."""
        s = self.spout
        code = err.code()
        if code == KafkaError._PARTITION_EOF:
            # every record below the high watermark m.offset() was delivered
            hw = m.offset()
            if hw is not None and hw >= limit:
                return limit, why, False
            if hw is not None and hw < end:
                return (max(pos, hw) if s.opaque else pos), f"the partition ends at offset {hw}", True
            return pos, why, False
        if code in _OUT_OF_RANGE:
            self._gone(tx, partition, start, end, f"offset out of range ({err.str()})")
        if code in _GONE:
            self._gone(tx, partition, start, end, f"the partition is gone ({err.str()})")
        if err.fatal():
            msg = f"Kafka client error reading {s.topic}[{partition}] in txid {tx.txid}: {err.str()}"
            raise SpoutError(msg)
        return pos, err.str(), False  # retriable (transport, leader change ...): keep trying

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
        if self.consumer is not None:
            c, self.consumer = self.consumer, None
            c.close()
