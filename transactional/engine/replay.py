"""Replay policies: how each spout kind re-emits a failed txid (the coordinator's rule 3).

A transactional spout replays exactly the stored metadata; an opaque one is planned again
from where the previous batch ended and keeps what a short batch emitted; a core
topology's micro-batch is planned again from new ``next_tuple`` calls. ``SpoutsReplay``
combines the policies of a topology's spouts under one txid.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ReplayPolicy", "TransactionalReplay", "OpaqueReplay", "CoreReplay", "SpoutsReplay", "advance"]


def advance(partitions: dict[Any, Any] | None, meta: Any) -> dict[Any, Any]:
    """The partition state after a batch with (partitioned) metadata ``meta``."""
    out = dict(partitions or {})
    out.update(meta or {})
    return out


class ReplayPolicy:
    """How a spout kind re-emits a failed txid. One object per kind."""

    partitioned = True
    replays = False          # a failed txid is re-emitted with its stored metadata

    def replay_meta(self, meta: Any) -> Any | None:
        """The metadata a failed txid is re-emitted with, or None: plan it again."""
        raise NotImplementedError

    def keep(self, meta: Any) -> Any | None:
        """When ``replay_meta`` is None: the part of ``meta`` the new plan must reuse."""
        return None

    def adopt(self, planned: Any, actual: dict[Any, Any] | None) -> Any | None:
        """The metadata to keep when an attempt reports what it ``actual``-ly emitted, or
        None when that is what was planned."""
        return None

    def advance(self, state: Any, meta: Any) -> Any:
        """The spout's state after a batch with metadata ``meta``: the partition state
        (partition -> its latest metadata), or None for a spout without partitions."""
        return advance(state, meta) if self.partitioned else None


class TransactionalReplay(ReplayPolicy):
    """Transactional and partitioned spouts: a replay re-emits exactly the stored metadata."""

    replays = True

    def __init__(self, partitioned: bool = True) -> None:
        self.partitioned = partitioned

    def replay_meta(self, meta: Any) -> Any | None:
        return meta


class OpaqueReplay(ReplayPolicy):
    """Opaque spouts: a replay is planned again from where the previous batch ended; a
    batch that emitted less than planned keeps what it emitted."""

    def replay_meta(self, meta: Any) -> Any | None:
        return None

    def adopt(self, planned: Any, actual: dict[Any, Any] | None) -> Any | None:
        if not actual:
            return None
        kept = {p: actual.get(p, m) for p, m in planned.items()}
        return None if kept == planned else kept


class CoreReplay(ReplayPolicy):
    """Core topologies' micro-batches: a failed one is planned again from new
    ``next_tuple`` calls (its spouts replay the tuples it held, as they were failed)."""

    partitioned = False

    def replay_meta(self, meta: Any) -> Any | None:
        return None


class SpoutsReplay(ReplayPolicy):
    """The spouts of one topology, each with its own policy (Storm's MasterBatchCoordinator
    keeps a list of spouts under one txid).

    A txid's metadata is ``{spout_id: meta}``, None for a spout with nothing in that txid;
    the state is ``{spout_id: state}``, where a spout without partitions keeps its last
    metadata, so that one that sat a txid out continues from its own last batch. A failed
    txid is re-emitted as stored when every spout replays; otherwise it is planned again
    and the spouts that replay (transactional ones) ``keep`` their part, a None ("nothing
    in this txid") included: a transactional spout's batch of a txid never changes.

    >>> p = SpoutsReplay({"t": TransactionalReplay(False), "o": OpaqueReplay()})
    >>> p.replay_meta({"t": [0, 3], "o": {"0": [5, 9]}}), p.keep({"t": None, "o": {"0": [5, 9]}})
    (None, {'t': None})
    >>> p.advance({"t": [0, 3], "o": {"0": [0, 5]}}, {"t": None, "o": {"1": [0, 2]}})
    {'t': [0, 3], 'o': {'0': [0, 5], '1': [0, 2]}}
    """

    def __init__(self, policies: dict[str, ReplayPolicy]) -> None:
        self.policies = dict(policies)
        self.replays = all(p.replays for p in self.policies.values())

    def replay_meta(self, meta: Any) -> Any | None:
        if not self.replays:
            return None
        return {sid: (meta or {}).get(sid) for sid in self.policies}

    def keep(self, meta: Any) -> Any | None:
        kept = {sid: (meta or {}).get(sid) for sid, p in self.policies.items() if p.replays}
        return kept or None

    def adopt(self, planned: Any, actual: dict[Any, Any] | None) -> Any | None:
        out, changed = dict(planned), False
        for sid, p in self.policies.items():
            if planned.get(sid) is not None:
                kept = p.adopt(planned[sid], (actual or {}).get(sid))
                if kept is not None:
                    out[sid], changed = kept, True
        return out if changed else None

    def advance(self, state: Any, meta: Any) -> Any:
        state, meta = state or {}, meta or {}
        out = {}
        for sid, p in self.policies.items():
            m, prev = meta.get(sid), state.get(sid)
            out[sid] = prev if m is None else (p.advance(prev, m) if p.partitioned else m)
        return out
