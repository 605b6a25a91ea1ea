"""Kafka spouts: exact replay (``KafkaTransactionalSpout``) and opaque continuation
(``OpaqueKafkaTransactionalSpout``) of the partitions of one topic (docs/design.md §6).

One spout partition per Kafka partition; a batch's metadata for a partition is its offset
range ``{"start": a, "end": b}`` (``b`` exclusive). The coordinator *plans* ranges on the
driver from the partitions' high watermarks (``[last_end, min(last_end + max_records,
high_watermark))``); emitters *read* exactly a planned range in Spark tasks with
``assign`` + ``seek`` (no consumer group membership), so a new batch and a replay are the
same read.

The Kafka spouts (here, ``spouts.kafka.coordinator``, ``spouts.kafka.emitter`` and ``spouts.kafka.core``) use **confluent-kafka**
(librdkafka), chosen by measurement: against the Tansu broker on this kind of machine it
produced ≈300k msg/s and consumed ≈400-800k msg/s from one Python process, about ten
times kafka-python (≈20k / ≈70k msg/s, measured here; docs/kafka.md). Reading is the per-record hot
path of every batch and librdkafka decodes record batches in C: the emitter's loop reads
reference sentences at the rate of a bare ``consume()`` loop (both ≈116k records/s of
≈60-byte sentences on a 2-core machine busy with other jobs).

What is read is decided by Kafka's documented protocol only: ListOffsets (``latest``)
and the high watermark of Fetch responses, Fetch from an explicit offset,
``OFFSET_OUT_OF_RANGE`` and the partition-EOF event. The plan trusts a Fetch response's
high watermark over ListOffsets: some brokers (Tansu, see docs/kafka.md) answer
ListOffsets short of the last records of a partition, and a plan bounded by that answer
would leave them unread until more data arrives, with the lag reading 0.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from transactional.extras import missing_extra

try:
    import confluent_kafka  # noqa: F401 - the extra is installed: the submodules import it
except ModuleNotFoundError as e:
    raise missing_extra(e, "spouts.kafka (the Kafka spouts)") from None

from spouts.base import (
    OpaquePartitionedTransactionalSpout,
    OutputDeclarer,
    PartitionedCoordinator,
    PartitionedEmitter,
    PartitionedTransactionalSpout,
    SpoutContext,
)
from spouts.kafka.columns import BAD_RECORD_FIELDS, BadRecordError
from spouts.kafka.coordinator import END_OFFSETS_CONF, KafkaCoordinator
from spouts.kafka.emitter import KafkaEmitter
from spouts.kafka.records import RECORD_FIELDS, Deserializer, deserializer_for
from transactional.exceptions import ConfigError, SpoutError
from transactional.tuples import Fields, TransactionAttempt

__all__ = ["BAD_RECORD_FIELDS", "END_OFFSETS_CONF", "BadRecordError", "KafkaCoordinator", "KafkaTransactionalSpout",
           "OpaqueKafkaTransactionalSpout", "RECORD_FIELDS"]

log = logging.getLogger("trident.kafka")


#: Consumer settings the spout relies on; ``client_config`` may not change them.
_LOCKED = {
    "enable.auto.commit": False,        # the coordinator state is the source of truth
    "enable.auto.offset.store": False,
    "auto.offset.reset": "error",       # a range that is gone is an error, never a silent jump
    "enable.partition.eof": True,       # "everything below the high watermark was delivered"
}

FetchFault = Callable[[TransactionAttempt, int, int, int], "int | None"]


class _ClientLog:
    """librdkafka's own log lines (connection retries ...) at DEBUG: the spout reports
    what matters in its exceptions and warnings, naming topic, partition and offsets."""

    _log = logging.getLogger("trident.kafka.client")

    def log(self, level: int, msg: str, *args: Any) -> None:
        self._log.debug(msg, *args)


_CLIENT_LOG = _ClientLog()

class _KafkaSpout:
    """Options and roles shared by both Kafka spouts (not for direct use)."""

    opaque = False

    def __init__(self, bootstrap_servers: str | Sequence[str], topic: str, *,
                 start: str | Mapping[int, int] = "earliest",
                 max_records_per_partition: int = 10_000,
                 deserializer: str | Deserializer = "utf-8",
                 key_deserializer: str | Deserializer = "bytes",
                 fields: Sequence[str] = ("value",),
                 field_names: Sequence[str] | None = None,
                 json_fields: Sequence[str] | None = None,
                 bad_records_stream: str | None = None,
                 tx_field: str = "tx",
                 client_config: Mapping[str, Any] | None = None,
                 group_id: str | None = None,
                 fetch_timeout_secs: float = 10.0,
                 metadata_timeout_secs: float = 5.0,
                 watch_wait_ms: int = 50,
                 reuse_consumer: bool = True,
                 fetch_fault: FetchFault | None = None) -> None:
        bootstrap_servers = _check_servers(bootstrap_servers)
        if not isinstance(topic, str) or not topic:
            msg = f"topic must be a non-empty string; got {topic!r}"
            raise ConfigError(msg)
        if not isinstance(max_records_per_partition, int) or max_records_per_partition < 1:
            msg = f"max_records_per_partition must be an int >= 1; got {max_records_per_partition!r}"
            raise ConfigError(msg)
        for name, v in (("fetch_timeout_secs", fetch_timeout_secs), ("metadata_timeout_secs", metadata_timeout_secs)):
            if not (isinstance(v, (int, float)) and v > 0):
                msg = f"{name} must be > 0 seconds; got {v!r}"
                raise ConfigError(msg)
        if not isinstance(watch_wait_ms, int) or not 1 <= watch_wait_ms <= 10_000:
            msg = f"watch_wait_ms must be an int of milliseconds in 1..10000; got {watch_wait_ms!r}"
            raise ConfigError(msg)
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.start = _check_start(start)
        self.max_records_per_partition = max_records_per_partition
        self.deserializer = deserializer
        self.key_deserializer = key_deserializer
        deserializer_for(deserializer, "deserializer")
        deserializer_for(key_deserializer, "key_deserializer")
        self.fields, self.field_names = _check_fields(fields, field_names, tx_field)
        self.json_fields = _check_json_fields(json_fields, deserializer, self.fields)
        Fields(tx_field, *self.output_names())  # validates the names
        self.bad_records_stream = _check_bad_stream(bad_records_stream)
        self.tx_field = tx_field
        self.client_config = _check_client_config(client_config)
        self.group_id = group_id
        self.fetch_timeout_secs = float(fetch_timeout_secs)
        self.metadata_timeout_secs = float(metadata_timeout_secs)
        self.watch_wait_ms = watch_wait_ms
        self.reuse_consumer = reuse_consumer
        self.fetch_fault = fetch_fault

    # -- the roles -------------------------------------------------------------------------
    def get_coordinator(self, conf: dict[str, Any], context: SpoutContext) -> PartitionedCoordinator:
        """The driver-side planner. Reaches the broker at once: raises ``SpoutError``
        naming ``bootstrap_servers`` within ``metadata_timeout_secs`` if it cannot."""
        fixed = (conf or {}).get(END_OFFSETS_CONF, {}).get(self.topic)
        return KafkaCoordinator(self, None if fixed is None else {int(p): int(o) for p, o in fixed.items()})

    def end_offsets_now(self) -> dict[int, int]:
        """Each partition's end offset now (the high watermark a Fetch reports): what
        ``trident verify`` records at its reference run's start and passes to every run as
        ``conf[END_OFFSETS_CONF] = {topic: {partition: offset}}``, so that each run plans
        the same fixed range, whatever is produced meanwhile."""
        c = KafkaCoordinator(self)
        try:
            out = {}
            for p in range(c.num_partitions()):
                wm = c.watermarks(p)
                if wm is None:
                    msg = f"Kafka topic {self.topic!r} partition {p} did not answer ListOffsets at {self.bootstrap_servers}"
                    raise SpoutError(msg)
                out[p] = c.high_watermark(p, wm[1])
            return out
        finally:
            c.close()

    def planned_records(self, meta: Any) -> int:
        """The records a batch's planned metadata reads (``KafkaCoordinator.planned_records``):
        what lets the engine run a small batch in the driver's process
        (``TopologyConfig.driver_batch_max_records``)."""
        return KafkaCoordinator.planned_records(meta)

    def get_emitter(self, conf: dict[str, Any], context: SpoutContext) -> PartitionedEmitter:
        """A reader of planned ranges; its Kafka consumer is created on first use."""
        return KafkaEmitter(self)

    def output_names(self) -> tuple[str, ...]:
        """The fields emitted after the attempt: ``field_names``, with ``value`` expanded
        to ``json_fields`` when they are declared."""
        out: list[str] = []
        for f, name in zip(self.fields, self.field_names, strict=True):
            out.extend(self.json_fields if f == "value" and self.json_fields is not None else (name,))
        return tuple(out)

    def declare_output_fields(self, declarer: OutputDeclarer) -> None:
        declarer.declare(Fields(self.tx_field, *self.output_names()))
        if self.bad_records_stream is not None:
            declarer.declare_stream(self.bad_records_stream, Fields(self.tx_field, *BAD_RECORD_FIELDS))


    def consumer_config(self, role: str) -> dict[str, Any]:
        """The librdkafka settings of this spout's consumers (``role`` is 'coordinator'
        or 'emitter'): ``client_config`` plus the settings the spout relies on."""
        group = self.group_id or f"trident-spout-{self.topic}"
        cfg: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers, "group.id": group,
                               "client.id": f"trident-{role}", "logger": _CLIENT_LOG,
                               # ranges are planned below the high watermark: there is data
                               # to return, so a long poll only adds latency per batch
                               "fetch.wait.max.ms": 20,
                               # an emitter reads one planned range per assign and drops what
                               # it fetched beyond it at unassign: prefetch about one range, and
                               # do not back off a second when the queue was full (a read after
                               # another of the same partition otherwise stalled ~1 s)
                               # (librdkafka takes at most 10,000,000)
                               "queued.min.messages": min(self.max_records_per_partition, 10_000_000),
                               "fetch.queue.backoff.ms": 10}
        cfg.update(self.client_config)
        if "fetch.max.bytes" not in self.client_config:
            # a fetch answers at most 1 MiB: brokers that size the answer by the request's
            # total (Tansu does) otherwise send up to 50 MB of a partition per read, which the
            # client decodes and then drops; never below message.max.bytes (librdkafka's rule)
            cfg["fetch.max.bytes"] = max(1 << 20, int(cfg.get("message.max.bytes", 0)))
        cfg.update(_LOCKED)
        return cfg

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(bootstrap_servers={self.bootstrap_servers!r}, topic={self.topic!r}, "
                f"max_records_per_partition={self.max_records_per_partition})")


def _check_servers(bootstrap_servers: str | Sequence[str]) -> str:
    """``bootstrap_servers`` as librdkafka takes them (comma-separated); ``ConfigError`` if none."""
    if not isinstance(bootstrap_servers, str):
        bootstrap_servers = ",".join(bootstrap_servers)
    if not bootstrap_servers:
        msg = "bootstrap_servers is empty; e.g. '127.0.0.1:9092'"
        raise ConfigError(msg)
    return bootstrap_servers


def _check_fields(fields: Sequence[str], field_names: Sequence[str] | None,
                  tx_field: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The record attributes a spout emits and their field names, checked."""
    checked = tuple(fields)
    bad = [f for f in checked if f not in RECORD_FIELDS]
    if not checked or bad:
        msg = f"fields must name record attributes among {RECORD_FIELDS}; got {tuple(fields)!r}"
        raise ConfigError(msg)
    names = tuple(field_names) if field_names is not None else checked
    if len(names) != len(checked):
        msg = f"field_names {names!r} must name each of fields {checked!r}"
        raise ConfigError(msg)
    Fields(tx_field, *names)  # validates the names
    return checked, names


def _check_json_fields(json_fields: Sequence[str] | None, deserializer: Any,
                       fields: tuple[str, ...]) -> tuple[str, ...] | None:
    """``json_fields`` checked against the scheme and the emitted fields."""
    if json_fields is None:
        return None
    if deserializer != "json" or isinstance(json_fields, str) or not json_fields:
        msg = (f"json_fields names the fields of JSON-object values: give a list of names with "
               f"deserializer='json'; got json_fields={json_fields!r}, deserializer={deserializer!r}")
        raise ConfigError(msg)
    if "value" not in fields:
        msg = f"json_fields expand the 'value' field, which fields {fields!r} does not emit"
        raise ConfigError(msg)
    return tuple(json_fields)


def _check_bad_stream(bad_records_stream: str | None) -> str | None:
    """``bad_records_stream``: None, or a stream name other than 'default'."""
    if bad_records_stream is not None and (not isinstance(bad_records_stream, str) or not bad_records_stream
                                           or bad_records_stream == "default"):
        msg = (f"bad_records_stream must be None (stop at a bad record) or the name of a stream other "
               f"than 'default'; got {bad_records_stream!r}")
        raise ConfigError(msg)
    return bad_records_stream


def _check_client_config(client_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """``client_config`` as a dict; ``ConfigError`` if it changes what the spout relies on."""
    config = dict(client_config or {})
    for k, needed in _LOCKED.items():
        if k in config and config[k] != needed:
            msg = f"client_config may not set {k!r} (the spout needs {needed!r}); got {config[k]!r}"
            raise ConfigError(msg)
    if "bootstrap.servers" in config:
        msg = "give the brokers as bootstrap_servers, not in client_config"
        raise ConfigError(msg)
    return config


def _check_start(start: Any) -> str | dict[int, int]:
    if start in ("earliest", "latest"):
        return str(start)
    if isinstance(start, Mapping):
        out = {}
        for p, o in start.items():
            try:
                p_i = int(p)
            except (TypeError, ValueError):
                msg = f"start offsets must map partition -> offset; got key {p!r}"
                raise ConfigError(msg) from None
            if not isinstance(o, int) or o < 0 or p_i < 0:
                msg = f"start offset of partition {p!r} must be an int >= 0; got {o!r}"
                raise ConfigError(msg)
            out[p_i] = o
        return out
    msg = f"start must be 'earliest', 'latest' or a dict partition -> offset; got {start!r}"
    raise ConfigError(msg)


class KafkaTransactionalSpout(_KafkaSpout, PartitionedTransactionalSpout):
    """Batches of a Kafka topic that replay exactly (Storm's ``TransactionalKafkaSpout``).

    Each batch holds, per partition, at most ``max_records_per_partition`` records from
    where the partition's previous batch ended; the offset range is stored before the
    batch runs and a replay of the txid reads exactly those offsets again. A planned range
    that can no longer be read (deleted by retention, partition gone, log truncated below
    it) stops the run with ``SpoutError`` naming topic, partition, offsets and txid; a
    range not readable within ``fetch_timeout_secs`` (broker down) fails the batch with
    ``FailedException`` so it is retried, up to the topology's ``max_attempts``.

    Options:

    - ``start``: where a new topology begins: ``"earliest"`` (default), ``"latest"`` or
      ``{partition: offset}`` (partitions not named start at earliest), for the
      partitions present when it first plans. Partitions added to the topic later
      always start at earliest. Each partition's start is decided once and stored with
      the coordinator state (``initial_meta``), so a restarted driver keeps it.
    - ``deserializer`` / ``key_deserializer``: ``"bytes"``, ``"utf-8"``, ``"json"`` or a
      callable ``bytes -> value`` (runs in Spark tasks; must be picklable).
    - ``fields``: record attributes emitted after the TransactionAttempt, among
      ``RECORD_FIELDS`` (default ``("value",)``); ``field_names`` renames them.
    - ``json_fields``: with ``deserializer="json"``, the names of the JSON object's fields
      emitted in place of ``value`` (a column each on the columnar path).
    - ``bad_records_stream``: a record the scheme cannot decode (not UTF-8, not JSON, not
      an object, a field missing) stops the batch with ``BadRecordError`` naming topic,
      partition and offset (None, the default), or is emitted on this stream as
      ``(tx, *BAD_RECORD_FIELDS)`` and left out of the batch. The same on the row and
      the columnar path (``spouts.kafka.columns``).
    - ``client_config``: librdkafka settings passed to every consumer (e.g. security).
    - ``group_id``: committed end offsets of each committed batch are written to Kafka
      under this consumer group, as information for lag monitors only (the coordinator
      state stays the source of truth). None: nothing is written.
    - ``watch_wait_ms``: while a topology runs, a background consumer on the driver
      long-polls the partitions past their last plan and wakes the driver when records
      arrive (``spouts.kafka.watch``); the broker holds its fetch up to this long while the
      topic is idle (default 50: about 20 small requests a second when idle).
    - ``reuse_consumer``: keep one consumer per emitter and the driver's watch (default);
      False closes the emitters' after every read and does not watch (the driver polls
      the topic every ``poll_interval_secs``): for brokers whose topics are deleted and
      created again under a running topology (docs/kafka.md).
    - ``fetch_fault(tx, partition, start, end) -> int | None``: a test seam called before
      each read in the emitter; returning an offset makes the partition unfetchable from
      that offset on for this read (as if the broker timed out).

    >>> spout = KafkaTransactionalSpout("127.0.0.1:9092", "sentences", max_records_per_partition=500)
    >>> spout.opaque, spout.topic
    (False, 'sentences')
    """

    opaque = False


class OpaqueKafkaTransactionalSpout(_KafkaSpout, OpaquePartitionedTransactionalSpout):
    """Batches of a Kafka topic that tolerate unavailable partitions (Storm's
    ``OpaqueTridentKafkaSpout``); pair it with ``OpaqueMap``.

    Plans as ``KafkaTransactionalSpout`` does, but a partition that cannot be fetched
    within ``fetch_timeout_secs`` contributes only what was read and the emitter returns
    the actual range; the engine records it before the commit and plans later batches
    from where it ended, so the partition catches up later and nothing is skipped. A range
    that is definitely gone (retention, partition deleted) still stops the run with
    ``SpoutError``: skipping it would lose data silently. Same options as
    ``KafkaTransactionalSpout``.

    >>> OpaqueKafkaTransactionalSpout("127.0.0.1:9092", "sentences").opaque
    True
    """

    opaque = True
