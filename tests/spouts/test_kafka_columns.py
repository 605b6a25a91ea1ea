"""The Kafka spouts' columnar path (issue 27): a partition fetch becomes one Arrow record
batch when the consumer takes columns, with the same values as the row path, and bad
records follow one policy on both paths (stop naming topic, partition and offset, or a
named stream)."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from spouts.kafka import BadRecordError, KafkaTransactionalSpout, OpaqueKafkaTransactionalSpout
from transactional.exceptions import ConfigError
from transactional.tuples import Fields, TransactionAttempt

pytestmark = pytest.mark.integration

TX = TransactionAttempt(4, 1)


class Rows:
    """A collector whose consumers take rows."""

    def __init__(self) -> None:
        self.out: dict[str, list[tuple]] = {}

    def emit(self, values: tuple, stream: str = "default") -> None:
        self.out.setdefault(stream, []).append(values)

    def rows(self, stream: str = "default") -> list[tuple]:
        return [v[1:] for v in self.out.get(stream, [])]


class Columns(Rows):
    """A collector whose default-stream consumer takes columns."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[Any] = []

    def columnar(self, stream: str = "default") -> bool:
        return stream == "default"

    def emit_columns(self, batch: Any, stream: str = "default") -> None:
        assert stream == "default"
        self.batches.append(batch)

    def rows(self, stream: str = "default") -> list[tuple]:
        if stream != "default":
            return super().rows(stream)
        assert not self.out.get("default"), "the columnar path emitted tuples"
        return [tuple(r.values()) for b in self.batches for r in b.to_pylist()]


def emit(spout, collector, partition: int = 0, meta: dict | None = None):
    e = spout.get_emitter({}, None)
    try:
        return e.emit_partition_batch(TX, collector, partition, meta or {"start": 0, "end": 5})
    finally:
        e.close()


@pytest.fixture
def topic(kafka_broker, kafka_topic):
    kafka_broker.create_topic(kafka_topic, 2)
    kafka_broker.produce(kafka_topic, {0: [("k0", "a b"), ("k1", "c"), (None, "d e f"), ("k3", ""), ("k4", "g")],
                                       1: ["x"]})
    return kafka_topic


@pytest.mark.parametrize("cls", [KafkaTransactionalSpout, OpaqueKafkaTransactionalSpout])
def test_one_record_batch_per_fetch_with_the_row_paths_values(kafka_broker, topic, cls):
    fields = ("partition", "offset", "key", "value", "timestamp")
    spout = cls(kafka_broker.bootstrap, topic, fields=fields, key_deserializer="utf-8",
                field_names=("p", "o", "k", "sentence", "ts"))
    rows, cols = Rows(), Columns()
    assert emit(spout, rows) == emit(spout, cols)
    assert len(cols.batches) == 1
    b = cols.batches[0]
    assert b.schema.names == ["p", "o", "k", "sentence", "ts"]
    assert [b.schema.field(n).type for n in ("p", "o", "k", "sentence", "ts")] == \
        [pa.int32(), pa.int64(), pa.string(), pa.string(), pa.int64()]
    assert cols.rows() == rows.rows()
    assert [r[:4] for r in rows.rows()] == [(0, 0, "k0", "a b"), (0, 1, "k1", "c"), (0, 2, None, "d e f"),
                                           (0, 3, "k3", ""), (0, 4, "k4", "g")]
    assert all(isinstance(r[4], int) and r[4] > 0 for r in rows.rows())


def test_bytes_scheme_is_a_binary_column_and_callables_go_as_rows(kafka_broker, topic):
    cols = Columns()
    emit(KafkaTransactionalSpout(kafka_broker.bootstrap, topic, deserializer="bytes"), cols)
    assert cols.batches[0].schema.field(0).type == pa.binary()
    assert cols.rows() == [(b"a b",), (b"c",), (b"d e f",), (b"",), (b"g",)]
    odd = Columns()
    emit(KafkaTransactionalSpout(kafka_broker.bootstrap, topic, deserializer=bytes.upper), odd)
    assert not odd.batches and [v[1] for v in odd.out["default"]] == [b"A B", b"C", b"D E F", b"", b"G"]


BAD_UTF8 = [b"ok", b"\xff\xfe", b"fine"]
JSON = [json.dumps({"word": "a", "n": 1}), "[1, 2]", json.dumps({"word": "b"}), "not json",
        json.dumps({"word": "c", "n": 3, "extra": True})]


@pytest.mark.parametrize("collector", [Rows, Columns], ids=["rows", "columns"])
def test_a_bad_record_stops_the_batch_naming_topic_partition_and_offset(kafka_broker, kafka_topic, collector):
    kafka_broker.create_topic(kafka_topic, 1)
    kafka_broker.produce(kafka_topic, {0: BAD_UTF8})
    with pytest.raises(BadRecordError, match=(
            rf"^Kafka topic '{kafka_topic}' partition 0 offset 1 \(txid 4\): the value is not UTF-8 "
            r"\(invalid start byte at byte 0\)\. Fix the producer, or have the spout route bad records to a "
            r"stream \(bad_records_stream='bad-records'\) instead of stopping$")):
        emit(KafkaTransactionalSpout(kafka_broker.bootstrap, kafka_topic), collector(), meta={"start": 0, "end": 3})


@pytest.mark.parametrize("collector", [Rows, Columns], ids=["rows", "columns"])
def test_bad_records_go_to_the_named_stream_the_same_on_both_paths(kafka_broker, kafka_topic, collector):
    kafka_broker.create_topic(kafka_topic, 2)
    kafka_broker.produce(kafka_topic, {0: BAD_UTF8, 1: JSON})
    c = collector()
    text = KafkaTransactionalSpout(kafka_broker.bootstrap, kafka_topic, bad_records_stream="bad")
    emit(text, c, 0, {"start": 0, "end": 3})
    assert c.rows() == [("ok",), ("fine",)]
    assert c.rows("bad") == [(kafka_topic, 0, 1, None, b"\xff\xfe", "the value is not UTF-8 (invalid start byte "
                                                                   "at byte 0)")]
    c = collector()
    js = KafkaTransactionalSpout(kafka_broker.bootstrap, kafka_topic, deserializer="json", json_fields=("word", "n"),
                                 fields=("offset", "value"), bad_records_stream="bad")
    emit(js, c, 1, {"start": 0, "end": 5})
    assert c.rows() == [(0, "a", 1), (4, "c", 3)]
    assert [r[2:] for r in c.rows("bad")] == [
        (1, None, b"[1, 2]", "the value is JSON list, not an object with fields ['word', 'n']"),
        (2, None, b'{"word": "b"}', "the JSON object has no field 'n' (json_fields ['word', 'n'])"),
        (3, None, b"not json", c.rows("bad")[2][5])]
    assert c.rows("bad")[2][5].startswith("the value is not JSON (")
    if collector is Columns:
        assert c.batches[0].schema.names == ["offset", "word", "n"]


def test_declared_streams_and_option_errors(kafka_broker, topic):
    class Declarer:
        def __init__(self) -> None:
            self.streams: dict[str, Fields] = {}

        def declare(self, fields: Fields) -> None:
            self.streams["default"] = fields

        def declare_stream(self, stream: str, fields: Fields, direct: bool = False) -> None:
            self.streams[stream] = fields

    d = Declarer()
    KafkaTransactionalSpout(kafka_broker.bootstrap, topic, deserializer="json", json_fields=("word", "n"),
                            fields=("key", "value"), bad_records_stream="bad").declare_output_fields(d)
    assert {k: list(v) for k, v in d.streams.items()} == {
        "default": ["tx", "key", "word", "n"],
        "bad": ["tx", "topic", "partition", "offset", "key", "value", "error"]}
    with pytest.raises(ConfigError, match="json_fields names the fields of JSON-object values"):
        KafkaTransactionalSpout(kafka_broker.bootstrap, topic, json_fields=("word",))
    with pytest.raises(ConfigError, match="bad_records_stream must be None"):
        KafkaTransactionalSpout(kafka_broker.bootstrap, topic, bad_records_stream="default")


def test_a_read_fetches_about_its_range_not_the_rest_of_the_partition(kafka_broker, kafka_topic):
    """A read assigns at its start and drops what it fetched past its end: a broker that
    sizes a fetch answer by the request's total (Tansu) sent up to 50 MB of the partition
    for each read, decoded and then dropped (issue 27's profile: 4x the client's CPU)."""
    kafka_broker.create_topic(kafka_topic, 1)
    kafka_broker.produce(kafka_topic, {0: ["x" * 200] * 40_000})          # ≈ 9 MB in the log
    stats: list[dict[str, Any]] = []
    spout = KafkaTransactionalSpout(kafka_broker.bootstrap, kafka_topic, max_records_per_partition=100,
                                    client_config={"statistics.interval.ms": 100,
                                                   "stats_cb": lambda s: stats.append(json.loads(s))})
    e = spout.get_emitter({}, None)
    try:
        cols = Columns()
        e.emit_partition_batch(TX, cols, 0, {"start": 1000, "end": 1100})
        assert len(cols.rows()) == 100
        c = e.consumer
        assert c is not None
        while not stats:
            c.poll(0.1)
        received = sum(b["rxbytes"] for b in stats[-1]["brokers"].values())
    finally:
        e.close()
    assert received < 2.5 * (1 << 20), f"a read of 100 records received {received} bytes"


def test_a_large_range_still_makes_a_valid_consumer(kafka_broker, topic):
    """The prefetch follows ``max_records_per_partition`` up to librdkafka's limit
    (``queued.min.messages`` takes at most 10,000,000)."""
    spout = KafkaTransactionalSpout(kafka_broker.bootstrap, topic, max_records_per_partition=50_000_000)
    assert spout.consumer_config("emitter")["queued.min.messages"] == 10_000_000
    cols = Columns()
    assert emit(spout, cols, meta={"start": 0, "end": 5}) is None
    assert len(cols.rows()) == 5


def test_the_fetch_size_follows_a_larger_message_max_bytes(kafka_broker, topic):
    """librdkafka refuses ``fetch.max.bytes`` below ``message.max.bytes``: a client_config
    raising the latter (e.g. shared with producers) still makes a consumer."""
    spout = KafkaTransactionalSpout(kafka_broker.bootstrap, topic, client_config={"message.max.bytes": 5_000_000})
    assert spout.consumer_config("emitter")["fetch.max.bytes"] == 5_000_000
    assert KafkaTransactionalSpout(kafka_broker.bootstrap, topic, client_config={"fetch.max.bytes": 2_000_000}) \
        .consumer_config("emitter")["fetch.max.bytes"] == 2_000_000
    cols = Columns()
    emit(spout, cols, meta={"start": 0, "end": 5})
    assert len(cols.rows()) == 5
