"""The coordinator's records in ``TransactionalState`` (layout in ``state/base.py``)::

    committed      {"txid": t, "meta": <meta of t>, "partitions": {p: latest meta}}
    meta/<txid>    {"meta": ..., "attempts": n, "commit_started": [a, ...]}
                   uncommitted txids: written before they run; ``commit_started`` lists the
                   attempts whose commit phase began (written before it writes user state)
    epoch          n: the epoch of the newest lock holder; each driver takes n + 1 when it
                   gets the lock and fences its user-state writes with it (state/map.py)
    maps           {"<name>": "transactional" | "opaque"}: every map the topology used, so
                   a commit can repair an OpaqueMap a failed attempt wrote (state/map.py)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from state.base import TransactionalState


@dataclass
class Recovered:
    """What a (re)starting driver finds."""

    last_committed: int = 0
    committed_meta: Any = None
    partitions: dict | None = None
    pending: dict[int, dict] = field(default_factory=dict)   # txid -> {"meta", "attempts", ...}
    maps: dict[str, str] = field(default_factory=dict)       # map name -> kind


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
                # written by write_pending; only the lock holder (this driver) deletes it
                rec.pending[txid] = cast("dict[str, Any]", self.state.get(f"meta/{txid}"))
        rec.maps = self.recover_maps()
        return rec

    def recover_maps(self) -> dict[str, str]:
        """The maps the topology used (name -> kind)."""
        return dict(self.state.get("maps") or {})

    def take_epoch(self) -> int:
        """The next driver epoch, stored before it is used. Call holding the lock: the
        write is fenced on it, so epochs only grow, one per lock holder."""
        epoch = int(self.state.get("epoch") or 0) + 1
        self.state.set("epoch", epoch)
        return epoch

    def record_map(self, name: str, kind: str) -> None:
        """Add map ``name`` of ``kind`` to the topology's list of maps."""
        maps = dict(self.state.get("maps") or {})
        maps[name] = kind
        self.state.set("maps", maps)

    def write_pending(self, txid: int, meta: Any, attempts: int, commit_started: Iterable[int] = ()) -> None:
        self.state.set(f"meta/{txid}", {"meta": meta, "attempts": attempts, "commit_started": list(commit_started)})

    def drop_pending(self, txid: int) -> None:
        self.state.delete(f"meta/{txid}")

    def record_commit(self, txid: int, meta: Any, partitions: dict | None) -> None:
        self.state.set("committed", {"txid": txid, "meta": meta, "partitions": partitions})
