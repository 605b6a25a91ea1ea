"""``trident verify FILE``: prove that a topology is exactly once, by running it under faults
and comparing every key with a run without faults (docs/verify.md).

1. **Reference run.** The topology file runs once, without faults, in a driver process of
   its own, under a scratch topology id (``verify-<hex>-ref``): its maps are
   ``verify-<hex>-ref:<name>``, never the user's keys, in a Redis and a ZooKeeper that
   verify starts for itself (``transactional.testing``) unless ``--state`` and
   ``--coordination`` name others. Its final state is read back key by key
   (``transactional.ops.snapshot``).
2. **Runs under faults**, each from the same input under a fresh scratch id: a driver
   SIGKILL at each commit crash point (``--crash-points``), seeded random SIGKILLs
   (``--kills N --seed S``: crash points at random txids), and task failures in the
   processing and commit tasks (``TRIDENT_FAIL_TASKS``). After each kill a new driver
   resumes the run (it was started beforehand and waits with Spark up, so a restart costs
   no start-up) until the run completes. ``--server-faults`` adds a run in which the Redis
   and ZooKeeper that verify started are stopped and started again mid-run
   (``ServerRestarts``).
3. **Verdict.** Each run's state against the reference, key by key: missing, doubled,
   extra, different, PASS or FAIL. A core (at-least-once) topology passes when nothing is
   missing; its duplicates are counted, not failed.

Kafka spouts read a fixed range: each partition's end offset, recorded before the reference
run (``kafka_end_offsets``), bounds every run.

Honest limits: a spout must say it reads the same input in a fresh run (``replayable``),
and what the topology writes outside its maps and ``KeyValueState`` is not compared unless
the file defines ``verify_outputs(topology_id)`` returning ``{name: {key: value}}``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from xml.sax.saxutils import escape, quoteattr

from transactional.exceptions import TridentError
from transactional.ops.snapshot import Difference, Snapshot, compare, read_snapshot
from transactional.ops.verify_child import PREFIX, last_committed_txid

__all__ = ["VerifyError", "VerifyOptions", "RunOutcome", "VerifyReport", "verify", "format_table",
           "junit_xml", "CRASH_POINTS"]

#: the driver's crash points of the commit protocol, in the order a txid reaches them
#: (transactional.engine.faults)
CRASH_POINTS = ("process.after_meta", "commit.before", "commit.after_task", "commit.before_write",
                "commit.before_record", "commit.after_record")


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
    verdict: str = "PASS"          # PASS, FAIL, SKIP (not run: budget) or ERROR
    note: str = ""
    secs: float = 0.0
    restarts: int = 0              # servers restarted (--server-faults)

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

    @property
    def passed(self) -> bool:
        """True when every run that ran matched the reference (``SKIP`` rows do not count)."""
        return all(r.verdict in ("PASS", "SKIP") for r in self.runs) and any(r.verdict == "PASS" for r in self.runs)

    @property
    def kills(self) -> int:
        """SIGKILLs of the driver that happened, over every run."""
        return sum(r.kills for r in self.runs)

    def to_json(self) -> dict[str, Any]:
        """The report as one JSON-friendly dict (``--json``)."""
        return {"file": self.file, "topology_id": self.topology_id, "kind": self.kind,
                "verdict": "PASS" if self.passed else "FAIL", "secs": round(self.secs, 1), "kills": self.kills,
                "reference_keys": self.reference_keys, "reference_txids": self.reference_txids,
                "runs": [r.to_json() for r in self.runs], "unchecked": self.unchecked,
                "fixed_ranges": self.fixed_ranges}


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


# -- servers ----------------------------------------------------------------------------------------

@contextlib.contextmanager
def scratch_servers(options: VerifyOptions, workdir: Path) -> Iterator[tuple[tuple[str, str], list[tuple[str, Any]]]]:
    """``((state URL, coordination URL), started)``: the URLs given, else a Redis and a ZooKeeper
    started for this verify run (removed at the end), listed in ``started`` as ``(name,
    ManagedProcess)`` for ``--server-faults``. ZooKeeper's tick is short, so the lock of a
    killed driver goes within about a second; Redis keeps an append-only file, so a restart
    (``stop`` flushes it) comes back with every write."""
    started: list[tuple[str, Any]] = []
    try:
        state = options.state
        if state is None:
            from transactional.testing.redis import ManagedRedis

            r = ManagedRedis(workdir=workdir / "redis", appendonly=True, appendfsync="everysec")
            started.append(("redis", r))
            r.start()
            state = r.url
        coordination = options.coordination
        if coordination is None:
            from transactional.testing.zookeeper import ManagedZooKeeper

            z = ManagedZooKeeper(workdir=workdir / "zookeeper", tick_time_ms=200)
            started.append(("zookeeper", z))
            z.start()
            coordination = z.url("trident-verify") + "?session_timeout=1.5"
        yield (state, coordination), list(started)
    finally:
        for _, s in reversed(started):
            s.destroy()


# -- driver processes -------------------------------------------------------------------------------

class Driver:
    """A ``transactional.ops.verify_child`` process: started (Spark up), then told to go."""

    def __init__(self, file: str, topology_id: str, urls: tuple[str, str], options: VerifyOptions,
                 env: dict[str, str], log: IO[bytes], until_txid: int | None, fault: str = "none",
                 kafka_end_offsets: dict[str, dict[str, int]] | None = None) -> None:
        cmd = [sys.executable, "-m", "transactional.ops.verify_child", file, "--topology-id", topology_id,
               "--state", urls[0], "--coordination", urls[1], "--master", options.master, "--fault", fault]
        if options.executor:
            cmd += ["--executor", options.executor]
        if until_txid is not None:
            cmd += ["--until-txid", str(until_txid)]
        if kafka_end_offsets:
            cmd += ["--kafka-end-offsets", json.dumps(kafka_end_offsets)]
        full_env = {k: v for k, v in os.environ.items() if k not in ("TRIDENT_CRASH_AT", "TRIDENT_PAUSE_AT",
                                                                       "TRIDENT_FAIL_TASKS")}
        full_env.update(env)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=full_env,
                                     start_new_session=True)
        self.lines: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.last_commit: dict[str, Any] = {}
        self.done: dict[str, Any] | None = None
        self.output: list[str] = []
        threading.Thread(target=self._read, daemon=True, name="trident-verify-driver").start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            if not line.startswith(PREFIX):
                self.output.append(line)
                continue
            what, _, payload = line[len(PREFIX):].partition(" ")
            data = json.loads(payload) if payload else None
            if what == "commit":
                self.last_commit = dict(data or {})
            elif what == "done":
                self.done = data
            self.lines.put((what, data))
        self.lines.put(("eof", None))

    def wait_ready(self, timeout: float) -> bool:
        """True once the process has Spark up and waits for ``go``; False if it ended first."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                what, _ = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                return False
            if what == "ready":
                return True
            if what == "eof":
                return False

    def go(self) -> None:
        """Start the run."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()

    def wait(self, timeout: float | None) -> int | None:
        """The exit status (negative: a signal), or None if it still runs at ``timeout``."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        """SIGKILL the driver (and its Spark JVM, in its process group)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def reap_group(self) -> None:
        """Kill what the driver left behind in its process group (its Spark JVM and workers)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)


#: where a ``--server-faults`` run pauses its driver (``TRIDENT_PAUSE_AT``) to restart a server:
#: Redis while a txid's updates are buffered but not written, ZooKeeper while they are written
#: but the txid is not recorded
SERVER_PAUSE_POINTS = ("commit.before_write", "commit.before_record")


class ServerRestarts:
    """The ``--server-faults`` of one run: each time a driver stops at a pause point
    (SIGSTOP, ``TRIDENT_PAUSE_AT``), the next server of ``servers`` is stopped for real (its
    process ends) and started again on the same port with the same data directory, then the
    driver continues (SIGCONT) against the restarted server."""

    def __init__(self, servers: list[tuple[str, Any]], say: Callable[[str], None]) -> None:
        self.pending = list(servers)
        self.restarts = 0
        self.done: list[str] = []
        self.say = say

    @staticmethod
    def pause_env(txid: int) -> dict[str, str]:
        """The ``TRIDENT_PAUSE_AT`` of a driver: one pause per server, at txid and the next."""
        return {"TRIDENT_PAUSE_AT": ";".join(f"{p}:txid={txid + i}" for i, p in enumerate(SERVER_PAUSE_POINTS))}

    def watch(self, driver: Driver) -> None:
        """Restart servers whenever ``driver`` pauses, until it ends (a thread)."""
        threading.Thread(target=self._watch, args=(driver,), daemon=True, name="trident-verify-servers").start()

    def _watch(self, driver: Driver) -> None:
        stat = Path(f"/proc/{driver.proc.pid}/stat")
        while driver.proc.poll() is None:
            try:
                state = stat.read_text().rpartition(")")[2].split()[0]
            except (OSError, IndexError):
                return
            if state in ("T", "t"):
                if self.pending:
                    name, server = self.pending.pop(0)
                    server.stop()               # SIGTERM: the process ends; its data stays
                    server.start()              # same port, same data directory
                    self.restarts += 1
                    self.done.append(name)
                    self.say(f"  server faults: {name} restarted on port {server.port}")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(driver.proc.pid, signal.SIGCONT)
            time.sleep(0.05)


class _Budget:
    def __init__(self, secs: float | None) -> None:
        self.end = None if secs is None else time.monotonic() + secs

    def left(self) -> float:
        return float("inf") if self.end is None else self.end - time.monotonic()


class OutOfBudget(Exception):
    """The budget ran out in the middle of a run."""


class Verifier:
    """One ``trident verify`` of one topology file (``verify`` is its entry point)."""

    def __init__(self, file: str, options: VerifyOptions, urls: tuple[str, str], workdir: Path,
                 say: Any = None) -> None:
        self.file, self.options, self.urls, self.workdir = file, options, urls, workdir
        self.run_id = uuid.uuid4().hex[:8]
        self.budget = _Budget(options.budget_secs)
        self.say = say or (lambda text: None)
        self.until_txid: int | None = None
        self.restarter: ServerRestarts | None = None
        self.kafka_end_offsets: dict[str, dict[str, int]] = {}

    def scratch_id(self, name: str) -> str:
        """The scratch topology id of run ``name``."""
        return f"verify-{self.run_id}-{name}"

    def run(self, name: str, kills: list[Kill], env: dict[str, str] | None = None,
            fault: str | None = None, servers: ServerRestarts | None = None) -> tuple[str, RunOutcome]:
        """Run the topology under scratch id ``name`` to completion, killing its driver at each
        of ``kills`` in turn (a kill not reached is noted) and restarting ``servers`` when a
        driver pauses; the id and the row so far."""
        tid = self.scratch_id(name)
        row = RunOutcome(fault=fault or name, kills_planned=len(kills))
        self.restarter = servers
        t0 = time.monotonic()
        log_path = self.workdir / f"{tid}.log"
        plan = list(kills)
        with open(log_path, "ab") as log:
            def start(k: Kill | None) -> Driver:
                e = dict(env or {})
                if k is not None:
                    e["TRIDENT_CRASH_AT"] = k.spec
                return Driver(self.file, tid, self.urls, self.options, e, log, self.until_txid, row.fault,
                              self.kafka_end_offsets)

            def start_next(killed: bool) -> Driver | None:
                """The driver that resumes after a kill (started now, it waits with Spark up)."""
                return start(plan[0] if plan else None) if plan or killed or self.restarter else None

            current: Driver | None = start(plan[0] if plan else None)
            while current is not None:
                kill = plan.pop(0) if plan else None
                current = self._drive(current, kill, start_next, row, tid, log_path)
        self.restarter = None
        if servers is not None:
            row.restarts = servers.restarts
        for k in plan:
            row.note = _join(row.note, f"not reached: {k.spec}")
        row.secs = time.monotonic() - t0
        return tid, row

    def _drive(self, current: Driver, kill: Kill | None, start_next: Callable[[bool], Driver | None], row: RunOutcome, tid: str,
               log_path: Path) -> Driver | None:
        """Let ``current`` run (the next driver starting meanwhile, ``start_next``) until it ends;
        the driver that resumes the run after a kill, None once the run completed."""
        try:
            ready = current.wait_ready(max(1.0, min(300.0, self.budget.left())))
        except BaseException:
            current.kill()
            raise
        if not ready:
            current.kill()
            raise VerifyError(self._driver_failed(tid, current, log_path, "starting"))
        current.go()
        if self.restarter is not None:
            self.restarter.watch(current)
        row.drivers += 1
        nxt = start_next(kill is not None)
        try:
            status = current.wait(max(0.0, self.budget.left()))
            if status is None:
                current.kill()
                raise OutOfBudget
            current.reap_group()
            row.replays += int((current.done or current.last_commit).get("attempts", 0))
            if status == -signal.SIGKILL and kill is not None:
                row.kills += 1
                self.say(f"  {row.fault}: driver killed at {kill.spec}; restarting")
                resumed, nxt = nxt, None
                return resumed
            if status != 0 and self.restarter is not None and self.restarter.restarts and row.drivers < 8:
                # a driver may give up when its server goes away; the next one resumes the run
                row.note = _join(row.note, f"a driver exited with status {status} after a server restart; resumed")
                resumed, nxt = nxt, None
                return resumed
            if status != 0:
                raise VerifyError(self._driver_failed(tid, current, log_path, "running"))
            if kill is not None:
                row.note = _join(row.note, f"not reached: {kill.spec}")
            return None
        finally:
            if nxt is not None:
                nxt.kill()

    def _driver_failed(self, tid: str, driver: Driver, log_path: Path, doing: str) -> str:
        tail = log_path.read_text(errors="replace").strip().splitlines()[-15:]
        return (f"a driver of {self.file} (scratch topology {tid}) failed while {doing} "
                f"(exit status {driver.proc.returncode}); its last lines:\n  " + "\n  ".join(tail))

    def snapshot(self, tid: str, module: Any) -> Snapshot:
        """The scratch run's state, with the file's own outputs (``verify_outputs``) if it has them."""
        snap = read_snapshot(self.urls[0], self.urls[1], tid)
        outputs = getattr(module, "verify_outputs", None)
        if outputs is not None:
            for name, values in dict(outputs(tid)).items():
                snap[f"{name} (verify_outputs)"] = dict(values)
        return snap


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


# -- what it prints ---------------------------------------------------------------------------------

_COLUMNS = ("fault", "kills", "restarts", "replays", "keys", "missing", "doubled", "different", "verdict")


def format_table(report: VerifyReport) -> str:
    """The verdict table, then the examples of each failed run and what was not checked."""
    rows = [_COLUMNS]
    for r in report.runs:
        kills = f"{r.kills}/{r.kills_planned}" if r.kills_planned else "0"
        rows.append((r.fault, kills, str(r.restarts), str(r.replays), str(r.compared), str(r.missing), str(r.doubled),
                     str(r.different + r.extra), r.verdict))
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    lines = [f"trident verify {report.file}: topology {report.topology_id!r}, {report.kind}; reference "
             f"{report.reference_txids} txids, {report.reference_keys} keys"]
    for j, row in enumerate(rows):
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths,
                                                                                                    strict=True))))
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    for r in report.runs:
        for ex in r.examples:
            lines.append(f"  {r.fault}: {ex}")
        if r.note:
            lines.append(f"  {r.fault}: {r.note}")
    for topic, ends in report.fixed_ranges.items():
        lines.append(f"fixed range: Kafka topic {topic!r} read up to the end offsets recorded at the start "
                     f"{', '.join(f'{p}:{o}' for p, o in ends.items())}")
    for note in report.unchecked:
        lines.append(f"not checked: {note}")
    verdict = "PASS" if report.passed else "FAIL"
    lines.append(f"{verdict}: {sum(r.verdict == 'PASS' for r in report.runs)} of {len(report.runs)} runs matched the "
                 f"reference; {report.kills} driver kills in {report.secs:.1f} s")
    return "\n".join(lines)


def junit_xml(report: VerifyReport) -> str:
    """The report as a JUnit XML test suite: one test case per run (``--junit FILE``)."""
    cases = []
    for r in report.runs:
        body = ""
        if r.verdict in ("FAIL", "ERROR"):
            text = "\n".join(r.examples + ([r.note] if r.note else []))
            body = (f"<failure message={quoteattr(f'{r.missing} missing, {r.doubled} doubled, {r.different} different, {r.extra} extra')}>"
                    f"{escape(text)}</failure>")
        elif r.verdict == "SKIP":
            body = f"<skipped message={quoteattr(r.note)}/>"
        cases.append(f'  <testcase classname={quoteattr("trident.verify." + report.topology_id)} '
                     f'name={quoteattr(r.fault)} time="{r.secs:.1f}">{body}</testcase>')
    failures = sum(r.verdict in ("FAIL", "ERROR") for r in report.runs)
    skipped = sum(r.verdict == "SKIP" for r in report.runs)
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<testsuite name={quoteattr("trident verify " + report.file)} '
            f'tests="{len(report.runs)}" failures="{failures}" skipped="{skipped}" time="{report.secs:.1f}">\n'
            + "\n".join(cases) + "\n</testsuite>\n")


# -- the command --------------------------------------------------------------------------------------

def add_parser(sub: Any) -> None:
    """``trident verify``'s subcommand and flags (``transactional.ops.cli``)."""
    p = sub.add_parser("verify", help="prove exactly-once for a topology file: a run without faults, runs under "
                       "driver kills and task failures in scratch namespaces, every key compared (docs/verify.md)")
    p.add_argument("file", help="a topology file, as `trident run` takes")
    p.add_argument("--crash-points", default="all", metavar="all|none|LIST",
                   help=f"kill the driver once at each of these commit crash points, one run each "
                        f"(comma-separated among {', '.join(CRASH_POINTS)}; default all)")
    p.add_argument("--kills", type=int, default=0, metavar="N",
                   help="one more run with N driver SIGKILLs at seeded random crash points and txids")
    p.add_argument("--seed", type=int, default=1, help="the seed of the random kills and task failures (default 1)")
    p.add_argument("--no-task-failures", action="store_true",
                   help="skip the run with failing tasks (FailedException in seeded-random bolt tasks)")
    p.add_argument("--server-faults", action="store_true",
                   help="one more run in which the Redis and the ZooKeeper that verify started are stopped and started "
                        "again mid-run (same port, same data); not with --state/--coordination")
    p.add_argument("--budget", type=float, default=None, metavar="SECS",
                   help="stop starting runs when this much time has passed; the table says what it had time for")
    p.add_argument("--max-batches", type=int, default=None, metavar="N",
                   help="commit N batches per run (for a spout that never runs dry)")
    p.add_argument("--state", metavar="URL", help="a Redis for the scratch maps (default: one verify starts)")
    p.add_argument("--coordination", metavar="URL", help="a ZooKeeper for the scratch coordinator state "
                   "(default: one verify starts)")
    p.add_argument("--master", default="local[2]", help="the Spark master of the runs (default local[2])")
    p.add_argument("--executor", choices=("spark", "in-process"), default=None,
                   help="where processing tasks run (default: the file's CONFIG, else spark)")
    p.add_argument("--junit", metavar="FILE", help="also write the verdict as JUnit XML, for CI")
    p.add_argument("--json", action="store_true", help="print the verdict as one JSON line instead of the table")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def command(args: Any) -> int:
    """``trident verify``: 0 when every run matched the reference, 1 otherwise."""
    points: tuple[str, ...]
    if args.crash_points == "all":
        points = CRASH_POINTS
    elif args.crash_points == "none":
        points = ()
    else:
        points = tuple(p.strip() for p in args.crash_points.split(",") if p.strip())
    if args.kills < 0:
        msg = f"--kills must be >= 0; got {args.kills}"
        raise VerifyError(msg)
    options = VerifyOptions(crash_points=points, kills=args.kills, seed=args.seed,
                            task_failures=not args.no_task_failures, budget_secs=args.budget, state=args.state,
                            coordination=args.coordination, master=args.master, executor=args.executor,
                            max_batches=args.max_batches, server_faults=args.server_faults)

    def say(text: str) -> None:
        if not args.quiet:
            print(text, file=sys.stderr, flush=True)

    report = verify(args.file, options, say)
    print(json.dumps(report.to_json()) if args.json else format_table(report), flush=True)
    if args.junit:
        Path(args.junit).write_text(junit_xml(report))
    return 0 if report.passed else 1
