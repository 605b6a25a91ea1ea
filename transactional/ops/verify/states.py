"""The user's own states under ``trident verify``: found on the topology's bolts, redirected
to scratch copies, read back and dropped (``transactional.ops.verify``; docs/verify.md).

A topology writes a user state through a factory of the State API (``make_state``:
``PostgresStateFactory``, ``ParquetStateFactory``, ``TridentKafkaStateFactory``, a
user's own). A verify driver never makes a state from the real factory: the engine makes
it from ``factory.scratch(<scratch topology id>)`` (``transactional.engine.user_states``),
a copy that writes into scratch copies of the table, directory or topic. Here, before
anything runs, every factory the bolts hold is found (their attributes, and what those
hold, a few levels down) and one that cannot make a copy is refused; after each run the
copies of that run are read (``read_scratch``: rows as ``{key: value}`` or a multiset
``{row: count}``) into the run's snapshot, under ``"<state name> (state)"``, and dropped
(``drop_scratch``).
"""

from __future__ import annotations

import types
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from transactional.engine.user_states import factory_key, factory_name, scratch_factory
from transactional.exceptions import ConfigError
from transactional.ops.snapshot import Snapshot
from transactional.ops.verify.model import VerifyError

__all__ = ["StateUse", "find_states", "check_states", "read_states", "drop_states", "state_entry"]

#: how deep into a bolt's attributes factories are looked for
_DEPTH = 6
_LEAVES = (str, bytes, int, float, bool, type(None), type, types.ModuleType, types.FunctionType,
           types.BuiltinFunctionType, types.MethodType)


@dataclass(frozen=True)
class StateUse:
    """A user state factory and the components that hold it."""

    components: tuple[str, ...]
    factory: Any

    @property
    def name(self) -> str:
        """The state's name (``postgres:word_counts``)."""
        return factory_name(self.factory)

    @property
    def where(self) -> str:
        """The components, for a message."""
        return "component " + " and ".join(repr(c) for c in self.components)


def state_entry(name: str) -> str:
    """The snapshot entry of user state ``name``."""
    return f"{name} (state)"


def _walk(obj: Any, depth: int, seen: set[int], out: list[Any]) -> None:
    if id(obj) in seen or depth > _DEPTH or isinstance(obj, _LEAVES):
        return
    seen.add(id(obj))
    if callable(getattr(type(obj), "make_state", None)):
        out.append(obj)
        return
    if isinstance(obj, dict):
        items: Any = list(obj.values())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        items = list(obj)
    else:
        items = list(getattr(obj, "__dict__", {}).values())
        items += [getattr(obj, s, None) for s in getattr(type(obj), "__slots__", ()) if isinstance(s, str)]
    for v in items:
        _walk(v, depth + 1, seen, out)


def find_states(topology: Any) -> list[StateUse]:
    """Every State API factory the topology's bolts hold, once each (copies of one factory
    in several components are one state), in the order the components come."""
    found: dict[Hashable, tuple[list[str], Any]] = {}
    for spec in topology.components:
        if spec.kind != "bolt":
            continue
        held: list[Any] = []
        _walk(spec.new_instance(), 0, set(), held)
        for f in held:
            comps, _ = found.setdefault(factory_key(f), ([], f))
            if spec.id not in comps:
                comps.append(spec.id)
    return [StateUse(tuple(c), f) for c, f in found.values()]


def check_states(uses: list[StateUse]) -> None:
    """Refuse (``VerifyError``, before anything runs) a state whose factory cannot make a
    scratch copy, naming it, its component and the fix."""
    for use in uses:
        try:
            scratch_factory(use.factory, "verify-check", use.where)
        except ConfigError as e:
            raise VerifyError(str(e)) from None


def read_states(uses: list[StateUse], topology_id: str, snap: Snapshot) -> list[str]:
    """Add what each state's scratch copies of run ``topology_id`` hold to ``snap``, then
    drop them; the states that cannot say what they hold (``read_scratch`` None)."""
    unread = []
    for use in uses:
        copy = scratch_factory(use.factory, topology_id, use.where)
        try:
            read = getattr(copy, "read_scratch", None)
            held = read() if callable(read) else None
            if held is None:
                unread.append(use.name)
            else:
                snap[state_entry(use.name)] = dict(held)
        finally:
            drop = getattr(copy, "drop_scratch", None)
            if callable(drop):
                drop()
    return unread


def drop_states(uses: list[StateUse], topology_ids: list[str]) -> None:
    """Drop the scratch copies of every run (those a failed or stopped run left too)."""
    for tid in topology_ids:
        for use in uses:
            drop = getattr(scratch_factory(use.factory, tid, use.where), "drop_scratch", None)
            if callable(drop):
                drop()
