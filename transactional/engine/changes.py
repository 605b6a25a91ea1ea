"""What a new version of a topology changes, against the layout its committed txids were
written with (``transactional.engine.layout``; docs/operations.md, "Changing a running
topology").

``classify(recorded, new, ...)`` sorts every difference into one of three kinds:

* **safe** -- a new stateless operation, a removed one, a changed class (a function's
  body), a new state or spout, a changed task count where the state moves with its keys
  (Trident map states, core stateful bolts; a user's state learns its new
  ``partition_index``/``num_partitions``);
* **migration** -- a transactional or opaque map declares a higher ``version`` and a
  ``migrate`` function (as Flink's state schema evolution): values stored before the
  switch pass through it as they are read (``state.map.migrate``);
* **unsafe** -- refused, before anything is written, one line per change naming the
  component and the fix: a removed or renamed state (without ``allow_dropped_state``),
  a changed kind, key fields or grouping of a stateful stream, a higher version with no
  ``migrate``, a lower version, a changed task count of a window stage whose tuples are not
  all sent to task 0 by a global grouping (windows are kept per task), a changed or removed spout with stored offsets, a transactional map fed by
  an opaque spout, and any change of states while a txid's commit is under way.

States are known by their stable id (``uid=``, else their name); components by their id.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from state.errors import ConfigError

SAFE, MIGRATION, UNSAFE = "safe", "migration", "unsafe"


@dataclass(frozen=True)
class Change:
    """One difference: its ``level`` (safe, migration, unsafe), the component or state it
    concerns, what changed, and the fix (unsafe changes)."""

    level: str
    component: str
    what: str
    fix: str = ""

    def line(self) -> str:
        """The change in one line, as ``trident upgrade`` prints it."""
        return f"{self.level:9} {self.component}: {self.what}" + (f"; {self.fix}" if self.fix else "")


class UpgradeRefusedError(ConfigError):
    """A new topology changes what its stored state cannot follow; nothing was written."""


def _groupings(inputs: Iterable[Any]) -> list[tuple[str, tuple[str, ...]]]:
    """A component's input groupings without the sources' ids (a renamed stage is the same)."""
    return sorted((str(g), tuple(f)) for _src, _stream, g, f in inputs)


def states_of(layout: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """State id -> its spec, the component writing it, that component's inputs and tasks.
    Core stateful bolts' states are ``bolt:<id>``."""
    out: dict[str, dict[str, Any]] = {}
    for cid, c in (layout.get("components") or {}).items():
        specs = dict((c.get("layout") or {}).get("states") or {})
        if c.get("core") in ("stateful", "swindowed"):
            specs[f"bolt:{cid}"] = {"kind": f"keyvalue ({c['core']})", "keys": None, "use": "persist", "version": 1}
        for sid, spec in specs.items():
            entry = {**spec, "component": cid, "inputs": _groupings(c.get("routing") or c.get("inputs") or []),
                     "tasks": int(c.get("tasks", 1)), "windows": bool((c.get("layout") or {}).get("windows")),
                     "windows_global": all(i[2] == "global" for i in c.get("routing") or c.get("inputs") or [])}
            if sid not in out or out[sid].get("use") == "query":
                out[sid] = entry
    return out


def _spouts(layout: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str((c.get("layout") or {}).get("uid") or cid): {**(c.get("layout") or {}), "id": cid}
            for cid, c in (layout.get("components") or {}).items() if c.get("kind") == "spout"}


def _state_changes(sid: str, old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    """The changes of one state both versions have."""
    where = f"state {sid!r} ({new['component']})"
    out: list[Change] = []
    if old["kind"] != new["kind"]:
        out.append(Change(UNSAFE, where, f"kind {old['kind']} -> {new['kind']}: the stored values are of the old "
                          "kind", "keep the kind, or give the new one another name (a new, empty state)"))
    if old.get("use") != "query" and new.get("use") != "query" and old.get("keys") != new.get("keys"):
        out.append(Change(UNSAFE, where, f"key fields {old.get('keys')} -> {new.get('keys')}: the stored keys "
                          "would no longer be found", "keep the key fields, or a new state name"))
    if old["inputs"] != new["inputs"] and old.get("use") != "query":
        out.append(Change(UNSAFE, where, f"grouping {_show(old['inputs'])} -> {_show(new['inputs'])} of the "
                          "stream that writes it: its keys would reach other tasks than hold them",
                          "keep the grouping, or a new state name"))
    ov, nv = int(old.get("version", 1)), int(new.get("version", 1))
    if nv > ov and new.get("migrate") and new["kind"] not in ("transactional", "opaque"):
        out.append(Change(UNSAFE, where, f"value version {ov} -> {nv} of a {new['kind']} state: only transactional "
                          "and opaque maps migrate (their stored values carry the txid that wrote them)",
                          "use a transactional or opaque map, or a new state name"))
    elif nv > ov and new.get("migrate"):
        out.append(Change(MIGRATION, where, f"value version {ov} -> {nv}: values stored before the switch pass "
                          "through migrate() as they are read"))
    elif nv > ov:
        out.append(Change(UNSAFE, where, f"value version {ov} -> {nv} without a migrate function",
                          "declare migrate=fn(value, from_version) on the state"))
    elif nv < ov:
        out.append(Change(UNSAFE, where, f"value version {ov} -> {nv}: the stored values are newer",
                          f"declare version={ov} (or higher)"))
    out += _task_changes(where, old, new)
    return out


def _task_changes(where: str, old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    """A changed task count of the component writing a state."""
    out: list[Change] = []
    if old["tasks"] != new["tasks"] and new["windows"] and new.get("windows_global"):
        out.append(Change(SAFE, where, f"tasks {old['tasks']} -> {new['tasks']} of a window stage: its tuples all "
                          "reach task 0 (a global grouping), where its open windows stay"))
    elif old["tasks"] != new["tasks"] and new["windows"]:
        out.append(Change(UNSAFE, where, f"tasks {old['tasks']} -> {new['tasks']} of a window stage: windows "
                          "are kept per task", f"keep parallelism_hint({old['tasks']})"))
    elif old["tasks"] != new["tasks"]:
        out.append(Change(SAFE, where, f"tasks {old['tasks']} -> {new['tasks']}: the state moves with its keys"))
    return out


def _show(inputs: list[Any]) -> str:
    return ", ".join(f"{g}{list(f) if f else ''}" for g, f in inputs) or "none"


def _spout_changes(old: dict[str, Any], new: dict[str, Any], committed: int, allow_dropped: bool,
                   transactional_maps: list[str]) -> list[Change]:
    out: list[Change] = []
    for uid, o in sorted(old.items()):
        n = new.get(uid)
        where = f"spout {o['id']!r}"
        if n is None:
            if committed and not allow_dropped:
                out.append(Change(UNSAFE, where, "removed, with stored offsets", "keep it, or pass "
                                  "--allow-dropped-state (allow_dropped_state=True) to drop its offsets"))
            else:
                out.append(Change(SAFE, where, "removed"))
            continue
        if (o.get("class"), o.get("source")) != (n.get("class"), n.get("source")) and committed:
            out.append(Change(UNSAFE, where, f"{o.get('class')}({o.get('source')}) -> {n.get('class')}"
                              f"({n.get('source')}): its stored offsets belong to the old source",
                              "keep the spout, or give the new one another id (it starts from its beginning)"))
        if n.get("opaque") and not o.get("opaque") and transactional_maps:
            out.append(Change(UNSAFE, where, f"now opaque, and feeds transactional map(s) {transactional_maps}",
                              "use opaque maps (trident.state.opaque), or keep a transactional spout"))
    out += [Change(SAFE, f"spout {n['id']!r}", "new") for uid, n in sorted(new.items()) if uid not in old]
    return out


def _component_changes(old: dict[str, Any], new: dict[str, Any], stateful: set[str]) -> list[Change]:
    out: list[Change] = []
    oc, nc = old.get("components") or {}, new.get("components") or {}
    for cid in sorted(set(oc) | set(nc)):
        if cid in stateful:
            continue
        o, n = oc.get(cid), nc.get(cid)
        if o is None:
            out.append(Change(SAFE, repr(cid), "new operation" if n and n["kind"] == "bolt" else "new"))
        elif n is None:
            out.append(Change(SAFE, repr(cid), "removed"))
        elif o["kind"] == "bolt":
            if o["class"] != n["class"]:
                out.append(Change(SAFE, repr(cid), f"class {o['class']} -> {n['class']}"))
            if o["tasks"] != n["tasks"]:
                out.append(Change(SAFE, repr(cid), f"tasks {o['tasks']} -> {n['tasks']}"))
    return out


def classify(recorded: dict[str, Any], new: dict[str, Any], *, committed: int = 0, allow_dropped_state: bool = False,
             pending_txid: int | None = None) -> list[Change]:
    """Every difference of ``new`` from ``recorded`` (layout records), classified (module
    docstring). ``committed``: the last committed txid (a spout's offsets are stored once
    one is); ``pending_txid``: a txid whose commit began under ``recorded``."""
    olds, news = states_of(recorded), states_of(new)
    out: list[Change] = []
    for sid in sorted(set(olds) - set(news)):
        where = f"state {sid!r} ({olds[sid]['component']})"
        if olds[sid].get("use") == "query":
            continue
        if allow_dropped_state:
            out.append(Change(SAFE, where, "dropped (allow_dropped_state): its stored values stay unread"))
        else:
            out.append(Change(UNSAFE, where, "removed or renamed: its stored values would be left behind",
                              f"keep it; if you renamed it, give it uid={sid!r}; or pass --allow-dropped-state "
                              "(allow_dropped_state=True) to drop them"))
    out += [Change(SAFE, f"state {sid!r} ({news[sid]['component']})", "new state")
            for sid in sorted(set(news) - set(olds))]
    for sid in sorted(set(olds) & set(news)):
        out += _state_changes(sid, olds[sid], news[sid])
    maps = sorted(sid for sid, s in news.items() if s["kind"] in ("transactional", "counter") and s.get("use") != "query")
    out += _spout_changes(_spouts(recorded), _spouts(new), committed, allow_dropped_state, maps)
    out += _component_changes(recorded, new, {s["component"] for s in [*olds.values(), *news.values()]})
    if pending_txid is not None and any(c.level != SAFE or c.what in ("new state", "removed") for c in out):
        out.append(Change(UNSAFE, "(topology)", f"txid {pending_txid} began to commit with the recorded topology "
                          "and is not recorded: a new version must not finish it",
                          "run the recorded topology once more to finish it (trident run OLD_FILE --max-batches 1)"))
    return out


def refuse_unsafe(changes: list[Change], topology_id: str) -> None:
    """``UpgradeRefusedError`` listing every unsafe change, one line each; nothing else."""
    bad = [c for c in changes if c.level == UNSAFE]
    if bad:
        lines = "\n".join(f"  {c.component}: {c.what}; {c.fix}" for c in bad)
        msg = (f"topology {topology_id!r} cannot run this version over its stored state ({len(bad)} unsafe "
               f"change(s)); nothing was written:\n{lines}")
        raise UpgradeRefusedError(msg)
