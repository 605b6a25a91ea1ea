"""Reading a topology's maps as of its last recorded txid: the coordinator's txid record is
the cut (docs/redis.md, "What a reader sees").

On Redis Cluster the nodes take a txid's write one by one in time (each atomically), and
the coordinator records the txid only after every node took its part. A plain read
(``MapState.multi_get`` with no known ``last_committed``) may see, between those moments,
txid t's values on one node and t-1's on another. ``CommittedReader`` reads the
coordinator's record first and then every key as of that txid: a key a later,
unrecorded txid already wrote answers with the value it kept from before (``prev`` of a
transactional or opaque value; a counter slot's before-record), so what it returns is
exactly the state after the recorded txid, on every node.

    reader = CommittedReader("zk://127.0.0.1:2181/trident", "redis+cluster://127.0.0.1:7000", "wc")
    txid, counts = reader.read("counts", ["apple", "pear"])

A key's value can be one txid ahead of the cut at most (txid t+1 is written only after t
was recorded), so the before-value is always the value at the cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from state.base import open_transactional_state
from state.map.openers import open_map

__all__ = ["CommittedReader", "committed_txid"]


def committed_txid(coordination_url: str, topology_id: str, **options: Any) -> int:
    """The last txid the coordinator recorded as committed for ``topology_id`` (0: none)."""
    s = open_transactional_state(coordination_url, topology_id, **options)
    try:
        rec = s.get("committed")
        return int(rec["txid"]) if isinstance(rec, dict) and rec.get("txid") is not None else 0
    finally:
        s.close()


class CommittedReader:
    """Reads maps of topology ``topology_id`` in the user state at ``state_url`` as of the
    txid the coordinator at ``coordination_url`` recorded last (module docstring)."""

    def __init__(self, coordination_url: str, state_url: str, topology_id: str, *,
                 state_options: dict[str, Any] | None = None) -> None:
        self.coordination_url, self.state_url, self.topology_id = coordination_url, state_url, topology_id
        self.state_options = dict(state_options or {})

    def read(self, name: str, keys: Sequence[Any], kind: bool | str = "transactional") -> tuple[int, list[Any]]:
        """``(txid, values)``: the recorded txid (the cut) and the values of ``keys`` in map
        ``name`` (of ``kind``: "transactional", "opaque", "counter", ...) as that txid left
        them; None where a key had no value then."""
        cut = committed_txid(self.coordination_url, self.topology_id)
        m = open_map(name, kind, url=self.state_url, scope=self.topology_id, known={},
                     options=self.state_options, writer="reader")
        m.last_committed = cut
        return cut, m.multi_get(list(keys))
