"""``KeyValueState`` over a map backing: what a scheme registered with
``state.user_backing.register_map_backing`` serves to core stateful bolts, so one
registered store holds every state kind of a topology (docs/states.md, "A map over your
store").

The state of a namespace lives in the backing opened for that namespace, as the
wrappers' records beside the bolt's keys (encoded as the maps encode them,
``state.keys``): each committed value ``{"v": value}`` at its key; the prepared changes of
a checkpoint ``{"txid": t, "changes": {key: {"v": value} or None}}`` at ``~kv:prepare``;
the last committed txid at ``~kv:txid``; the committed keys at ``~kv:keys`` (so ``items``
needs no listing from the store). A commit is one ``multi_put`` (the changes, the key
list, the txid, the prepared record cleared): atomic when the backing's ``multi_put`` is.
Each write carries ``Fence(epoch, None)``: a backing that takes ``fence=`` refuses an
older driver's write, as the maps' writes are refused.

>>> from state.map import MemoryMapBacking
>>> s = MapKeyValueState(MemoryMapBacking(), "doc:count:0")
>>> s.put("cat", 2); s.prepare_commit(1); s.commit(1)
>>> MapKeyValueState(s.backing, "doc:count:0").get("cat"), s.committed_txid()
(2, 1)
"""

from __future__ import annotations

from typing import Any

from state.errors import ConfigError
from state.keyvalue import DELETED, KeyValueState, Prepared
from state.map.backing import MapBacking
from state.map.fence import Fence
from state.user_backing import open_registered

PREPARE, TXID, KEYS = "~kv:prepare", "~kv:txid", "~kv:keys"


class MapKeyValueState(KeyValueState):
    """A ``KeyValueState`` whose store is a ``MapBacking`` (module docstring)."""

    def __init__(self, backing: MapBacking, namespace: str, *, fence_scope: str | None = None,
                 epoch: int | None = None) -> None:
        self.backing = backing
        self._keys: list[str] | None = None
        super().__init__(namespace, fence_scope=fence_scope, epoch=epoch)

    def _fence(self) -> Fence | None:
        return None if self.epoch is None or self.fence_scope is None else Fence(self.epoch, None)

    def _put(self, keys: list[str], values: list[Any]) -> None:
        self.backing.multi_put(keys, values, self._fence())

    def _committed_keys(self) -> list[str]:
        if self._keys is None:
            self._keys = list(self.backing.multi_get([KEYS])[0] or [])
        return self._keys

    def committed_txid(self) -> int | None:
        """The last committed txid (None before the first commit)."""
        v = self.backing.multi_get([TXID])[0]
        return None if v is None else int(v)

    def _committed(self, e: str) -> tuple[bool, Any, int | None]:
        s = self.backing.multi_get([e])[0]
        return (False, None, None) if s is None else (True, s["v"], None)

    def _committed_items(self) -> list[tuple[str, Any, int | None]]:
        keys = self._committed_keys()
        return [(k, s["v"], None) for k, s in zip(keys, self.backing.multi_get(keys), strict=True) if s is not None]

    def _load_prepared(self) -> Prepared | None:
        rec = self.backing.multi_get([PREPARE])[0]
        if not rec:
            return None
        return Prepared(int(rec["txid"]), {e: DELETED if c is None else c["v"] for e, c in rec["changes"].items()})

    def _store_prepared(self, prep: Prepared) -> None:
        rec = {"txid": prep.txid,
               "changes": {e: None if v is DELETED else {"v": v} for e, v in prep.changes.items()}}
        self._put([PREPARE], [rec])

    def _store_commit(self, prep: Prepared) -> list[str]:
        txid, changes = prep.txid, prep.changes
        keys = dict.fromkeys(self._committed_keys())
        for e, v in changes.items():
            if v is DELETED:
                keys.pop(e, None)
            else:
                keys[e] = None
        names = list(changes)
        values: list[Any] = [None if v is DELETED else {"v": v} for v in changes.values()]
        self._put([*names, KEYS, TXID, PREPARE], [*values, list(keys), txid, None])
        self._keys = list(keys)
        return []                                   # no TTL here: nothing swept

    def _store_rollback(self) -> None:
        self._put([PREPARE], [None])

    def _store_fence(self) -> None:
        self._put([], [])


def open_registered_key_value(url: str, namespace: str, *, fence_scope: str | None = None,
                              epoch: int | None = None, ttl: object = None, **options: Any) -> MapKeyValueState:
    """The ``KeyValueState`` of ``namespace`` over a registered scheme's backing
    (``state.backends.opener`` calls this for ``KEY_VALUE``); a TTL is refused (its keys
    would need a sweep the backing contract does not have)."""
    if ttl is not None:
        msg = (f"a TTL (topology.state.ttl.secs) is not supported on {url.split('://', 1)[0]}:// key-value state: "
               "use memory://, redis:// or redis+cluster://, or drop the TTL setting")
        raise ConfigError(msg)
    backing = open_registered(url, namespace, fence_scope=fence_scope, **options)
    return MapKeyValueState(backing, namespace, fence_scope=fence_scope, epoch=epoch)
