"""``topology_status`` / ``format_status`` / ``trident status`` against a real ZooKeeper,
with the coordinator records written by the engine's own ``CoordinatorStore``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from state.base import MemoryTransactionalState
from state.zookeeper import ZooKeeperTransactionalState, parse_zk_url
from transactional.engine.store import CoordinatorStore
from transactional.exceptions import StateUnavailableError
from transactional.ops.cli import main as trident
from transactional.ops.status import format_status, topology_status
from transactional.testing._process import free_port, wait_until
from transactional.testing.zookeeper import ManagedZooKeeper

pytestmark = pytest.mark.integration


@pytest.fixture
def driver(zk_url: str) -> Iterator[ZooKeeperTransactionalState]:
    """A 'driver' of topology ``words`` that committed txid 2 and has 3 and 4 in flight."""
    s = ZooKeeperTransactionalState.from_url(zk_url, "words")
    s.acquire_lock("host-a:4242:ab12cd", wait=False, timeout=None)
    store = CoordinatorStore(s)
    store.record_commit(2, {"0": [3, 6], "1": [2, 4]}, None)
    store.write_pending(3, {"0": [6, 9], "1": [4, 6]}, 2, [1])
    store.write_pending(4, {"0": [9, 12], "1": [6, 8]}, 0)
    yield s
    s.close()


def test_status_reports_committed_uncommitted_and_lock(
        zk_url: str, driver: ZooKeeperTransactionalState) -> None:
    st = topology_status(zk_url, "words")
    assert st["exists"] is True
    assert st["last_committed_txid"] == 2
    assert st["committed_meta"] == {"0": [3, 6], "1": [2, 4]}
    assert st["uncommitted"] == [
        {"txid": 3, "attempts": 2, "meta": {"0": [6, 9], "1": [4, 6]}, "commit_started": [1]},
        {"txid": 4, "attempts": 0, "meta": {"0": [9, 12], "1": [6, 8]}, "commit_started": []},
    ]
    assert st["lock_holder"] == "host-a:4242:ab12cd" and st["lock_waiting"] == []
    assert json.loads(json.dumps(st)) == st  # JSON-ready for --json

    text = format_status(st)
    assert "topology words" in text
    assert "last committed txid: 2" in text
    assert "lock: held by host-a:4242:ab12cd" in text
    assert "uncommitted txids: 2" in text
    assert 'txid 3: attempts 2, meta {"0": [6, 9], "1": [4, 6]}' in text
    assert "commit started by attempt(s) [1]" in text


def test_status_shows_waiting_driver_and_free_lock(
        zk_url: str, driver: ZooKeeperTransactionalState) -> None:
    other = ZooKeeperTransactionalState.from_url(zk_url, "words")
    try:
        import threading

        waiter = threading.Thread(
            target=lambda: other.acquire_lock("host-b:7:ef34gh", wait=True, timeout=10),
            daemon=True)
        waiter.start()
        wait_until(lambda: topology_status(zk_url, "words")["lock_waiting"]
                   == ["host-b:7:ef34gh"], 10, what="the waiting driver to queue")
        assert "waiting: host-b:7:ef34gh" in format_status(topology_status(zk_url, "words"))
        driver.release_lock()
        waiter.join(10)
        assert not waiter.is_alive()
        assert topology_status(zk_url, "words")["lock_holder"] == "host-b:7:ef34gh"
        other.release_lock()
        st = topology_status(zk_url, "words")
        assert st["lock_holder"] is None
        assert "lock: free" in format_status(st)
    finally:
        other.close()


def test_stale_metadata_of_committed_txid_is_set_apart(
        zk_url: str, driver: ZooKeeperTransactionalState) -> None:
    CoordinatorStore(driver).record_commit(3, {"0": [6, 9], "1": [4, 6]}, None)
    st = topology_status(zk_url, "words")
    assert st["last_committed_txid"] == 3
    assert [u["txid"] for u in st["uncommitted"]] == [4]
    assert st["stale_txids"] == [3]
    assert "stale metadata of committed txids [3]" in format_status(st)


def test_unknown_topology_is_reported_and_nothing_is_created(
        zk_server: ManagedZooKeeper, zk_url: str) -> None:
    st = topology_status(zk_url, "never-ran")
    assert st["exists"] is False and st["last_committed_txid"] is None
    assert st["uncommitted"] == [] and st["lock_holder"] is None
    assert "never ran here" in format_status(st)
    _, root, _ = parse_zk_url(zk_url)
    raw = KazooClient(hosts=zk_server.hosts)
    raw.start(timeout=10)
    try:
        assert raw.exists(f"/{root}/never-ran") is None  # status created no znode
        assert raw.exists(f"/{root}") is None
    finally:
        raw.stop()
        raw.close()


def test_status_of_protected_topology_needs_no_credentials(zk_url: str) -> None:
    s = ZooKeeperTransactionalState.from_url(zk_url, "secure", auth="app:s3cret")
    try:
        s.acquire_lock("host-a:1:x", wait=False, timeout=None)
        CoordinatorStore(s).record_commit(7, {"0": [0, 1]}, None)
        assert topology_status(zk_url, "secure")["last_committed_txid"] == 7
        assert topology_status(zk_url, "secure", auth="app:s3cret")["lock_holder"] == "host-a:1:x"
    finally:
        s.close()


def test_unreachable_zookeeper_names_the_address() -> None:
    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(StateUnavailableError, match=f"127.0.0.1:{port}"):
        topology_status(f"zk://127.0.0.1:{port}/r", "words", connect_timeout=1.0)
    assert time.monotonic() - t0 < 2.0


def test_memory_backend_in_process() -> None:
    s = MemoryTransactionalState("status-memory")
    try:
        CoordinatorStore(s).record_commit(1, [0, 3], None)
        st = topology_status("memory://", "status-memory")
        assert st["last_committed_txid"] == 1 and st["committed_meta"] == [0, 3]
    finally:
        MemoryTransactionalState.reset("status-memory")


def test_cli_status_human_and_json(zk_url: str, driver: ZooKeeperTransactionalState,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert trident(["status", "words", "--coordination", zk_url]) == 0
    out = capsys.readouterr().out
    assert "last committed txid: 2" in out and "host-a:4242:ab12cd" in out
    assert trident(["status", "words", "--coordination", zk_url, "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["last_committed_txid"] == 2 and [u["txid"] for u in st["uncommitted"]] == [3, 4]


def test_cli_status_unreachable_is_an_error_message(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    t0 = time.monotonic()
    assert trident(["status", "words", "--coordination", f"zk://127.0.0.1:{port}/r"]) == 1
    assert f"127.0.0.1:{port}" in capsys.readouterr().err
    assert time.monotonic() - t0 < 10.5


def test_the_status_record_keeps_the_last_error_of_a_timed_out_job_and_a_failing_listener_stops_nothing() -> None:
    """A timeout's failure (no task, no traceback) goes into the record as any other; and a
    listener that raises is logged, never raised into the run."""
    import uuid

    from spouts import MemoryTransactionalSpout
    from transactional import Fields, TopologyConfig, TransactionalTopologyBuilder
    from transactional.engine.coordinator import CoordinatorSettings, _Timeout
    from transactional.engine.events import Transition
    from transactional.ops.run import OperatedRun as Engine
    from transactional.ops.status import StatusRecorder
    from transactional.testing import ListSink

    state = MemoryTransactionalState(f"rec-{uuid.uuid4().hex[:6]}")
    rec = StatusRecorder(state, "transactional", "me")
    rec(Transition("failed", 3, 2, 1.0, {"failure": _Timeout(3, 2, CoordinatorSettings(message_timeout_secs=4))}))
    err = state.get("status")["errors"]["(spark job)"]
    assert (err["txid"], err["attempt"], err["task"]) == (3, 2, -1)
    assert err["error"] == "Timeout: not processed within message_timeout_secs=4; its job was cancelled"

    tid = f"listener-{uuid.uuid4().hex[:6]}"
    b = TransactionalTopologyBuilder(tid, "spout", MemoryTransactionalSpout({0: list(range(6))}, Fields("n"), 2))
    b.set_bolt("sink", ListSink(tid)).shuffle_grouping("spout")
    engine = Engine(b.build(), TopologyConfig(executor="in-process", progress=False))

    def broken(t: Transition) -> None:
        raise ValueError("observer bug")

    engine.listeners.append(broken)
    r = engine.run(None)
    assert r.batches_committed == 3 and r.stopped_because == "spout has nothing more"


REPO = Path(__file__).resolve().parents[3]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "transactional.ops.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=60)


def test_a_hung_driver_is_stale_a_killed_one_dead_and_the_next_run_keeps_its_history(
        zk_factory, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A driver (another process) writes its status record every second even while idle;
    SIGSTOP it and `trident status`/`trident list` say stale once 5 intervals passed
    (its session, and lock, still alive); SIGKILL it and they say dead once its session
    expired. The next run lists the killed one as died in the topology's runs."""
    from transactional.ops.status import STALE_INTERVALS

    # a server of its own whose tick (1 s) lets a session last the 15 s asked for: the shared
    # one's 250 ms tick caps sessions at 5 s, as long as a record takes to be stale, so the
    # hung driver could be "dead" before it was seen "stale"
    zk = zk_factory(tick_time_ms=1000)
    zk.start()
    zk_url = zk.url("t-hung")
    coordination = zk_url + "?session_timeout=15"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    with open(tmp_path / "driver.err", "wb") as err:
        driver = subprocess.Popen([sys.executable, "-m", "transactional.ops.cli", "run", "examples/transactional_words.py",
                                   "--set", "executor=in-process", "--coordination", coordination,
                                   "--accept-state-loss", "--idle-timeout", "-1", "-q"],
                                  cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    try:
        def status() -> dict:
            return topology_status(zk_url, "transactional-words")

        # the data runs out; the idle driver still writes its record every interval
        seen: dict = {}

        def written_while_idle() -> bool:
            run = status()["run"] or {}
            if seen.get("batches") != run.get("batches"):
                seen.update(batches=run.get("batches"), at=run.get("updated_at"))
                return False
            return bool(run.get("batches")) and run["updated_at"] > seen["at"] + 1.5

        wait_until(written_while_idle, 60, what="writes of the idle driver, with no new batch")
        first = status()
        assert first["run_state"]["state"] == "running" and first["run"]["batches"] == seen["batches"]
        owner = first["run"]["owner"]
        assert first["lock_holder"] == owner

        os.killpg(driver.pid, signal.SIGSTOP)                # hung: its session lives on for 15 s
        wait_until(lambda: status()["run_state"]["state"] != "running", STALE_INTERVALS + 4, what="stale")
        st = status()
        assert st["run_state"]["state"] == "stale" and st["lock_holder"] == owner
        assert trident(["status", "transactional-words", "--coordination", zk_url]) == 0
        out = capsys.readouterr().out
        assert "last run: STALE" in out and "has not written its status record" in out, out
        assert trident(["list", "--coordination", zk_url, "--json"]) == 0
        assert [r["run"] for r in json.loads(capsys.readouterr().out)] == ["stale"]

        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(10)
        wait_until(lambda: status()["lock_holder"] is None, 30, what="the killed driver's session to expire")
        st = status()
        assert st["run"]["running"] is True and st["run_state"]["state"] == "dead"
        assert st["run_state"]["why"].startswith(f"the status record says running but its driver {owner} holds no "
                                                 "session (the lock is free)")
        assert trident(["status", "transactional-words", "--coordination", zk_url]) == 0
        out = capsys.readouterr().out
        assert "last run: DEAD" in out and "died without ending the run" in out, out
        assert trident(["list", "--coordination", zk_url]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].split() == ["TOPOLOGY", "KIND", "LAST", "TXID", "STATE", "RUN", "DRIVER"]
        assert lines[1].split() == ["transactional-words", "transactional", str(st["last_committed_txid"]), "active",
                                    "dead", "(not", "running)"]
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(30)

    # the next run: ends normally; the runs record has it first, then the killed one as died
    p = _cli("run", "examples/transactional_words.py", "--set", "executor=in-process", "--coordination", coordination,
             "--accept-state-loss", "--max-batches", "1", "-q")
    assert p.returncode == 0, p.stderr
    st = status()
    assert st["run_state"]["state"] == "ended"
    runs = st["runs"]
    assert [(r["ended"], r["owner"] == owner) for r in runs] == [("ended", False), ("died", True)]
    assert runs[1]["stopped_because"] == "the driver died (no last write)"
    assert runs[1]["batches"] == first["run"]["batches"] and runs[0]["stopped_because"] == "spout has nothing more"


def test_status_and_list_exit_non_zero_for_an_unknown_topology(zk_url: str, driver: ZooKeeperTransactionalState,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert trident(["status", "never-ran", "--coordination", zk_url]) == 1
    captured = capsys.readouterr()
    assert "never ran here" in captured.out and f"no topology 'never-ran' under {zk_url}" in captured.err
    assert trident(["status", "never-ran", "--coordination", zk_url, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["exists"] is False
    assert trident(["list", "never-ran", "words", "--coordination", zk_url]) == 1
    assert capsys.readouterr().err == (f"trident: error: no topology 'never-ran' under {zk_url}: it never ran there "
                                       "(check the id and the root in the URL; there: words)\n")
    assert trident(["list", "words", "--coordination", zk_url, "--json"]) == 0
    assert [r["topology_id"] for r in json.loads(capsys.readouterr().out)] == ["words"]
