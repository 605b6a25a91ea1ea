"""The DRPC server (`trident drpc`) as a real process on a free loopback port, with remote
topologies on the in-process and Spark executors: calls over HTTP, the token, bad input,
and SIGKILL of the server and of the driver while requests are in flight."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from examples import reach
from transactional import LocalCluster, TopologyConfig
from transactional.drpc import DRPCClient, DRPCExecutionException

REPO = Path(__file__).resolve().parents[3]
PY = sys.executable


class Server:
    """A `trident drpc` process; ``start`` again after ``kill`` reuses the port."""

    def __init__(self, tmp: Path, *extra: str) -> None:
        self.extra = extra
        self.port = 0
        self.log = tmp / "drpc-server.log"
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        out = open(self.log, "a")  # noqa: SIM115 - the process keeps it
        self.proc = subprocess.Popen([PY, "-m", "transactional.ops.cli", "drpc", "--port", str(self.port),
                                      "--lease-secs", "2", "--log-level", "DEBUG", *self.extra],
                                     stdout=subprocess.PIPE, stderr=out, text=True, cwd=REPO)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert "listening on http://127.0.0.1:" in line, (line, self.log.read_text())
        self.port = int(line.split("127.0.0.1:")[1].split()[0])

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path)
    s.start()
    yield s
    if s.proc is not None and s.proc.poll() is None:
        s.kill()


def served(client: DRPCClient, function: str, args: str, deadline_secs: float = 20) -> str:
    """``client.execute``, once a topology has asked the server for ``function`` (a fresh
    server knows a function from the first fetch of the topology serving it; 503 before)."""
    deadline = time.monotonic() + deadline_secs
    while True:
        try:
            return client.execute(function, args)
        except DRPCExecutionException as e:
            if e.status != 503 or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def wait_for_file(path: Path, deadline_secs: float = 20) -> None:
    """Wait until ``path`` exists (the gated call has started in the topology)."""
    deadline = time.monotonic() + deadline_secs
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear within {deadline_secs} s"
        time.sleep(0.01)


def test_remote_reach_over_http(executor: str, server: Server) -> None:
    with LocalCluster() as cluster:
        cluster.submit_topology("reach", TopologyConfig(executor=executor, progress=False,
                                                        drpc_servers=[server.address]),
                                reach.construct().create_remote_topology())
        client = DRPCClient("127.0.0.1", server.port, timeout=30)
        assert served(client, "reach", "foo.com/blog/1") == "16"
        with urllib.request.urlopen(f"http://{server.address}/drpc/reach/engineering.twitter.com/blog/5") as r:
            assert r.read().decode() == "14"
        assert client.execute("reach", "notaurl.com") == "0"
        with pytest.raises(DRPCExecutionException, match=r"^DRPC function 'nosuch' is not served by any running "
                                                         r"topology on this server: no topology has asked this server "
                                                         r"for its calls; served now: \['reach'\]\. Start the") as e:
            client.execute("nosuch", "x")
        assert e.value.status == 503
        with pytest.raises(DRPCExecutionException, match=r"^DRPC args of 'reach' must be text \(str\); got bytes"):
            client.execute("reach", b"x")   # type: ignore[arg-type]


def test_the_token_is_checked_on_every_call_and_never_logged(tmp_path: Path) -> None:
    token = "s3cret-token-4242"
    s = Server(tmp_path, "--token", token)
    s.start()
    try:
        with LocalCluster() as cluster:
            cluster.submit_topology("reach", TopologyConfig(executor="in-process", progress=False,
                                                            drpc_servers=[s.address], drpc_token=token),
                                    reach.construct().create_remote_topology())
            with pytest.raises(DRPCExecutionException, match=r"^this DRPC server wants its token"):
                DRPCClient("127.0.0.1", s.port, timeout=10, token="").execute("reach", "foo.com/blog/1")
            with pytest.raises(DRPCExecutionException, match=r"^this DRPC server wants its token"):
                DRPCClient("127.0.0.1", s.port, timeout=10, token="wrong").execute("reach", "foo.com/blog/1")
            assert served(DRPCClient("127.0.0.1", s.port, timeout=30, token=token), "reach", "foo.com/blog/1") == "16"
    finally:
        s.kill()
    assert token not in s.log.read_text()
    assert "/drpc/reach" in s.log.read_text()          # the log has the calls, not the token


def test_sigkill_of_the_server_mid_flight_then_restart(tmp_path: Path, server: Server) -> None:
    (tmp_path / "d").mkdir()
    child = subprocess.Popen([PY, str(REPO / "tests" / "support" / "drpc_driver_child.py"), server.address, str(tmp_path / "d")],
                             cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             env={**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "serving"
        client = DRPCClient("127.0.0.1", server.port, timeout=20)
        assert served(client, "gated", "a") == "a!"
        got: dict[str, str | BaseException] = {}

        def call(a: str) -> None:
            try:
                got[a] = client.execute("gated", a)
            except DRPCExecutionException as e:
                got[a] = e
        threads = [threading.Thread(target=call, args=(a,)) for a in ("slow", "b", "c")]
        for t in threads:
            t.start()
        wait_for_file(tmp_path / "d" / "started")
        t0 = time.monotonic()
        server.kill()                                   # "slow" is in the topology's hands
        for t in threads:
            t.join(25)
        assert time.monotonic() - t0 < 20               # nobody waited out its timeout
        assert all(isinstance(v, DRPCExecutionException) and "gone mid-call" in str(v) or v == f"{a}!"
                   for a, v in got.items()), got
        assert isinstance(got["slow"], DRPCExecutionException)
        (tmp_path / "d" / "gate").touch()               # the late answer of "slow" goes to a dead server: dropped
        server.start()                                  # the same port
        assert served(client, "gated", "after") == "after!"
        assert client.execute("gated", "slow") == "slow!"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)


def test_sigkill_of_the_driver_mid_flight_then_restart(tmp_path: Path, server: Server) -> None:
    (tmp_path / "d").mkdir()
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}

    def driver() -> subprocess.Popen[str]:
        p = subprocess.Popen([PY, str(REPO / "tests" / "support" / "drpc_driver_child.py"), server.address, str(tmp_path / "d")],
                             cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        assert p.stdout is not None and p.stdout.readline().strip() == "serving"
        return p
    first = driver()
    second = None
    try:
        client = DRPCClient("127.0.0.1", server.port, timeout=30)
        assert served(client, "gated", "a") == "a!"
        got: list[str] = []
        t = threading.Thread(target=lambda: got.append(client.execute("gated", "slow")))
        t.start()
        wait_for_file(tmp_path / "d" / "started")
        first.send_signal(signal.SIGKILL)               # the driver dies with "slow" in flight
        first.wait(10)
        (tmp_path / "d" / "gate").touch()
        second = driver()                               # the server hands "slow" out again after its lease
        t.join(30)
        assert got == ["slow!"]
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait(10)


def test_a_token_from_the_environment_is_masked_in_logs_as_one_from_the_config(monkeypatch) -> None:
    from transactional.engine.drpc.remote import drpc_token
    from transactional.redaction import redact_text

    monkeypatch.setenv("TRIDENT_DRPC_TOKEN", "env-token-9731")
    assert drpc_token(TopologyConfig(executor="in-process").drpc_token) == "env-token-9731"
    assert "env-token-9731" not in redact_text("conf {'drpc.token': 'env-token-9731'} and env-token-9731")


def test_the_server_forgets_drivers_that_stopped_and_keeps_the_last_of_each_function() -> None:
    """200 runs of a topology against one server, each run a new driver id (every other one
    SIGKILLed: it stops polling without unregistering), 10 s apart on the server's clock:
    the server keeps the drivers that stopped within ``forget_secs`` and the last of each
    kind, not 200; a 503 still says when the function's topology stopped."""
    from transactional.ops.drpc_server import DRPCServer

    now = [0.0]
    s = DRPCServer(port=0, forget_secs=300.0, clock=lambda: now[0])
    try:
        for run in range(200):
            driver = f"d{run}"
            assert s.invocations("reach", 0, 0.0, driver) == []      # a poll: its lease
            if run % 2 == 0:
                s.unregister("reach", driver)                         # the run ended
            now[0] += 10.0                                            # odd runs: killed, no word
        # at the last poll (1990 s) the last 300 s hold runs 169..199: 16 killed, 15 unregistered
        assert s.remembered() == 31
        now[0] += 1000.0
        assert s.invocations("reach", 0, 0.0, "live") == []
        assert s.serving("reach") == ["live"]
        assert s.remembered() == 3                 # the live driver, the last killed, the last unregistered
        s.unregister("reach", "live")
        status, body = s.call("reach", "x", 1.0)
        assert status == 503 and "its topology stopped (last asked for calls 1010 s ago)" in body
        with pytest.raises(ValueError, match=r"forget_secs=1.0 must be at least 60 s"):
            DRPCServer(port=0, forget_secs=1.0)
    finally:
        s.http.server_close()
