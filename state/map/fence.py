"""Fencing (``state.map``'s docstring): what a write claims (``Fence``), the rule a backing
applies to it (``fence_refusal``), the errors of a refusal, and an in-process fence (``FenceCell``)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from state.errors import LeadershipLostError, StateAheadError
from state.keys import decode_key
from state.map.rules import WRITTEN_KEY


@dataclass(frozen=True)
class Fence:
    """What a write claims: the writing driver's ``epoch`` and the batch's ``txid``.

    Either may be None: no epoch (a map used outside the engine) is not checked against
    epochs; no txid (raising the epoch when a driver starts) is not checked against txids.

    ``writer`` (with ``attempt``): one of several writers of the same attempt -- committer
    tasks on executors, each writing its own share. The backing then also refuses, writing
    nothing, a key that another writer of the same attempt already wrote (two tasks
    updating one key in one txid; ``ConflictingWriteError``), so no share is lost silently.
    """

    epoch: int | None
    txid: int | None
    attempt: int | None = None
    writer: str | None = None

    @property
    def claims(self) -> str | None:
        """The name of this attempt's claims (which writer wrote which key), or None."""
        if self.writer is None or self.txid is None:
            return None
        return f"~claims:{self.txid}:{self.attempt}"


def fence_refusal(stored_epoch: int, stored_txid: int, fence: Fence) -> str | None:
    """Why a backing whose fence holds ``(stored_epoch, stored_txid)`` must refuse a write
    under ``fence``: ``"epoch"`` (an older driver), ``"txid"`` (an older batch), or None.
    After an accepted write the stored fence is the element-wise maximum."""
    if fence.epoch is not None and stored_epoch > fence.epoch:
        return "epoch"
    if fence.txid is not None and stored_txid > fence.txid:
        return "txid"
    return None


def fence_error(reason: str, what: str, stored_epoch: int, stored_txid: int, fence: Fence) -> Exception:
    """The error for a refused write to ``what`` (a namespace and address)."""
    if reason == "epoch":
        return LeadershipLostError(
            f"write to {what} refused: a driver with a newer epoch ({stored_epoch}) has taken "
            f"over this topology, and this driver's epoch is {fence.epoch}; this driver must "
            "stop (nothing was written). If no other driver runs, the coordinator state was "
            "reset (e.g. coordination='memory://' with a durable state): use ZooKeeper "
            "coordination or a new topology_id")
    return StateAheadError(
        f"write to {what} refused: it was already written by txid {stored_txid}, newer than "
        f"this write (txid {fence.txid}): another driver is writing this state, or the "
        "topology id was reused with fresh coordinator state. Stop the other writer, or use "
        "a new topology_id / state name")


def conflict_error(what: str, key: str, other: str, fence: Fence) -> Exception:
    """The error for a key two writers of one attempt wrote (see ``Fence.writer``)."""
    from state.errors import ConflictingWriteError

    return ConflictingWriteError(
        f"{what}: key {decode_key(key)!r} is updated by {other} and by {fence.writer} in txid "
        f"{fence.txid}; each would overwrite the other's share. Route every update of a key "
        "to one committer task (fields_grouping on the key) and use one committer per map, "
        "or commit on the driver (commit_placement='driver'). Nothing of this write was stored")


class FenceCell:
    """An in-process fence: the highest (epoch, txid) written through it, and the claims
    of the newest attempt (``(namespace, key) -> writer``), under a lock."""

    def __init__(self) -> None:
        self.epoch = 0
        self.txid = 0
        self.claims: dict[str, dict[tuple[str, str], str]] = {}
        self.lock = threading.Lock()

    def check(self, fence: Fence, what: str, keys: Sequence[str] = (), namespace: str = "") -> None:
        """Raise ``fence_error`` (or ``conflict_error`` for a key of ``namespace`` another
        writer of the attempt claimed) if ``fence`` is refused; changes nothing."""
        reason = fence_refusal(self.epoch, self.txid, fence)
        if reason is not None:
            raise fence_error(reason, what, self.epoch, self.txid, fence)
        if fence.claims is not None:
            claims = self.claims.get(fence.claims, {})
            for k in keys:
                other = claims.get((namespace, k))
                if other is not None and other != fence.writer:
                    raise conflict_error(what, k, other, fence)

    def raise_to(self, fence: Fence, keys: Sequence[str] = (), namespace: str = "") -> None:
        """Raise the cell to ``fence`` (checked), claiming ``keys`` of ``namespace`` for its writer."""
        if fence.claims is not None:
            claims = self.claims.get(fence.claims, {})
            self.claims = {fence.claims: claims}   # only the newest attempt's are kept
            writer = fence.writer
            assert writer is not None   # a fence has claims only with a writer
            claims.update(((namespace, k), writer) for k in keys if not k.startswith(WRITTEN_KEY))
        self.epoch = max(self.epoch, fence.epoch or 0)
        self.txid = max(self.txid, fence.txid or 0)

    def check_and_raise(self, fence: Fence, what: str, keys: Sequence[str] = (), namespace: str = "") -> None:
        """``check``, then ``raise_to``. Call with ``self.lock`` held, together with the
        write it guards."""
        self.check(fence, what, keys, namespace)
        self.raise_to(fence, keys, namespace)

