"""Combining the outputs of several tasks of one stage before they go on (a map-side
combine; docs/performance.md, "Throughput and latency by setting").

A bolt whose outputs can be merged across its tasks declares ``combines_outputs = True``
and a method ``combine_outputs(records) -> records`` (``OutputCombiner``): given the
records several of its tasks emitted for one batch, it returns records that a consumer
reads to the same effect, fewer of them (Trident's partial aggregates of a
``CombinerAggregator``: one partial per key and consumer task instead of one per key,
consumer task and producing task). The engine calls it

* in a Spark task that carries several logical tasks of the stage
  (``transactional.engine.task_groups``), before the records leave the task (the shuffle,
  or the collect to the driver);
* on the driver, on the processing output the commit phase reads (``combine_handoff``),
  off the commit's serial path: the commit then sees one partial per key.

A combine is an optimisation only: it must give the consumer the same result (exactly:
the records are a pure function of the batch, so a replay combines to the same values),
and when it cannot (it raises), the records go on as they were, and the consumer meets
the error itself, named as usual.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from transactional.topology import Topology

Record = tuple[int, Any]          # (consumer_index * KEY_STRIDE + consumer_task, payload)
Combine = Callable[[list[Record]], list[Record]]

log = logging.getLogger(__name__)


class OutputCombiner(Protocol):
    """A bolt that merges the records several of its tasks emitted for one batch."""

    combines_outputs: bool

    def combine_outputs(self, records: list[Record]) -> list[Record]:
        """Records to the same effect on every consumer as ``records``; payloads are
        ``(component, stream, source task, values)`` as ``Router.records`` makes them."""


def combine_records(topology: Topology, component: str, records: list[Record]) -> list[Record]:
    """``records`` of ``component``'s tasks merged by its bolt; as they are when the bolt
    does not combine, when there is nothing to merge, or when its combine raises."""
    if len(records) < 2 or not topology.component(component).combines:
        return records
    try:
        bolt: OutputCombiner = topology.component(component).new_instance()
        return bolt.combine_outputs(records)
    except Exception:  # noqa: BLE001 - an optimisation: the consumer meets the error itself
        log.debug("combine of %s's outputs skipped", component, exc_info=True)
        return records


def stage_combiner(shared: Any, component: str) -> Combine:
    """The combine of ``component``'s records in a task that reaches the topology through
    ``shared`` (a Spark broadcast on the workers)."""
    def combine(records: list[Record]) -> list[Record]:
        return combine_records(shared.value, component, records)
    return combine


def combine_handoff(topology: Topology, records: list[Record]) -> list[Record]:
    """The processing output the commit phase reads, each combining component's records
    merged (records of other components as they are, in their order)."""
    combining = {c.id for c in topology.components if c.combines}
    if not combining:
        return records
    by_component: dict[str, list[Record]] = {}
    out: list[Record] = []
    for r in records:
        c = r[1][0]
        if c in combining:
            by_component.setdefault(c, []).append(r)
        else:
            out.append(r)
    for c, rs in by_component.items():
        out.extend(combine_records(topology, c, rs))
    return out
