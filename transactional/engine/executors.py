"""Where stages run: the ``Executor`` protocol and ``InProcessExecutor``.

* ``transactional.engine.spark.SparkExecutor``: a stage is a ``mapPartitionsWithIndex`` over
  ``partitionBy(parallelism)`` (partition = task), one Spark job per attempt and phase;
* ``InProcessExecutor`` (here): the same stages as lists of partitions in this process,
  for the commit phase on the driver and for fast tests without Spark.

Records move between stages in the same form in both:
``(consumer_index * KEY_STRIDE + consumer_task, payload)``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

from transactional.engine.plan import Stage
from transactional.engine.reports import TaskReport, empty_report, merge_reports
from transactional.engine.routing import KEY_STRIDE
from transactional.engine.stage_tasks import Shared
from transactional.engine.task_groups import together
from transactional.topology import Topology


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

    def stage(self, stage: Stage, inputs: Sequence[Any], fn: Callable[[int, Iterable[Any]], Iterator[Any]],
              combine: Callable[[list[Any]], list[Any]] | None = None) -> Any:
        """Route ``inputs`` to ``stage``'s tasks by record key (or task to task when
        ``stage.local``) and run ``fn`` on each task's records. ``combine``: merges what
        several of the stage's tasks emitted where one place runs them
        (``transactional.engine.combine``); may be ignored."""

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

    def add(self, r: TaskReport) -> None:
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
        together(fn, range(stage.parallelism))
        return [list(fn(t, ())) for t in range(stage.parallelism)]

    def records(self, stage: Stage, parts: list[list[Any]]) -> list[list[Any]]:
        self._check()
        return parts

    def select(self, data: list[list[Any]], consumers: frozenset[int]) -> list[list[Any]]:
        return [[kv for kv in part if kv[0] // KEY_STRIDE in consumers] for part in data]

    def stage(self, stage: Stage, inputs: Sequence[list[list[Any]]], fn: Callable[[int, Iterable[Any]], Iterator[Any]],
              combine: Callable[[list[Any]], list[Any]] | None = None) -> list[list[Any]]:
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
