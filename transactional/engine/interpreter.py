"""One plan, one interpreter (docs/design.md §4).

``run_processing`` and ``run_commit`` interpret a plan (``transactional.engine.plan``)
for one attempt through an ``Executor`` (``transactional.engine.executors``). Both run
the same task functions (``transactional.engine.stage_tasks``), and records move between
stages in the same form: ``(consumer_index * KEY_STRIDE + consumer_task, payload)``.
Failures, counters and an opaque spout's actual metadata come back as a *report*
(``transactional.engine.reports``), never as exceptions across the executor boundary.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from transactional.engine.combine import combine_handoff, stage_combiner
from transactional.engine.core.task import TICKS
from transactional.engine.executors import Executor
from transactional.engine.gc import paused_gc
from transactional.engine.plan import COMMIT, ExecutionPlan
from transactional.engine.reports import PhaseReport, ProcessingResult, TaskReport, empty_report, rerun_failures
from transactional.engine.stage_tasks import Shared, bolt_task, emit_task
from transactional.tuples import TransactionAttempt


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
                combine = stage_combiner(shared, st.component) if topology.component(st.component).combines else None
                data[st.component] = ex.stage(st, inputs, bolt_task(shared, st, attempt, conf, acc), combine)
            if st.persist:
                ex.persist(data[st.component])
        handoff = [ex.select(data[c], plan.commit_indexes) for c in plan.handoff]
        records, kept = [], None
        if plan.commits_on_executors:
            kept = ex.keep(handoff)
        else:
            with paused_gc():
                # the partials the commit reads merged here, off its serial path
                records = combine_handoff(topology, ex.collect(handoff))
    finally:
        ex.end()
    r: TaskReport = acc.value or empty_report()
    r.failures += rerun_failures(r, attempt)
    if r.failures and kept is not None:
        ex.release(kept)
        kept = None
    total = r.per_component()
    return ProcessingResult(attempt, records, r.failures, total.executed, total.emitted, r.actual,
                            time.monotonic() - t0, kept, r.acks, total.busy, total.metrics)


def run_commit(plan: ExecutionPlan, ex: Executor, shared: Shared, conf: dict[str, Any], attempt: TransactionAttempt,
               handoff: Any, states: Any) -> PhaseReport:
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
            if acc.value.failures:
                break
    finally:
        ex.end()
    report: TaskReport = acc.value
    return report.per_component()
