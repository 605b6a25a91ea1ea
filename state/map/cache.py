"""Caching what a map's backing holds (Trident's ``CachedMap``): kept while the map is
the only writer (the driver's maps, fenced by its epoch)."""

from __future__ import annotations

from typing import Any

#: The most keys a map caches (``MapState._cache``) before it starts over.
CACHE_LIMIT = 1_000_000
#: user values no updater can change in place: the ones a map caches
_SCALARS = frozenset({int, float, str, bool, type(None)})


class CachedMap:
    """The cache of a ``MapState`` (``MapState._cache``): what the backing holds for the keys
    the map read or wrote in its epoch."""

    shared_writes: bool
    _cache: dict[str, Any]
    _cache_epoch: int | None
    _user_fields: tuple[str, ...] | None = None

    def _remember(self, keys: list[str], stored: list[Any]) -> None:
        """Cache what the backing now holds for ``keys`` (values that cannot change under
        it: a user's updater may mutate a list or dict it is given)."""
        if self.shared_writes or self._cache_epoch is None:
            return
        cache = self._cache
        if len(cache) + len(keys) > CACHE_LIMIT:
            cache.clear()
        scalar, fields = _SCALARS, self._user_fields
        f1, f2 = (fields + (fields[0],))[:2] if fields else (None, None)
        drop = []
        for k, v in zip(keys, stored, strict=True):
            if v is None or (type(v) in scalar if f1 is None else (
                    type(v) is dict and type(v.get(f1)) in scalar and type(v.get(f2)) in scalar)):
                cache[k] = v
            else:
                drop.append(k)
        for k in drop:
            cache.pop(k, None)
