"""Running ``trident verify``'s drivers: the scratch servers, one driver process
(``transactional.ops.verify.child``), the server restarts of ``--server-faults``, and the
``Verifier`` that runs a topology file to completion under scratch ids, killing its drivers
as planned (``transactional.ops.verify``)."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from transactional.ops.snapshot import Snapshot, read_snapshot
from transactional.ops.verify.model import PREFIX, Kill, Leg, RunOutcome, VerifyError, VerifyOptions, _join
from transactional.ops.verify.states import StateUse, read_states

__all__ = ["scratch_servers", "without_clock", "Driver", "SERVER_PAUSE_POINTS", "ServerRestarts", "OutOfBudget", "Verifier"]


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
    """A ``transactional.ops.verify.child`` process: started (Spark up), then told to go."""

    def __init__(self, file: str, topology_id: str, urls: tuple[str, str], options: VerifyOptions,
                 env: dict[str, str], log: IO[bytes], until_txid: int | None, fault: str = "none",
                 kafka_end_offsets: dict[str, dict[str, int]] | None = None, leg: int = 0) -> None:
        self.leg = leg                  # the run's leg it drives (``Verifier.legs``)
        cmd = [sys.executable, "-m", "transactional.ops.verify.child", file, "--topology-id", topology_id,
               "--state", urls[0], "--coordination", urls[1], "--master", options.master, "--fault", fault]
        if options.executor:
            cmd += ["--executor", options.executor]
        if options.allow_dropped_state:
            cmd += ["--allow-dropped-state"]
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
        self.legs: list[Leg] | None = None      # --upgrade-to: the first version's file, then the new one's
        self.leg_ends: dict[int, int] = {}      # the last run's legs that completed: the last txid they committed
        self.restarter: ServerRestarts | None = None
        self.kafka_end_offsets: dict[str, dict[str, int]] = {}
        self.states: list[StateUse] = []        # the user states, run against scratch copies
        self.unread: set[str] = set()           # states whose copies cannot say what they hold
        self.tids: list[str] = []               # every run's scratch id, to drop its copies at the end

    def scratch_id(self, name: str) -> str:
        """The scratch topology id of run ``name``."""
        return f"verify-{self.run_id}-{name}"

    def run(self, name: str, kills: list[Kill], env: dict[str, str] | None = None,
            fault: str | None = None, servers: ServerRestarts | None = None) -> tuple[str, RunOutcome]:
        """Run the topology under scratch id ``name`` to completion, killing its driver at each
        of ``kills`` in turn (a kill not reached is noted) and restarting ``servers`` when a
        driver pauses; the id and the row so far. With ``legs`` (``--upgrade-to``), the
        drivers of each leg's file in turn: a leg ends when its last txid is committed (its
        driver completed, or was killed just after recording that txid)."""
        tid = self.scratch_id(name)
        self.tids.append(tid)
        row = RunOutcome(fault=fault or name, kills_planned=len(kills))
        self.restarter = servers
        t0 = time.monotonic()
        log_path = self.workdir / f"{tid}.log"
        plan = list(kills)
        legs = self.legs or [Leg(self.file, self.until_txid)]
        with open(log_path, "ab") as log:
            def kill_of(leg: int) -> Kill | None:
                """The next planned kill, when a driver of ``leg`` can reach it."""
                return plan[0] if plan and _reaches(legs, leg, plan[0]) else None

            def start(leg: int) -> Driver:
                e = dict(env or {})
                k = kill_of(leg)
                if k is not None:
                    e["TRIDENT_CRASH_AT"] = k.spec
                return Driver(legs[leg].file, tid, self.urls, self.options, e, log, legs[leg].until_txid, row.fault,
                              self.kafka_end_offsets, leg)

            def start_next(current: Driver, kill: Kill | None) -> Driver | None:
                """The driver that goes on after ``current`` (started now, it waits with Spark up)."""
                leg = current.leg if kill is None and self.restarter else _next_leg(legs, current.leg, kill)
                return start(leg) if leg < len(legs) else None

            current: Driver | None = start(0)
            while current is not None:
                kill = plan.pop(0) if kill_of(current.leg) is not None else None
                current = self._drive(current, kill, start_next, row, tid, log_path)
        self.restarter = None
        if servers is not None:
            row.restarts = servers.restarts
        for k in plan:
            row.note = _join(row.note, f"not reached: {k.spec} (no fault there: the run ended first)")
        row.secs = time.monotonic() - t0
        return tid, row

    def _drive(self, current: Driver, kill: Kill | None, start_next: Callable[[Driver, Kill | None], Driver | None],
               row: RunOutcome, tid: str, log_path: Path) -> Driver | None:
        """Let ``current`` run (the next driver starting meanwhile, ``start_next``) until it ends;
        the driver that goes on after a kill or into the next leg, None once the run completed."""
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
        nxt = start_next(current, kill)
        try:
            status = current.wait(max(0.0, self.budget.left()))
            if status is None:
                current.kill()
                raise OutOfBudget
            current.reap_group()
            row.replays += int((current.done or current.last_commit).get("attempts", 0))
            if self._goes_on(current, kill, status, nxt, row, tid, log_path):
                resumed, nxt = nxt, None
                return resumed
            return None
        finally:
            if nxt is not None:
                nxt.kill()

    def _goes_on(self, current: Driver, kill: Kill | None, status: int, nxt: Driver | None, row: RunOutcome,
                 tid: str, log_path: Path) -> bool:
        """Whether ``nxt`` goes on after ``current`` ended with ``status``: after a kill, a
        driver that gave up on a restarted server, or into the next leg; ``VerifyError`` when
        ``current`` failed."""
        if status == -signal.SIGKILL and kill is not None:
            row.kills += 1
            row.landed.append(kill.spec)
            self.say(f"  {row.fault}: driver killed at {kill.spec}; restarting")
            return True
        if status != 0 and self.restarter is not None and self.restarter.restarts and row.drivers < 8:
            # a driver may give up when its server goes away; the next one resumes the run
            row.note = _join(row.note, f"a driver exited with status {status} after a server restart; resumed")
            return True
        if status != 0:
            raise VerifyError(self._driver_failed(tid, current, log_path, "running"))
        if kill is not None:
            row.note = _join(row.note, f"not reached: {kill.spec} (the run passed that txid without stopping at this step: no fault there)")
        if nxt is not None and nxt.leg > current.leg:           # on to the next leg's file
            self.leg_ends[current.leg] = int((current.done or {}).get("last_txid") or 0)
            return True
        return False

    def _driver_failed(self, tid: str, driver: Driver, log_path: Path, doing: str) -> str:
        tail = log_path.read_text(errors="replace").strip().splitlines()[-15:]
        return (f"a driver of {self.file} (scratch topology {tid}) failed while {doing} "
                f"(exit status {driver.proc.returncode}); its last lines:\n  " + "\n  ".join(tail))

    def snapshot(self, tid: str, module: Any) -> Snapshot:
        """The scratch run's state: its maps and ``KeyValueState``, the rows of its user states'
        scratch copies (dropped once read), and the file's own outputs (``verify_outputs``)."""
        snap = without_clock(read_snapshot(self.urls[0], self.urls[1], tid))
        self.unread.update(read_states(self.states, tid, snap))
        outputs = getattr(module, "verify_outputs", None)
        if outputs is not None:
            for name, values in dict(outputs(tid)).items():
                snap[f"{name} (verify_outputs)"] = dict(values)
        return snap


def _reaches(legs: list[Leg], leg: int, kill: Kill) -> bool:
    """Whether a driver of ``legs[leg]`` can reach ``kill``: the last leg reaches every txid,
    another only its own (up to its ``until_txid``)."""
    until = legs[leg].until_txid
    return leg == len(legs) - 1 or until is None or kill.txid <= until


def _next_leg(legs: list[Leg], leg: int, kill: Kill | None) -> int:
    """The leg of the driver after one of ``leg`` that completed (``kill`` None) or was
    killed at ``kill``: the next leg once ``leg``'s last txid is recorded."""
    until = legs[leg].until_txid
    if kill is None:
        return leg + 1
    done = kill.point == "commit.after_record" and until is not None and kill.txid >= until
    return leg + 1 if done and leg + 1 < len(legs) else leg


#: the fields of a Trident window's record (trident.runtime.window_proc)
_WINDOW_RECORD = frozenset(("txid", "now", "seq", "count_since", "next_end", "maxima"))


def without_clock(snap: Snapshot) -> Snapshot:
    """``snap`` with each Trident window record's ``now`` blanked: it is the recorded time of
    the txid that wrote it, another in every run by construction; what the window holds and
    fired is compared."""
    for values in snap.values():
        for k, v in values.items():
            if isinstance(v, dict) and _WINDOW_RECORD <= v.keys():
                values[k] = {**v, "now": "(the run's clock)"}
    return snap
