"""When the coordinator plans and launches the next new txid (docs/design.md, "Pipelining and
max_spout_pending").

``max_spout_pending`` bounds the txids in flight (Storm's meaning). Within it, two policies:

- ``"eager"`` (Storm's): plan the next txid whenever a slot is free. On few cores the
  batches in flight share them, and a record that arrives while every slot is taken waits
  for the oldest batch's commit: measured on ``local[2]``, Kafka -> Redis at 10k records/s,
  ``max_spout_pending`` 3 answered slower than 1 at every offered rate.
- ``"adaptive"`` (the default): plan the next txid when processing capacity is free -- no
  batch in flight is still processing (the others are processed, waiting for or in their
  commit) -- so a batch is planned the moment the previous one's processing ends and takes
  everything that arrived meanwhile; while the spouts are *backlogged* (their last plan hit
  a per-batch cap: ``Coordinator.backlogged`` in ``transactional.spout``) it plans as
  ``"eager"`` does, and every slot fills, so throughput on a backlog stays that of
  ``max_spout_pending`` batches in flight.

Replays (a failed txid, uncommitted txids a restarted driver found) have their metadata
already: they launch whenever a slot is free, under either policy. Commits are untouched:
strictly in txid order, one at a time, each as soon as its txid is processed and the one
before it committed.

>>> adaptive = LaunchPolicy("adaptive")
>>> adaptive.may_plan(processing=1, backlogged=False)     # one batch still processing: wait
False
>>> adaptive.may_plan(processing=0, backlogged=False)     # the others are processed: plan now
True
>>> adaptive.may_plan(processing=2, backlogged=True)      # the spout has more than a batch: fill
True
>>> LaunchPolicy("eager").may_plan(processing=2, backlogged=False)
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["LAUNCH_POLICIES", "LaunchPolicy"]

#: the values of ``TopologyConfig.launch_policy``
LAUNCH_POLICIES = ("adaptive", "eager")


@dataclass(frozen=True)
class LaunchPolicy:
    """Whether the coordinator may plan a new txid now, given a free slot of
    ``max_spout_pending`` (the module docstring). Pure: no clock, no I/O."""

    name: Literal["adaptive", "eager"] | str = "adaptive"

    def __post_init__(self) -> None:
        if self.name not in LAUNCH_POLICIES:
            msg = f"launch_policy must be one of {', '.join(map(repr, LAUNCH_POLICIES))}; got {self.name!r}"
            raise ValueError(msg)

    def may_plan(self, processing: int, backlogged: bool) -> bool:
        """True when a new txid may be planned now: ``processing`` txids in flight are still
        processing; ``backlogged``: the spouts' last plan left input behind (it hit a
        per-batch cap)."""
        return self.name == "eager" or backlogged or processing == 0
