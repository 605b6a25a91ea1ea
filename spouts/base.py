"""Spout interfaces (DESIGN §6). Users subclass one of the three spout classes; the engine
calls the coordinator on the driver and the emitters in Spark tasks.

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

    def emit(self, values: tuple, stream: str = "default") -> None: ...

    def emit_direct(self, task: int, values: tuple, stream: str = "default") -> None: ...


class OutputDeclarer(Protocol):
    def declare(self, fields: Fields, stream: str = "default", direct: bool = False) -> None: ...

    def declare_stream(self, stream: str, fields: Fields, direct: bool = False) -> None: ...


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

    def committed(self, txid: int, meta: Meta) -> None:
        """Called on the driver after ``txid`` was recorded as committed (e.g. to publish
        offsets for monitoring). Failures here are logged, not retried."""

    def close(self) -> None:
        """Called once at the end of the run."""


class Emitter(abc.ABC):
    """Runs in Spark tasks: one instance per emitter task and Python worker, reused across
    batches. Emits this task's share of a batch."""

    @abc.abstractmethod
    def emit_batch(self, tx: TransactionAttempt, meta: Meta, collector: EmitCollector) -> None:
        """Emit the tuples of batch ``tx.txid`` described by ``meta`` that belong to this
        task (``context.task_index`` of ``context.num_tasks``). Each tuple is
        ``(tx, *values)``. Must emit the same tuples for the same ``meta``."""

    def cleanup_before(self, txid: int) -> None:
        """Every txid before ``txid`` committed: state kept for them may go."""

    def close(self) -> None:
        """Called when the emitter is dropped."""


class TransactionalSpout(abc.ABC):
    """A source of batches that can replay the exact batch for a txid (Storm's
    ``ITransactionalSpout``). Subclass it and return a coordinator and an emitter
    (one object may be both)."""

    @abc.abstractmethod
    def get_coordinator(self, conf: dict, context: SpoutContext) -> Coordinator: ...

    @abc.abstractmethod
    def get_emitter(self, conf: dict, context: SpoutContext) -> Emitter: ...

    @abc.abstractmethod
    def declare_output_fields(self, declarer: OutputDeclarer) -> None:
        """Declare the fields of the default stream, the TransactionAttempt field first,
        e.g. ``declarer.declare(Fields("tx", "word"))``."""


# -- partitioned spouts -------------------------------------------------------------------

class PartitionedCoordinator(abc.ABC):
    """Runs on the driver. Knows the partitions and *plans* each partition's next batch;
    planning must be cheap (e.g. compare an offset with a high watermark)."""

    @abc.abstractmethod
    def num_partitions(self) -> int:
        """Partitions now; asked before every batch, so partitions added later are read
        (a new partition is planned with ``last_meta=None``)."""

    @abc.abstractmethod
    def plan_partition(self, partition: int, last_meta: Meta | None) -> Meta | None:
        """The metadata of ``partition``'s next batch, continuing from ``last_meta`` (that
        of the partition's previous batch, None if it never had one). Return None when the
        partition has nothing new now: it is left out of this batch."""

    def is_ready(self) -> bool:
        return True

    def committed(self, txid: int, meta: dict[str, Meta]) -> None:
        """After ``txid`` was recorded as committed; ``meta`` maps partition (as str) to
        its metadata in that batch."""

    def close(self) -> None: ...


class PartitionedEmitter(abc.ABC):
    """Runs in Spark tasks; reads planned batches. One instance per emitter task and
    Python worker, reused across batches."""

    @abc.abstractmethod
    def emit_partition_batch(self, tx: TransactionAttempt, collector: EmitCollector,
                             partition: int, meta: Meta) -> Meta | None:
        """Emit the batch of ``partition`` that ``meta`` describes, each tuple
        ``(tx, *values)``.

        Transactional spouts must emit exactly the tuples ``meta`` names (a replay is the
        same call) and return None. Opaque spouts may emit less (a broker down) and return
        the metadata of what they did emit."""

    def cleanup_before(self, txid: int) -> None: ...

    def close(self) -> None: ...


class PartitionedTransactionalSpout(abc.ABC):
    """A partitioned source whose batches replay exactly (Storm's
    ``IPartitionedTransactionalSpout``; e.g. Kafka offset ranges). Partition ``p`` is
    emitted by task ``p % parallelism``."""

    opaque = False

    @abc.abstractmethod
    def get_coordinator(self, conf: dict, context: SpoutContext) -> PartitionedCoordinator: ...

    @abc.abstractmethod
    def get_emitter(self, conf: dict, context: SpoutContext) -> PartitionedEmitter: ...

    @abc.abstractmethod
    def declare_output_fields(self, declarer: OutputDeclarer) -> None: ...


class OpaquePartitionedTransactionalSpout(PartitionedTransactionalSpout):
    """A partitioned source whose emitter may deliver less than planned and says what it
    delivered (Storm's ``IOpaquePartitionedTransactionalSpout``). The engine records what
    was actually emitted before the commit, fails every later in-flight batch, and plans
    them again from there, so the stream continues exactly where each partition ended.
    Pair it with ``OpaqueMap``."""

    opaque = True
