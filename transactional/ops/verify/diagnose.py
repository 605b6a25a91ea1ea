"""Where a failed ``trident verify`` run differs, and why it likely does
(``transactional.ops.verify``; docs/verify.md).

Each state of a snapshot is traced to the component that writes it: a map to the Trident
operation that lists it (``ComponentSpec.writes``) or else the committer bolts (a
transactional bolt opens its maps at run time, by name), a ``KeyValueState`` to its
bolt, a user state to the components holding its factory, ``verify_outputs`` to the
file. The likely mistake is read from the kind of state and of difference:

- a non-transactional map that differs: it applies a replayed batch again;
- a user state or ``verify_outputs`` with rows doubled or extra: the state is written
  without its txid (or outside any state), so a replayed batch is written again;
- values that are not whole numbers, or differ in other ways: the batch's output depends on
  more than its input (the clock, randomness, a side effect in ``execute``);
- whole numbers lost or counted twice in a map: the count is kept outside the map (a
  module-level or instance variable carried across batches).
"""

from __future__ import annotations

from typing import Any

from transactional.ops.snapshot import Difference
from transactional.ops.verify.states import StateUse, state_entry

__all__ = ["owners", "where_it_differs", "MISTAKES"]

#: the likely mistakes, one line each
MISTAKES = {
    "non-transactional": "a non-transactional map under replays: a replayed batch is applied again (use a "
                         "transactional or opaque map)",
    "outside": "state written outside a map or state, or a state that does not store the txid with its data: a "
               "replayed batch is written again (docs/states.md)",
    "side effect": "a side effect in execute, or output that depends on more than the input (the clock, "
                   "randomness): a replayed batch computes other values",
    "kept outside": "state kept outside the map (a module-level or instance variable carried across batches): a "
                    "restarted driver loses it and a replayed batch adds to it again",
}


def owners(topology: Any, uses: list[StateUse]) -> dict[str, str]:
    """``{snapshot entry: who writes it}`` for the entries known before a run; maps not
    listed by any component get the committers (``owner``)."""
    out: dict[str, str] = {}
    for spec in topology.components:
        for m in spec.writes:
            out.setdefault(m, f"Trident operation {spec.id!r}")
        if spec.kind == "bolt":
            out[f"{spec.id} (KeyValueState)"] = f"bolt {spec.id!r}"
    for use in uses:
        out[state_entry(use.name)] = use.where
    committers = [s.id for s in topology.components if s.kind == "bolt" and s.committer]
    out[""] = ("bolt " + repr(committers[0]) if len(committers) == 1
               else "one of the committer bolts " + ", ".join(repr(c) for c in committers) if committers
               else "a bolt")
    return out


def owner(entry: str, who: dict[str, str]) -> str:
    """Who writes snapshot ``entry`` (``owners``)."""
    if entry in who:
        return who[entry]
    if entry.endswith(" (verify_outputs)"):
        return f"the file's verify_outputs (written by {who['']})"
    return who[""]


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _mistake(entry: str, rows: list[tuple[str, str, Any, Any]], kinds: dict[str, str]) -> str:
    if kinds.get(entry) == "non-transactional":
        return MISTAKES["non-transactional"]
    user = entry.endswith((" (state)", " (verify_outputs)"))
    if user and any(k in ("doubled", "extra") for k, *_ in rows):
        return MISTAKES["outside"]
    numbers = [v for _, _, ref, got in rows for v in (ref, got) if v is not None]
    if any(k == "different" for k, *_ in rows) or not all(_whole(v) for v in numbers):
        return MISTAKES["side effect"]
    return MISTAKES["outside"] if user else MISTAKES["kept outside"]


def _label(entry: str) -> str:
    if entry.endswith(" (state)"):
        return f"state {entry[:-len(' (state)')]!r}"
    if entry.endswith((" (KeyValueState)", " (verify_outputs)")):
        return entry
    return f"map {entry!r}"


def where_it_differs(d: Difference, who: dict[str, str], kinds: dict[str, str], shown_by: str) -> list[str]:
    """One line per state that differs: the state, its component, the fault that showed it,
    the counts, and the likely mistake."""
    by: dict[str, list[tuple[str, str, Any, Any]]] = {}
    for kind, rows in (("missing", d.missing), ("doubled", d.doubled), ("extra", d.extra),
                       ("different", d.different)):
        for entry, key, ref, got in rows:
            by.setdefault(entry, []).append((kind, key, ref, got))
    lines = []
    for entry, rows in by.items():
        counts = ", ".join(f"{sum(k == kind for k, *_ in rows)} {kind}" for kind in ("missing", "doubled", "extra",
                                                                                      "different")
                           if any(k == kind for k, *_ in rows))
        lines.append(f"{_label(entry)} of {owner(entry, who)} differs after {shown_by} ({counts}); likely "
                     f"{_mistake(entry, rows, kinds)}")
    return lines
