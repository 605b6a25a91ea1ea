"""One spout executor for the three spout kinds (docs/design.md §6).

Driver side, ``SpoutPlanner`` turns any spout into "plan the metadata of txid t", and
``SpoutsPlanner`` plans every spout of a topology under one txid: it is the transactional
topologies' ``Planner`` (the interface the engine plans a topology's txids through; a core
topology's is ``transactional.engine.core.spout_planner.CoreSpoutPlanner``) (metadata
``{spout_id: meta}``, None for a spout with nothing in that txid; replays follow
``transactional.engine.replay.SpoutsReplay``); executor side, ``emit_spout_task`` runs one
emitter task of a batch (``fetch_group`` reads the partitions of several at once, for an
emitter with ``fetch_partitions``). Partitioned spouts keep a *partition state* (partition
-> its latest metadata) that each planned batch advances; a batch's metadata holds only
the partitions it reads.

Where a partition with no batch yet begins is decided once per topology, not once per
driver: for a coordinator with ``initial_meta`` (transactional/spout.py) the planner stores it in
the coordinator state (``TransactionalState``) at::

    starts/<spout_id>  {"initial_partitions": n, "partitions": {"<p>": <empty meta where p begins>}}

``initial_partitions`` is the number of partitions when the topology first planned
(written once): partitions ``>= n`` were added later and are asked with
``new_partition=True``. ``partitions`` gets an entry when a partition's start is first
decided and keeps it; the record is written before ``plan`` returns a batch that reads
from it, and a partition missing from the partition state continues from its entry here
(also after a restart, and when an opaque spout plans uncommitted txids again).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from state.base import JSON_TYPES, json_problem
from transactional.exceptions import SpoutError, StateCorruptError, TopologyError
from transactional.spout import OpaquePartitionedTransactionalSpout, PartitionedTransactionalSpout, TransactionalSpout
from transactional.tuples import TransactionAttempt

if TYPE_CHECKING:
    from transactional.engine.replay import ReplayPolicy

log = logging.getLogger(__name__)


class Planner(Protocol):
    """The spouts of a topology as the engine plans its txids through them, on the driver
    (``SpoutsPlanner`` for transactional topologies, ``CoreSpoutPlanner`` for core ones).
    ``policy`` is the coordinator's replay policy for them."""

    policy: ReplayPolicy

    def plan(self, txid: int, states: dict[str, Any] | None, keep: Any = None) -> tuple[Any, Any] | None:
        """``(metadata, state after it)`` of ``txid``, or None when no spout has anything now."""

    def fed(self, txid: int) -> dict[str, list[list[Any]]] | None:
        """The records the driver feeds ``txid``'s processing job (None: its spout stages emit)."""

    def discard(self, txid: int) -> None:
        """``txid``'s attempt failed or was cancelled."""

    def tick(self, now: float) -> None:
        """Time passed: the spouts' timers."""

    def next_wakeup(self) -> float | None:
        """When the spouts' next timer is due, or None."""

    def busy(self) -> bool:
        """True when the spouts have work outside the coordinator's txids."""

    def backlogged(self) -> bool:
        """True when the last ``plan`` left input behind (a spout's batch hit its cap): the
        launch policy (``transactional.engine.launch``) fills every slot then. Default:
        True (a planner that cannot tell is planned as Storm does, whenever a slot is free)."""
        return True

    def pending(self) -> dict[str, int]:
        """Tracked spout tuples not yet decided, per spout."""

    def committed(self, txid: int, meta: Any) -> None:
        """``txid`` (metadata ``meta``) is committed."""

    def close(self, ok: bool = True) -> None:
        """The run ended (``ok``: without an error)."""


@dataclass
class SpoutContext:
    topology_id: str
    component_id: str
    task_index: int
    num_tasks: int


def spout_kind(spout: Any) -> str:
    """"opaque", "partitioned" or "plain"."""
    if isinstance(spout, OpaquePartitionedTransactionalSpout) or (
            isinstance(spout, PartitionedTransactionalSpout) and getattr(spout, "opaque", False)):
        return "opaque"
    if isinstance(spout, PartitionedTransactionalSpout):
        return "partitioned"
    if isinstance(spout, TransactionalSpout) or hasattr(spout, "get_coordinator"):
        return "plain"
    msg = f"{type(spout).__name__} is not a transactional spout"
    raise TopologyError(msg)


class SpoutPlanner:
    """Driver side of a spout: plans each txid's metadata.

    ``state``: the topology's coordinator state, where partition starts are kept (see
    the module docstring); None keeps them in this planner only (tests)."""

    def __init__(self, spout: Any, conf: dict[str, Any], topology_id: str, spout_id: str, parallelism: int, *,
                 state: Any = None) -> None:
        self.kind = spout_kind(spout)
        self.coordinator = spout.get_coordinator(conf, SpoutContext(topology_id, spout_id, 0, parallelism))
        self.spout_id = spout_id
        self.state = state
        self.starts_key = f"starts/{spout_id}"
        self._starts: dict[str, Any] | None = None     # the "starts" record, read on first use

    @property
    def partitioned(self) -> bool:
        return self.kind != "plain"

    def plan(self, txid: int, prev_meta: Any, partitions: dict[Any, Any] | None) -> tuple[Any, dict[str, Any] | None] | None:
        """``(meta, partition state after it)`` for ``txid``, or None when there is
        nothing to emit now. ``prev_meta`` is txid-1's metadata; ``partitions`` the
        partition state after txid-1."""
        c = self.coordinator
        if not c.is_ready():
            return None
        if not self.partitioned:
            return self._json(c.initialize_transaction(txid, prev_meta), txid, "initialize_transaction"), None
        partitions = dict(partitions or {})
        n = c.num_partitions()
        initial_meta: Any = getattr(c, "initial_meta", None)
        starts = self._load_starts(n) if initial_meta is not None else None
        decided = False
        lasts: dict[int, Any] = {}
        for p in range(n):
            last = partitions.get(str(p))
            if last is None and starts is not None:
                last = starts["partitions"].get(str(p))
                if last is None:
                    last = initial_meta(p, p >= starts["initial_partitions"])
                    if last is None:
                        continue             # cannot tell where it begins now: ask again next time
                    self._json({str(p): last}, txid, "initial_meta")
                    starts["partitions"][str(p)] = last
                    decided = True
            lasts[p] = last
        # all partitions in one call (one round to the source where it offers that)
        plan_all = getattr(c, "plan_partitions", None)
        planned = plan_all(lasts) if plan_all is not None else {p: c.plan_partition(p, m) for p, m in lasts.items()}
        meta = {str(p): planned[p] for p in lasts if planned.get(p) is not None}
        if decided:
            self._store_starts()             # before any batch reads from a new start
        if not meta:
            return None
        self._json(meta, txid, "plan_partition")
        partitions.update(meta)
        return meta, partitions

    def _json(self, meta: Any, txid: int, call: str) -> Any:
        """``meta`` when JSON can hold it (the coordinator state keeps batch metadata as
        JSON, on every backend: ``state.base.json_problem``), else ``SpoutError`` naming
        the spout, the txid and the field -- before anything of the txid is written."""
        problem = json_problem(meta, "meta")
        if problem is None:
            return meta
        msg = (f"spout {self.spout_id!r}: {type(self.coordinator).__name__}.{call}() planned metadata for txid {txid} "
               f"that JSON cannot hold: {problem}. Batch metadata is stored as JSON in the coordinator state "
               f"(memory:// and zk:// alike): plan {JSON_TYPES} (e.g. a sorted list instead of a set). "
               f"Nothing of txid {txid} was written")
        raise SpoutError(msg)

    def _load_starts(self, partitions_now: int) -> dict[str, Any]:
        """The "starts" record (read once; created, and stored, on the topology's first plan)."""
        if self._starts is None:
            stored = self.state.get(self.starts_key) if self.state is not None else None
            if stored is None:
                self._starts = {"initial_partitions": partitions_now, "partitions": {}}
                self._store_starts()
            elif (isinstance(stored, dict) and isinstance(stored.get("initial_partitions"), int)
                  and isinstance(stored.get("partitions", {}), dict)):
                self._starts = {"initial_partitions": stored["initial_partitions"],
                                "partitions": dict(stored.get("partitions") or {})}
            else:
                msg = (f"the coordinator state's {self.starts_key!r} record of topology {self.state.topology_id!r} is "
                       f"{stored!r}, not {{'initial_partitions': n, 'partitions': {{...}}}}; was it written by "
                       "something else? Delete it only if every partition has had a batch (partitions "
                       "without one would start anew)")
                raise StateCorruptError(msg)
        return self._starts

    def _store_starts(self) -> None:
        if self.state is not None:
            self.state.set(self.starts_key, self._starts)

    def committed(self, txid: int, meta: Any) -> None:
        self.coordinator.committed(txid, meta)

    def close(self) -> None:
        self.coordinator.close()


class SpoutsPlanner(Planner):
    """Every spout of a topology, planned under one txid (Storm's MasterBatchCoordinator
    with its list of spouts). ``policy`` is the coordinator's replay policy for them."""

    def __init__(self, topology: Any, conf: dict[str, Any], *, state: Any = None) -> None:
        from transactional.engine.replay import OpaqueReplay, SpoutsReplay, TransactionalReplay

        self.planners: dict[str, SpoutPlanner] = {}
        try:
            for spec in topology.spouts:
                self.planners[spec.id] = SpoutPlanner(spec.new_instance(), conf, topology.topology_id, spec.id,
                                                      spec.parallelism, state=state)
        except BaseException:
            self.close()
            raise
        self.policy = SpoutsReplay({sid: OpaqueReplay() if p.kind == "opaque" else TransactionalReplay(p.partitioned)
                                    for sid, p in self.planners.items()})

    @property
    def kinds(self) -> dict[str, str]:
        return {sid: p.kind for sid, p in self.planners.items()}

    def plan(self, txid: int, states: dict[str, Any] | None, keep: Any = None) -> tuple[Any, Any] | None:
        """``(meta, states after it)`` for ``txid``, or None when no spout has anything
        now. ``states``: each spout's state after txid-1 (``SpoutsReplay.advance``);
        ``keep``: the spouts whose part is fixed (a replay), which are not asked."""
        states = states or {}
        meta: dict[str, Any] = {}
        for sid, p in self.planners.items():
            if keep is not None and sid in keep:
                meta[sid] = keep[sid]
                continue
            last = states.get(sid)
            planned = p.plan(txid, None if p.partitioned else last, last if p.partitioned else None)
            meta[sid] = None if planned is None else planned[0]
        if all(m is None for m in meta.values()):
            return None
        return meta, self.policy.advance(states, meta)

    def fed(self, txid: int) -> dict[str, list[list[Any]]] | None:
        """Transactional spouts emit in their own tasks: nothing is fed from the driver."""
        return None

    def discard(self, txid: int) -> None:
        """A txid failed: its metadata is kept by the coordinator; nothing to drop here."""

    def tick(self, now: float) -> None:
        """Nothing runs on time here (the coordinator has the timeouts)."""

    def next_wakeup(self) -> float | None:
        """No timers of its own."""
        return None

    def busy(self) -> bool:
        """No work outside the coordinator's txids."""
        return False

    def backlogged(self) -> bool:
        """True when a spout's coordinator says its last plan left input behind
        (``backlogged()`` of ``transactional.spout``'s coordinators; one without it counts as
        backlogged)."""
        for p in self.planners.values():
            ask = getattr(p.coordinator, "backlogged", None)
            if ask is None or ask():
                return True
        return False

    def pending(self) -> dict[str, int]:
        """No spout tuples are tracked (that is for core topologies)."""
        return {}

    def committed(self, txid: int, meta: Any) -> None:
        """Tell each spout's coordinator that its part of ``txid`` is committed."""
        for sid, p in self.planners.items():
            m = (meta or {}).get(sid)
            if m is not None:
                p.committed(txid, m)

    def close(self, ok: bool = True) -> None:
        """Close every spout's coordinator."""
        for p in self.planners.values():
            try:
                p.close()
            except Exception as e:  # noqa: BLE001 - one spout's close must not keep the others open
                log.warning("closing spout coordinator: %r", e)


_EMITTERS: dict[tuple[Any, ...], Any] = {}


def _emitter(run_id: str, spout: Any, conf: dict[str, Any], ctx: SpoutContext) -> Any:
    key = (run_id, ctx.component_id, ctx.task_index)
    e = _EMITTERS.get(key)
    if e is None:
        # an earlier run's emitters in this worker are closed and dropped
        for old in [k for k in _EMITTERS if k[0] != run_id]:
            try:
                _EMITTERS.pop(old).close()
            except Exception:  # noqa: BLE001 - closing stale emitters is best effort
                pass
        e = _EMITTERS[key] = [spout.get_emitter(conf, ctx), 0]
    return e


def fetch_partitions(emitter: Any, tx: TransactionAttempt, metas: dict[int, Any]) -> dict[int, Any]:
    """Partition -> its ``emit(collector)``, read together by an emitter that has the optional
    ``fetch_partitions`` (``transactional.spout.PartitionedEmitter``); {} for one without it
    (its partitions are emitted one by one). An exception of the read fails each partition."""
    fetch = getattr(emitter, "fetch_partitions", None)
    if fetch is None or not metas:
        return {}
    try:
        return dict(fetch(tx, metas))
    except Exception as e:  # noqa: BLE001 - each partition's emit raises it, in its task
        return {p: functools.partial(_raise, e) for p in metas}


def _raise(e: BaseException, collector: Any) -> Any:
    raise e


def fetch_group(run_id: str, spout: Any, kind: str, conf: dict[str, Any], ctx: SpoutContext, tasks: Sequence[int],
                tx: TransactionAttempt, meta: Any) -> dict[int, Any] | None:
    """The partitions of every task in ``tasks`` (emitter tasks of one spout that this
    process runs next, one after the other, ``ctx`` the first's) read at once by the first
    task's emitter: partition -> its ``emit(collector)``, for ``emit_spout_task`` to hand
    each task its own. None when there is nothing to read together (one task, a plain spout,
    an emitter without ``fetch_partitions``)."""
    if kind == "plain" or len(tasks) < 2 or not meta:
        return None
    emitter = _emitter(run_id, spout, conf, ctx)[0]
    if getattr(emitter, "fetch_partitions", None) is None:
        return None
    group = set(tasks)
    metas = {int(p): m for p, m in meta.items() if int(p) % ctx.num_tasks in group}
    return fetch_partitions(emitter, tx, metas)


def emit_spout_task(run_id: str, spout: Any, kind: str, conf: dict[str, Any], ctx: SpoutContext,
                    tx: TransactionAttempt, meta: Any, collector: Any, cleanup_before: int,
                    fetched: dict[int, Any] | None = None) -> dict[str, Any] | None:
    """Run emitter task ``ctx.task_index`` for batch ``tx``. Returns, for opaque spouts,
    the metadata actually emitted per partition of this task. ``fetched``: partitions
    already read (``fetch_group``); each of this task's is taken out of it as it is emitted.
    The task's other partitions are read together when the emitter can
    (``fetch_partitions``), else one by one."""
    slot = _emitter(run_id, spout, conf, ctx)
    emitter = slot[0]
    if cleanup_before > slot[1]:
        emitter.cleanup_before(cleanup_before)
        slot[1] = cleanup_before
    if kind == "plain":
        emitter.emit_batch(tx, meta, collector)
        return None
    mine = [(p, m) for p, m in meta.items() if int(p) % ctx.num_tasks == ctx.task_index]
    fetched = {} if fetched is None else fetched
    fetched.update(fetch_partitions(emitter, tx, {int(p): m for p, m in mine if int(p) not in fetched}))
    actual = {}
    for p, m in mine:
        emit = fetched.pop(int(p), None)
        got = emit(collector) if emit is not None else emitter.emit_partition_batch(tx, collector, int(p), m)
        if kind == "opaque":
            actual[p] = m if got is None else got
    return actual if kind == "opaque" else None
