"""One door to state for a task: ``TaskStates``, what ``TaskContext`` hands a bolt (maps,
its ``KeyValueState``, its windows, the states of the user's ``StateFactory``-s, the
driver's epoch), with two implementations: ``DriverTaskStates`` (tasks that run on the
driver: the driver's maps, the checkpointer's key-value states, the window keeper) and
``ExecutorTaskStates`` (committer tasks on executors: maps opened from the commit job's
``ExecutorStates``, key-value states prepared when the task ends). A task asks for a kind
of state it does not have and gets a ``RuntimeError`` naming the component and what has
it; nothing probes which kind a door is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from transactional.engine.user_states import TaskUserStates


class TaskStates(Protocol):
    """One task's door to state (module docstring). The engine makes one per task and
    batch (``for_task(component, task)`` of the phase's states), calls ``finish`` when the
    task ended well and ``abort`` when it failed."""

    #: the task's ``StateFactory`` states (``TaskContext.state``), set by ``run_task``
    user: TaskUserStates | None

    @property
    def epoch(self) -> int | None:
        """The driver's epoch (``TaskContext.epoch``), None where none fences."""
        ...

    def map_state(self, name: str, opaque: bool | str = False) -> Any:
        """The topology's map ``name`` of kind ``opaque`` (``state.map.map_class``)."""
        ...

    def key_value_state(self, owner: Any = None) -> Any:
        """The task's ``KeyValueState``; ``owner`` hears the checkpoint hooks."""
        ...

    def window_state(self) -> Any:
        """The task's windows (windowed bolts of core topologies)."""
        ...

    def user_state(self, factory: Any) -> Any:
        """The state ``factory`` makes for this task, in the commit of this batch."""
        ...

    def finish(self) -> None:
        """The task ended well: write (or keep buffered) what it changed."""
        ...

    def abort(self) -> None:
        """The task failed: drop what it buffered."""
        ...


class KeyValueTask(Protocol):
    """The key-value part of a task's door (``engine.core.checkpoint``'s per-task record)."""

    def key_value_state(self, owner: Any = None) -> Any:
        """The task's ``KeyValueState``, opened on first use."""
        ...

    def finish(self) -> None:
        """The task ended well."""
        ...

    def abort(self) -> None:
        """The task failed."""
        ...


class MapSource(Protocol):
    """Where a driver task's maps come from (``engine.maps.StateRegistry``)."""

    def map_state(self, name: str, opaque: bool | str = False) -> Any:
        """The map ``name`` as ``opaque``."""
        ...


class WindowSource(Protocol):
    """Where a driver task's windows come from (``engine.core.window_keeper.WindowKeeper``)."""

    def task(self, component: str, task: int) -> Any:
        """The windows of ``component``'s task ``task``."""
        ...


class TaskStatesBase:
    """What both implementations share: the task, the kinds of state it has, and the
    refusals of those it has not. As it is, a task with no state (the processing phase)."""

    def __init__(self, component: str, task: int, epoch: int | None = None,
                 key_value: KeyValueTask | None = None) -> None:
        self.component, self.task = component, task
        self._epoch = epoch
        self.key_value = key_value
        self.user: TaskUserStates | None = None

    @property
    def epoch(self) -> int | None:
        """The driver's epoch, None where none fences."""
        return self._epoch

    def map_state(self, name: str, opaque: bool | str = False) -> Any:
        """Refused: this task has no maps."""
        msg = (f"map_state({name!r}) is not available in {self.component!r}: "
               "user state is reached from committers and bolts of the commit phase")
        raise RuntimeError(msg)

    def key_value_state(self, owner: Any = None) -> Any:
        """The task's ``KeyValueState`` (stateful bolts of core topologies)."""
        if self.key_value is None:
            msg = f"{self.component!r} has no KeyValueState: only stateful bolts of core topologies do"
            raise RuntimeError(msg)
        return self.key_value.key_value_state(owner)

    def window_state(self) -> Any:
        """Refused: this task has no windows."""
        msg = f"{self.component!r} has no windows: only windowed bolts of core topologies do"
        raise RuntimeError(msg)

    def user_state(self, factory: Any) -> Any:
        """The state ``factory`` makes for this task (``TaskUserStates.state``)."""
        if self.user is None:
            msg = f"{self.component!r}: context.state() is only available while a task runs"
            raise RuntimeError(msg)
        return self.user.state(factory)

    def finish(self) -> None:
        """The task ended well: its key-value changes stay pending until a checkpoint."""
        if self.key_value is not None:
            self.key_value.finish()

    def abort(self) -> None:
        """The task failed."""
        if self.key_value is not None:
            self.key_value.abort()


class DriverTaskStates(TaskStatesBase):
    """A task's door on the driver: the driver's maps (``maps``; shared by every commit
    task, written when the whole commit phase succeeded, not when a task ends; a failed
    task leaves the abort to the engine), the checkpointer's ``KeyValueState`` of the task
    (``key_value``) and the window keeper's windows (``windows``)."""

    def __init__(self, component: str, task: int, *, epoch: int | None = None, maps: MapSource | None = None,
                 key_value: KeyValueTask | None = None, windows: WindowSource | None = None) -> None:
        super().__init__(component, task, epoch, key_value)
        self.maps, self.windows = maps, windows

    def map_state(self, name: str, opaque: bool | str = False) -> Any:
        """The driver's map ``name``."""
        if self.maps is None:
            return super().map_state(name, opaque)
        return self.maps.map_state(name, opaque)

    def window_state(self) -> Any:
        """The task's windows, kept on the driver across micro-batches."""
        if self.windows is None:
            return super().window_state()
        return self.windows.task(self.component, self.task)


@dataclass(frozen=True)
class ExecutorStates:
    """What committer tasks on executors need to reach user state, shipped with the commit
    job: the state URL and options, the topology, the driver's epoch, the attempt, and the
    maps the topology declared (name -> kind). Each task opens its own backings."""

    url: str
    options: dict[str, Any]
    topology_id: str
    epoch: int | None
    txid: int
    attempt: int
    known: dict[str, Any]
    time_ms: int | None = None

    def for_task(self, component: str, task: int) -> ExecutorTaskStates:
        """Task ``task`` of ``component``'s door."""
        return ExecutorTaskStates(component, task, maps=self)


class ExecutorTaskStates(TaskStatesBase):
    """A committer task's door on an executor: its maps (``maps``) opened on first use,
    each writing its share of the txid when the task ends (``finish``), as writer
    ``<component>.<task>``; its ``KeyValueState`` (``key_value``) prepared then."""

    def __init__(self, component: str, task: int, *, maps: ExecutorStates | None = None,
                 key_value: KeyValueTask | None = None) -> None:
        super().__init__(component, task, None if maps is None else maps.epoch, key_value)
        self.spec = maps
        self.maps: dict[str, Any] = {}

    def map_state(self, name: str, opaque: bool | str = False) -> Any:
        """The map ``name``, opened here from the commit job's ``ExecutorStates``: only a
        map the topology declared, as its declared kind."""
        from state.map import map_kind, open_map
        from transactional.exceptions import ConfigError

        s = self.spec
        if s is None:
            return super().map_state(name, opaque)
        m = self.maps.get(name)
        if m is not None:
            return m
        map_kind(name, opaque, {})      # a map name and a kind
        if name not in s.known:
            msg = (
                f"map state {name!r} is opened by {self.component!r} task {self.task} on an executor, "
                "but the topology did not declare it: with commit_placement='executors', open "
                "maps in prepare() with context.map_state(...), where the driver finds them "
                "before the first commit"
            )
            raise ConfigError(msg)
        m = self.maps[name] = open_map(name, opaque, url=s.url, scope=s.topology_id, known=s.known, options=s.options,
                                       writer=f"{self.component}.{self.task}", shared_writes=True,
                                       by=f"{self.component!r} task {self.task}")   # one name, one kind
        m.begin_commit(s.txid, s.attempt, epoch=s.epoch, time_ms=s.time_ms)
        return m

    def finish(self) -> None:
        """The task ended: write its share of every map it used, all checked storable
        first, in one atomic step (``state.map.commit_maps``); prepare its key-value state."""
        from state.map import commit_maps

        if self.spec is not None:
            commit_maps(list(self.maps.values()), self.spec.txid)
        super().finish()

    def abort(self) -> None:
        """The task failed: its maps write nothing."""
        for m in self.maps.values():
            m.abort()
        super().abort()
