"""What ``trident verify`` runs and how it judges them: the topology's spouts checked, the
reference run, the runs under faults, each compared with the reference
(``transactional.ops.verify``)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from transactional.ops.snapshot import Difference, Snapshot, compare
from transactional.ops.verify.drivers import OutOfBudget, ServerRestarts, Verifier, scratch_servers
from transactional.ops.verify.model import (
    CRASH_POINTS,
    Kill,
    RunOutcome,
    VerifyError,
    VerifyOptions,
    VerifyReport,
    _join,
    last_committed_txid,
    plan_random_kills,
)

__all__ = ["check_spouts", "verify", "kafka_end_offsets"]


# -- the topology: what can be verified ------------------------------------------------------------

def check_spouts(topology: Any) -> list[str]:
    """Refuse (``VerifyError``) a topology whose spout says it cannot replay; the notes on
    spouts that do not say (``replayable`` unset): verify assumes their input is fixed."""
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
        if says is not True:
            notes.append(f"spout {spec.id!r} ({type(spout).__name__}) does not say whether a fresh run reads the same "
                         "input (class attribute replayable = True); verify assumes it does, so a difference may come "
                         "from its input")
    return notes


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
    report = VerifyReport(file, topology.topology_id,
                          "core (at least once)" if topology.core else "transactional (exactly once)")
    report.unchecked += check_spouts(topology)
    if getattr(module, "verify_outputs", None) is None:
        report.unchecked.append("writes outside the maps and KeyValueState (files, databases, sinks of your own) are not "
                                "compared: define verify_outputs(topology_id) in the file to include them")
    setup = getattr(module, "setup", None)
    if setup is not None:
        setup()
    with tempfile.TemporaryDirectory(prefix="trident-verify-") as tmp, scratch_servers(options, Path(tmp)) as (urls, managed):
        v = Verifier(file, options, urls, Path(tmp), say)
        v.until_txid = options.max_batches
        v.kafka_end_offsets = report.fixed_ranges = kafka_end_offsets(topology)
        for topic, ends in report.fixed_ranges.items():
            say(f"  Kafka topic {topic!r}: every run reads up to the end offsets recorded now {ends}")
        say(f"trident verify {file}: reference run (topology {topology.topology_id!r} as {v.scratch_id('ref')})")
        try:
            ref_tid, ref_row = v.run("reference", [])
        except OutOfBudget:
            msg = f"--budget {options.budget_secs:g}s ran out during the reference run; give it more time"
            raise VerifyError(msg) from None
        reference = v.snapshot(ref_tid, module)
        report.reference_keys = sum(len(s) for s in reference.values())
        last = report.reference_txids = last_committed_txid(urls[1], ref_tid)
        v.until_txid = last if options.max_batches is not None else None
        if not report.reference_keys:
            report.unchecked.append("the reference run left no key in any map: there is nothing to compare")
        say(f"  reference: {last} txids, {report.reference_keys} keys in {ref_row.secs:.1f} s")
        scenarios = _scenarios(options, last)
        for i, (name, kills, env) in enumerate(scenarios):
            if v.budget.left() < ref_row.secs * (len(kills) + 1) * 0.6:
                report.runs.append(RunOutcome(name, kills_planned=len(kills), verdict="SKIP",
                                              note=f"not run: --budget {options.budget_secs:g}s left too little"))
                continue
            say(f"run {i + 1}/{len(scenarios)}: {name}")
            report.runs.append(_fault_run(v, f"r{i + 1}", name, kills, env, reference, module, topology.core, last))
        if options.server_faults:
            report.runs.append(_server_fault_run(v, managed, reference, module, topology.core, last, ref_row.secs))
    report.secs = time.monotonic() - t0
    return report


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


def _fault_run(v: Verifier, run_name: str, name: str, kills: list[Kill], env: dict[str, str], reference: Snapshot,
               module: Any, core: bool, last: int) -> RunOutcome:
    """One run under faults, judged against ``reference``."""
    try:
        tid, row = v.run(run_name, kills, env, fault=name)
    except OutOfBudget:
        return RunOutcome(name, kills_planned=len(kills), verdict="SKIP",
                          note=f"stopped: --budget {v.options.budget_secs:g}s ran out")
    row.replays = max(0, row.replays - last)
    _judge(row, compare(reference, v.snapshot(tid, module)), core)
    v.say(f"  {row.verdict}: {row.kills} kill(s), {row.compared} keys compared in {row.secs:.1f} s")
    return row


def _server_fault_run(v: Verifier, managed: list[tuple[str, Any]], reference: Snapshot, module: Any, core: bool,
                      last: int, ref_secs: float) -> RunOutcome:
    """The ``--server-faults`` run: Redis and ZooKeeper (those verify started) restarted
    mid-run, the driver paused meanwhile (``SERVER_PAUSE_POINTS``), then judged as the others."""
    name = "server restarts (" + ", ".join(n for n, _ in managed) + ")" if managed else "server restarts"
    if not managed:
        return RunOutcome(name, verdict="SKIP", note="not run: --state and --coordination name servers verify did not "
                                                     "start, and it restarts only its own")
    if v.budget.left() < ref_secs * 2 * 0.6:
        return RunOutcome(name, verdict="SKIP", note=f"not run: --budget {v.options.budget_secs:g}s left too little")
    v.say(f"run: {name}")
    mid = max(1, (last + 1) // 2)
    servers = ServerRestarts(managed, v.say)
    try:
        tid, row = v.run("servers", [], ServerRestarts.pause_env(mid), fault=name, servers=servers)
    except OutOfBudget:
        return RunOutcome(name, restarts=servers.restarts, verdict="SKIP",
                          note=f"stopped: --budget {v.options.budget_secs:g}s ran out")
    row.replays = max(0, row.replays - last)
    if servers.pending:
        row.note = _join(row.note, "not restarted (the run ended first): " + ", ".join(n for n, _ in servers.pending))
    _judge(row, compare(reference, v.snapshot(tid, module)), core)
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
