"""The plan: a topology compiled, once, into stages (docs/design.md §4).

``compile_plan(topology)`` turns a topology, once, into stages: one emitter stage per
spout, then one stage per bolt, each with its **phase** (``processing``: may run for
several batches at once; ``commit``: committers and everything downstream of one,
strictly in txid order) and its **placement** (``executors``: Spark tasks; ``driver``:
the driver process). ``transactional.engine.interpreter`` runs a plan for one attempt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from transactional.bolt import BasicBoltAdapter
from transactional.engine.core.task import adapter as core_adapter
from transactional.engine.core.task import run_core_task
from transactional.engine.core.window_keeper import Windowed
from transactional.engine.task import run_task
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
    runner: str = "transactional"  # its task runner (``TASK_RUNNERS``): the topology's kind
    adapter: str = ""             # how its bolt becomes a batch bolt (``ADAPTERS``); "" for a spout


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


def compile_plan(topology: Topology, commit_placement: str = DRIVER) -> ExecutionPlan:
    """Compile ``topology``: processing stages run on executors, commit stages where
    ``commit_placement`` says."""
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
            len(same_phase) + (1 if crosses else 0) > 1, topology.kind, _adapter(topology, c)))
    return ExecutionPlan(topology, tuple(s for s in stages if s.phase == PROCESSING),
                         tuple(s for s in stages if s.phase == COMMIT), tuple(handoff),
                         frozenset(index[c] for c in commit))


#: the task runner of each topology kind: run one task of a bolt for one batch
TASK_RUNNERS: dict[str, Callable[..., tuple[list[Any], int, int, Any]]] = {"transactional": run_task,
                                                                      "core": run_core_task}
#: how a bolt as the user wrote it becomes the batch bolt its task runner drives
ADAPTERS: dict[str, Callable[[Any], Any]] = {
    "batch": lambda bolt: bolt,                           # a BaseBatchBolt (or a committer) as it is
    "basic": BasicBoltAdapter,                            # a transactional BaseBasicBolt
    "core-rich": lambda bolt: core_adapter("rich", bolt),  # core topologies' bolts
    "core-basic": lambda bolt: core_adapter("basic", bolt),
    "core-stateful": lambda bolt: core_adapter("stateful", bolt),
    "core-windowed": Windowed,                            # windows kept on the driver
    "core-swindowed": Windowed,
}


def _adapter(topology: Topology, c: ComponentSpec) -> str:
    if c.kind != "bolt":
        return ""
    if topology.core:
        return f"core-{c.core}"
    return "basic" if c.basic else "batch"


def new_bolt(stage: Stage, spec: ComponentSpec) -> Any:
    """A fresh instance of ``stage``'s bolt as its task runner drives it (its adapter)."""
    return ADAPTERS[stage.adapter](spec.new_instance())
