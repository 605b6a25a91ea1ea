"""The maps of a run on the driver (docs/design.md §5): ``StateRegistry`` opens each map
over the configured backing, fences its writes with the driver's epoch, buffers a txid's
updates and writes them once per commit, and tells committer tasks on executors which
maps exist. The engine (``transactional.engine.driver``) owns one per run."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from state.keys import check_state_name
from state.map import (
    CommitScope,
    Fence,
    MapState,
    OpaqueMap,
    TransactionalMap,
    commit_maps,
    map_class,
    map_kind,
    open_map,
    open_map_backing,
)
from transactional.config import TopologyConfig
from transactional.engine.plan import ExecutionPlan, new_bolt
from transactional.engine.task import TaskContext
from transactional.engine.task_states import DriverTaskStates, ExecutorStates
from transactional.tuples import TransactionAttempt

log = logging.getLogger("trident")


class StateRegistry:
    """The maps of a run, on the driver: one per state name, over the configured backing.

    Every map's writes are fenced by this driver's ``epoch`` (taken durably with the lock,
    ``CoordinatorStore.take_epoch``) under the topology's fence scope; ``raise_epoch``
    raises that fence when the driver starts, so from then on every write of an older
    driver is refused, whatever map it goes to. The names and kinds of the maps ever used
    are kept durably (``record_map``), so that a commit that must repair what a failed
    attempt of its txid left in an ``OpaqueMap`` finds that map even when this attempt
    does not use it.
    """

    def __init__(self, config: TopologyConfig, topology_id: str,
                 record_map: Callable[[str, str], None] | None = None) -> None:
        """``record_map(name, kind)`` stores a map's name and kind durably (the engine
        binds it to ``CoordinatorStore.record_map``)."""
        self.config = config
        self.topology_id = topology_id
        self.maps: dict[str, MapState[Any]] = {}
        self.known: dict[str, str] = {}          # name -> kind, of every map this topology used
        self.epoch: int | None = None
        self.scope: CommitScope | None = None
        self.last_committed: int | None = None
        self.record_map = record_map

    def map_state(self, name: str, opaque: bool | str = False) -> MapState[Any]:
        """The map called ``name`` (``OpaqueMap`` when ``opaque``; or a kind of
        ``state.map.MAP_KINDS``), in the current commit."""
        m = self.maps.get(name)
        kind = map_kind(name, opaque, self.known if m is None else {name: m.kind})   # one name, one kind
        if m is None:
            if name not in self.known:
                self.known[name] = kind.kind
                if self.record_map is not None:
                    self.record_map(name, kind.kind)   # durable before the map's first write
            m = self._open(name, kind)
        return m

    def _open(self, name: str, kind: type[MapState[Any]]) -> MapState[Any]:
        # the kind is the caller's (map_state checked it against the known kinds)
        m = self.maps[name] = open_map(name, kind.kind, url=self.config.state, scope=self.topology_id, known={},
                                       options=self.options())
        m.last_committed = self.last_committed
        if self.scope is not None:
            m.begin_commit(self.scope.txid, self.scope.attempt, epoch=self.scope.epoch, time_ms=self.scope.time_ms)
        return m

    def options(self) -> dict[str, Any]:
        opts = dict(self.config.state_options)
        if not self.config.state.startswith("memory:"):
            opts.setdefault("connect_timeout", self.config.connect_timeout_secs)
        return opts

    def raise_epoch(self, epoch: int) -> None:
        """Take ``epoch`` for this driver's writes and raise the topology's fence to it
        (reaching the configured state once: a clear error before any batch when it
        cannot). Raises ``LeadershipLostError`` if a newer driver has raised it already."""
        self.epoch = epoch
        check = open_map_backing(self.config.state, f"{self.topology_id}:~epoch",
                                 fence_scope=self.topology_id, **self.options())
        check.multi_put([], [], Fence(epoch, None))

    def existing(self, name: str, opaque: bool | str | None = None) -> MapState[Any]:
        """The map ``name`` for reading after a run (opened if this run did not use it)."""
        if name not in self.maps:
            check_state_name(name)
            self._open(name, map_class(self.known.get(name, TransactionalMap.kind) if opaque is None else opaque))
        return self.maps[name]

    def begin(self, txid: int, attempt: int, rollback: Sequence[str] = (), time_ms: int | None = None) -> None:
        """Start the commit of ``txid``, whose recorded time is ``time_ms`` (maps with a TTL
        decide expiry by it). ``rollback``: an earlier attempt of it began its
        commit; every opaque map this topology ever used puts back what these writers
        (the driver, committer tasks) wrote for a failed attempt of ``txid``."""
        self.scope = CommitScope(txid, attempt, self.epoch, time_ms)
        for m in self.maps.values():
            m.begin_commit(txid, attempt, epoch=self.epoch, time_ms=time_ms)
        if rollback:
            for name, kind in self.known.items():
                if kind == OpaqueMap.kind:
                    with _naming_map(name):
                        n = self.map_state(name, opaque=True).rollback(rollback)
                    if n:
                        log.info("txid %d: put back %d value(s) of map %r that a failed attempt "
                                 "wrote", txid, n, name)

    def commit(self, txid: int) -> None:
        """Write every map's changes of ``txid``: all checked storable before any is
        written, then the maps of one store in one fenced atomic write
        (``state.map.commit_maps``), so ``txid`` is visible in all of them or in none."""
        commit_maps(list(self.maps.values()), txid)
        self.scope = None

    def for_task(self, component: str, task: int) -> DriverTaskStates:
        """Commit tasks on the driver share the registry's maps: they write when the whole
        commit phase succeeded (``commit``), not when a task ends, and a failed task leaves
        the abort to the engine."""
        return DriverTaskStates(component, task, epoch=self.epoch, maps=self)

    def declare(self, plan: ExecutionPlan, conf: dict[str, Any]) -> None:
        """Find the maps the committers open in ``prepare`` (run on the driver against a
        recording context) and record them, before the first commit: committer tasks on
        executors open only declared maps (see ``transactional.engine.task_states.ExecutorTaskStates``)."""
        topology = plan.topology
        for stage in plan.commit:
            c = topology.component(stage.component)
            asked = _Declared()
            ctx = TaskContext(topology, c, 0, "commit", DriverTaskStates(c.id, 0, maps=asked))
            try:
                new_bolt(stage, c).prepare(conf, ctx, _NoCollector(), TransactionAttempt(0, 0))
            except Exception as e:  # noqa: BLE001 - prepare may need more than a context here
                log.debug("declaring the maps of %r: prepare raised %r", c.id, e)
            for name, opaque in asked.asked:
                kind = map_kind(name, opaque, self.known, by=repr(c.id)).kind    # one name, one kind
                if name not in self.known:
                    self.known[name] = kind
                    if self.record_map is not None:
                        self.record_map(name, kind)

    def for_executors(self, txid: int, attempt: int) -> ExecutorStates:
        """What committer tasks on executors need to open their maps for this attempt."""
        return ExecutorStates(self.config.state, self.options(), self.topology_id, self.epoch, txid,
                              attempt, dict(self.known), None if self.scope is None else self.scope.time_ms)

    def committed(self, txid: int) -> None:
        """``txid`` is recorded as committed: reads after the run show values as of it."""
        self.last_committed = txid
        for m in self.maps.values():
            m.last_committed = txid

    def abort(self) -> None:
        """End the current commit, writing nothing more."""
        for m in self.maps.values():
            m.abort()
        self.scope = None


@contextlib.contextmanager
def _naming_map(name: str) -> Iterator[None]:
    """Tag an exception raised while reading or writing map ``name`` with its name."""
    try:
        yield
    except Exception as e:
        e.trident_map = name  # type: ignore[attr-defined]
        raise


class _Declared:
    """The maps a committer's ``prepare``, run on the driver, asks for (``declare``)."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, bool | str]] = []

    def map_state(self, name: str, opaque: bool | str = False) -> Any:
        """Noted; no map is opened."""
        self.asked.append((name, opaque))
        return None


class _NoCollector:
    def emit(self, *args: Any, **kwargs: Any) -> None:
        pass

    emit_direct = report_error = emit
