"""The bolt API users subclass (Storm's names, in Python).

* ``BaseBatchBolt``: a fresh instance per task per batch; ``prepare`` then ``execute``
  for each tuple of the batch that reaches this task, then ``finish_batch`` once, also
  when the task received no tuple.
* ``BaseTransactionalBolt``: a batch bolt whose id is the ``TransactionAttempt``.
* ``Committer``: marker; the bolt's ``finish_batch`` runs in the commit phase, strictly
  in txid order (or add the bolt with ``set_committer_bolt``).
* ``BaseBasicBolt``: per-tuple processing with no batch state; ``execute(tuple, collector)``.

Every tuple of a transactional topology carries the TransactionAttempt as its first value:
emit ``Values(self.id, ...)`` from batch bolts and ``Values(tuple[0], ...)`` from basic ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from transactional.tuples import Fields, TransactionAttempt, Tuple

if TYPE_CHECKING:
    from state.map import MapState


class OutputFieldsDeclarer(Protocol):
    """Given to ``declare_output_fields``."""

    def declare(self, fields: Fields, stream: str = "default", direct: bool = False) -> None:
        """Declare ``stream``'s fields (TransactionAttempt field first). ``direct=True``
        makes it a direct stream, emitted with ``emit_direct`` to a chosen task."""
        ...

    def declare_stream(self, stream: str, fields: Fields, direct: bool = False) -> None:
        """Storm's ``declareStream``: ``declare(fields, stream, direct)`` with the stream named first."""
        ...


class TopologyContext(Protocol):
    """Where a task runs, and its way to user state."""

    topology_id: str
    component_id: str
    task_index: int           # 0 .. num_tasks-1
    num_tasks: int
    phase: str                # "processing" or "commit"

    def component_tasks(self, component_id: str) -> int:
        """Parallelism of ``component_id``."""
        ...

    def map_state(self, name: str, opaque: bool | str = False) -> MapState[Any]:
        """The exactly-once map ``<topology_id>:<name>`` over the configured state
        (``TopologyConfig.state``): a ``TransactionalMap`` or, with ``opaque=True``, an
        ``OpaqueMap`` (or a kind by name: ``"non-transactional"``, see ``state.map_class``). In a committer the framework calls ``begin_commit``/``commit``
        around ``finish_batch``; call ``multi_update``/``multi_combine`` there."""
        ...

    @property
    def epoch(self) -> int | None:
        """The driver's epoch (higher for every new driver of the topology): store it with
        your own writes and refuse a lower one, so a stale driver writes nothing."""
        ...

    def state(self, factory: Any) -> Any:
        """The state a Trident ``StateFactory`` makes for this task (docs/states.md): kept
        across batches; the framework calls ``begin_commit(txid)`` now and ``commit(txid)``
        after ``finish_batch``, in txid order. Committers (commit phase) only."""
        ...


class BatchOutputCollector(Protocol):
    """Given to batch bolts in ``prepare``."""

    def emit(self, values: tuple[Any, ...], stream: str = "default") -> None:
        """Send ``values`` (TransactionAttempt first) to every subscriber of ``stream``."""
        ...

    def emit_direct(self, task: int, values: tuple[Any, ...], stream: str = "default") -> None:
        """Send ``values`` to task ``task`` of the subscribers of the direct ``stream``."""
        ...

    def report_error(self, error: BaseException) -> None:
        """Log ``error`` against this task without failing the batch."""
        ...


class BasicOutputCollector(BatchOutputCollector, Protocol):
    """Given to ``BaseBasicBolt.execute``; same calls as the batch collector."""


class BaseBatchBolt:
    """Subclass and override ``execute``, ``finish_batch`` and ``declare_output_fields``.

    >>> from transactional import Values, Fields
    >>> class BatchCount(BaseBatchBolt):
    ...     def prepare(self, conf, context, collector, id):
    ...         self.collector, self.id, self.count = collector, id, 0
    ...     def execute(self, tuple):
    ...         self.count += 1
    ...     def finish_batch(self):
    ...         self.collector.emit(Values(self.id, self.count))
    ...     def declare_output_fields(self, declarer):
    ...         declarer.declare(Fields("id", "count"))
    """

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: BatchOutputCollector,
                id: Any) -> None:
        """Called once per task per batch, before any ``execute``. ``id`` is the batch's
        ``TransactionAttempt``. Keep ``collector`` and ``id`` for later."""

    def execute(self, tuple: Tuple) -> None:
        """Called for every tuple of the batch routed to this task."""

    def finish_batch(self) -> None:
        """Called once when this task has received every tuple of the batch (for a
        committer: in the commit phase, in txid order)."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """Declare output streams; a bolt that emits nothing declares nothing."""


class BaseTransactionalBolt(BaseBatchBolt):
    """A batch bolt of a transactional topology: ``id`` is a ``TransactionAttempt``."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: BatchOutputCollector,
                id: TransactionAttempt) -> None:
        """As ``BaseBatchBolt.prepare``; ``id`` is the batch's ``TransactionAttempt``."""


class Committer:
    """Marker mixin: ``class UpdateGlobalCount(BaseTransactionalBolt, Committer)`` makes
    ``finish_batch`` part of the commit phase (Storm's ``ICommitter``)."""


class BaseBasicBolt:
    """A bolt that maps each tuple to zero or more tuples, with no batch state.

    >>> from transactional import Values, Fields
    >>> class Split(BaseBasicBolt):
    ...     def execute(self, tuple, collector):
    ...         for w in tuple[1].split():
    ...             collector.emit(Values(tuple[0], w))
    ...     def declare_output_fields(self, declarer):
    ...         declarer.declare(Fields("id", "word"))
    """

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        """Called once per task per batch before the first ``execute``."""

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        """Called for every tuple; emit with ``collector`` (TransactionAttempt first,
        i.e. ``tuple[0]``)."""
        msg = f"{type(self).__name__} must implement execute(tuple, collector)"
        raise NotImplementedError(msg)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """Declare output streams."""


class BasicBoltAdapter(BaseBatchBolt):
    """Runs a ``BaseBasicBolt`` on the batch path (internal; one task runner for all)."""

    def __init__(self, bolt: BaseBasicBolt) -> None:
        self.bolt = bolt

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: BatchOutputCollector,
                id: Any) -> None:
        """Prepare the basic bolt for this task's batch and keep ``collector`` for its ``execute``."""
        self.bolt.prepare(conf, context)
        self.collector = collector
        self._execute = self.bolt.execute

    def execute(self, tuple: Tuple) -> None:
        """Run the basic bolt's ``execute`` on ``tuple`` with the batch's collector."""
        self._execute(tuple, self.collector)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """The basic bolt's own declarations."""
        self.bolt.declare_output_fields(declarer)
