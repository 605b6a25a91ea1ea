"""One plan, one interpreter (docs/design.md §4).

``compile_plan(topology)`` turns a topology, once, into stages: one emitter stage per
spout, then one stage per bolt, each with its **phase** (``processing``: may run for
several batches at once; ``commit``: committers and everything downstream of one,
strictly in txid order) and its **placement** (``executors``: Spark tasks; ``driver``:
the driver process). ``run_processing`` and ``run_commit`` interpret a plan for one
attempt through an ``Executor``:

* ``transactional.engine.spark.SparkExecutor``: a stage is a ``mapPartitionsWithIndex`` over
  ``partitionBy(parallelism)`` (partition = task), one Spark job per attempt and phase;
* ``InProcessExecutor`` (here): the same stages as lists of partitions in this process,
  for the commit phase on the driver and for fast tests without Spark.

Both run the same task functions (``emit_task`` / ``bolt_task``: one spout emitter task,
one bolt task through ``transactional.engine.task.run_task``, or a core topology's through
``transactional.engine.core.task.run_core_task``), and records move between stages
in the same form: ``(consumer_index * KEY_STRIDE + consumer_task, payload)``. Failures,
counters and an opaque spout's actual metadata come back as a *report* (data, merged
with ``merge_reports``), never as exceptions across the executor boundary.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from transactional.bolt import BasicBoltAdapter
from transactional.engine.core.task import TICKS, run_core_task
from transactional.engine.core.task import adapter as core_adapter
from transactional.engine.core.window_keeper import Windowed
from transactional.engine.faults import crash_point
from transactional.engine.gc import paused_gc
from transactional.engine.routing import KEY_STRIDE
from transactional.engine.spout_planner import SpoutContext, emit_spout_task, spout_kind
from transactional.engine.task import Router, TaskFailure, run_task
from transactional.metrics import collecting, merge_component
from transactional.topology import ComponentSpec, Topology
from transactional.tuples import TransactionAttempt

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


# -- reports -------------------------------------------------------------------------------------------

def empty_report() -> dict[str, Any]:
    return {"failures": [], "executed": {}, "emitted": {}, "actual": {}, "runs": {}, "acks": {}, "busy": {},
            "metrics": {}}


def merge_reports(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Fold report ``b`` into ``a``: failures (list), counters per (component, task), actual
    metadata (spout -> partition -> what it emitted). A task Spark runs again (a lost
    executor) reports again what it reported before: counters and metadata are set, not
    added, so they do not double."""
    a["failures"].extend(b["failures"])
    for k in ("executed", "emitted", "acks", "busy", "metrics"):
        a.setdefault(k, {}).update(b.get(k, {}))
    for k, n in b.get("runs", {}).items():
        a["runs"][k] = a["runs"].get(k, 0) + n
    for spout, parts in b["actual"].items():
        a["actual"].setdefault(spout, {}).update(parts)
    return a


def report(component: str, task: int, executed: int = 0, emitted: int = 0, failure: TaskFailure | None = None,
           actual: dict[Any, Any] | None = None, acks: Any = None, busy: float = 0.0,
           metrics: dict[str, Any] | None = None) -> dict[str, Any]:
    """One task's report: its failure, or its counters (and an opaque emitter's actual
    metadata, with ``runs``: how many times Spark ran that emitter task; a core task's
    report to the ackers, ``acks``, kept per task like the counters; ``busy``: the
    seconds the task ran, for the status page's process latency and capacity; ``metrics``:
    the user's metrics of the task, ``transactional.metrics``)."""
    if failure is not None:
        return {"failures": [failure], "executed": {}, "emitted": {}, "actual": {}, "runs": {}, "acks": {}, "busy": {},
                "metrics": {}}
    return {"failures": [], "executed": {(component, task): executed}, "emitted": {(component, task): emitted},
            "busy": {(component, task): busy}, "metrics": {(component, task): metrics} if metrics else {},
            "actual": {component: actual} if actual is not None else {},
            "runs": {(component, task): 1} if actual is not None else {},
            "acks": {(component, task): acks} if acks is not None else {}}


def rerun_failures(r: dict[str, Any], attempt: TransactionAttempt) -> list[TaskFailure]:
    """Spark runs a task again when the executor holding its output is lost, and both runs
    report. An opaque emitter may read a different range the second time (retention moved
    on, more data arrived), and consumers that read the first run's output would see a
    batch mixing two readings: an opaque emitter task that ran twice fails the attempt."""
    return [TaskFailure(c, t, attempt.txid, attempt.attempt_id, "failed", "EmitterRerun",
                        f"opaque emitter {c!r} task {t} ran {n} times in this attempt (Spark re-ran it "
                        "after losing an executor); it may have read a different range, so the attempt "
                        "is replayed", "")
            for (c, t), n in sorted(r.get("runs", {}).items()) if n > 1]


def per_component(counts: dict[tuple[str, int], Any]) -> dict[str, Any]:
    """Counters per (component, task) summed per component."""
    out: dict[str, Any] = {}
    for (component, _), n in counts.items():
        out[component] = out.get(component, 0) + n
    return out


@dataclass
class ProcessingResult:
    """What an attempt's processing phase returns to the driver."""

    attempt: TransactionAttempt
    records: list[Any] = field(default_factory=list)       # (key, payload) for commit components
    failures: list[TaskFailure] = field(default_factory=list)
    executed: dict[str, int] = field(default_factory=dict)
    emitted: dict[str, int] = field(default_factory=dict)
    actual: dict[Any, Any] = field(default_factory=dict)
    seconds: float = 0.0
    kept: Any = None          # commits on executors: the records, kept where they are
    acks: dict[tuple[str, int], Any] = field(default_factory=dict)   # core topologies: (component, task) -> its report to the ackers
    busy: dict[str, float] = field(default_factory=dict)   # component -> seconds its tasks ran
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)   # component -> the user's metrics


# -- task functions (run wherever the executor runs them) --------------------------------------------

class Shared(Protocol):
    """The topology as tasks reach it (a Spark broadcast; a plain holder in process)."""

    value: Topology


_SPOUTS: dict[tuple[str, str], Any] = {}
_SPOUTS_GUARD = threading.Lock()


def _spout_instance(run_id: str, spec: Any) -> Any:
    """The spout object of this run in this process (emitters are cached on it)."""
    with _SPOUTS_GUARD:
        s = _SPOUTS.get((run_id, spec.id))
        if s is None:
            for old in [k for k in _SPOUTS if k[0] != run_id]:
                del _SPOUTS[old]
            s = _SPOUTS[(run_id, spec.id)] = spec.new_instance()
        return s


def emit_task(shared: Shared, component_id: str, run_id: str, attempt: TransactionAttempt, meta: Any,
              cleanup: int, conf: dict[str, Any], acc: Any) -> Callable[[int, Iterable[Any]], Iterator[Any]]:
    """The function of emitter task ``task`` of spout ``component_id``: emits its share of
    the batch (nothing when ``meta`` is None: the spout sits this txid out)."""
    def run(task: int, _: Iterable[Any]) -> Iterator[Any]:
        if meta is None:
            return iter(())
        t0 = time.perf_counter()
        with paused_gc():   # loading the topology and emitting build many small objects
            topology: Topology = shared.value
            spec = topology.component(component_id)
            router = Router(topology, spec, task, attempt)
            try:
                spout = _spout_instance(run_id, spec)
                actual = emit_spout_task(run_id, spout, spout_kind(spout), conf,
                                         SpoutContext(topology.topology_id, spec.id, task, spec.parallelism),
                                         attempt, meta, router, cleanup)
            except Exception as e:  # noqa: BLE001 - reported to the driver as data
                acc.add(report(spec.id, task, failure=TaskFailure.of(e, spec.id, task, attempt)))
                return iter(())
        acc.add(report(spec.id, task, 0, router.emitted, actual=actual, busy=time.perf_counter() - t0))
        return iter(router.records())
    return run


def bolt_task(shared: Shared, stage: Stage, attempt: TransactionAttempt, conf: dict[str, Any], acc: Any,
              phase: str = PROCESSING, states: Any = None) -> Callable[[int, Iterable[Any]], Iterator[Any]]:
    """The function of task ``task`` of a bolt: prepare, execute each input, finish_batch
    (through the stage's task runner and adapter)."""
    component_id, run_task = stage.component, TASK_RUNNERS[stage.runner]

    def run(task: int, records: Iterable[Any]) -> Iterator[Any]:
        topology: Topology = shared.value
        spec = topology.component(component_id)
        task_states = None if states is None else states.for_task(component_id, task)
        t0 = time.perf_counter()
        try:
            # paused_gc also covers unpickling the input, which happens as it is read
            with paused_gc(), collecting(component_id, task) as metrics:
                out, n, e, acks = run_task(topology, spec, new_bolt(stage, spec), task, attempt,
                                           (p for _, p in records), conf, phase, task_states)
                if task_states is not None:
                    task_states.finish()   # a committer task on an executor writes its maps
                mine = metrics.snapshot()
        except Exception as exc:  # noqa: BLE001 - reported to the driver as data
            if task_states is not None:
                task_states.abort()
            acc.add(report(component_id, task, failure=TaskFailure.of(exc, component_id, task, attempt)))
            return iter(())
        acc.add(report(component_id, task, n, e, acks=acks, busy=time.perf_counter() - t0, metrics=mine))
        if phase == COMMIT:
            crash_point("commit.after_task", txid=attempt.txid, component=component_id, task=task)
        return iter(out)
    return run


# -- executors -------------------------------------------------------------------------------------------

class Executor(Protocol):
    """Where stages run. A dataset is the executor's own handle on a stage's output records."""

    def begin(self, group: str, description: str) -> None:
        """Start an attempt's job (``group`` names it for ``cancel``)."""

    def shared(self, topology: Topology) -> Shared: ...

    def accumulator(self) -> Any:
        """A report accumulator tasks ``add`` to; ``.value`` on the driver after the job."""

    def source(self, stage: Stage, fn: Callable[[int, Iterable[Any]], Iterator[Any]]) -> Any:
        """The output of ``stage.parallelism`` tasks of ``fn`` with no input (the spout)."""

    def records(self, stage: Stage, parts: list[list[Any]]) -> Any:
        """A dataset of ``stage.parallelism`` partitions holding ``parts`` (records made on
        the driver: what a core topology's spout tasks emitted)."""

    def select(self, data: Any, consumers: frozenset[int]) -> Any:
        """The records of ``data`` addressed to the components at ``consumers`` indexes."""

    def stage(self, stage: Stage, inputs: Sequence[Any], fn: Callable[[int, Iterable[Any]], Iterator[Any]]) -> Any:
        """Route ``inputs`` to ``stage``'s tasks by record key (or task to task when
        ``stage.local``) and run ``fn`` on each task's records."""

    def persist(self, data: Any) -> None: ...

    def collect(self, datasets: Sequence[Any]) -> list[Any]:
        """Run the job; every record of ``datasets`` on the driver."""

    def keep(self, datasets: Sequence[Any]) -> Any:
        """Run the job; the records of ``datasets`` kept where they are (``release``)."""

    def materialize(self, data: Any) -> Any:
        """Run the stages that make ``data`` now, keeping the result (until ``end``)."""

    def release(self, kept: Any) -> None:
        """Forget what ``keep`` kept."""

    def end(self) -> None:
        """Release what the attempt's job kept (persisted data)."""

    def cancel(self, group: str) -> None: ...

    def explain(self, error: str) -> str | None:
        """A message for a failed job's ``error`` that fails the same way on every attempt
        (the workers cannot run this project at all), naming the cause and the fix; else None."""


class _Value:
    def __init__(self, value: Any) -> None:
        self.value = value


class _LocalAccumulator:
    def __init__(self) -> None:
        self.value = empty_report()
        self._lock = threading.Lock()

    def add(self, r: dict[str, Any]) -> None:
        with self._lock:
            merge_reports(self.value, r)


def task_of(key: int) -> int:
    """The consumer task of a record key (``consumer_index * KEY_STRIDE + task``)."""
    return key % KEY_STRIDE


def for_consumers(consumers: frozenset[int]) -> Callable[[tuple[Any, ...]], bool]:
    """A filter keeping the records ``(key, payload)`` meant for ``consumers`` (indexes).
    Here, not in ``_spark``: Spark's workers unpickle it without importing the driver's
    modules (pydantic, the config)."""
    return lambda kv: kv[0] // KEY_STRIDE in consumers


def flatten(part: list[Any]) -> list[Any]:
    """A partition of one element, the list of its records, as those records (here, not
    in ``_spark``, for the reason given at ``for_consumers``)."""
    return part


class InProcessExecutor:
    """Stages in this process: a dataset is a list of partitions (lists of records).

    Serves the commit phase on the driver, and runs whole topologies without Spark for
    fast tests (``TopologyConfig(executor="in-process")``). Not for throughput: tasks run
    one after another, under the GIL."""

    def __init__(self) -> None:
        self._cancelled: set[str] = set()
        self._local = threading.local()

    def begin(self, group: str, description: str) -> None:
        self._local.group = group

    def _check(self) -> None:
        if getattr(self._local, "group", None) in self._cancelled:
            msg = "cancelled"
            raise RuntimeError(msg)

    def shared(self, topology: Topology) -> Shared:
        return _Value(topology)

    def accumulator(self) -> Any:
        return _LocalAccumulator()

    def source(self, stage: Stage, fn: Callable[[int, Iterable[Any]], Iterator[Any]]) -> list[list[Any]]:
        self._check()
        return [list(fn(t, ())) for t in range(stage.parallelism)]

    def records(self, stage: Stage, parts: list[list[Any]]) -> list[list[Any]]:
        self._check()
        return parts

    def select(self, data: list[list[Any]], consumers: frozenset[int]) -> list[list[Any]]:
        return [[kv for kv in part if kv[0] // KEY_STRIDE in consumers] for part in data]

    def stage(self, stage: Stage, inputs: Sequence[list[list[Any]]], fn: Callable[[int, Iterable[Any]], Iterator[Any]]) -> list[list[Any]]:
        self._check()
        if stage.local:
            parts = inputs[0]
        else:
            parts = [[] for _ in range(stage.parallelism)]
            for data in inputs:
                for part in data:
                    for kv in part:
                        parts[task_of(kv[0])].append(kv)
        return [list(fn(t, parts[t])) for t in range(stage.parallelism)]

    def persist(self, data: Any) -> None:
        pass

    def collect(self, datasets: Sequence[list[list[Any]]]) -> list[Any]:
        self._check()
        return [kv for data in datasets for part in data for kv in part]

    def keep(self, datasets: Sequence[list[list[Any]]]) -> list[list[Any]]:
        return [self.collect(datasets)]

    def materialize(self, data: list[list[Any]]) -> list[list[Any]]:
        return data

    def release(self, kept: Any) -> None:
        pass

    def end(self) -> None:
        self._cancelled.discard(getattr(self._local, "group", None))

    def cancel(self, group: str) -> None:
        self._cancelled.add(group)

    def explain(self, error: str) -> str | None:
        return None


# -- the interpreter -----------------------------------------------------------------------------------

def run_processing(plan: ExecutionPlan, ex: Executor, shared: Shared, run_id: str, conf: dict[str, Any],
                   attempt: TransactionAttempt, meta: dict[str, Any], cleanup_before: int, group: str,
                   fed: dict[str, list[list[Any]]] | None = None) -> ProcessingResult:
    """The processing phase of ``attempt`` (metadata ``{spout_id: meta}``) as one job of ``ex``.
    ``fed``: in a core topology, the records each spout task emitted on the driver
    (spout id -> one list per task), which stand for the spouts' stages."""
    t0 = time.monotonic()
    topology = plan.topology
    if fed is not None and TICKS in fed:       # the bolts that get a tick in this micro-batch
        conf = {**conf, TICKS: fed[TICKS]}
    ex.begin(group, f"trident {topology.topology_id} txid {attempt.txid} attempt "
                    f"{attempt.attempt_id} (processing)")
    acc = ex.accumulator()
    data: dict[str, Any] = {}
    try:
        for st in plan.processing:
            if st.kind == "spout" and fed is not None:
                data[st.component] = ex.records(st, fed[st.component])
            elif st.kind == "spout":
                fn = emit_task(shared, st.component, run_id, attempt, meta.get(st.component), cleanup_before, conf, acc)
                data[st.component] = ex.source(st, fn)
            else:
                inputs = [ex.select(data[s], frozenset((st.index,))) for s in st.sources]
                data[st.component] = ex.stage(st, inputs, bolt_task(shared, st, attempt, conf, acc))
            if st.persist:
                ex.persist(data[st.component])
        handoff = [ex.select(data[c], plan.commit_indexes) for c in plan.handoff]
        records, kept = [], None
        if plan.commits_on_executors:
            kept = ex.keep(handoff)
        else:
            with paused_gc():
                records = ex.collect(handoff)
    finally:
        ex.end()
    r = acc.value or empty_report()
    r["failures"] += rerun_failures(r, attempt)
    if r["failures"] and kept is not None:
        ex.release(kept)
        kept = None
    return ProcessingResult(attempt, records, r["failures"], per_component(r["executed"]),
                            per_component(r["emitted"]), r["actual"], time.monotonic() - t0, kept, r["acks"],
                            per_component(r.get("busy", {})), merge_component(r.get("metrics", {})))


def run_commit(plan: ExecutionPlan, ex: Executor, shared: Shared, conf: dict[str, Any], attempt: TransactionAttempt,
               handoff: Any, states: Any) -> dict[str, Any]:
    """The commit-phase stages of ``attempt`` over the processing output ``handoff`` (a
    dataset of ``ex``), with ``states`` (``for_task(component, task)`` gives a task its
    maps); returns the report. Each stage runs before the next is started, and the first
    stage with a failure ends the phase: a later stage would read an incomplete input."""
    acc = ex.accumulator()
    produced: list[Any] = [handoff]         # datasets the commit stages read from, in order
    ex.begin(f"commit-{attempt.txid}-{attempt.attempt_id}-{uuid.uuid4().hex[:6]}",
             f"trident {plan.topology.topology_id} txid {attempt.txid} attempt {attempt.attempt_id} (commit)")
    try:
        for st in plan.commit:
            inputs = [ex.select(d, frozenset((st.index,))) for d in produced]
            out = ex.stage(st, inputs, bolt_task(shared, st, attempt, conf, acc, COMMIT, states))
            produced.append(ex.materialize(out))
            if acc.value["failures"]:
                break
    finally:
        ex.end()
    r = acc.value
    return {**r, "executed": per_component(r["executed"]), "emitted": per_component(r["emitted"]),
            "busy": per_component(r.get("busy", {})), "metrics": merge_component(r.get("metrics", {}))}


# -- user state for committer tasks on executors ------------------------------------------------------

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
