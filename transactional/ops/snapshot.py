"""What a run left in its user state, read back key by key, and how two such snapshots
differ: the evidence of ``trident verify`` (``transactional.ops.verify``) and
``trident replay`` (``transactional.ops.replay``).

A snapshot is ``{state name: {key: value}}`` for one topology id: every map the
coordinator recorded for it (``maps`` in the coordinator state; values as the map's
committers see them, without the txid bookkeeping), and every stateful bolt's
``KeyValueState`` (``"<bolt> (KeyValueState)"``, the tasks' namespaces merged). Keys are
found by scanning the store (Redis ``SCAN`` over the map's key prefix); tuples in keys
come back as tuples.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from state.keys import decode_key, hashable_key, key_prefix

__all__ = ["Snapshot", "read_snapshot", "Difference", "compare", "show_key"]

Snapshot = dict[str, dict[Any, Any]]


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _map_keys(client: Any, namespace: str) -> list[Any]:
    """The user keys stored in map ``namespace`` (bookkeeping keys such as ``~written`` left out)."""
    prefix = key_prefix(namespace)
    out = []
    for raw in client.scan_iter(match=_glob_escape(prefix) + "*", count=1000):
        suffix = (raw.decode() if isinstance(raw, bytes) else raw)[len(prefix):]
        if suffix.startswith("~") and suffix[1:2] not in ("s", "b", "j"):
            continue
        out.append(hashable_key(decode_key(suffix)))
    return out


def read_snapshot(state_url: str, coordination_url: str, topology_id: str) -> Snapshot:
    """Every map and ``KeyValueState`` of ``topology_id`` (module docstring). The state must be
    a ``redis://`` store (a ``memory://`` one lives and dies with its driver process)."""
    from state.base import open_transactional_state
    from state.keyvalue import open_key_value_state
    from state.map import map_class, open_map_backing
    from state.redis import client_from_url

    coord = open_transactional_state(coordination_url, topology_id)
    try:
        maps = dict(coord.get("maps") or {})
        stateful = dict(coord.get("stateful") or {})
        committed = coord.get("committed") or {}
    finally:
        coord.close()
    last = committed.get("txid") if committed else None
    client = client_from_url(state_url)
    snap: Snapshot = {}
    try:
        for name, kind in sorted(maps.items()):
            ns = f"{topology_id}:{name}"
            keys = _map_keys(client, ns)
            m = map_class(kind)(open_map_backing(state_url, ns, fence_scope=topology_id))
            m.last_committed = last
            values = m.multi_get(list(keys)) if keys else []
            snap[name] = {k: v for k, v in zip(keys, values, strict=True) if v is not None}
        for bolt, rec in sorted(stateful.items()):
            merged: dict[Any, Any] = {}
            for task in range(int(rec.get("tasks", rec.get("parallelism", 1)))):
                kv = open_key_value_state(state_url, f"{topology_id}:{bolt}:{task}")
                merged.update(kv.items())
            snap[f"{bolt} (KeyValueState)"] = merged
    finally:
        client.close()
    return snap


def show_key(state: str, key: Any) -> str:
    """``counts['dog']``: a key of a state, for a message."""
    return f"{state}[{key!r}]"


@dataclass
class Difference:
    """How a snapshot differs from the reference, key by key.

    ``missing``: keys the reference has and the run has not (or, for numbers, a smaller
    value: something was lost); ``doubled``: numbers larger than the reference's (counted
    more than once); ``extra``: keys only the run has; ``different``: any other value that
    differs. Each list holds ``(state, key, reference value, run value)``."""

    compared: int = 0
    missing: list[tuple[str, Any, Any, Any]] = field(default_factory=list)
    doubled: list[tuple[str, Any, Any, Any]] = field(default_factory=list)
    extra: list[tuple[str, Any, Any, Any]] = field(default_factory=list)
    different: list[tuple[str, Any, Any, Any]] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        """True when every key of every state holds the reference's value."""
        return not (self.missing or self.doubled or self.extra or self.different)

    def examples(self, n: int = 3) -> list[str]:
        """The first ``n`` keys of each kind of difference, as ``kind state[key]: ref -> run``."""
        out = []
        for kind, rows in (("missing", self.missing), ("doubled", self.doubled), ("extra", self.extra),
                           ("different", self.different)):
            out += [f"{kind} {show_key(s, k)}: {ref!r} -> {got!r}" for s, k, ref, got in rows[:n]]
        return out


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def compare(reference: Snapshot, run: Snapshot) -> Difference:
    """Every key of every state of ``run`` against ``reference`` (``Difference``)."""
    d = Difference()
    for state in sorted(set(reference) | set(run)):
        ref, got = reference.get(state, {}), run.get(state, {})
        for key in sorted(set(ref) | set(got), key=repr):
            d.compared += 1
            if key not in got:
                d.missing.append((state, key, ref[key], None))
            elif key not in ref:
                d.extra.append((state, key, None, got[key]))
            elif ref[key] != got[key]:
                row = (state, key, ref[key], got[key])
                if _number(ref[key]) and _number(got[key]):
                    (d.doubled if got[key] > ref[key] else d.missing).append(row)
                else:
                    d.different.append(row)
    return d
