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
here. A number N > 0 is the earlier opt-in (any master, at most N calls, no budget); 0:
every batch is a Spark job.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Callable, Mapping
from typing import Any

from transactional.config import TopologyConfig

__all__ = ["DRIVER_BUDGET_SECS", "Rule", "SmallBatches", "auto_on", "max_calls"]

#: the expected work of a batch (seconds its tasks ran) that may still run on the driver in
#: the "auto" setting; a heavier batch is a Spark job, its tasks on the executors
DRIVER_BUDGET_SECS = 0.25
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


class SmallBatches:
    """The test of a batch's metadata (``{spout_id: meta}``): does its processing run in the
    driver's process? ``rules``: spout id -> ``Rule``; ``budget_secs``: the most expected
    work (None: no bound). ``ran`` feeds it each processed batch's measured work.

    >>> small = SmallBatches({"drpc": lambda m: len(m) if len(m) <= 4 else None}, budget_secs=0.1)
    >>> small({"drpc": [1, 2]}), small({"drpc": [1] * 5}), small({"drpc": [1], "kafka": {"0": [0, 9]}})
    (True, False, False)
    >>> small.ran({"drpc": [1, 2]}, 0.2)           # 0.1 s a call: two calls no longer fit
    >>> small({"drpc": [1, 2]}), small({"drpc": [1]})
    (False, True)
    """

    def __init__(self, rules: Mapping[str, Rule], budget_secs: float | None = None) -> None:
        self.rules = dict(rules)
        self.budget_secs = budget_secs
        #: seconds of work per item of the batches measured so far (None: none yet)
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

    def __call__(self, meta: Any) -> bool:
        n = self.size(meta)
        if n is None:
            return False
        return self.budget_secs is None or self.per_item is None or n * self.per_item <= self.budget_secs

    def ran(self, meta: Any, busy_secs: float) -> None:
        """A batch of ``meta`` was processed (here or on Spark) in ``busy_secs`` of its
        tasks' time: the estimate of work per item follows it."""
        n = self.size(meta)
        if not n:
            return
        per = busy_secs / n
        self.per_item = per if self.per_item is None else (1 - _WEIGHT) * self.per_item + _WEIGHT * per
