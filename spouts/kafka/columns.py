"""Kafka records as values: the schemes that decode a record's value, the one bad-record
policy, and a partition fetch as one Arrow record batch (docs/kafka.md, "Columns and
schemes").

The Kafka emitters read a planned range into a list of confluent-kafka ``Message``-s and
hand it here. For consumers that take rows, ``rows`` decodes each record into its tuple of
values; for consumers that take columns (Trident's stages in the emitter's own task),
``record_batch`` builds one ``pyarrow.RecordBatch`` of the whole fetch: a column per field
(``key``, ``value``, ``partition``, ``offset``, ``timestamp``, ``topic``), the value
decoded by Arrow kernels (``bytes``: binary; ``utf-8``: a validating cast to string) or,
for ``json`` with ``json_fields``, one column per declared field. No tuple is built per
record.

A *bad record* is one the scheme cannot decode: bytes that are not UTF-8 (``utf-8``),
text that is not JSON, JSON that is not an object or lacks a declared field (``json``
with ``json_fields``). Both paths find the same records bad and treat them the same way:
with ``bad_records_stream=None`` (the default) the batch stops with ``BadRecordError``
naming topic, partition, offset and what is wrong; with a stream name, each bad record is
emitted on that stream as ``(tx, topic, partition, offset, key, value, error)`` (raw
bytes) and the batch goes on without it. Decoding is deterministic, so a replay of a
txid finds the same bad records.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from spouts.kafka.records import record_values
from transactional.exceptions import SpoutError

try:  # orjson parses several times faster; json is the fallback with the same results
    import orjson as _orjson

    _loads: Callable[[bytes], Any] = _orjson.loads
    _JSON_ERRORS: tuple[type[Exception], ...] = (_orjson.JSONDecodeError, ValueError)
except ImportError:  # pragma: no cover - orjson is in the redis-fast and test extras
    _loads = json.loads
    _JSON_ERRORS = (ValueError,)

__all__ = ["BAD_RECORD_FIELDS", "BadRecordError", "Scheme"]

#: The fields of a bad record on ``bad_records_stream``, after the attempt.
BAD_RECORD_FIELDS = ("topic", "partition", "offset", "key", "value", "error")


class BadRecordError(SpoutError):
    """A record the spout's scheme cannot decode, with ``bad_records_stream`` unset."""


class _Bad(Exception):
    """Why one record cannot be decoded (internal: becomes a BadRecordError or a bad tuple)."""


class Scheme:
    """How a record's value becomes field values: ``deserializer`` (``"bytes"``,
    ``"utf-8"``, ``"json"`` or a callable) and, for ``"json"``, ``json_fields``: the
    names of the object's fields emitted in place of ``value`` (each record must be a
    JSON object holding them all)."""

    def __init__(self, deserializer: str | Callable[[bytes | None], Any], json_fields: Sequence[str] | None) -> None:
        self.kind = deserializer if isinstance(deserializer, str) else "callable"
        if self.kind in ("utf8", "str"):
            self.kind = "utf-8"
        self.fn = deserializer if callable(deserializer) else None
        self.json_fields = tuple(json_fields) if json_fields is not None else None

    @property
    def columnar(self) -> bool:
        """True when the values have an Arrow type the scheme knows: raw bytes, UTF-8
        text, declared JSON fields. ``json`` without fields and callables give arbitrary
        Python values: their batches go as rows."""
        return self.kind in ("bytes", "utf-8") or (self.kind == "json" and self.json_fields is not None)

    def value_names(self) -> tuple[str, ...] | None:
        """The field names ``value`` expands to (``json_fields``), or None (one field)."""
        return self.json_fields

    # -- one record ------------------------------------------------------------------------------
    def decode(self, b: bytes | None) -> Any:
        """The value of one record (a tuple of the fields' values for ``json_fields``);
        raises ``_Bad`` for a bad record."""
        if self.kind == "bytes":
            return b
        if self.kind == "callable":
            assert self.fn is not None
            return self.fn(b)
        if b is None:
            if self.json_fields is not None:
                msg = "no value (a tombstone), but json_fields are declared"
                raise _Bad(msg)
            return None
        if self.kind == "utf-8":
            try:
                return b.decode("utf-8")
            except UnicodeDecodeError as e:
                msg = f"the value is not UTF-8 ({e.reason} at byte {e.start})"
                raise _Bad(msg) from None
        return self._decode_json(b)

    def _decode_json(self, b: bytes) -> Any:
        try:
            v = _loads(b)
        except _JSON_ERRORS as e:
            msg = f"the value is not JSON ({e})"
            raise _Bad(msg) from None
        if self.json_fields is None:
            return v
        if type(v) is not dict:
            msg = f"the value is JSON {type(v).__name__}, not an object with fields {list(self.json_fields)}"
            raise _Bad(msg)
        try:
            return tuple(v[f] for f in self.json_fields)
        except KeyError as e:
            msg = f"the JSON object has no field {e.args[0]!r} (json_fields {list(self.json_fields)})"
            raise _Bad(msg) from None


class Records:
    """Turns the messages of one partition fetch into what the emitter emits, applying the
    bad-record policy. Made per read by the emitter."""

    def __init__(self, topic: str, partition: int, txid: int, fields: Sequence[str], scheme: Scheme,
                 key_of: Scheme, bad_stream: str | None) -> None:
        self.topic, self.partition, self.txid = topic, partition, txid
        self.fields, self.scheme, self.key_of, self.bad_stream = tuple(fields), scheme, key_of, bad_stream
        self.bad: list[tuple[Any, ...]] = []             # (topic, partition, offset, key, value, error)

    def _bad(self, m: Any, why: str) -> None:
        if self.bad_stream is None:
            msg = (f"Kafka topic {self.topic!r} partition {self.partition} offset {m.offset()} (txid {self.txid}): "
                   f"{why}. Fix the producer, or have the spout route bad records to a stream "
                   f"(bad_records_stream='bad-records') instead of stopping")
            raise BadRecordError(msg)
        self.bad.append((self.topic, self.partition, m.offset(), m.key(), m.value(), why))

    def emit_rows(self, tx: Any, emit: Callable[[tuple[Any, ...]], None], msgs: Sequence[Any]) -> None:
        """Emit ``(tx, *values)`` for each of ``msgs``, bad records left out."""
        decode, fields, key_of = self.scheme.decode, self.fields, self.key_of.decode
        expand = self.scheme.json_fields is not None
        if fields == ("value",) and not expand:
            for m in msgs:
                try:
                    v = decode(m.value())
                except _Bad as e:
                    self._bad(m, str(e))
                    continue
                emit((tx, v))
            return
        head = (tx,)
        for m in msgs:
            try:
                row = record_values(m, fields, key_of, decode, expand=expand, head=head)
            except _Bad as e:
                self._bad(m, str(e))
                continue
            emit(row)

    def record_batch(self, msgs: Sequence[Any], names: Sequence[str]) -> Any:
        """One ``pyarrow.RecordBatch`` of ``msgs`` with columns ``names`` (the fields, with
        ``value`` expanded to ``json_fields``), bad records left out; None when the
        decoded values have no common Arrow type (JSON fields of mixed kinds): emit rows."""
        import pyarrow as pa

        values = [m.value() for m in msgs]
        keyed = "key" in self.fields
        keys = [m.key() for m in msgs] if keyed else []
        try:
            value_cols = self._value_columns(self.scheme, values)
            key_col = self._value_columns(self.key_of, keys) if keyed else [None]
            if value_cols is None or key_col is None:   # a bad record among them: keep the good
                msgs = self._good(msgs, keyed)
                values = [m.value() for m in msgs]
                keys = [m.key() for m in msgs] if keyed else []
                value_cols = self._value_columns(self.scheme, values)
                key_col = self._value_columns(self.key_of, keys) if keyed else [None]
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return None
        assert value_cols is not None and key_col is not None
        return pa.RecordBatch.from_arrays(self._columns(msgs, value_cols, key_col[0]), names=list(names))

    def _good(self, msgs: Sequence[Any], keyed: bool) -> list[Any]:
        """``msgs`` without the bad records (which go by the policy)."""
        good = []
        for m in msgs:
            try:
                self.scheme.decode(m.value())
                if keyed:
                    self.key_of.decode(m.key())
            except _Bad as e:
                self._bad(m, str(e))
                continue
            good.append(m)
        return good

    def _columns(self, msgs: Sequence[Any], value_cols: list[Any], key_col: Any) -> list[Any]:
        """The columns of the fields, in order."""
        import pyarrow as pa

        cols: list[Any] = []
        n = len(msgs)
        for f in self.fields:
            if f == "value":
                cols.extend(value_cols)
            elif f == "key":
                cols.append(key_col)
            elif f == "offset":
                cols.append(pa.array([m.offset() for m in msgs], pa.int64()))
            elif f == "timestamp":
                cols.append(pa.array([m.timestamp()[1] for m in msgs], pa.int64()))
            elif f == "partition":
                cols.append(pa.array([self.partition] * n, pa.int32()))
            else:  # topic
                cols.append(pa.array([self.topic] * n, pa.string()))
        return cols

    @staticmethod
    def _value_columns(s: Scheme, values: list[bytes | None]) -> list[Any] | None:
        """The column(s) of ``values`` decoded by ``s``; None when a record is bad. Raises
        ``ArrowInvalid``/``ArrowTypeError`` for values of no common Arrow type."""
        import pyarrow as pa

        if s.kind == "bytes":
            return [pa.array(values, pa.binary())]
        if s.kind == "utf-8":
            try:
                return [pa.array(values, pa.binary()).cast(pa.string())]   # validates UTF-8 in C
            except pa.ArrowInvalid:
                return None
        if s.kind == "callable" or s.json_fields is None:
            return [pa.array([s.decode(b) for b in values])]
        try:
            objs = [_loads(b) for b in values]   # type: ignore[arg-type]
        except (*_JSON_ERRORS, TypeError):  # type: ignore[misc]
            return None
        if not all(type(o) is dict for o in objs):
            return None
        try:
            return [pa.array([o[f] for o in objs]) for f in s.json_fields]
        except KeyError:
            return None
