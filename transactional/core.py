"""Core Storm topologies: spouts that replay what fails, bolts that anchor and ack, and
stateful bolts whose state the framework checkpoints (docs/design.md §7). At least once.

Storm's ``TopologyBuilder``, as a user writes it::

    class SplitSentence(BaseRichBolt):
        def prepare(self, conf, context, collector):
            self.collector = collector
        def execute(self, tuple):                        # ("the cow jumped",)
            for word in tuple[0].split():
                self.collector.emit((word,), anchors=tuple)   # anchored: part of the tree
            self.collector.ack(tuple)
        def declare_output_fields(self, declarer):
            declarer.declare(Fields("word"))

    builder = TopologyBuilder("word-count")
    builder.set_spout("sentences", RedisStreamSpout(url, "sentences", "wc"), 1)
    builder.set_bolt("split", SplitSentence(), 4).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), 4).fields_grouping("split", Fields("word"))
    run_topology(builder, TopologyConfig(ackers=1, message_timeout_secs=30))

How it runs: the spouts' ``next_tuple`` is called on the driver, which feeds the tuples
to the bolts as micro-batches (one Spark job each, several in flight); every tuple
emitted with a ``msg_id`` is the root of a tree that the acker tracks with Storm's XOR
algorithm (``transactional.engine.core.acker``), and the spout task that emitted it gets
``ack(msg_id)`` when the whole tree was acked, ``fail(msg_id)`` when any tuple of it was
failed or the tree did not complete within ``message_timeout_secs``. Bolt instances live
for one micro-batch (as in transactional topologies: prepare, execute*, cleanup); state
that must outlive it goes through ``BaseStatefulBolt.init_state(KeyValueState)``.

Classes users subclass: ``BaseRichBolt``, ``BaseStatefulBolt``, ``transactional.BaseBasicBolt``
and the spouts of ``spouts.core``. ``OutputCollector`` is what the framework passes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from transactional.bolt import BaseBasicBolt, OutputFieldsDeclarer, TopologyContext
from transactional.exceptions import TopologyError
from transactional.topology import InputDeclarer, Subscription, Topology, _check_id, _check_parallelism, freeze
from transactional.tuples import Tuple

if TYPE_CHECKING:
    from state.keyvalue import KeyValueState

__all__ = ["TopologyBuilder", "BaseRichBolt", "BaseStatefulBolt", "OutputCollector"]

Anchors = Tuple | list[Tuple] | tuple[Tuple, ...] | None


class OutputCollector(Protocol):
    """Given to ``BaseRichBolt.prepare``: emit, anchor, ack and fail (Storm's
    ``OutputCollector``)."""

    def emit(self, values: tuple[Any, ...], anchors: Anchors = None, stream: str = "default") -> list[int]:
        """Send ``values`` to the subscribers of ``stream``; returns the ids of the tasks
        it went to. ``anchors``: an input tuple, or a list of them, whose trees the new
        tuple joins (its failure then fails their spout tuples); None: unanchored, not
        tracked."""
        ...

    def emit_direct(self, task: int, values: tuple[Any, ...], anchors: Anchors = None,
                    stream: str = "default") -> None:
        """Send ``values`` to the task with id ``task`` (a subscriber of the direct ``stream``)."""
        ...

    def ack(self, tuple: Tuple) -> None:
        """``tuple`` is processed: its part of each tree is done (with the tuples anchored
        to it added). Every input must be acked or failed; one never acked fails its
        trees after ``message_timeout_secs``."""
        ...

    def fail(self, tuple: Tuple) -> None:
        """Fail every spout tuple ``tuple`` descends from, now (they are replayed by
        their spouts sooner than a timeout would)."""
        ...

    def report_error(self, error: BaseException) -> None:
        """Log ``error`` against this task (the last one per component is shown by
        ``trident status``) without failing anything."""
        ...


class BaseRichBolt:
    """Storm's ``BaseRichBolt``: anchors and acks explicitly.

    >>> from transactional import Fields
    >>> class Split(BaseRichBolt):
    ...     def prepare(self, conf, context, collector):
    ...         self.collector = collector
    ...     def execute(self, tuple):
    ...         for word in tuple[0].split():
    ...             self.collector.emit((word,), anchors=tuple)
    ...         self.collector.ack(tuple)
    ...     def declare_output_fields(self, declarer):
    ...         declarer.declare(Fields("word"))
    """

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        """Called once per task per micro-batch, before any ``execute``; keep ``collector``."""

    def execute(self, tuple: Tuple) -> None:
        """Called for each input tuple; ack or fail it (now or later in the micro-batch)."""
        msg = f"{type(self).__name__} must implement execute(tuple)"
        raise NotImplementedError(msg)

    def cleanup(self) -> None:
        """Called when the task's micro-batch ends (the instance is then dropped)."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """Declare output streams (no TransactionAttempt field: core tuples carry none)."""


class BaseStatefulBolt(BaseRichBolt):
    """Storm's ``BaseStatefulBolt``: its ``KeyValueState`` is checkpointed by the framework.

    ``init_state(state)`` comes after ``prepare`` and before the first ``execute`` of each
    micro-batch, with the task's state as the last checkpoint left it plus the changes
    since (namespace ``<topology_id>:<component>:<task>``, in the store of
    ``TopologyConfig.state``). Every ``checkpoint_interval_ms`` the framework prepares
    every stateful bolt's changes, then commits them all, and only then acks the tuples
    they processed; a failure rolls every state back to the last checkpoint and fails
    those tuples, so their spouts replay them. Anchor what you emit and ack what you
    processed, as the seed's ``WordCountBolt`` does::

        class WordCount(BaseStatefulBolt):
            def prepare(self, conf, context, collector):
                self.collector = collector
            def init_state(self, state):
                self.counts = state
            def execute(self, tuple):
                n = self.counts.get(tuple["word"], 0) + 1
                self.counts.put(tuple["word"], n)
                self.collector.emit((tuple["word"], n), anchors=tuple)
                self.collector.ack(tuple)

    Stateful bolts run in the commit phase, in micro-batch order, on the driver -- or, with
    ``commit_placement="executors"``, on the executors, every micro-batch a checkpoint
    (``pre_commit``/``pre_rollback`` are then not called: docs/core.md).
    """

    def init_state(self, state: KeyValueState) -> None:
        """The task's state (see the class docstring); keep it."""

    def pre_prepare(self, txid: int) -> None:
        """Hook: just before the framework prepares checkpoint ``txid`` of this state."""

    def pre_commit(self, txid: int) -> None:
        """Hook: just before the framework commits checkpoint ``txid`` of this state."""

    def pre_rollback(self) -> None:
        """Hook: just before the framework rolls this state back to its last checkpoint."""


class TopologyBuilder:
    """Storm's ``TopologyBuilder`` for core (at-least-once) topologies.

    >>> from spouts.core import BaseRichSpout
    >>> from transactional import Fields
    >>> class Numbers(BaseRichSpout):
    ...     def next_tuple(self): pass
    ...     def declare_output_fields(self, declarer): declarer.declare(Fields("n"))
    >>> b = TopologyBuilder("doc-core")
    >>> b.set_spout("numbers", Numbers(), 2)
    >>> _ = b.set_bolt("print", BaseRichBolt(), 2).shuffle_grouping("numbers")
    >>> t = b.build(); t.kind, [c.id for c in t.components]
    ('core', ['numbers', 'print'])
    """

    def __init__(self, topology_id: str) -> None:
        _check_id("topology_id", topology_id)
        self.topology_id = topology_id
        self._spouts: dict[str, tuple[Any, int]] = {}
        self._bolts: dict[str, tuple[Any, int, bool, str]] = {}
        self._inputs: dict[str, list[Subscription]] = {}

    def _new_id(self, what: str, cid: str) -> None:
        _check_id(what, cid)
        if cid in self._spouts or cid in self._bolts:
            msg = f"component id {cid!r} is used twice; ids must be unique"
            raise TopologyError(msg)

    def set_spout(self, spout_id: str, spout: Any, parallelism: int = 1) -> None:
        """Add a core spout (``spouts.BaseRichSpout``) with ``parallelism`` tasks; each task
        is an instance of its own on the driver, told ``ack``/``fail`` of what it emitted."""
        self._new_id("spout id", spout_id)
        if not callable(getattr(spout, "next_tuple", None)) or not hasattr(spout, "declare_output_fields"):
            msg = (f"spout {spout_id!r} ({type(spout).__name__}) is not a core spout; subclass "
                   "spouts.BaseRichSpout (next_tuple, ack, fail, declare_output_fields). Transactional "
                   "spouts go in a TransactionalTopologyBuilder")
            raise TopologyError(msg)
        self._spouts[spout_id] = (spout, _check_parallelism(spout_id, parallelism))

    def set_bolt(self, bolt_id: str, bolt: Any, parallelism: int = 1) -> InputDeclarer:
        """Add a bolt (``BaseRichBolt``, ``BaseStatefulBolt``, ``BaseBasicBolt``, or a windowed
        bolt of ``transactional.windowing``) with ``parallelism`` tasks; subscribe it with the
        returned declarer's groupings (and ``add_configuration`` for its own settings)."""
        self._new_id("bolt id", bolt_id)
        from transactional.windowing import BaseStatefulWindowedBolt, BaseWindowedBolt

        if isinstance(bolt, BaseWindowedBolt):   # its windows live in the commit phase, on the driver
            how = "swindowed" if isinstance(bolt, BaseStatefulWindowedBolt) else "windowed"
            bolt.window_config.check(bolt_id)
            self._bolts[bolt_id] = (bolt, _check_parallelism(bolt_id, parallelism), True, how)
            self._inputs[bolt_id] = []
            return InputDeclarer(self, bolt_id)   # type: ignore[arg-type]  # it reads only _inputs
        if isinstance(bolt, BaseStatefulBolt):
            how = "stateful"
        elif isinstance(bolt, BaseRichBolt):
            how = "rich"
        elif isinstance(bolt, BaseBasicBolt):
            how = "basic"
        else:
            msg = (f"bolt {bolt_id!r} is a {type(bolt).__name__}; subclass BaseRichBolt, BaseStatefulBolt "
                   "(transactional.core), BaseWindowedBolt (transactional.windowing) or BaseBasicBolt. Batch bolts go in a TransactionalTopologyBuilder")
            raise TopologyError(msg)
        self._bolts[bolt_id] = (bolt, _check_parallelism(bolt_id, parallelism), how == "stateful", how)
        self._inputs[bolt_id] = []
        return InputDeclarer(self, bolt_id)   # type: ignore[arg-type]  # it reads only _inputs

    def build(self) -> Topology:
        """Validate and freeze; ``TopologyError`` names the problem and the fix."""
        if not self._spouts:
            msg = f"topology {self.topology_id!r} has no spout; add one with set_spout"
            raise TopologyError(msg)
        from transactional.windowing import check_windowed

        topology = freeze(self.topology_id, self._spouts, self._bolts, self._inputs, "core",
                          getattr(self, "_confs", None))
        check_windowed(topology)
        return topology

    create_topology = build
