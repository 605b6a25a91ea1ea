"""One txid's writes of several maps: each checked storable and encoded (``MapWrite``),
then the writes of one store in one atomic, fenced step (``write_maps``, ``commit_maps``)."""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from state.map.fence import Fence

if TYPE_CHECKING:
    from state.map.backing import BackingCapabilities
    from state.map.base import MapState


@dataclass
class MapWrite:
    """One map's write of a txid (``MapState.prepare_write``): checked storable, and
    encoded for its backing, before anything of the txid is written.

    ``op`` is ``"put"`` (store ``values`` at ``keys``) or ``"add"`` (a counter map's numbers,
    added once per txid). ``values`` is what the backing's ``encode_values`` /
    ``encode_deltas`` / ``encode_columns`` made (a backing without them gets the raw values
    through ``multi_put`` / ``multi_add``); ``stored``: the raw values of a put, for the
    map's cache. ``delete_at``: when the store may delete the keys (ms since the epoch; a
    map with a TTL, ``state.map.ttl``), and ``time_ms`` the txid's time."""

    name: str
    backing: Any
    op: str
    keys: Any
    values: Any
    fence: Fence
    trusted: int = 0
    stored: list[Any] | None = None
    delete_at: int | None = None
    time_ms: int | None = None
    #: the backing's capabilities (the map's ``caps``, found when it opened); None: the
    #: backing is written through its own ``multi_put`` / ``multi_add``
    caps: BackingCapabilities | None = None


@contextlib.contextmanager
def tagged(name: str) -> Iterator[None]:
    """Tag an exception raised while reading or writing map ``name`` with its name
    (``trident_map``, which the engine's failure reports show), unless tagged already."""
    try:
        yield
    except Exception as e:
        if not hasattr(e, "trident_map"):
            e.trident_map = name  # type: ignore[attr-defined]
        raise


def write_maps(parts: Sequence[MapWrite]) -> None:
    """Write ``parts`` (each checked storable already): the parts whose backings share a
    ``write_group`` (one Redis server; the memory maps of one fence) in one atomic step,
    through the group's ``write`` (``GroupWriting``); a backing without it through its own calls."""
    groups: dict[Hashable, list[MapWrite]] = {}
    for p in parts:
        group = None if p.caps is None else p.caps.write_group
        groups.setdefault(("own", id(p)) if group is None else group, []).append(p)
    for ps in groups.values():
        if ps[0].caps is not None and ps[0].caps.write_group is not None:
            ps[0].backing.write(ps)
            continue
        for p in ps:
            with tagged(p.name):
                if p.op == "put":
                    p.backing.multi_put(p.keys, p.values, p.fence, trusted=p.trusted)
                else:
                    p.backing.multi_add(p.keys, p.values, p.fence)


def commit_maps(maps: Sequence[MapState[Any]], txid: int) -> None:
    """``commit(txid)`` of several maps at once, so that txid is visible in all of them or
    in none (docs/design.md §5):

    1. every map makes its write of ``txid`` and checks it storable: a value its backing
       cannot store raises ``UnstorableValueError`` naming the map, the key and the value,
       and nothing of any of the maps is written;
    2. the writes go out, the maps on one store (one Redis; the memory maps of a topology)
       in one atomic, fenced step (``write_maps``): a refusal there (fence, claims, a
       corrupt key) leaves every one of them as it was;
    3. the maps end the commit.

    A failure leaves the maps in their commit: the caller ``abort``-s them."""
    for m in maps:
        if m.scope is None or m.scope.txid != txid:
            msg = f"commit({txid}) of map {m.name!r} without begin_commit({txid})"
            raise RuntimeError(msg)
    # Step 1. every write made and checked storable
    parts: list[tuple[MapState[Any], MapWrite]] = []
    for m in maps:
        with tagged(m.name):
            part = m.prepare_write()
        if part is not None:
            parts.append((m, part))
    # Step 2. written: one atomic step per store
    try:
        write_maps([part for _, part in parts])
    except BaseException:
        for m in maps:
            m._cache = {}        # written or not: unknown
        raise
    for m, part in parts:
        m._written(part)
    # Step 3. the commit ends
    for m in maps:
        m.scope = None
        m._reset()

