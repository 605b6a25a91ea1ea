"""The values of ``trident verify``: its options, a planned kill, a row of the verdict table
and the whole report (``transactional.ops.verify``)."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Any

from state.base import last_committed_txid
from transactional.exceptions import TridentError

__all__ = ["PREFIX", "last_committed_txid", "map_kinds", "CRASH_POINTS", "SWITCH_POINTS", "VerifyError", "VerifyOptions",
           "Kill", "Leg", "RunOutcome", "VerifyReport", "plan_random_kills", "switch_kills"]


#: what every line of this protocol starts with (the topology's own prints go through)
PREFIX = "@verify "


#: the driver's crash points of the commit protocol, in the order a txid reaches them
#: (transactional.engine.faults)
CRASH_POINTS = ("process.after_meta", "commit.before", "commit.after_task", "commit.before_write",
                "commit.before_record", "commit.after_record")


#: the kills of ``--upgrade-to``'s run at the switch, in the order a run reaches them: the first
#: version just after recording its last txid (``K - 1``), then the new version's driver before
#: and after it records its layout (the switch), and at each step of its first txid ``K``
SWITCH_POINTS = ("commit.after_record@-1", "upgrade.before_record", "upgrade.recorded", "process.after_meta",
                 "commit.before_write", "commit.before_record", "commit.after_record")


class VerifyError(TridentError):
    """``trident verify`` cannot verify this topology (a spout that cannot replay, a run that
    fails without faults, a bad option); the message says why and what to do."""


@dataclass(frozen=True)
class VerifyOptions:
    """What ``trident verify`` runs (its command-line flags)."""

    crash_points: tuple[str, ...] = CRASH_POINTS
    kills: int = 0
    seed: int = 1
    task_failures: bool = True
    task_failure_rate: float = 0.2
    budget_secs: float | None = None
    state: str | None = None
    coordination: str | None = None
    master: str = "local[2]"
    executor: str | None = None
    max_batches: int | None = None
    server_faults: bool = False
    upgrade_to: str | None = None          # a new version's topology file: the run switches to it
    switch_at: int = 3                     # the first txid the new version runs
    switch_points: tuple[str, ...] = SWITCH_POINTS
    allow_dropped_state: bool = False


@dataclass(frozen=True)
class Leg:
    """A part of a run: drivers of topology file ``file`` until txid ``until_txid`` is
    committed (None: until its spouts run dry); a run of ``--upgrade-to`` has two."""

    file: str
    until_txid: int | None


@dataclass(frozen=True)
class Kill:
    """One SIGKILL of the driver: at crash point ``point`` of ``txid``."""

    point: str
    txid: int

    @property
    def spec(self) -> str:
        """The ``TRIDENT_CRASH_AT`` value."""
        return f"{self.point}:txid={self.txid}"


@dataclass
class RunOutcome:
    """One row of the verdict table."""

    fault: str
    kills_planned: int = 0
    kills: int = 0
    drivers: int = 0
    replays: int = 0
    compared: int = 0
    missing: int = 0
    doubled: int = 0
    extra: int = 0
    different: int = 0
    examples: list[str] = field(default_factory=list)
    verdict: str = "PASS"          # PASS, FAIL, UNCHECKED (nothing compared), SKIP (not run: budget) or ERROR
    note: str = ""
    secs: float = 0.0
    restarts: int = 0              # servers restarted (--server-faults)
    landed: list[str] = field(default_factory=list)   # the kills that happened (TRIDENT_CRASH_AT specs)
    where: list[str] = field(default_factory=list)    # each state that differs: its component, the likely mistake

    def to_json(self) -> dict[str, Any]:
        """The row as a JSON-friendly dict."""
        return dataclasses.asdict(self)


@dataclass
class VerifyReport:
    """Everything ``trident verify`` found."""

    file: str
    topology_id: str
    kind: str
    reference_keys: int = 0
    reference_txids: int = 0
    fixed_ranges: dict[str, dict[str, int]] = field(default_factory=dict)
    runs: list[RunOutcome] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    secs: float = 0.0
    spouts: list[str] = field(default_factory=list)    # per spout: its kind, and whether it replays its input
    states: list[str] = field(default_factory=list)    # the user states run against scratch copies
    upgrade_to: str | None = None                      # --upgrade-to: the new version's file
    switch_at: int = 0                                 # its first txid
    changes: list[str] = field(default_factory=list)   # each change, classified (``Change.line``)
    refused: bool = False                              # an unsafe change: nothing ran, nothing was written

    @property
    def passed(self) -> bool:
        """True when every run that ran matched the reference (``SKIP`` rows do not count)."""
        return not self.refused and all(r.verdict in ("PASS", "SKIP") for r in self.runs) and any(r.verdict == "PASS" for r in self.runs)

    @property
    def verdict(self) -> str:
        """PASS; REFUSED when ``--upgrade-to``'s new version has an unsafe change (nothing ran);
        UNCHECKED when no run compared anything (nothing to fail, nothing proven); else FAIL."""
        if self.refused:
            return "REFUSED"
        if self.passed:
            return "PASS"
        ran = [r for r in self.runs if r.verdict != "SKIP"]
        return "UNCHECKED" if ran and all(r.verdict == "UNCHECKED" for r in ran) else "FAIL"

    @property
    def kills(self) -> int:
        """SIGKILLs of the driver that happened, over every run."""
        return sum(r.kills for r in self.runs)

    def to_json(self) -> dict[str, Any]:
        """The report as one JSON-friendly dict (``--json``)."""
        return {"file": self.file, "topology_id": self.topology_id, "kind": self.kind,
                "verdict": self.verdict, "spouts": self.spouts, "states": self.states, "secs": round(self.secs, 1), "kills": self.kills,
                "reference_keys": self.reference_keys, "reference_txids": self.reference_txids,
                "runs": [r.to_json() for r in self.runs], "unchecked": self.unchecked,
                "fixed_ranges": self.fixed_ranges, "upgrade_to": self.upgrade_to, "switch_at": self.switch_at,
                "changes": self.changes}


def map_kinds(coordination: str, topology_id: str) -> dict[str, str]:
    """The maps the topology recorded: name -> kind (``transactional``, ``opaque`` ...)."""
    from state.base import open_transactional_state

    s = open_transactional_state(coordination, topology_id)
    try:
        return dict(s.get("maps") or {})
    finally:
        s.close()


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b


def plan_random_kills(n: int, seed: int, last_txid: int) -> list[Kill]:
    """``n`` kills at seeded random crash points and txids (1..``last_txid``), in the order a
    run reaches them (by txid, then by the point's place in the protocol).

    >>> [k.spec for k in plan_random_kills(2, 1, 5)]
    ['process.after_meta:txid=3', 'commit.before:txid=5']
    """
    rng = random.Random(seed)
    kills = [Kill(rng.choice(CRASH_POINTS), rng.randint(1, max(1, last_txid))) for _ in range(n)]
    return sorted(kills, key=lambda k: (k.txid, CRASH_POINTS.index(k.point)))


def switch_kills(points: tuple[str, ...], switch_at: int) -> list[Kill]:
    """The kills at the switch to txid ``switch_at`` (``SWITCH_POINTS``): a point ``P@-1``
    is ``P`` of the txid before the switch, any other ``P`` of the switch's txid.

    >>> [k.spec for k in switch_kills(("commit.after_record@-1", "upgrade.recorded"), 3)]
    ['commit.after_record:txid=2', 'upgrade.recorded:txid=3']
    """
    out = []
    for p in points:
        point, _, before = p.partition("@")
        out.append(Kill(point, switch_at + (int(before) if before else 0)))
    return out
