"""Task reports (transactional/engine/plan.py) when Spark runs a task again after losing an
executor: counters do not double, and an opaque emitter that ran twice fails the attempt."""

from __future__ import annotations

from transactional.engine.plan import empty_report, merge_reports, per_component, report, rerun_failures
from transactional.tuples import TransactionAttempt


def test_a_task_reported_twice_counts_once_and_an_opaque_emitter_run_twice_fails_the_attempt():
    attempt = TransactionAttempt(7, 2)
    acc = empty_report()
    first = [report("kafka", 0, 0, 40, actual={"0": {"start": 0, "end": 40}}), report("kafka", 1, 0, 10, actual={}),
             report("memory", 0, 0, 5), report("split", 0, 40, 200), report("split", 1, 10, 50)]
    for r in first:
        merge_reports(acc, r)
    assert rerun_failures(acc, attempt) == []
    assert per_component(acc["emitted"]) == {"kafka": 50, "memory": 5, "split": 250}
    # the executor that ran kafka task 0, memory task 0 and split task 0 is lost: Spark runs them again
    for r in (report("kafka", 0, 0, 43, actual={"0": {"start": 0, "end": 43}}), report("memory", 0, 0, 5),
              report("split", 0, 40, 200)):
        merge_reports(acc, r)
    assert per_component(acc["executed"]) == {"kafka": 0, "memory": 0, "split": 50}
    failures = rerun_failures(acc, attempt)
    assert [(f.component, f.task, f.txid, f.attempt_id, f.kind) for f in failures] == [("kafka", 0, 7, 2, "failed")]
    assert "ran 2 times in this attempt" in failures[0].message and "replayed" in failures[0].message
