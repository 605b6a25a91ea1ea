"""The processing phase of one attempt as one Spark job (DESIGN §4).

Stage 0 runs the spout's P emitter tasks (every task gets the attempt and metadata: the
all-grouping of Storm's batch stream); every processing-phase bolt is a
``partitionBy`` + ``mapPartitionsWithIndex`` stage of N partitions, partition = task.
A task sends one record per (consumer, consumer task, stream) holding all its tuples
for it, so the shuffle moves a few large records, not one per tuple. What flows into
commit-phase components is collected to the driver; failures, counters and opaque
spouts' actual metadata come back through an accumulator, as data.
"""

from __future__ import annotations

import glob
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

from pyspark import SparkConf, SparkContext
from pyspark.accumulators import AccumulatorParam

from transactional._gc import paused_gc
from transactional._spout import SpoutContext, emit_spout_task, spout_kind
from transactional._task import KEY_STRIDE, Router, TaskFailure, run_task
from transactional.config import TopologyConfig
from transactional.topology import Topology
from transactional.tuples import TransactionAttempt

log = logging.getLogger("trident")


def get_or_create_context(config: TopologyConfig, app_name: str = "trident") -> SparkContext:
    """The active SparkContext, or a new one for ``config.spark_master`` bound to loopback."""
    active = SparkContext._active_spark_context
    if active is not None:
        return active
    os.environ.setdefault("PYTHONHASHSEED", "0")
    if "JAVA_HOME" not in os.environ:  # Spark 4 runs on Java 17/21; prefer 17 when present
        for jdk in sorted(glob.glob("/usr/lib/jvm/java-17-openjdk-*")):
            os.environ["JAVA_HOME"] = jdk
            break
    conf = (SparkConf().setMaster(config.spark_master).setAppName(config.app_name or app_name)
            .set("spark.ui.enabled", "false")
            .set("spark.ui.showConsoleProgress", "false")
            .set("spark.executorEnv.PYTHONHASHSEED", "0")
            .set("spark.python.task.killTimeout", "1s")
            .set("spark.scheduler.mode", "FAIR"))
    if config.spark_master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")   # loopback only, before the JVM starts
        conf.set("spark.driver.host", "127.0.0.1").set("spark.driver.bindAddress", "127.0.0.1")
    for k, v in config.spark_conf.items():
        conf.set(k, v)
    sc = SparkContext(conf=conf)
    sc.setLogLevel("ERROR")
    return sc


class _ReportParam(AccumulatorParam):
    """Merges task reports: failures (list), counters (sum), actual metadata (dict)."""

    def zero(self, value: dict) -> dict:
        return {"failures": [], "executed": {}, "emitted": {}, "actual": {}}

    def addInPlace(self, a: dict, b: dict) -> dict:
        a["failures"].extend(b["failures"])
        for k in ("executed", "emitted"):
            for c, n in b[k].items():
                a[k][c] = a[k].get(c, 0) + n
        a["actual"].update(b["actual"])
        return a


def _report(component: str, executed: int = 0, emitted: int = 0, failure: TaskFailure | None = None,
            actual: dict | None = None) -> dict:
    return {"failures": [failure] if failure else [], "executed": {component: executed},
            "emitted": {component: emitted}, "actual": actual or {}}


def _task_of(key: int) -> int:
    return key % KEY_STRIDE


def _emit_stage(bc: Any, run_id: str, attempt: TransactionAttempt, meta: Any, cleanup: int,
                conf: dict, acc: Any):
    def run(task: int, _: Any):
        with paused_gc():   # loading the topology and emitting build many small objects
            topology: Topology = bc.value
            spec = topology.spout
            router = Router(topology, spec, task, attempt)
            try:
                spout = _spout_instance(run_id, spec)
                actual = emit_spout_task(run_id, spout, spout_kind(spout), conf,
                                         SpoutContext(topology.topology_id, spec.id, task, spec.parallelism),
                                         attempt, meta, router, cleanup)
            except Exception as e:  # noqa: BLE001 - reported to the driver as data
                acc.add(_report(spec.id, failure=TaskFailure.of(e, spec.id, task, attempt)))
                return iter(())
        acc.add(_report(spec.id, 0, router.emitted, actual=actual))
        return iter(router.records())
    return run


_SPOUTS: dict[str, Any] = {}


def _spout_instance(run_id: str, spec: Any) -> Any:
    """The spout object of this run in this Python worker (emitters are cached on it)."""
    s = _SPOUTS.get(run_id)
    if s is None:
        _SPOUTS.clear()
        s = _SPOUTS[run_id] = spec.new_instance()
    return s


def _bolt_stage(bc: Any, component_id: str, attempt: TransactionAttempt, conf: dict, acc: Any):
    def run(task: int, records: Any):
        topology: Topology = bc.value
        spec = topology.component(component_id)
        try:
            with paused_gc():   # also covers unpickling the input, which happens as it is read
                out, n, e = run_task(topology, spec, task, attempt, (p for _, p in records), conf, "processing")
        except Exception as exc:  # noqa: BLE001 - reported to the driver as data
            acc.add(_report(component_id, failure=TaskFailure.of(exc, component_id, task, attempt)))
            return iter(())
        acc.add(_report(component_id, n, e))
        return iter(out)
    return run


@dataclass
class ProcessingResult:
    """What the processing job of one attempt returns to the driver."""

    attempt: TransactionAttempt
    records: list = field(default_factory=list)       # (key, payload) for commit components
    failures: list[TaskFailure] = field(default_factory=list)
    executed: dict[str, int] = field(default_factory=dict)
    emitted: dict[str, int] = field(default_factory=dict)
    actual: dict = field(default_factory=dict)
    seconds: float = 0.0


class JobPlanner:
    """Builds and runs the processing job of an attempt. One per run."""

    def __init__(self, sc: SparkContext, topology: Topology, conf: dict, run_id: str) -> None:
        self.sc = sc
        self.topology = topology
        self.conf = conf
        self.run_id = run_id
        self.bc = sc.broadcast(topology)
        self.index = {c.id: i for i, c in enumerate(topology.components)}
        commit = topology.commit_components
        self.processing = [c for c in topology.components if c.id not in commit]
        self.commit_idx = frozenset(self.index[c] for c in commit)
        # uses of each processing component's output: processing consumers + the final collect
        self.uses: dict[str, int] = {}
        self.collect: dict[str, bool] = {}
        for c in self.processing:
            consumers = {cons.id for cons, _ in topology.consumers(c.id)}
            proc = [x for x in consumers if x not in commit]
            self.collect[c.id] = bool(consumers & commit) or not proc
            self.uses[c.id] = len(proc) + (1 if self.collect[c.id] else 0)

    def run(self, attempt: TransactionAttempt, meta: Any, cleanup_before: int, group: str) -> ProcessingResult:
        """Run the processing phase of ``attempt`` as one Spark job in job group ``group``
        (call from the thread that owns the attempt)."""
        t0 = time.monotonic()
        sc = self.sc
        sc.setJobGroup(group, f"trident {self.topology.topology_id} txid {attempt.txid}", interruptOnCancel=True)
        acc = sc.accumulator(_ReportParam().zero(None), _ReportParam())
        spout = self.topology.spout
        rdds: dict[str, Any] = {}
        persisted = []
        rdds[spout.id] = sc.parallelize(range(spout.parallelism), spout.parallelism).mapPartitionsWithIndex(
            _emit_stage(self.bc, self.run_id, attempt, meta, cleanup_before, self.conf, acc))
        finals = []
        for c in self.processing:
            if c.kind == "bolt":
                inputs = []
                ci = self.index[c.id]
                for src in dict.fromkeys(s.source for s in c.inputs):
                    inputs.append(rdds[src].filter(lambda kv, ci=ci: kv[0] // KEY_STRIDE == ci))
                u = inputs[0] if len(inputs) == 1 else sc.union(inputs)
                if not self.topology.is_local(c):   # local_or_shuffle: task i reads task i, no shuffle
                    u = u.partitionBy(c.parallelism, _task_of)
                rdds[c.id] = u.mapPartitionsWithIndex(_bolt_stage(self.bc, c.id, attempt, self.conf, acc))
            if self.uses[c.id] > 1:
                rdds[c.id].persist()
                persisted.append(rdds[c.id])
            if self.collect[c.id]:
                commit_idx = self.commit_idx
                finals.append(rdds[c.id].filter(lambda kv, ix=commit_idx: kv[0] // KEY_STRIDE in ix))
        try:
            final = finals[0] if len(finals) == 1 else sc.union(finals)
            with paused_gc():
                records = final.collect()
        finally:
            for r in persisted:
                r.unpersist(blocking=False)
        report = acc.value or _ReportParam().zero(None)
        return ProcessingResult(attempt, records, report["failures"], report["executed"],
                                report["emitted"], report["actual"], time.monotonic() - t0)

    def cancel(self, group: str) -> None:
        self.sc.cancelJobGroup(group)

    def close(self) -> None:
        try:
            self.bc.unpersist(blocking=False)
        except Exception:  # noqa: BLE001 - the context may be gone already
            pass
