"""Crash points: SIGKILL (or SIGSTOP) this process at an exact moment, for recovery tests.

Set ``TRIDENT_CRASH_AT`` to ``name[:label=value[,label=value]]`` (several separated by
``;``), e.g. ``commit.before_record:txid=3`` or ``commit.after_task:txid=2,task=0``; or
``TRIDENT_PAUSE_AT`` (same form) to stop the process with SIGSTOP there instead, as a
long GC pause or a frozen VM would (the test sends SIGCONT; each pause point pauses once).
Both print a line ``trident: crash point ...`` / ``trident: pause point ...`` to stderr
first. The engine calls ``crash_point(name, **labels)`` at:

* ``process.after_meta``   txid's metadata is durable, its batch not yet launched
* ``commit.before``        txid processed, about to run the committers
* ``commit.after_task``    one committer task finished (labels txid, component, task)
* ``commit.before_write``  committers ran (updates buffered), user state not yet written
* ``commit.before_record`` user state written for txid, txid not yet recorded
* ``commit.after_record``  txid recorded, its metadata not yet dropped
* ``upgrade.before_record`` a driver started, its topology checked against the recorded
  layout, its layout and value versions not yet recorded (label txid: the next txid;
  every start passes it, the first start of a new version is the switch)
* ``upgrade.recorded``     that layout and those versions recorded, nothing of the txid run

and states at their own commit steps: ``delta.before_commit`` / ``iceberg.before_commit``
(a task's table commit, labels txid, task), ``kafka.before_commit_transaction`` (a task's
records sent in its Kafka transaction, not committed).

Task failures: ``TRIDENT_FAIL_TASKS=seed=S,rate=R[,max_attempt=M]`` makes ``task_fault``
(called by the task runner before each bolt task of each attempt, in Spark tasks and on
the driver alike) raise ``FailedException`` for a seeded-random share ``R`` of (component,
task, txid, attempt) with ``attempt <= M`` (default 1), the same choice in every process:
``trident verify`` injects task failures so (``transactional.testing.FaultPlan`` is the
same rule for a test's own bolts).
"""

from __future__ import annotations

import os
import signal
import sys
import zlib

_SPEC: list[tuple[str, dict[str, str]]] = []


def _parse(text: str) -> list[tuple[str, dict[str, str]]]:
    out = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, _, labels = part.partition(":")
        kv = dict(item.split("=", 1) for item in labels.split(",") if "=" in item)
        out.append((name, kv))
    return out


_SPEC = _parse(os.environ.get("TRIDENT_CRASH_AT", ""))
_PAUSE = _parse(os.environ.get("TRIDENT_PAUSE_AT", ""))


def crash_point(name: str, **labels: object) -> None:
    """SIGKILL this process if ``TRIDENT_CRASH_AT`` names this point; SIGSTOP it (once per
    point) if ``TRIDENT_PAUSE_AT`` does."""
    if not _SPEC and not _PAUSE:
        return
    for spec, what, sig in ((_SPEC, "crash", signal.SIGKILL), (_PAUSE, "pause", signal.SIGSTOP)):
        for want, kv in list(spec):
            if want == name and all(str(labels.get(k)) == v for k, v in kv.items()):
                sys.stderr.write(f"trident: {what} point {name} {labels} reached; {sig.name}\n")
                sys.stderr.flush()
                if sig == signal.SIGSTOP:
                    spec.remove((want, kv))
                os.kill(os.getpid(), sig)


def fails(seed: int, rate: float, component: str, task: int, txid: int, attempt_id: int) -> bool:
    """Whether attempt ``attempt_id`` of ``component``'s ``task`` in ``txid`` is chosen to
    fail: a seeded hash of the values compared with ``rate``, so every process decides
    alike (the rule of ``FaultPlan`` and of ``TRIDENT_FAIL_TASKS``)."""
    h = zlib.crc32(f"{seed}:{component}:{task}:{txid}:{attempt_id}".encode())
    return (h % 10_000) < rate * 10_000


def _task_spec(text: str) -> tuple[int, float, int] | None:
    if not text.strip():
        return None
    kv = dict(item.split("=", 1) for item in text.split(",") if "=" in item)
    return int(kv.get("seed", 0)), float(kv.get("rate", 0.2)), int(kv.get("max_attempt", 1))


_TASKS = _task_spec(os.environ.get("TRIDENT_FAIL_TASKS", ""))


def task_fault(component: str, task: int, txid: int, attempt_id: int) -> None:
    """Raise ``FailedException`` if ``TRIDENT_FAIL_TASKS`` chooses this task attempt (see the
    module docstring); nothing otherwise."""
    if _TASKS is None:
        return
    seed, rate, max_attempt = _TASKS
    if attempt_id <= max_attempt and fails(seed, rate, component, task, txid, attempt_id):
        from transactional.exceptions import FailedException

        msg = f"injected task failure (TRIDENT_FAIL_TASKS) in {component} task {task}, txid {txid} attempt {attempt_id}"
        raise FailedException(msg)
