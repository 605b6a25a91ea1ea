"""Spout interfaces (docs/design.md §6, §7), as Storm keeps them in its client API; ``spouts``
re-exports them beside its implementations. Users subclass one of the three transactional
spout classes; the engine calls the coordinator on the driver and the emitters in Spark tasks.
Core (at-least-once) spouts subclass ``BaseRichSpout``.

Metadata are JSON values (dict, list, str, int, float, bool, None). They are written to
the coordinator state before a batch runs, and a transactional spout must emit exactly
the same tuples whenever it is given the same metadata.
"""

from __future__ import annotations

import abc
from typing import Any, Protocol

from transactional.tuples import Fields, TransactionAttempt

Meta = Any


class SpoutContext(Protocol):
    """What a spout's coordinator or emitter is told about where it runs."""

    topology_id: str
    component_id: str
    task_index: int   # this emitter task, 0 .. num_tasks-1 (0 for the coordinator)
    num_tasks: int    # the spout's parallelism


class EmitCollector(Protocol):
    """Given to emitters. Every tuple's first value must be the TransactionAttempt."""

    def emit(self, values: tuple[Any, ...], stream: str = "default") -> None:
        """Send ``values`` (the TransactionAttempt first) to every subscriber of ``stream``."""

    def emit_direct(self, task: int, values: tuple[Any, ...], stream: str = "default") -> None:
        """Send ``values`` to task ``task`` of the subscribers of the direct ``stream``."""


class OutputDeclarer(Protocol):
    """Given to ``declare_output_fields``: names the fields of each output stream."""

    def declare(self, fields: Fields, stream: str = "default", direct: bool = False) -> None:
        """Declare ``stream`` with ``fields`` (``direct``: consumers subscribe with direct grouping)."""

    def declare_stream(self, stream: str, fields: Fields, direct: bool = False) -> None:
        """As ``declare``, with the stream named first."""


# -- plain transactional spouts ---------------------------------------------------------

class Coordinator(abc.ABC):
    """Runs on the driver, one per run. Picks each batch's metadata."""

    @abc.abstractmethod
    def initialize_transaction(self, txid: int, prev_meta: Meta | None) -> Meta:
        """The metadata of batch ``txid``; ``prev_meta`` is that of ``txid - 1`` (None for
        the first txid). Called once per txid (a replay reuses what this returned, which
        the engine stored before the batch ran). Must not block for long."""

    def is_ready(self) -> bool:
        """True when a new batch may be emitted now. When False and nothing is in flight,
        ``run_topology`` waits up to ``idle_timeout_secs`` for it, then ends the run."""
        return True

    def backlogged(self) -> bool:
        """Asked on the driver right after each batch is planned: True when more input
        waits than that batch took (it hit a per-batch cap). Under ``launch_policy``
        "adaptive" the engine then plans further batches at once, up to
        ``max_spout_pending``; on False it plans the next batch when no batch is processing.
        Default True: every free slot is planned at once (Storm's way)."""
        return True

    def committed(self, txid: int, meta: Meta) -> None:  # noqa: B027 - an optional hook
        """Called on the driver after ``txid`` was recorded as committed (e.g. to publish
        offsets for monitoring). Failures here are logged, not retried."""

    def close(self) -> None:  # noqa: B027 - an optional hook
        """Called once at the end of the run."""


class Emitter(abc.ABC):
    """Runs in Spark tasks: one instance per emitter task and Python worker, reused across
    batches. Emits this task's share of a batch."""

    @abc.abstractmethod
    def emit_batch(self, tx: TransactionAttempt, meta: Meta, collector: EmitCollector) -> None:
        """Emit the tuples of batch ``tx.txid`` described by ``meta`` that belong to this
        task (``context.task_index`` of ``context.num_tasks``). Each tuple is
        ``(tx, *values)``. Must emit the same tuples for the same ``meta``."""

    def cleanup_before(self, txid: int) -> None:  # noqa: B027 - an optional hook
        """Every txid before ``txid`` committed: state kept for them may go."""

    def close(self) -> None:  # noqa: B027 - an optional hook
        """Called when the emitter is dropped."""


class TransactionalSpout(abc.ABC):
    """A source of batches that can replay the exact batch for a txid (Storm's
    ``ITransactionalSpout``). Subclass it and return a coordinator and an emitter
    (one object may be both)."""

    @abc.abstractmethod
    def get_coordinator(self, conf: dict[str, Any], context: SpoutContext) -> Coordinator:
        """The coordinator, made once per run on the driver."""

    @abc.abstractmethod
    def get_emitter(self, conf: dict[str, Any], context: SpoutContext) -> Emitter:
        """An emitter, made in a Spark task (once per task and Python worker)."""

    @abc.abstractmethod
    def declare_output_fields(self, declarer: OutputDeclarer) -> None:
        """Declare the fields of the default stream, the TransactionAttempt field first,
        e.g. ``declarer.declare(Fields("tx", "word"))``."""


# -- partitioned spouts -------------------------------------------------------------------

class PartitionedCoordinator(abc.ABC):
    """Runs on the driver. Knows the partitions and *plans* each partition's next batch;
    planning must be cheap (e.g. compare an offset with a high watermark).

    Optional: ``initial_meta(partition, new_partition) -> Meta | None``, where a
    partition with no batch yet begins, for sources where that depends on *when* it is
    decided (Kafka's ``start="latest"``: the high watermark at that moment). Define it as
    a method to use it; left None (the default), a partition's first batch is planned
    with ``plan_partition(partition, None)`` by every driver anew.

    - Called on the driver, before ``plan_partition``, for a partition that has no batch
      and no stored start yet. ``new_partition`` is True when the partition was not there
      when the topology first planned (it was added to the source later, perhaps while no
      driver ran); False for the partitions present then.
    - Return the metadata of an *empty* batch that ends where the partition's first batch
      must start (Kafka: ``{"start": s, "end": s}``), as JSON; or None when it cannot be
      told now (the source does not answer): the partition sits out this batch and is
      asked again before the next one.
    - The engine stores the answer durably with the coordinator state before any batch
      reads from it and passes it as ``last_meta`` to ``plan_partition`` from then on,
      also after a driver restart; so each partition's start is decided once per
      topology, not once per driver, and records that arrive while no driver runs are
      read.
    """

    #: Optional method ``initial_meta(partition: int, new_partition: bool) -> Meta | None``;
    #: see the class docstring. None: the coordinator does not place new partitions.
    initial_meta: Any = None

    @abc.abstractmethod
    def num_partitions(self) -> int:
        """Partitions now; asked before every batch, so partitions added later are read
        (a new partition's first batch continues from ``initial_meta``, or is planned with
        ``last_meta=None`` by a coordinator without it)."""

    @abc.abstractmethod
    def plan_partition(self, partition: int, last_meta: Meta | None) -> Meta | None:
        """The metadata of ``partition``'s next batch, continuing from ``last_meta`` (that
        of the partition's previous batch, or what ``initial_meta`` returned for it; None
        if it never had one and the coordinator has no ``initial_meta``). Return None when
        the partition has nothing new now: it is left out of this batch."""

    def plan_partitions(self, last_metas: dict[int, Meta | None]) -> dict[int, Meta | None]:
        """Every partition's next batch in one call: ``{partition: plan_partition(partition,
        last_meta)}`` for each ``partition -> last_meta`` of ``last_metas`` (the partitions
        the engine plans now, in order). The engine plans a batch through this method.

        The default asks ``plan_partition`` partition after partition. Override it when
        the source can answer for all partitions in one round (Kafka: one fetch for all of
        them instead of one per partition); the answer must be what ``plan_partition``
        would return for each, and may be None for a partition with nothing new."""
        return {p: self.plan_partition(p, last) for p, last in last_metas.items()}

    def is_ready(self) -> bool:
        """True when batches may be planned now (as ``Coordinator.is_ready``)."""
        return True

    def backlogged(self) -> bool:
        """Asked on the driver right after each batch is planned: True when some partition
        has more input than its part of that batch took (``plan_partition`` hit a cap), as
        ``Coordinator.backlogged``. Default True."""
        return True

    def committed(self, txid: int, meta: dict[str, Meta]) -> None:  # noqa: B027 - an optional hook
        """After ``txid`` was recorded as committed; ``meta`` maps partition (as str) to
        its metadata in that batch."""

    def close(self) -> None:  # noqa: B027 - an optional hook
        """Called once at the end of the run."""


class PartitionedEmitter(abc.ABC):
    """Runs in Spark tasks; reads planned batches. One instance per emitter task and
    Python worker, reused across batches.

    Optional: ``fetch_partitions(tx, metas) -> {partition: emit}``, for sources that read
    several partitions' batches faster together than one after the other (Kafka: one
    consumer assignment and one round of fetches for all of them). Define it as a method
    to use it; left None (the default), the engine calls ``emit_partition_batch`` for each
    partition in turn.

    - ``metas`` maps partition (int) -> its metadata in batch ``tx``. They are the
      partitions of this emitter's task, or of every emitter task of the same spout that
      this process runs one after the other for the batch (a Spark task carrying several
      logical tasks, ``transactional.engine.task_groups``; the driver's in-process run):
      the engine asks the first task's emitter for them all.
    - Read them all, and return, for each partition of ``metas``, a function
      ``emit(collector) -> Meta | None`` that emits that partition's batch to ``collector``
      exactly as ``emit_partition_batch(tx, collector, partition, meta)`` would: the same
      tuples in the same order, the same return value, the same exception where that
      partition's batch cannot be read (raised by its ``emit``, so that the other
      partitions are still emitted). The engine calls each partition's ``emit`` once, with
      the collector of the task the partition belongs to, in the tasks' order.
    - An exception from ``fetch_partitions`` itself fails every partition of ``metas``.
    """

    #: Optional method ``fetch_partitions(tx: TransactionAttempt, metas: dict[int, Meta])
    #: -> dict[int, Callable[[EmitCollector], Meta | None]]``; see the class docstring.
    fetch_partitions: Any = None

    @abc.abstractmethod
    def emit_partition_batch(self, tx: TransactionAttempt, collector: EmitCollector,
                             partition: int, meta: Meta) -> Meta | None:
        """Emit the batch of ``partition`` that ``meta`` describes, each tuple
        ``(tx, *values)``.

        Transactional spouts must emit exactly the tuples ``meta`` names (a replay is the
        same call) and return None. Opaque spouts may emit less (a broker down) and return
        the metadata of what they did emit."""

    def cleanup_before(self, txid: int) -> None:  # noqa: B027 - an optional hook
        """Every txid before ``txid`` committed: state kept for them may go."""

    def close(self) -> None:  # noqa: B027 - an optional hook
        """Called when the emitter is dropped."""


class PartitionedTransactionalSpout(abc.ABC):
    """A partitioned source whose batches replay exactly (Storm's
    ``IPartitionedTransactionalSpout``; e.g. Kafka offset ranges). Partition ``p`` is
    emitted by task ``p % parallelism``."""

    opaque = False

    @abc.abstractmethod
    def get_coordinator(self, conf: dict[str, Any], context: SpoutContext) -> PartitionedCoordinator:
        """The coordinator, made once per run on the driver."""

    @abc.abstractmethod
    def get_emitter(self, conf: dict[str, Any], context: SpoutContext) -> PartitionedEmitter:
        """An emitter, made in a Spark task (once per task and Python worker)."""

    @abc.abstractmethod
    def declare_output_fields(self, declarer: OutputDeclarer) -> None:
        """Declare the fields of the default stream, the TransactionAttempt field first."""


class OpaquePartitionedTransactionalSpout(PartitionedTransactionalSpout):
    """A partitioned source whose emitter may deliver less than planned and says what it
    delivered (Storm's ``IOpaquePartitionedTransactionalSpout``). The engine records what
    was actually emitted before the commit, fails every later in-flight batch, and plans
    them again from there, so the stream continues exactly where each partition ended.
    Pair it with ``OpaqueMap``."""

    opaque = True


# -- core spouts (at-least-once, docs/design.md §7) ---------------------------------------

class SpoutOutputCollector(Protocol):
    """Given to ``open``: where a core spout emits."""

    def emit(self, values: tuple[Any, ...], msg_id: Any = None, stream: str = "default") -> Any:
        """Send ``values`` to the subscribers of ``stream``; with a ``msg_id``, the tuple's
        tree is tracked and ``ack(msg_id)`` or ``fail(msg_id)`` follows."""


class BaseRichSpout(abc.ABC):
    """Storm's ``BaseRichSpout``: override ``next_tuple`` and ``declare_output_fields``;
    ``open``, ``ack``, ``fail`` and ``close`` do nothing unless overridden."""

    def open(self, conf: dict[str, Any], context: SpoutContext, collector: SpoutOutputCollector) -> None:
        """Called once before the first ``next_tuple`` (connect, keep the collector)."""
        return None

    @abc.abstractmethod
    def next_tuple(self) -> None:
        """Emit zero or more tuples; return soon (the caller polls again)."""

    def ack(self, msg_id: Any) -> None:
        """The tuple emitted with ``msg_id`` was fully processed."""
        return None

    def fail(self, msg_id: Any) -> None:
        """The tuple emitted with ``msg_id`` failed or timed out: replay it if it matters."""
        return None

    def close(self) -> None:
        """Called once at the end (may not be called after a crash)."""
        return None

    @abc.abstractmethod
    def declare_output_fields(self, declarer: OutputDeclarer) -> None:
        """Name the fields of each output stream."""
