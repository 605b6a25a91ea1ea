"""Staged commits in the engine (``TopologyConfig.staged_counters``; docs/redis.md,
"Staged commits"): the counter maps of a run committed by reference, with no partial counts
shipped to the commit phase and no second Spark job.

* **Processing.** Every task that ends with partial counts for a staged counter map (a
  Trident ``persistent_aggregate`` of ``Count``/``Sum`` into ``trident.state.counters``)
  stages them beside the map (``state.staged.StagedCounters.stage``, fenced by this
  driver's epoch) instead of emitting them, and reports ``(map, StagedRef)`` pairs to the
  driver with its task report (``ProcessingResult.acks``, which transactional topologies
  use for nothing else). What the processing tasks need for it is in the run's conf under
  ``STAGED_CONF``.
* **Commit, step 4-5** (``StagedMapCommit.write``): the commit-phase stages and the other
  maps as ``MapCommit`` does them; then each staged map's parts are added on every node
  (``StagedCounters.apply``: the node checks its slots' fences and that every part is there,
  the slots whose marker already says the txid skip it). Step 6 records the txid only
  after every node took its part. A lost part (``StateUnavailableError``) or a refused
  fence fails the attempt (``AttemptFailed``): the batch is processed and staged again.

A driver killed after the apply but before the record replays the txid: the replay stages
its (identical: transactional spouts only, as for every counter map) counts under a new
attempt and the apply skips every slot that took the txid. ``TRIDENT_CRASH_AT`` points:
``commit.before_write`` (staged, nothing applied), ``staged.after_node`` (txid, node: some
nodes applied), ``commit.before_record`` (all applied, not recorded).
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from state.errors import ConfigError
from state.staged import StagedCounters, StagedRef
from transactional.engine.attempts import AttemptFailed
from transactional.engine.commit import MapCommit, RunStages
from transactional.engine.coordinator import Commit
from transactional.engine.faults import crash_point
from transactional.engine.plan import ExecutionPlan, new_bolt
from transactional.engine.reports import ProcessingResult
from transactional.engine.store import CoordinatorStore
from transactional.engine.task import TaskFailure
from transactional.tuples import TransactionAttempt

if TYPE_CHECKING:
    from transactional.engine.context import RunContext

__all__ = ["STAGED_CONF", "StagedMapCommit", "staged_map_names", "stage_counts"]

#: the conf key processing tasks find the staging settings under: a dict with ``url``,
#: ``topology_id``, ``epoch``, ``options`` and ``maps`` (the staged map names)
STAGED_CONF = "trident.staged_counters"


def staged_map_names(plan: ExecutionPlan) -> list[str]:
    """The counter maps whose counts the processing stages of ``plan`` can stage (a bolt
    says which with ``staged_maps``: Trident's stages do), sorted."""
    names: set[str] = set()
    for stage in plan.processing:
        if stage.kind != "bolt":
            continue
        bolt = new_bolt(stage, plan.topology.component(stage.component))
        names.update(getattr(bolt, "staged_maps", ()))
    return sorted(names)


def stage_counts(conf: dict[str, Any], name: str, component: str, task: int, attempt: TransactionAttempt,
                 keys: Sequence[Any], deltas: Sequence[int]) -> tuple[str, StagedRef] | None:
    """In a processing task: stage ``deltas`` of ``keys`` for counter map ``name`` when the
    run stages it (returns the pair the task reports); None when it does not (the caller
    emits its partial counts as usual)."""
    s = conf.get(STAGED_CONF)
    if not s or name not in s["maps"]:
        return None
    staged = StagedCounters(s["url"], s["topology_id"], name, **s["options"])
    # a part is named by its task: unique across the components that stage into one map
    part = (zlib.crc32(component.encode()) << 16) | task
    return name, staged.stage(attempt.txid, attempt.attempt_id, part, s["epoch"], keys, deltas)


class StagedMapCommit(MapCommit):
    """``MapCommit`` whose step 4-5 also applies the staged counter maps (module docstring).
    Raises ``ConfigError`` when the topology has no counter map to stage."""

    def __init__(self, ctx: RunContext, store: CoordinatorStore, epoch: int) -> None:
        super().__init__(ctx, store)
        self.epoch = epoch
        names = staged_map_names(ctx.plan)
        if not names:
            msg = (f"topology {ctx.topology.topology_id!r}: staged_counters=True, but no stage of it adds to a "
                   "counter map: staged commits apply to Trident persistent_aggregate(trident.state.counters(...), "
                   "Count() or Sum()). Use staged_counters=False")
            raise ConfigError(msg)
        options = ctx.states.options()
        self.maps = {n: StagedCounters(ctx.config.state, ctx.topology.topology_id, n, **options) for n in names}
        ctx.conf[STAGED_CONF] = {"url": ctx.config.state, "topology_id": ctx.topology.topology_id,
                                 "epoch": epoch, "options": options, "maps": names}

    def write(self, a: Commit, r: ProcessingResult, run_stages: RunStages) -> None:
        """Steps 4-5 of ``MapCommit``, then every staged part of the attempt added (all nodes)."""
        super().write(a, r, run_stages)
        refs: dict[str, list[StagedRef]] = {n: [] for n in self.maps}
        for pairs in r.acks.values():
            for name, ref in pairs or ():
                refs[name].append(ref)
        txid = a.txid
        after = ((lambda node: crash_point("staged.after_node", txid=txid, node=node))
                 if "staged.after_node" in os.environ.get("TRIDENT_CRASH_AT", "") else None)
        for name, staged in self.maps.items():
            try:
                staged.apply(txid, self.epoch, refs[name], after_node=after)
            except Exception as exc:
                raise AttemptFailed(TaskFailure.of(exc, f"(map {name!r})", -1,
                                                   TransactionAttempt(txid, a.attempt))) from exc
