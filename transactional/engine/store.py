"""The coordinator's records in ``TransactionalState`` (layout in ``state/base.py``)::

    committed      {"txid": t, "meta": <meta of t>, "partitions": {p: latest meta}}
    meta/<txid>    {"meta": ..., "attempts": n, "commit_started": [a, ...], "time_ms": ms}
                   uncommitted txids: written before they run; ``commit_started`` lists the
                   attempts whose commit phase began (written before it writes user state);
                   ``time_ms``: the driver's clock when the first commit began, which every
                   later attempt reuses (``commit_time``; processing-time windows)
    epoch          n: the epoch of the newest lock holder; each driver takes n + 1 when it
                   gets the lock and fences its user-state writes with it (state/map/)
    maps           {"<name>": "transactional" | "opaque"}: every map the topology used, so
                   a commit can repair an OpaqueMap a failed attempt wrote (state/map/)
    kept/<txid>    {"meta": ..., "partitions": ..., "keep": N}: a committed txid's metadata, kept for
                   ``trident replay`` (``TopologyConfig.keep_batch_meta``: the last N txids)
    state          {"kind": "redis", "location": "host:port/db"}: the user state the
                   committed txids were written to (no credentials); a run whose state is
                   another is refused (``check_user_state``)
    stateful       {"<bolt>": {"parallelism": p, "tasks": n}}: each stateful bolt's
                   parallelism, and how many task namespaces may hold its state (more than
                   p only while a rebalance is under way; transactional/engine/core/checkpoint.py)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from state.backends import COORDINATION, USER_STATE, backend_for, describe_identity, store_identity
from state.base import TransactionalState
from transactional.exceptions import StateLossError


@dataclass
class Recovered:
    """What a (re)starting driver finds."""

    last_committed: int = 0
    committed_meta: Any = None
    partitions: dict[Any, Any] | None = None
    pending: dict[int, dict[str, Any]] = field(default_factory=dict)   # txid -> {"meta", "attempts", ...}
    maps: dict[str, str] = field(default_factory=dict)       # map name -> kind


class CoordinatorStore:
    """The coordinator's records (module docstring) in one topology's ``TransactionalState``."""

    def __init__(self, state: TransactionalState) -> None:
        self.state = state
        #: raised when the run is about to keep user state it would lose (``check_user_state``)
        self.refuse_state: StateLossError | None = None
        self._kept_checked = False
        #: txid -> the driver's time (ms) its first commit began with (``commit_time``)
        self.times: dict[int, int] = {}

    def check_user_state(self, state_url: str, coordination_url: str, *, keeps_state: bool,
                         accept_loss: bool) -> None:
        """Refuse (``StateLossError``, before anything is written) a run that would drop
        what an earlier run committed without a word, unless ``accept_loss``:

        * txids were committed into user state (maps or checkpoints recorded) in a store
          other than ``state_url``'s: this run would resume after them, their values
          left behind;
        * durable coordination with state that dies with this process: the next run
          resumes after txids whose values are gone. Refused now when ``keeps_state``
          (the topology's state is known at start), else at the first map or stateful
          bolt the run records (``record_map``, ``record_stateful``).

        Then records ``state_url``'s store (kind and location, never a password)."""
        here = store_identity(USER_STATE, state_url)
        durable = backend_for(COORDINATION, coordination_url).shared
        tid = self.state.topology_id
        if durable and not backend_for(USER_STATE, state_url).shared and not accept_loss:
            msg = (f"topology {tid!r}: coordination {_safe(coordination_url)} is durable but state {_safe(state_url)} "
                   "is not: a restart would resume after the txids this run commits while their state is gone "
                   "with this process. Use a durable state (--state redis://host:port/db, TopologyConfig "
                   "state=...), or accept the loss knowingly with --accept-state-loss (accept_state_loss=True)")
            self.refuse_state = StateLossError(msg)
            if keeps_state:
                raise self.refuse_state
        before = self.state.get("state")
        if before is not None and before != here:
            committed = (self.state.get("committed") or {}).get("txid")
            kept = any(self.state.get(p) for p in ("maps", "checkpoint", "stateful"))
            if committed and kept and not accept_loss:
                msg = (f"topology {tid!r} committed txids up to {committed} into state {describe_identity(before)}, "
                       f"but this run's state is {describe_identity(here)}: it would resume after txid {committed} "
                       "and what they wrote would be lost without a word. Run it with the state it committed to "
                       f"(--state {describe_identity(before)}), or accept the loss knowingly with "
                       "--accept-state-loss (TopologyConfig accept_state_loss=True)")
                raise StateLossError(msg)
        if before != here:
            self.state.set("state", here)

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
                if isinstance(rec.pending[txid], dict) and rec.pending[txid].get("time_ms") is not None:
                    self.times[txid] = int(rec.pending[txid]["time_ms"])
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
        """Add map ``name`` of ``kind`` to the topology's list of maps (refused, as
        ``check_user_state`` says, when that state would be lost)."""
        if self.refuse_state is not None:
            raise self.refuse_state
        maps = dict(self.state.get("maps") or {})
        maps[name] = kind
        self.state.set("maps", maps)

    def write_pending(self, txid: int, meta: Any, attempts: int, commit_started: Iterable[int] = ()) -> None:
        rec = {"meta": meta, "attempts": attempts, "commit_started": list(commit_started)}
        if txid in self.times:
            rec["time_ms"] = self.times[txid]
        self.state.set(f"meta/{txid}", rec)

    def commit_time(self, txid: int, clock: Callable[[], float]) -> int:
        """The driver's time (ms) of ``txid``'s commit: ``clock()`` the first time its
        commit begins, then the same for every later attempt of it, also after a restart
        (``write_pending`` stores it in the txid's record, ``recover`` reads it back).
        Processing-time windows take it, so a replay fires the same windows."""
        if txid not in self.times:
            self.times[txid] = int(clock() * 1000)
        return self.times[txid]

    def drop_pending(self, txid: int) -> None:
        self.state.delete(f"meta/{txid}")
        self.times.pop(txid, None)

    def keep_meta(self, txid: int, meta: Any, partitions: dict[Any, Any] | None, keep: int) -> None:
        """Keep committed ``txid``'s metadata under ``kept/<txid>`` while it is among the last
        ``keep`` txids (``keep`` 0: none is kept). One write and one delete per commit; the
        first commit of a run also drops what an earlier run with a larger ``keep`` left."""
        if keep > 0:
            self.state.set(f"kept/{txid}", {"meta": meta, "partitions": partitions, "keep": keep})
        if not self._kept_checked:
            self._kept_checked = True
            for name in self.state.children("kept"):
                if int(name) <= txid - keep:
                    self.state.delete(f"kept/{name}")
        elif keep > 0 and txid - keep >= 1:
            self.state.delete(f"kept/{txid - keep}")

    def kept_meta(self) -> dict[int, dict[str, Any]]:
        """The kept txids' metadata (``keep_meta``): txid -> {"meta", "partitions"}."""
        return {int(n): cast("dict[str, Any]", self.state.get(f"kept/{n}")) for n in self.state.children("kept")}

    def record_commit(self, txid: int, meta: Any, partitions: dict[Any, Any] | None) -> None:
        self.state.set("committed", {"txid": txid, "meta": meta, "partitions": partitions})

    def recorded_stateful(self) -> dict[str, dict[str, int]]:
        """Each stateful bolt's recorded parallelism and task namespaces (``stateful``)."""
        return dict(self.state.get("stateful") or {})

    def record_stateful(self, component: str, parallelism: int, tasks: int, to: int | None = None) -> None:
        """Record stateful bolt ``component``'s ``parallelism``, the ``tasks`` namespaces
        that may hold its state, and the parallelism its state is being moved ``to``
        (refused, as ``check_user_state`` says, when that state would be lost)."""
        if self.refuse_state is not None:
            raise self.refuse_state
        rec = self.recorded_stateful()
        rec[component] = {"parallelism": parallelism, "tasks": tasks, **({"to": to} if to is not None else {})}
        self.state.set("stateful", rec)


def _safe(url: str) -> str:
    """``url`` without its password, for messages."""
    from urllib.parse import urlparse

    u = urlparse(url)
    return url.replace(f":{u.password}@", ":***@") if u.password else url
