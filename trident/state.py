"""Trident state: map state factories in Trident's three flavours, and the pairing rule.

A factory names a map and its flavour; the backing is the topology's state
(``TopologyConfig.state``: ``memory://`` or ``redis://...``), as for bolts'
``context.map_state``. So ``transactional("counts")`` is the ``TransactionalMap`` called
``counts`` of the topology, readable after a run with ``result.map_state("counts")``.

| spout \\ state      | transactional, counters | opaque | non-transactional |
| ------------------- | ----------------------- | ------ | ----------------- |
| transactional       | exactly-once            | exactly-once | at-least-once |
| opaque              | **refused**             | exactly-once | at-least-once |

``counters(name)`` is a transactional map of numbers for ``Count``/``Sum``: each txid's
additions go to the store in one atomic write that records the txid (``CounterMap``),
with no read of the keys -- the fastest exactly-once persistent count; it needs the
commit phase on the driver (``commit_placement="driver"``).

An opaque spout may replay a txid with different tuples; a transactional map rebuilds
only the keys the replay updates, so it would keep the first attempt's value for keys the
replay does not touch (an opaque map puts those back). ``check_pairing`` refuses that
pairing when the topology is built.
The rule is about the spouts whose tuples *update* a map: an opaque spout's stream may
query a transactional map (``state_query``) and write its answers to an opaque map.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from state.keys import check_state_name
from transactional.exceptions import ConfigError


class StateType(str, enum.Enum):
    """Trident's state flavours (the names of ``state.map.MAP_KINDS``)."""

    TRANSACTIONAL = "transactional"
    OPAQUE = "opaque"
    NON_TRANSACTIONAL = "non-transactional"
    COUNTER = "counter"


@dataclass(frozen=True)
class MapStateFactory:
    """A map state of the topology: its ``name`` and flavour (``state_type``); with
    ``ttl_secs``, a key not written (``ttl_from="read"``: nor read) for that long, by the
    txids' recorded times, is gone (docs/operations.md, "State that expires").

    ``version`` and ``migrate`` (docs/operations.md, "Changing a running topology"): the
    shape of the values it stores, and ``migrate(value, from_version)`` turning a value an
    earlier version stored into this version's; ``trident upgrade`` refuses a new version
    without one. ``uid``: the state's stable id when its name changes (default: the name)."""

    name: str
    state_type: StateType = StateType.OPAQUE
    ttl_secs: float | None = None
    ttl_from: str = "write"
    ttl_grace_secs: float | None = None
    version: int = 1
    migrate: Callable[[Any, int], Any] | None = None
    uid: str | None = None

    def __post_init__(self) -> None:
        from state.map.ttl import Ttl

        check_state_name(self.name)
        object.__setattr__(self, "state_type", StateType(self.state_type))
        ttl = Ttl.of(self.ttl_secs, self.ttl_from, self.ttl_grace_secs)    # checked now, before a run
        if ttl is not None:
            ttl.check_kind(self.name, self.state_type.value)
        if not isinstance(self.version, int) or isinstance(self.version, bool) or self.version < 1:
            msg = f"state {self.name!r}: version is an int >= 1 (the shape of its values); got {self.version!r}"
            raise ConfigError(msg)
        if self.migrate is not None and not callable(self.migrate):
            msg = f"state {self.name!r}: migrate is a function (value, from_version) -> value; got {self.migrate!r}"
            raise ConfigError(msg)

    @property
    def ttl(self) -> dict[str, Any]:
        """The TTL settings as ``context.map_state`` takes them."""
        return {"ttl_secs": self.ttl_secs, "ttl_from": self.ttl_from, "ttl_grace_secs": self.ttl_grace_secs}


#: what a map factory takes besides its name: a TTL (docs/operations.md, "State that
#: expires") and its value version (docs/operations.md, "Changing a running topology")
Migrate = Callable[[Any, int], Any] | None


def transactional(name: str, *, ttl_secs: float | None = None, ttl_from: str = "write",
                  ttl_grace_secs: float | None = None, version: int = 1, migrate: Migrate = None,
                  uid: str | None = None) -> MapStateFactory:
    """A transactional map (exactly-once with a transactional spout)."""
    return MapStateFactory(name, StateType.TRANSACTIONAL, ttl_secs, ttl_from, ttl_grace_secs, version, migrate, uid)


def opaque(name: str, *, ttl_secs: float | None = None, ttl_from: str = "write",
           ttl_grace_secs: float | None = None, version: int = 1, migrate: Migrate = None,
           uid: str | None = None) -> MapStateFactory:
    """An opaque map (exactly-once with any spout we have)."""
    return MapStateFactory(name, StateType.OPAQUE, ttl_secs, ttl_from, ttl_grace_secs, version, migrate, uid)


def counters(name: str, *, ttl_secs: float | None = None, version: int = 1, migrate: Migrate = None,
             uid: str | None = None) -> MapStateFactory:
    """A map of numbers that ``Count``/``Sum`` add to, exactly once per txid, in one atomic
    write per batch without reading the keys (``state.map.CounterMap``). It cannot expire
    keys (it never reads them): ``ttl_secs`` is refused, naming ``transactional``."""
    return MapStateFactory(name, StateType.COUNTER, ttl_secs, "write", None, version, migrate, uid)


def non_transactional(name: str, *, ttl_secs: float | None = None, ttl_from: str = "write",
                      ttl_grace_secs: float | None = None, version: int = 1, migrate: Migrate = None,
                      uid: str | None = None) -> MapStateFactory:
    """A non-transactional map (at-least-once: a replayed batch is applied again)."""
    return MapStateFactory(name, StateType.NON_TRANSACTIONAL, ttl_secs, ttl_from, ttl_grace_secs, version, migrate,
                           uid)


PAIRING_TABLE = """\
  spout \\ state   transactional   opaque         non-transactional
                  (and counters)
  transactional   exactly-once    exactly-once   at-least-once
  opaque          REFUSED         exactly-once   at-least-once"""


def check_pairing(factory: Any, spouts: list[tuple[str, Any]]) -> None:
    """Refuse a transactional map whose updates come from an opaque spout (see the module
    docstring); ``spouts``: the spouts feeding the stream that writes the map (a stream
    that only queries it does not count). A State API factory (``trident.states``) says
    with ``opaque_safe`` whether it is exactly once with an opaque spout."""
    if not isinstance(factory, MapStateFactory):
        bad = [sid for sid, spout in spouts if getattr(spout, "opaque", False)]
        if bad and not getattr(factory, "opaque_safe", True):
            name = state_name(factory)
            msg = (f"state {name!r} skips a replayed txid, which is exactly once only with transactional "
                   f"spouts, but it is fed by the opaque spout(s) {bad}: a replayed batch of an opaque spout "
                   "may hold other tuples. Use the state's opaque mode (see docs/states.md) or a "
                   "transactional spout")
            raise ConfigError(msg)
        return
    if factory.state_type not in (StateType.TRANSACTIONAL, StateType.COUNTER):
        return
    bad = [sid for sid, spout in spouts if getattr(spout, "opaque", False)]
    if bad:
        msg = (
            f"state {factory.name!r} is {factory.state_type.value}, but it is fed by the opaque spout(s) "
            f"{bad}: a replayed batch of an opaque spout may hold other tuples, and a "
            "transactional map would keep some keys from one attempt and some from another. "
            f"Use trident.state.opaque({factory.name!r}). Trident's table:\n{PAIRING_TABLE}"
        )
        raise ConfigError(msg)


def state_name(factory: Any) -> str:
    """How messages and the status page call a state: its ``state_name`` (the framework's
    factories), else a ``name`` it set (a str: a user's ``self.name = name``), else its
    class name."""
    for attr in ("state_name", "name"):
        v = getattr(factory, attr, None)
        if isinstance(v, str) and v:
            return v
    return type(factory).__name__


class TridentState:
    """What ``persistent_aggregate`` and ``partition_persist`` return: the state, to query
    with ``Stream.state_query``, and the stream of updated values."""

    def __init__(self, topology: Any, factory: Any, node: Any) -> None:
        self.topology = topology
        self.factory = factory
        self._node = node

    @property
    def name(self) -> str:
        """The map's name (``result.map_state(name)`` reads it after a run), or a State API
        factory's ``name``."""
        return state_name(self.factory)

    def new_values_stream(self) -> Any:
        """The stream of ``(key fields..., new value)`` this state's updates produce (in the
        commit phase, after each update)."""
        if self._node is None:
            msg = f"{self!r} is a static state (new_static_state): no stream updates it, so it has no new values"
            raise ConfigError(msg)
        return self.topology.stream_of(self._node)

    def parallelism_hint(self, n: int) -> TridentState:
        """The number of tasks updating this state."""
        if self._node is not None:
            self._node.hint = n
        return self

    def __repr__(self) -> str:
        kind = getattr(getattr(self.factory, "state_type", None), "value", "State API")
        return f"TridentState({self.name!r}, {kind})"
