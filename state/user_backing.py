"""A user's own map backing under the exactly-once map wrappers, and the registry of user
state URL schemes (docs/states.md, "A map over your store").

A user's backing is Storm's ``IBackingMap``: ``multi_get(keys) -> values`` and
``multi_put(keys, values)``, I/O only. Keys are strings (``state.keys.encode_key`` of the
map key; ``decode_key`` gives it back; keys starting with ``~`` are the wrappers' own
records), values are JSON-compatible dicts the wrappers make (``{"txid", "curr", "prev"}``
...). ``UserMapBacking`` adapts it to ``state.map.MapBacking``; a backing whose
``multi_put`` also takes ``fence=`` (a ``state.map.Fence``) gets it and can refuse an
older driver's write atomically with the write (``state.map.fence_refusal``), as the
Redis backing does; one that does not is not fenced.

``register_map_backing("mydb", opener)`` makes ``TopologyConfig(state="mydb://...")`` open
every map of a topology over the user's backing: ``opener(url, namespace, **options)``
returns the backing (``namespace``: ``<topology_id>:<map name>``).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from state import backends
from state.errors import ConfigError
from state.map.backing import Closing

__all__ = ["IBackingMap", "UserMapBacking", "register_map_backing", "unregister_map_backing", "registered_schemes"]


@runtime_checkable
class IBackingMap(Protocol):
    """Storm's ``IBackingMap``: where a map's stored values live, I/O only."""

    def multi_get(self, keys: list[str]) -> list[Any]:
        """The stored values of ``keys`` in order, None where absent (one round trip)."""
        ...

    def multi_put(self, keys: list[str], values: list[Any]) -> None:
        """Store ``values[i]`` at ``keys[i]`` (atomically for the call, if the store can)."""
        ...


class UserMapBacking:
    """A user's ``IBackingMap`` as a ``state.map.MapBacking`` (see the module docstring).

    >>> class Dict:
    ...     def __init__(self): self.d = {}
    ...     def multi_get(self, keys): return [self.d.get(k) for k in keys]
    ...     def multi_put(self, keys, values): self.d.update(zip(keys, values))
    >>> from state.map import OpaqueMap
    >>> m = OpaqueMap(UserMapBacking(Dict()))
    >>> m.begin_commit(1); m.multi_combine(["a"], [2]); m.commit(1); m.get("a")
    [2]
    2
    """

    remote = True

    def __init__(self, backing: Any, namespace: str = "user map") -> None:
        if not isinstance(backing, IBackingMap):
            msg = (f"a map backing needs multi_get(keys) and multi_put(keys, values) (Storm's IBackingMap); "
                   f"got {backing!r}")
            raise ConfigError(msg)
        self.backing: Any = backing
        self.namespace = namespace
        try:
            params = inspect.signature(backing.multi_put).parameters
            self.fenced = "fence" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
        except (TypeError, ValueError):
            self.fenced = False

    def multi_get(self, keys: list[str]) -> list[Any]:
        """The user's ``multi_get``, checked for one value per key."""
        out = list(self.backing.multi_get(list(keys)))
        if len(out) != len(keys):
            msg = f"{type(self.backing).__name__}.multi_get returned {len(out)} values for {len(keys)} keys"
            raise ConfigError(msg)
        return out

    def multi_put(self, keys: list[str], values: list[Any], fence: Any = None, trusted: int = 0) -> None:
        """The user's ``multi_put`` (with ``fence=`` when it takes it)."""
        if self.fenced:
            self.backing.multi_put(list(keys), list(values), fence=fence)
        elif keys:
            self.backing.multi_put(list(keys), list(values))

    def close(self) -> None:
        """Close the user's backing if it can be."""
        if isinstance(self.backing, Closing):
            self.backing.close()


_OPENERS: dict[str, Callable[..., Any] | str] = {}


def register_map_backing(scheme: str, opener: Callable[..., Any] | str, example: str | None = None) -> None:
    """Open maps of state URLs ``<scheme>://...`` with ``opener(url, namespace, **options)``
    (a callable, or ``"module:attribute"``, imported when first used: the form that also
    works in executor processes that never ran this call). Registering a scheme again
    replaces its opener; the built-in schemes cannot be replaced. The scheme serves every
    state kind: maps, and the ``KeyValueState`` of core stateful bolts
    (``state.keyvalue_map``, over the same backing)."""
    if not scheme.isidentifier() and not scheme.replace("-", "").replace("+", "").isalnum():
        msg = f"state URL scheme {scheme!r} is not a URL scheme (letters, digits, '+', '-')"
        raise ConfigError(msg)
    for b in backends.BACKENDS:
        if b.role == backends.USER_STATE and b.scheme == scheme and scheme not in _OPENERS:
            msg = f"state URL scheme {scheme!r} is built in; register your backing under another name"
            raise ConfigError(msg)
    _OPENERS[scheme] = opener
    if not any(b.role == backends.USER_STATE and b.scheme == scheme for b in backends.BACKENDS):
        example = example or f"{scheme}://..."
        backends.BACKENDS = (
            *backends.BACKENDS,
            backends.Backend(scheme, backends.USER_STATE, example, "state.user_backing:open_registered"),
            backends.Backend(scheme, backends.KEY_VALUE, example, "state.keyvalue_map:open_registered_key_value"))


def unregister_map_backing(scheme: str) -> None:
    """Forget a registered scheme (not a built-in one)."""
    if _OPENERS.pop(scheme, None) is not None:
        backends.BACKENDS = tuple(b for b in backends.BACKENDS if not (
            b.role in (backends.USER_STATE, backends.KEY_VALUE) and b.scheme == scheme))


def registered_schemes() -> list[str]:
    """Every user state URL scheme known in this process, built in or registered."""
    return [b.scheme for b in backends.BACKENDS if b.role == backends.USER_STATE]


def open_registered(url: str, namespace: str, *, fence_scope: str | None = None, **options: Any) -> UserMapBacking:
    """Open a registered scheme's backing (``state.backends.opener`` calls this)."""
    scheme = url.split(":", 1)[0]
    opener = _OPENERS.get(scheme)
    if opener is None:
        msg = f"state URL {url!r}: no backing is registered for {scheme!r} in this process; known: {registered_schemes()}"
        raise ConfigError(msg)
    if isinstance(opener, str):
        module, _, attr = opener.partition(":")
        fn: Any = importlib.import_module(module)
        for part in attr.split("."):
            fn = getattr(fn, part)
        opener = fn
    assert callable(opener)
    backing = opener(url, namespace, **options)
    return backing if isinstance(backing, UserMapBacking) else UserMapBacking(backing, namespace)
