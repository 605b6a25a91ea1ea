"""The coordinator's records in ``TransactionalState`` (layout in ``state/base.py``)::

    committed      {"txid": t, "meta": <meta of t>, "partitions": {p: latest meta}}
    meta/<txid>    {"meta": ..., "attempts": n, "commit_started": [a, ...]}
                   uncommitted txids: written before they run; ``commit_started`` lists the
                   attempts whose commit phase began (written before it writes user state)
    superseded     {"<txid>": [a, ...]}  attempts whose commit began, failed, and was redone
                   by another attempt of the txid; ``OpaqueMap`` reads values they left
                   behind as never committed (see ``state/map.py``)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from state.base import TransactionalState


@dataclass
class Recovered:
    """What a (re)starting driver finds."""

    last_committed: int = 0
    committed_meta: Any = None
    partitions: dict | None = None
    pending: dict[int, dict] = field(default_factory=dict)   # txid -> {"meta", "attempts", ...}
    superseded: dict[int, set[int]] = field(default_factory=dict)


class CoordinatorStore:
    def __init__(self, state: TransactionalState) -> None:
        self.state = state

    def recover(self) -> Recovered:
        """Read the committed record and every uncommitted txid's metadata; metadata of
        txids already committed (a crash between recording and dropping) is dropped."""
        rec = Recovered()
        c = self.state.get("committed")
        if c:
            rec.last_committed, rec.committed_meta, rec.partitions = c["txid"], c.get("meta"), c.get("partitions")
        for name in self.state.children("meta"):
            txid = int(name)
            if txid <= rec.last_committed:
                self.state.delete(f"meta/{txid}")
            else:
                rec.pending[txid] = self.state.get(f"meta/{txid}")
        rec.superseded = {int(t): set(a) for t, a in (self.state.get("superseded") or {}).items()}
        return rec

    def write_pending(self, txid: int, meta: Any, attempts: int, commit_started: list[int] = ()) -> None:
        self.state.set(f"meta/{txid}", {"meta": meta, "attempts": attempts, "commit_started": list(commit_started)})

    def record_superseded(self, superseded: dict[int, set[int]]) -> None:
        self.state.set("superseded", {str(t): sorted(a) for t, a in superseded.items()})

    def drop_pending(self, txid: int) -> None:
        self.state.delete(f"meta/{txid}")

    def record_commit(self, txid: int, meta: Any, partitions: dict | None) -> None:
        self.state.set("committed", {"txid": txid, "meta": meta, "partitions": partitions})
