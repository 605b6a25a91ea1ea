"""Which batches run their processing in the driver's process instead of as a Spark job
(docs/performance.md, "Latency: DRPC"; ``TopologyConfig.drpc_on_driver_max_calls``).

A Spark job costs a batch at least its scheduling (tens to hundreds of milliseconds on a
small machine, whatever the batch holds), where a batch of a few DRPC calls is a few
milliseconds of work. ``SmallBatches`` is the test ``Jobs`` (``transactional.engine.attempts``)
asks of each batch's metadata: true when every spout with data in the batch has a *rule*
(spout id -> its part of the batch's size, or None when that part is too big for the
driver) and, when a work budget is set, the batch's expected work -- its size times the
seconds per item its spouts' batches took so far, wherever they ran -- fits the budget.
The DRPC spouts' rule is ``transactional.engine.drpc.driver_rules``; another spout kind
adds its own rule to the same mapping.

With the default (``drpc_on_driver_max_calls=None``, "auto") the DRPC rule applies only
where the driver's process is like an executor's (``auto_on``): a local master (the
executors are Python workers of this machine, with this interpreter and this code), no
archives or other Python for the executors, commits on the driver; then a batch of at
most ``drpc_batch_size`` calls whose expected work is at most ``DRIVER_BUDGET_SECS`` runs
here (the work measured as this thread's CPU time for a batch run here -- not its wall
time, which threads of the caller share under load -- and as its tasks' seconds for a
batch run on Spark). A number N > 0 is the earlier opt-in (any master, at most N calls, no budget); 0:
every batch is a Spark job.

Spouts whose batch size is known at planning (a spout with a ``planned_records(meta)``
method, e.g. ``spouts.kafka``'s: a partition's planned offset range) have a rule too
(``sized_rules``), set by ``TopologyConfig.driver_batch_max_records``: 0 (the default)
none -- measured, the driver's one thread fell behind 10k Kafka records/s, though each
small batch ran faster there than as a job; None ("auto", opt-in), under
the same conditions as above (``auto_on``), a batch of at most ``AUTO_MAX_RECORDS``
records whose expected work fits ``DRIVER_BUDGET_SECS`` runs here; N > 0: at most N
records, on any master, without the work bound. The work budget applies to a
batch whenever one of the two settings in use is "auto". Under "auto" with sized spouts
the driver's utilization is bounded too (``DriverLoad``): a batch placed while another
processes here, or when the batches processed here took more than ``DRIVER_SHARE`` of the
last second, is a Spark job -- the driver's thread also plans and commits, and batches
here run one after another where Spark has a worker per core.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from transactional.config import TopologyConfig

__all__ = ["AUTO_MAX_RECORDS", "DRIVER_BUDGET_SECS", "DRIVER_SHARE", "DriverLoad", "Rule", "SmallBatches", "auto_on",
           "max_calls", "max_records", "sized_rules"]

#: the expected work of a batch (CPU seconds of its tasks) that may still run on the driver in
#: the "auto" setting; a heavier batch is a Spark job. The break-even on a small machine: on
#: the driver a batch's tasks run one after another on one thread (W seconds); as a Spark
#: job on N workers about W / N plus the job's scheduling S (0.2-0.9 s on 2 cores here), so
#: the driver is the faster while W < N * S / (N - 1), about 1 s for N = 2 and S = 0.5 s
DRIVER_BUDGET_SECS = 1.0
#: the most records a batch of sized spouts (``sized_rules``) carries to run on the driver in
#: the "auto" setting, whatever the estimate says: the bound while nothing is measured yet
#: (a run's first batch may be a backlog's), and where the driver's one thread (which also
#: plans and commits) stops being the faster: at 100k records/s (batches of 25,000) the
#: driver made the p50 worse (docs/performance.md, "Latency: Kafka to Redis")
AUTO_MAX_RECORDS = 10_000
#: the most of the last ``LOAD_WINDOW_SECS`` the driver's process may have spent processing
#: batches (their wall seconds) for another batch of sized spouts to run there in the "auto"
#: setting (``DriverLoad``): the same process plans and commits, and at 10k Kafka records/s
#: batches run one after another there fell behind the input (docs/performance.md). Wall,
#: not CPU: a Kafka batch here waited ~100 ms on fetches for ~10 ms of CPU, and bounding
#: the CPU let the driver take nearly every batch (p50 1.5-3.5 s at 10k/s; 0.8 s with wall)
DRIVER_SHARE = 0.5
#: the window ``DRIVER_SHARE`` is measured over (seconds)
LOAD_WINDOW_SECS = 1.0
#: how much one batch's measured work moves the estimate (an exponential average)
_WEIGHT = 0.3
#: a spout's part of a batch's metadata -> its size (calls, records), or None: not on the driver
Rule = Callable[[Any], "int | None"]
_LOCAL_MASTER = re.compile(r"local(\[(\*|\d+)(,\s*\d+)?\])?")


def auto_on(config: TopologyConfig, master: str) -> bool:
    """True when small batches may run in the driver's process without being asked
    (``drpc_on_driver_max_calls=None``): the Spark ``master`` is local (``local``,
    ``local[N]``, ``local[*]``: executors are Python workers on this machine; not
    ``local-cluster`` or a cluster, whose executors may have other hardware, packages or
    memory than the driver), and the executors run this Python (no ``archives``, no
    ``spark.pyspark.python`` or ``PYSPARK_PYTHON`` naming another interpreter)."""
    if not _LOCAL_MASTER.fullmatch(master.strip()) or config.archives:
        return False
    chosen = config.spark_conf.get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON")
    if not chosen:
        return True
    found = shutil.which(chosen) or chosen
    return os.path.realpath(found) == os.path.realpath(sys.executable)


def max_calls(config: TopologyConfig, master: str) -> tuple[int, bool]:
    """``(N, auto)``: the most DRPC calls a batch run on the driver carries (0: none), and
    whether it is the "auto" setting (then a work budget applies too)."""
    n = config.drpc_on_driver_max_calls
    if n is not None:
        return n, False
    return (config.drpc_batch_size if auto_on(config, master) else 0), True


def max_records(config: TopologyConfig, master: str) -> tuple[int, bool]:
    """``(N, auto)``: the most records a batch of sized spouts run on the driver carries (0:
    none; ``TopologyConfig.driver_batch_max_records``), and whether it is the "auto" setting
    (then a work budget applies too)."""
    n = config.driver_batch_max_records
    if n is not None:
        return n, False
    return (AUTO_MAX_RECORDS if auto_on(config, master) else 0), True


def sized_rules(topology: Any, most: int) -> dict[str, Rule]:
    """The rules of the spouts of ``topology`` whose batch size is known at planning: those
    with a ``planned_records(meta)`` method (``spouts.kafka``: the records of a batch's
    planned offset ranges). Spout id -> its records in a batch, or None above ``most``."""
    if most <= 0:
        return {}
    rules: dict[str, Rule] = {}
    for spec in topology.spouts:
        planned = getattr(spec.new_instance(), "planned_records", None)
        if callable(planned):
            rules[spec.id] = _at_most(planned, most)
    return rules


def _at_most(planned: Callable[[Any], int], most: int) -> Rule:
    def rule(meta: Any) -> int | None:
        n = int(planned(meta))
        return n if n <= most else None
    return rule


class DriverLoad:
    """The utilization bound of the driver's process (``DRIVER_SHARE``): ``admit`` says
    whether one more batch may be processed here now -- none is (batches here run on one
    interpreter, under one lock, beside the thread that plans and commits: a second one
    waits for the first instead of running on a free Spark worker), and the batches
    processed here in the last ``window`` seconds took at most ``share`` of it (their wall
    seconds, counted when they end). ``left`` ends an admitted batch. Thread-safe: the job
    threads place their batches concurrently.

    >>> now = [0.0]
    >>> load = DriverLoad(share=0.5, window=1.0, clock=lambda: now[0])
    >>> load.admit(), load.admit()       # a second batch while the first one runs: not here
    (True, False)
    >>> load.left(0.6); load.admit()     # 0.6 s of the last second: the driver is busy enough
    False
    >>> now[0] = 1.5; load.admit()       # a second later the window is clear again
    True
    """

    def __init__(self, share: float = DRIVER_SHARE, window: float = LOAD_WINDOW_SECS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.share = share
        self.window = window
        self.clock = clock
        self.running = 0
        self._ended: list[tuple[float, float]] = []      # (when, wall seconds) of batches here
        self._lock = threading.Lock()

    def used(self) -> float:
        """The seconds of the batches processed here that ended within the window."""
        with self._lock:
            return self._used(self.clock())

    def _used(self, now: float) -> float:
        self._ended = [(t, c) for t, c in self._ended if t > now - self.window]
        return sum(c for _, c in self._ended)

    def admit(self) -> bool:
        """True (and the batch counts as running here until ``left``) when one more batch
        may be processed in the driver's process now."""
        with self._lock:
            if self.running or self._used(self.clock()) > self.share * self.window:
                return False
            self.running += 1
            return True

    def left(self, secs: float) -> None:
        """An admitted batch ended (or failed) after ``secs`` (wall) of processing here."""
        with self._lock:
            self.running = max(0, self.running - 1)
            self._ended.append((self.clock(), max(0.0, secs)))


class SmallBatches:
    """The test of a batch's metadata (``{spout_id: meta}``): does its processing run in the
    driver's process? ``rules``: spout id -> ``Rule``; ``budget_secs``: the most expected
    work (None: no bound); ``load``: the utilization bound (``DriverLoad``; None: none),
    which ``take`` applies. ``ran`` feeds it each processed batch's measured work.

    >>> small = SmallBatches({"drpc": lambda m: len(m) if len(m) <= 4 else None}, budget_secs=0.1)
    >>> small({"drpc": [1, 2]}), small({"drpc": [1] * 5}), small({"drpc": [1], "kafka": {"0": [0, 9]}})
    (True, False, False)
    >>> small.ran({"drpc": [1, 2]}, 0.06)          # 30 ms a call, as far as it knows
    >>> small({"drpc": [1]}), small({"drpc": [1, 2, 3]})
    (True, False)
    """

    def __init__(self, rules: Mapping[str, Rule], budget_secs: float | None = None,
                 load: DriverLoad | None = None) -> None:
        self.rules = dict(rules)
        self.budget_secs = budget_secs
        self.load = load
        #: the least work a batch took (its fixed part, as far as it is known), and the work
        #: of each item beyond it (an average over the batches measured; None: none yet)
        self.floor = 0.0
        self.per_item: float | None = None

    def size(self, meta: Any) -> int | None:
        """The batch's items (the sum of its spouts' sizes), or None when a spout with data in
        it has no rule, or its rule says its part is too big."""
        total = 0
        for sid, m in (meta or {}).items():
            if m is None:
                continue
            rule = self.rules.get(sid)
            n = rule(m) if rule is not None else None
            if n is None:
                return None
            total += n
        return total

    def expected(self, n: int) -> float:
        """The expected work (seconds) of a batch of ``n`` items: 0 before any was measured."""
        return 0.0 if self.per_item is None else self.floor + n * self.per_item

    def __call__(self, meta: Any) -> bool:
        n = self.size(meta)
        if n is None:
            return False
        return self.budget_secs is None or self.expected(n) <= self.budget_secs

    def take(self, meta: Any) -> bool:
        """Place a batch: True when it is small (``__call__``) and the driver's load admits it
        (then ``left(busy)`` must follow when its processing ends, whatever the outcome)."""
        return self(meta) and (self.load is None or self.load.admit())

    def left(self, secs: float) -> None:
        """A batch ``take`` placed here ended after ``secs`` (wall) of processing."""
        if self.load is not None:
            self.load.left(secs)

    def ran(self, meta: Any, busy_secs: float) -> None:
        """A batch of ``meta`` was processed (here or on Spark) in ``busy_secs`` of its
        tasks' time: the estimate follows it. The first batch counts all its work per item
        (a heavy call is not taken for a fixed cost); later ones what exceeds the least
        work a batch took."""
        n = self.size(meta)
        if not n:
            return
        if self.per_item is None:
            self.floor, self.per_item = busy_secs, busy_secs / n
            return
        self.floor = min(self.floor, busy_secs)
        extra = max(0.0, busy_secs - self.floor) / n
        # never above this batch's work per item (an upper bound of the true figure): a
        # first batch of a few records that paid a fixed cost (a consumer to create, a
        # worker to start) does not keep every batch after it off the driver for long
        self.per_item = min((1 - _WEIGHT) * self.per_item + _WEIGHT * extra, busy_secs / n)
