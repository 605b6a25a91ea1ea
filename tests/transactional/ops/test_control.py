"""Managing a running topology (docs/operations.md): ``trident deactivate`` stops new
batches and ``activate`` resumes them, ``kill`` stops the driver after its commit and
frees the lock, ``trident list`` shows every topology under a root -- in process with
the memory coordinator, and through the CLI against a driver in another process with a
real ZooKeeper."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from spouts import MemoryTransactionalSpout
from state.base import open_transactional_state
from transactional import BaseBatchBolt, Fields, TopologyConfig, TransactionalTopologyBuilder, run_topology
from transactional.engine.events import Transition
from transactional.exceptions import TridentError
from transactional.ops.control import RunControl, request
from transactional.ops.run import OperatedRun as Engine
from transactional.ops.status import topology_list, topology_status
from transactional.testing import SINKS, ListSink

REPO = Path(__file__).resolve().parents[3]


def wait_for(cond: Any, timeout: float = 30, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def endless(tid: str) -> TransactionalTopologyBuilder:
    b = TransactionalTopologyBuilder(tid, "spout", MemoryTransactionalSpout({0: list(range(100_000))}, Fields("n"), 1))
    b.set_bolt("sink", ListSink(tid)).shuffle_grouping("spout")
    return b


def test_deactivate_stops_new_batches_activate_resumes_and_kill_ends_the_run_freeing_the_lock() -> None:
    tid = f"ctl-{uuid.uuid4().hex[:8]}"
    heard: list[Transition] = []
    engine = Engine(endless(tid).build(), TopologyConfig(executor="in-process", progress=False,
                                                          idle_timeout_secs=None))
    engine.listeners.append(heard.append)
    done: dict[str, Any] = {}
    t = threading.Thread(target=lambda: done.setdefault("result", engine.run(None)))
    t.start()
    try:
        kinds = lambda: [h.kind for h in heard]  # noqa: E731
        wait_for(lambda: kinds().count("committed") >= 3, what="three commits")
        assert request("memory://", tid, "deactivate", by="ops")["state"] == "inactive"
        wait_for(lambda: "deactivated" in kinds(), what="the deactivation")
        at = kinds().index("deactivated")
        wait_for(lambda: kinds().count("launched") == kinds().count("committed"), what="the batches in flight")
        time.sleep(0.6)                                    # three poll intervals: no launch may come
        assert "launched" not in kinds()[at:] and t.is_alive()
        assert topology_status("memory://", tid)["control"]["state"] == "inactive"
        request("memory://", tid, "activate", by="ops")
        wait_for(lambda: "launched" in kinds()[kinds().index("activated"):] if "activated" in kinds() else False,
                 what="launches after activate")
        request("memory://", tid, "kill", by="ops")
        t.join(30)
        assert not t.is_alive()
    finally:
        if t.is_alive():
            request("memory://", tid, "kill")
            t.join(30)
    r = done["result"]
    assert r.stopped_because == "killed by ops" and r.batches_committed >= 4
    st = topology_status("memory://", tid)
    assert st["lock_holder"] is None and st["run"]["running"] is False
    assert st["uncommitted"] == [] or all(u["txid"] > r.last_txid for u in st["uncommitted"])
    rows = [row for row in topology_list("memory://") if row["topology_id"] == tid]
    assert rows == [{"topology_id": tid, "last_committed_txid": r.last_txid, "lock_holder": None,
                     "state": "active", "kind": "transactional", "uncommitted": len(st["uncommitted"]), "run": "ended"}]


def test_a_deactivated_topology_starts_deactivated_and_kill_without_a_driver_is_refused() -> None:
    tid = f"ctl-{uuid.uuid4().hex[:8]}"
    run_topology(endless(tid), TopologyConfig(executor="in-process", progress=False), max_batches=1)
    with pytest.raises(TridentError, match=f"no driver runs topology '{tid}' now .*nothing to kill"):
        request("memory://", tid, "kill")
    with pytest.raises(TridentError, match="no topology 'never-ran' under memory://"):
        request("memory://", "never-ran", "deactivate")
    request("memory://", tid, "deactivate")
    heard: list[str] = []
    engine = Engine(endless(tid).build(), TopologyConfig(executor="in-process", progress=False,
                                                          idle_timeout_secs=None))
    engine.listeners.append(lambda h: heard.append(h.kind))
    t = threading.Thread(target=engine.run, args=(None,))
    t.start()
    wait_for(lambda: "deactivated" in heard, what="the deactivation")
    time.sleep(0.4)
    assert "launched" not in heard
    request("memory://", tid, "kill")
    t.join(30)
    assert not t.is_alive() and "launched" not in heard


#: per topology id: set when txid ``at + 1`` is reported processed (by a listener of the run)
GATES: dict[str, threading.Event] = {}


class HoldBatch(BaseBatchBolt):
    """Processing phase: the batch of txid ``at`` ends only once txid ``at + 1`` is
    reported processed, so that when ``at`` commits, the Commit of ``at + 1`` is asked
    for at once. (The gate is found through ``sys.modules``: this class is shipped by
    value, and an Event cannot be pickled.)"""

    def __init__(self, tid: str, at: int) -> None:
        self.tid, self.at, self.module = tid, at, __name__

    def prepare(self, conf: dict, context: Any, collector: Any, id: Any) -> None:
        self.txid = id.txid

    def execute(self, tuple: Any) -> None:
        pass

    def finish_batch(self) -> None:
        if self.txid == self.at:
            assert sys.modules[self.module].GATES[self.tid].wait(30), f"txid {self.at + 1} was not processed"

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id"))


class KillDuringCommit(ListSink):
    """A committer that asks ``trident kill`` inside the commit of txid ``at``: the
    deterministic seam of a kill that arrives mid-commit."""

    def __init__(self, tid: str, coordination: str, at: int) -> None:
        super().__init__(tid)
        self.coordination, self.at = coordination, at

    def finish_batch(self) -> None:
        super().finish_batch()
        if self.attempt.txid == self.at:
            request(self.coordination, self.name, "kill", by="ops")


class KillingSpout(MemoryTransactionalSpout):
    """Its coordinator asks ``trident kill`` from ``committed(at)``: the last step of the
    commit of txid ``at``, a moment before the driver looks at the operator's record."""

    def __init__(self, tid: str, coordination: str, at: int) -> None:
        super().__init__({0: list(range(1000))}, Fields("n"), 1)
        self.tid, self.coordination, self.at = tid, coordination, at

    def get_coordinator(self, conf: dict, context: Any) -> Any:
        inner = super().get_coordinator(conf, context)
        spout = self

        class Coordinator(type(inner)):  # type: ignore[misc]
            def committed(self, txid: int, meta: Any) -> None:
                if txid == spout.at:
                    request(spout.coordination, spout.tid, "kill", by="ops")

        return Coordinator(inner.sizes, inner.take)


@pytest.mark.parametrize("seam", ["committer", "spout"])
@pytest.mark.parametrize("coordination", ["memory", "zk"])
def test_a_kill_that_arrives_mid_commit_finishes_that_commit_then_stops(coordination: str, seam: str,
                                                                       request: pytest.FixtureRequest) -> None:
    """The kill is written inside the commit of txid 3 (by a committer bolt, or by the
    spout coordinator's ``committed`` hook, its last step) while txid 4 is processed
    already (its Commit is asked for as soon as 3's is recorded): the run commits 3 and
    stops, 4 is cancelled. With ZooKeeper the driver hears the kill by a watch whose
    callback runs on kazoo's thread, after a read of its own; the driver reads the record
    afresh after each commit, so the kill cannot slip past the next commit."""
    url = "memory://" if coordination == "memory" else request.getfixturevalue("zk_url")
    tid = f"ctl-{uuid.uuid4().hex[:8]}"
    GATES[tid] = gate = threading.Event()
    if seam == "committer":
        b = TransactionalTopologyBuilder(tid, "spout", MemoryTransactionalSpout({0: list(range(1000))}, Fields("n"), 1))
        b.set_committer_bolt("sink", KillDuringCommit(tid, url, 3)).shuffle_grouping("spout")
    else:
        b = TransactionalTopologyBuilder(tid, "spout", KillingSpout(tid, url, 3))
        b.set_committer_bolt("sink", ListSink(tid)).shuffle_grouping("spout")
    b.set_bolt("hold", HoldBatch(tid, 3)).shuffle_grouping("spout")
    engine = Engine(b.build(), TopologyConfig(executor="in-process", coordination=url, progress=False,
                                              max_spout_pending=3, idle_timeout_secs=None))
    engine.listeners.append(lambda t: gate.set() if (t.kind, t.txid) == ("processed", 4) else None)
    try:
        r = engine.run(None)
    finally:
        del GATES[tid]
    assert (r.stopped_because, r.last_txid, r.batches_committed) == ("killed by ops", 3, 3)
    assert SINKS.pop(tid) == [(1, (0,)), (2, (1,)), (3, (2,))]
    st = topology_status(url, tid)
    assert st["last_committed_txid"] == 3 and st["lock_holder"] is None, st
    assert all(u["txid"] > 3 for u in st["uncommitted"]), st["uncommitted"]


@pytest.mark.integration
def test_a_kill_is_seen_by_the_read_after_a_commit_whatever_the_zookeeper_watch_delivered(zk_url: str) -> None:
    """The race behind a kill that slipped past the next commit: the watch's callback runs
    on kazoo's callback thread (after a read of its own), so when a commit ends the
    driver may not have heard a kill written during it. Here that thread is held busy
    while the kill is written: the watch has told nothing, and the fresh read the engine
    makes after each commit (``value(fresh=True)``) sees the kill all the same."""
    from kazoo.protocol.states import Callback

    tid = f"ctl-{uuid.uuid4().hex[:8]}"
    state = open_transactional_state(zk_url, tid)
    release = threading.Event()
    try:
        state.acquire_lock("driver-a", wait=False, timeout=None)
        control = RunControl(state, "driver-a")
        assert control.value() == {}
        state._client.handler.dispatch_callback(Callback("watch", release.wait, (30,)))  # kazoo's thread is busy
        request(zk_url, tid, "kill", by="ops")
        assert control.value() == {}                          # the watch has not run: nothing heard
        rec = control.value(fresh=True)
        assert rec["kill"]["owner"] == "driver-a" and rec["kill"]["by"] == "ops", rec
        assert control.value()["kill"]["by"] == "ops"         # and it stays heard
    finally:
        release.set()
        state.close()


def trident(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "transactional.ops.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout)


@pytest.mark.integration
def test_the_cli_lists_deactivates_activates_and_kills_a_driver_in_another_process(zk_url: str,
                                                                                  tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    err = open(tmp_path / "driver.err", "wb")
    driver = subprocess.Popen([sys.executable, "-m", "transactional.ops.cli", "run", "examples/transactional_words.py",
                               "--set", "executor=in-process", "--coordination", zk_url, "--accept-state-loss",
                               "--idle-timeout", "-1", "-q"],
                              cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=err, start_new_session=True)
    try:
        def listed() -> list[dict]:
            p = trident("list", "--coordination", zk_url, "--json")
            assert p.returncode == 0, p.stderr
            return json.loads(p.stdout)

        wait_for(lambda: any(r["lock_holder"] and r["last_committed_txid"] for r in listed()), 60, "a commit")
        p = trident("list", "--coordination", zk_url)
        assert p.returncode == 0 and "transactional-words" in p.stdout and "active" in p.stdout, p.stdout
        p = trident("deactivate", "transactional-words", "--coordination", zk_url)
        assert p.returncode == 0 and "transactional-words: inactive (driver " in p.stdout, p.stderr
        wait_for(lambda: "deactivated" in trident("status", "transactional-words", "--coordination", zk_url).stdout,
                 what="status showing the deactivation")
        assert listed()[0]["state"] == "inactive"
        assert trident("activate", "transactional-words", "--coordination", zk_url).returncode == 0
        p = trident("kill", "transactional-words", "--coordination", zk_url)
        assert p.returncode == 0 and "asked " in p.stdout, p.stderr
        out, _ = driver.communicate(timeout=60)
        assert driver.returncode == 0, (tmp_path / "driver.err").read_text()
        assert "stopped: killed by" in out.decode()
        wait_for(lambda: listed()[0]["lock_holder"] is None, 30, "the lock to be free")
        p = trident("kill", "transactional-words", "--coordination", zk_url)
        assert p.returncode == 1 and "nothing to kill" in p.stderr
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(30)
        err.close()


@pytest.mark.integration
@pytest.mark.parametrize("action", ["kill", "deactivate", "activate"])
def test_a_mistyped_id_is_refused_naming_the_known_ids_and_leaves_nothing_behind(zk_url: str, action: str) -> None:
    run_topology(endless("words"), TopologyConfig(executor="in-process", progress=False, coordination=zk_url),
                 max_batches=1)
    p = trident(action, "wrods", "--coordination", zk_url)
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert p.stdout == ""
    assert [r["topology_id"] for r in topology_list(zk_url)] == ["words"]     # no "?" entry for 'wrods'
    assert f"no topology 'wrods' under {zk_url}: it never ran there (check the id and the root in the URL); " \
           "the topologies there: 'words'" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
