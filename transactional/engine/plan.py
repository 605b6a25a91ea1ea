"""The plan: a topology compiled, once, into stages (docs/design.md §4).

``compile_plan(topology)`` turns a topology, once, into stages: one emitter stage per
spout, then one stage per bolt, each with its **phase** (``processing``: may run for
several batches at once; ``commit``: committers and everything downstream of one,
strictly in txid order) and its **placement** (``executors``: Spark tasks; ``driver``:
the driver process). ``transactional.engine.interpreter`` runs a plan for one attempt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from transactional.engine.task import TRANSACTIONAL_TASKS, TaskKind
from transactional.topology import ComponentSpec, Topology

PROCESSING, COMMIT = "processing", "commit"
EXECUTORS, DRIVER = "executors", "driver"


# -- the plan ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Stage:
    """One component as the interpreter runs it."""

    component: str
    index: int                    # position in ``Topology.components`` (the record key's prefix)
    kind: str                     # "spout" or "bolt"
    phase: str                    # PROCESSING or COMMIT
    placement: str                # EXECUTORS or DRIVER
    parallelism: int
    sources: tuple[str, ...]      # components it reads, each once
    local: bool                   # local_or_shuffle: task i reads task i of its one source
    persist: bool                 # its output is read more than once in its phase
    task_kind: TaskKind = TRANSACTIONAL_TASKS   # how its tasks run: its topology kind's task life
    adapter: str = ""             # how its bolt becomes a batch bolt (``task_kind.adapters``); "" for a spout


@dataclass(frozen=True)
class ExecutionPlan:
    """A compiled topology: its stages by phase, and what crosses from one phase to the next."""

    topology: Topology
    processing: tuple[Stage, ...]
    commit: tuple[Stage, ...]
    handoff: tuple[str, ...]      # processing stages whose output the commit phase (or nobody) reads
    commit_indexes: frozenset[int]

    @property
    def commits_on_executors(self) -> bool:
        return any(s.placement == EXECUTORS for s in self.commit)

    def writers(self) -> list[str]:
        """Who may write user state in the commit phase: "driver", or each committer task
        ("<component>.<task>") when commits run on executors."""
        if all(s.placement == DRIVER for s in self.commit):
            return ["driver"]
        return ["driver", *(f"{s.component}.{t}" for s in self.commit for t in range(s.parallelism))]

    def describe(self) -> str:
        return "\n".join(f"{s.phase:<10} {s.placement:<9} {s.component} x{s.parallelism}"
                         for s in self.processing + self.commit)


def compile_plan(topology: Topology, commit_placement: str = DRIVER,
                 kind: TaskKind = TRANSACTIONAL_TASKS) -> ExecutionPlan:
    """Compile ``topology``: processing stages run on executors, commit stages where
    ``commit_placement`` says; its bolts' tasks as the topology's ``kind`` runs them
    (``transactional.engine.task.TaskKind``; a core topology's is ``CORE_TASKS``)."""
    if kind.name != topology.kind:
        msg = f"topology {topology.topology_id!r} is a {topology.kind} topology: compile it with its task kind, not {kind.name!r}"
        raise ValueError(msg)
    commit = topology.commit_components
    index = {c.id: i for i, c in enumerate(topology.components)}
    stages: list[Stage] = []
    handoff: list[str] = []
    for c in topology.components:
        phase = COMMIT if c.id in commit else PROCESSING
        consumers = {cons.id for cons, _ in topology.consumers(c.id)}
        same_phase = [x for x in consumers if (x in commit) == (phase == COMMIT)]
        crosses = phase == PROCESSING and (bool(consumers & commit) or not same_phase)
        if crosses:
            handoff.append(c.id)
        stages.append(Stage(
            c.id, index[c.id], c.kind, phase, commit_placement if phase == COMMIT else EXECUTORS,
            c.parallelism, tuple(dict.fromkeys(s.source for s in c.inputs)),
            c.kind == "bolt" and topology.is_local(c),
            len(same_phase) + (1 if crosses else 0) > 1, kind, kind.adapter_of(c) if c.kind == "bolt" else ""))
    return ExecutionPlan(topology, tuple(s for s in stages if s.phase == PROCESSING),
                         tuple(s for s in stages if s.phase == COMMIT), tuple(handoff),
                         frozenset(index[c] for c in commit))


def new_bolt(stage: Stage, spec: ComponentSpec) -> Any:
    """A fresh instance of ``stage``'s bolt as its task runner drives it (its adapter)."""
    return stage.task_kind.new_bolt(stage.adapter, spec)
