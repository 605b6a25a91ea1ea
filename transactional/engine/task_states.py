"""User state for committer tasks on executors: ``ExecutorStates`` ships with the commit
job, and each task reaches its maps through ``TaskStates``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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

    def for_task(self, component: str, task: int) -> TaskStates:
        return TaskStates(self, component, task)


class TaskStates:
    """One committer task's maps on an executor: opened on first use, each writing its
    share of the txid when the task ends (``finish``), as writer ``<component>.<task>``."""

    def __init__(self, spec: ExecutorStates, component: str, task: int) -> None:
        self.spec = spec
        self.component = component
        self.task = task
        self.maps: dict[str, Any] = {}

    @property
    def epoch(self) -> int | None:
        """The driver's epoch (``TaskContext.epoch``)."""
        return self.spec.epoch

    def map_state(self, name: str, opaque: bool | str = False) -> Any:
        from state.map import map_kind, open_map
        from transactional.exceptions import ConfigError

        m = self.maps.get(name)
        if m is not None:
            return m
        map_kind(name, opaque, {})      # a map name and a kind
        s = self.spec
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
        first, in one atomic step (``state.map.commit_maps``)."""
        from state.map import commit_maps

        commit_maps(list(self.maps.values()), self.spec.txid)

    def abort(self) -> None:
        for m in self.maps.values():
            m.abort()
