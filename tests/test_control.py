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
from transactional import Fields, TopologyConfig, TransactionalTopologyBuilder, run_topology
from transactional._coordinator import Transition
from transactional._runner import Engine
from transactional.control import request
from transactional.exceptions import TridentError
from transactional.status import topology_list, topology_status
from transactional.testing import ListSink

REPO = Path(__file__).resolve().parents[1]


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


def trident(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "transactional.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout)


@pytest.mark.integration
def test_the_cli_lists_deactivates_activates_and_kills_a_driver_in_another_process(zk_url: str,
                                                                                  tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    err = open(tmp_path / "driver.err", "wb")
    driver = subprocess.Popen([sys.executable, "-m", "transactional.cli", "run", "examples/transactional_words.py",
                               "--set", "executor=in-process", "--coordination", zk_url, "--idle-timeout", "-1", "-q"],
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
