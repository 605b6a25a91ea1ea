"""How many Spark tasks a batch's spout and narrow stages run as (docs/performance.md,
"Throughput and latency by setting").

A spout stage of P emitter tasks, and every ``local_or_shuffle`` stage behind it, run in
one Spark task per logical task while the cores are free: one batch in flight on
``local[2]`` reads and splits on both cores. When several batches are in flight
(``max_spout_pending``) the cores are busy anyway, and each extra Spark task only adds its
fixed cost (the JVM's scheduling and launch, PySpark's task set-up, ≈20–35 ms here) and
one more output for the commit to combine. Then a Spark task runs a contiguous group of
logical tasks, one after the other: ``spark_tasks(P, cores, in_flight)`` of them, so that
the jobs in flight together ask for about one Spark task per core.

Nothing a component sees changes: each logical task still runs with its own index, its own
emitter and its own share of the batch, and emits the same records (keyed by consumer
task); only the Spark task that carries it does. One thing is shared: where the emitter
can (``fetch_partitions``, transactional/spout.py), the first logical task's emitter reads
the partitions of all the Spark task's logical tasks at once, and each emits its own. Stages behind a shuffle keep one Spark
task per task (``partitionBy``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from transactional.engine.routing import KEY_STRIDE

TaskFn = Callable[[int, Iterable[Any]], Iterator[Any]]


def spark_tasks(parallelism: int, cores: int, in_flight: int) -> int:
    """The Spark tasks a stage of ``parallelism`` logical tasks runs as, with ``in_flight``
    batches' jobs running at once (this one included) on ``cores`` cores: the cores' share
    of this job, at least 1 and at most ``parallelism``.

    >>> spark_tasks(2, 2, 1), spark_tasks(2, 2, 2), spark_tasks(2, 2, 3), spark_tasks(8, 16, 3)
    (2, 1, 1, 6)
    """
    share = -(-max(1, cores) // max(1, in_flight))
    return max(1, min(parallelism, share))


def tasks_of(part: int, parallelism: int, parts: int) -> range:
    """The logical tasks Spark task ``part`` of ``parts`` runs: contiguous, every task once.

    >>> [list(tasks_of(p, 5, 2)) for p in range(2)]
    [[0, 1], [2, 3, 4]]
    """
    return range(part * parallelism // parts, (part + 1) * parallelism // parts)


def together(fn: TaskFn, tasks: Sequence[int]) -> None:
    """Tell a spout stage's task function that this process runs ``tasks`` next, one after
    the other, if it listens (``fn.together``: the emit tasks, whose first then reads the
    partitions of them all at once where the emitter can, ``fetch_partitions``)."""
    hook = getattr(fn, "together", None)
    if hook is not None and len(tasks) > 1:
        hook(tasks)


def grouped_source(fn: TaskFn, parallelism: int, parts: int) -> TaskFn:
    """A spout stage's partition function over ``parts`` Spark tasks: Spark task ``part``
    runs emitter task ``fn`` for each of its logical tasks in turn (``together``)."""
    def run(part: int, _: Iterable[Any]) -> Iterator[Any]:
        tasks = tasks_of(part, parallelism, parts)
        together(fn, tasks)
        for task in tasks:
            yield from fn(task, ())
    return run


def grouped_stage(fn: TaskFn, parallelism: int, parts: int,
                  combine: Callable[[list[Any]], list[Any]] | None = None) -> TaskFn:
    """A ``local_or_shuffle`` stage's partition function over the ``parts`` Spark tasks of
    its source: the partition's records (keyed ``consumer * KEY_STRIDE + task``) go to their
    logical task, in their order, and each of the partition's tasks runs, inputs or none.
    ``combine``: the stage's bolt merges what its tasks of the partition emitted before it
    leaves the Spark task (``transactional.engine.combine``)."""
    def run(part: int, records: Iterable[Any]) -> Iterator[Any]:
        mine = tasks_of(part, parallelism, parts)
        by_task: dict[int, list[Any]] = {t: [] for t in mine}
        for r in records:
            by_task[r[0] % KEY_STRIDE].append(r)
        if combine is None or len(mine) < 2:
            for task in mine:
                yield from fn(task, by_task[task])
            return
        out: list[Any] = []
        for task in mine:
            out.extend(fn(task, by_task[task]))
        yield from combine(out)
    return run


class InFlight:
    """The jobs an executor runs at once, counted by the threads between ``begin`` and ``end``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: set[int] = set()

    def begin(self) -> None:
        with self._lock:
            self._threads.add(threading.get_ident())

    def end(self) -> None:
        with self._lock:
            self._threads.discard(threading.get_ident())

    def count(self) -> int:
        with self._lock:
            return max(1, len(self._threads))
