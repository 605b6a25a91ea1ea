"""What ``trident verify`` runs and how it judges them: the topology's spouts checked, the
reference run, the runs under faults, each compared with the reference
(``transactional.ops.verify``)."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transactional.ops.snapshot import Difference, Snapshot, compare
from transactional.ops.verify.diagnose import owners, where_it_differs
from transactional.ops.verify.drivers import OutOfBudget, ServerRestarts, Verifier, scratch_servers
from transactional.ops.verify.model import (
    CRASH_POINTS,
    Kill,
    Leg,
    RunOutcome,
    VerifyError,
    VerifyOptions,
    VerifyReport,
    _join,
    last_committed_txid,
    map_kinds,
    plan_random_kills,
    switch_kills,
)
from transactional.ops.verify.states import StateUse, check_states, drop_states, find_states
from transactional.ops.verify.upgrade import check_options, classify_upgrade, load_new_version

__all__ = ["check_spouts", "describe_spouts", "verify", "kafka_end_offsets"]


# -- the topology: what can be verified ------------------------------------------------------------

def check_spouts(topology: Any) -> list[str]:
    """Refuse (``VerifyError``) a topology whose spout says it cannot replay; the notes on
    spouts that do not say (``replayable`` unset; a Kafka spout reads a fixed range, so it
    does): verify assumes their input is fixed."""
    notes = []
    for spec in topology.spouts:
        spout = spec.new_instance()
        says = getattr(spout, "replayable", None)
        if isinstance(says, str):
            msg = (f"spout {spec.id!r} ({type(spout).__name__}) cannot be verified: {says}. trident verify "
                   "compares runs from the same input, so it needs a spout that reads the same data in every "
                   "run: MemoryTransactionalSpout or FixedBatchSpout over test data, or a KafkaTransactionalSpout "
                   "on a topic that holds the data (docs/verify.md)")
            raise VerifyError(msg)
        if says is not True and not callable(getattr(spout, "end_offsets_now", None)):
            notes.append(f"spout {spec.id!r} ({type(spout).__name__}) does not say whether a fresh run reads the same "
                         "input (class attribute replayable = True); verify assumes it does, so a difference may come "
                         "from its input")
    return notes


def describe_spouts(topology: Any, fixed_ranges: dict[str, dict[str, int]]) -> list[str]:
    """One line per spout: its kind and whether a fresh run reads the same input."""
    out = []
    for spec in topology.spouts:
        spout = spec.new_instance()
        names = {c.__name__ for c in type(spout).__mro__}
        if topology.core:
            kind = "core spout, at least once"
        elif getattr(spout, "opaque", False):
            kind = "opaque transactional"
        elif any("Transactional" in n for n in names):
            kind = "transactional"
        else:
            kind = "batch spout"
        topic = getattr(spout, "topic", None)
        if callable(getattr(spout, "end_offsets_now", None)) and str(topic) in fixed_ranges:
            ends = ", ".join(f"{p}:{o}" for p, o in fixed_ranges[str(topic)].items())
            replays = f"replays its input: Kafka topic {topic!r} up to the end offsets recorded at the start {ends}"
        elif getattr(spout, "replayable", None) is True:
            replays = "replays its input (replayable = True)"
        else:
            replays = ("does not say whether a fresh run reads the same input (replayable); verify assumes it does, "
                       "so a difference may come from its input")
        out.append(f"spout {spec.id!r} ({type(spout).__name__}, {kind}): {replays}")
    return out


def _kind(topology: Any) -> str:
    if topology.core:
        return "core (at least once)"
    return "transactional (exactly once)"


@dataclass
class _Judge:
    """What every run under faults is judged by."""

    v: Verifier
    module: Any
    reference: Snapshot
    core: bool
    last: int
    who: dict[str, str]
    kinds: dict[str, str]

    def judge(self, tid: str, row: RunOutcome, shown_by: str) -> None:
        d = compare(self.reference, self.v.snapshot(tid, self.module))
        row.replays = max(0, row.replays - self.last)
        _judge(row, d, self.core)
        if row.verdict == "FAIL":
            row.where = where_it_differs(d, self.who, self.kinds, shown_by)


def verify(file: str, options: VerifyOptions | None = None, say: Any = None) -> VerifyReport:
    """Verify the topology file ``file`` (module docstring); ``say(text)`` gets progress lines."""
    from transactional.ops.topology_file import built_topology, load_topology_file

    options = options or VerifyOptions()
    say = say or (lambda text: None)
    unknown = [p for p in options.crash_points if p not in CRASH_POINTS]
    if unknown:
        msg = f"unknown crash point {unknown[0]!r}; the commit crash points are {', '.join(CRASH_POINTS)} (or 'all')"
        raise VerifyError(msg)
    t0 = time.monotonic()
    module = load_topology_file(file)
    topology = built_topology(module.build_topology(), file)
    report = VerifyReport(file, topology.topology_id, _kind(topology))
    new = _upgrade(report, topology, options) if options.upgrade_to else None
    if report.refused:                          # an unsafe change: nothing runs
        report.secs = time.monotonic() - t0
        return report
    versions = [topology] if new is None else [topology, new[1]]
    for t in versions:
        check_spouts(t)
        check_states(find_states(t))            # before anything runs (setup included)
    if getattr(module, "verify_outputs", None) is None:
        report.unchecked.append("writes outside the maps, KeyValueState and State API states (files, databases, sinks "
                                "a bolt writes itself) are not compared: define verify_outputs(topology_id) in the "
                                "file to include them")
    versions = _set_up([(module, file)] if new is None else [(module, file), (new[0], str(options.upgrade_to))],
                       versions)
    topology = versions[0]
    uses = _states_of(versions)
    report.states = [f"state {u.name!r} of {u.where}: run against scratch copies, compared, then dropped"
                     for u in uses]
    with tempfile.TemporaryDirectory(prefix="trident-verify-") as tmp, scratch_servers(options, Path(tmp)) as (urls, managed):
        v = Verifier(file, options, urls, Path(tmp), say)
        v.states = uses
        if options.upgrade_to:
            v.legs = [Leg(file, options.switch_at - 1), Leg(options.upgrade_to, options.max_batches)]
        try:
            _verify_runs(v, report, topology, module, managed)
        finally:
            drop_states(uses, v.tids)
        report.unchecked += [f"state {n!r}: its scratch copy cannot say what it holds (read_scratch), so it is "
                             "not compared" for n in sorted(v.unread)]
    report.secs = time.monotonic() - t0
    return report


def _upgrade(report: VerifyReport, topology: Any, options: VerifyOptions) -> tuple[Any, Any]:
    """``--upgrade-to``: its flags checked, the new version's ``(module, topology)``, every
    change into ``report`` (``refused`` when one is unsafe: then nothing runs)."""
    assert options.upgrade_to is not None
    check_options(options)
    module, new = load_new_version(options.upgrade_to)
    changes = classify_upgrade(topology, new, module, options.upgrade_to, options)
    report.upgrade_to, report.switch_at = options.upgrade_to, options.switch_at
    report.changes = [c.line() for c in changes]
    report.refused = any(c.level == "unsafe" for c in changes)
    return module, new


def _set_up(modules: list[tuple[Any, str]], versions: list[Any]) -> list[Any]:
    """Run each file's ``setup()``; the topologies as built after it (the factories as
    setup() configured them), or ``versions`` when no file has one."""
    from transactional.ops.topology_file import built_topology

    if all(getattr(m, "setup", None) is None for m, _ in modules):
        return versions
    for m, _ in modules:
        if getattr(m, "setup", None) is not None:
            m.setup()
    return [built_topology(m.build_topology(), f) for m, f in modules]


def _states_of(versions: list[Any]) -> list[StateUse]:
    """The user states of every version, once each (by name)."""
    out: dict[str, StateUse] = {}
    for t in versions:
        for u in find_states(t):
            out.setdefault(u.name, u)
    return list(out.values())


def _verify_runs(v: Verifier, report: VerifyReport, topology: Any, module: Any, managed: list[tuple[str, Any]]) -> None:
    """The reference run, then the runs under faults, into ``report``."""
    options, say = v.options, v.say
    v.until_txid = options.max_batches
    v.kafka_end_offsets = report.fixed_ranges = kafka_end_offsets(topology)
    report.spouts = describe_spouts(topology, report.fixed_ranges)
    for topic, ends in report.fixed_ranges.items():
        say(f"  Kafka topic {topic!r}: every run reads up to the end offsets recorded now {ends}")
    say(f"trident verify {report.file}: reference run (topology {topology.topology_id!r} as {v.scratch_id('ref')})")
    try:
        ref_tid, ref_row = v.run("reference", [])
    except OutOfBudget:
        msg = f"--budget {options.budget_secs:g}s ran out during the reference run; give it more time"
        raise VerifyError(msg) from None
    reference = v.snapshot(ref_tid, module)
    report.reference_keys = sum(len(s) for s in reference.values())
    last = report.reference_txids = last_committed_txid(v.urls[1], ref_tid)
    v.until_txid = last if options.max_batches is not None else None
    if v.legs is not None:
        _check_switched(v, options, last)
    say(f"  reference: {last} txids, {report.reference_keys} keys in {ref_row.secs:.1f} s")
    j = _Judge(v, module, reference, topology.core, last, owners(topology, v.states), map_kinds(v.urls[1], ref_tid))
    scenarios = _scenarios(options, last)
    if v.legs is not None and options.switch_points:
        scenarios.insert(0, (f"kills at the switch to txid {options.switch_at}",
                             switch_kills(options.switch_points, options.switch_at), {}))
    if not report.reference_keys:
        report.unchecked.append(_NOTHING)
        report.runs += [RunOutcome(name, kills_planned=len(kills), verdict="UNCHECKED",
                                   note="not run: the reference run left nothing to compare")
                        for name, kills, _ in scenarios]
        return
    for i, (name, kills, env) in enumerate(scenarios):
        if v.budget.left() < ref_row.secs * (len(kills) + 1) * 0.6:
            report.runs.append(RunOutcome(name, kills_planned=len(kills), verdict="SKIP",
                                          note=f"not run: --budget {options.budget_secs:g}s left too little"))
            continue
        say(f"run {i + 1}/{len(scenarios)}: {name}")
        report.runs.append(_fault_run(j, f"r{i + 1}", name, kills, env))
    if options.server_faults:
        report.runs.append(_server_fault_run(j, managed, ref_row.secs))


def _check_switched(v: Verifier, options: VerifyOptions, last: int) -> None:
    """The reference switched versions: the first committed up to ``switch_at - 1``, the
    new one at least one txid; the new version's leg ends where the reference did."""
    assert v.legs is not None
    before = v.leg_ends.get(0)
    if before is not None and before < options.switch_at - 1:
        msg = (f"the reference run's {v.legs[0].file} committed txids up to {before} only, its spouts ran dry before "
               f"the switch at txid {options.switch_at}: give a smaller --switch-at")
        raise VerifyError(msg)
    if last < options.switch_at:
        msg = (f"the reference run committed {last} txid(s), so {options.upgrade_to} ran no txid from the switch at "
               f"txid {options.switch_at}: give a smaller --switch-at, or a spout with more batches")
        raise VerifyError(msg)
    v.legs = [v.legs[0], Leg(v.legs[1].file, v.until_txid)]


_NOTHING = ("nothing was compared: the reference run left no key in any map or KeyValueState, no row in any State "
            "API state and nothing in verify_outputs, so no run can show a difference; verify does not see what "
            "the topology writes elsewhere. Write the results through a map or a StateFactory, or define "
            "verify_outputs(topology_id)")


def _scenarios(options: VerifyOptions, last: int) -> list[tuple[str, list[Kill], dict[str, str]]]:
    """The runs under faults: (name, kills, environment) each."""
    mid = max(1, (last + 1) // 2)
    out: list[tuple[str, list[Kill], dict[str, str]]] = [
        (f"kill at {p}", [Kill(p, mid)], {}) for p in options.crash_points]
    if options.kills:
        out.append((f"{options.kills} random kills (seed {options.seed})",
                    plan_random_kills(options.kills, options.seed, last), {}))
    if options.task_failures:
        out.append((f"task failures (rate {options.task_failure_rate:g})", [],
                    {"TRIDENT_FAIL_TASKS": f"seed={options.seed},rate={options.task_failure_rate},max_attempt=1"}))
    return out


def _shown_by(name: str, row: RunOutcome) -> str:
    """The fault that showed a difference, for the where-line."""
    if row.landed:
        return "the kill" + ("s" if len(row.landed) > 1 else "") + " at " + ", ".join(row.landed)
    if row.restarts:
        return name
    return name if name.startswith("task failures") else f"{name} (no kill landed)"


def _fault_run(j: _Judge, run_name: str, name: str, kills: list[Kill], env: dict[str, str]) -> RunOutcome:
    """One run under faults, judged against the reference."""
    v = j.v
    try:
        tid, row = v.run(run_name, kills, env, fault=name)
    except OutOfBudget:
        return RunOutcome(name, kills_planned=len(kills), verdict="SKIP",
                          note=f"stopped: --budget {v.options.budget_secs:g}s ran out")
    if "random kills" in name and not any(k.startswith("commit.") for k in row.landed):
        row.note = _join(row.note, "no kill hit a commit step: " + (
            f"the kills landed outside the commit protocol ({', '.join(row.landed)})" if row.landed
            else "none landed"))
    j.judge(tid, row, _shown_by(name, row))
    v.say(f"  {row.verdict}: {row.kills} kill(s), {row.compared} keys compared in {row.secs:.1f} s")
    return row


def _server_fault_run(j: _Judge, managed: list[tuple[str, Any]], ref_secs: float) -> RunOutcome:
    """The ``--server-faults`` run: Redis and ZooKeeper (those verify started) restarted
    mid-run, the driver paused meanwhile (``SERVER_PAUSE_POINTS``), then judged as the others."""
    v = j.v
    name = "server restarts (" + ", ".join(n for n, _ in managed) + ")" if managed else "server restarts"
    if not managed:
        return RunOutcome(name, verdict="SKIP", note="not run: --state and --coordination name servers verify did not "
                                                     "start, and it restarts only its own")
    if v.budget.left() < ref_secs * 2 * 0.6:
        return RunOutcome(name, verdict="SKIP", note=f"not run: --budget {v.options.budget_secs:g}s left too little")
    v.say(f"run: {name}")
    mid = max(1, (j.last + 1) // 2)
    servers = ServerRestarts(managed, v.say)
    try:
        tid, row = v.run("servers", [], ServerRestarts.pause_env(mid), fault=name, servers=servers)
    except OutOfBudget:
        return RunOutcome(name, restarts=servers.restarts, verdict="SKIP",
                          note=f"stopped: --budget {v.options.budget_secs:g}s ran out")
    if servers.pending:
        row.note = _join(row.note, "not restarted (the run ended first): " + ", ".join(n for n, _ in servers.pending))
    j.judge(tid, row, _shown_by(name, row))
    v.say(f"  {row.verdict}: {row.restarts} server restart(s), {row.compared} keys compared in {row.secs:.1f} s")
    return row


def kafka_end_offsets(topology: Any) -> dict[str, dict[str, int]]:
    """``{topic: {partition: end offset}}`` now, for each spout that can say
    (``end_offsets_now``: the Kafka spouts): the fixed range every run of verify reads."""
    out: dict[str, dict[str, int]] = {}
    for spec in topology.spouts:
        spout = spec.new_instance()
        now = getattr(spout, "end_offsets_now", None)
        if callable(now):
            out[str(spout.topic)] = {str(p): int(o) for p, o in now().items()}
    return out


def _judge(row: RunOutcome, d: Difference, core: bool) -> None:
    row.compared, row.missing, row.doubled = d.compared, len(d.missing), len(d.doubled)
    row.extra, row.different = len(d.extra), len(d.different)
    row.examples = d.examples(3)
    if core:
        row.verdict = "FAIL" if d.missing else "PASS"
        if d.doubled or d.extra or d.different:
            row.note = _join(row.note, "at least once: duplicates reported, not failed")
    else:
        row.verdict = "PASS" if d.exact else "FAIL"
    if not d.compared:
        row.verdict = "UNCHECKED"
        row.note = _join(row.note, "nothing compared")
