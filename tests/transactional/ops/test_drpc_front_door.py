"""The DRPC server's front door (docs/drpc.md, "The front door"), against a real `trident drpc`
process: the token checked before any body is read, the body cap, 400s with reasons for
bad numbers and non-UTF-8 bodies, 503 at once for a function no running topology serves
(never started, killed, SIGKILLed), and slow clients that never hold up other callers."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from examples import reach
from transactional import LocalCluster, TopologyConfig
from transactional.drpc import DRPCClient, DRPCExecutionException

from test_drpc_server import PY, REPO, Server, served

TOKEN = "front-door-7781"


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path, "--token", TOKEN, "--max-body-bytes", "1000", "--read-timeout", "2",
               "--serve-lease-secs", "1")
    s.start()
    yield s
    if s.proc is not None and s.proc.poll() is None:
        s.kill()


def raw(port: int, head: str, body: bytes = b"", timeout: float = 5) -> tuple[int, str, float]:
    """Send ``head`` (request line and headers) and ``body`` as they are; the status, the
    body of the answer and how long it took. Reads to the end of the answer."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _length(data):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    status = int(data.split(b" ", 2)[1]) if data else 0
    return status, data.split(b"\r\n\r\n", 1)[1].decode() if data else "", time.monotonic() - t0


def _length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 0


AUTH = f"Authorization: Bearer {TOKEN}\n"


def test_the_token_is_checked_before_the_body_and_bad_requests_get_400_with_a_reason(guarded: Server) -> None:
    port = guarded.port
    # an unauthenticated POST announcing 1 GB: 401 from the headers, nothing read
    status, body, took = raw(port, "POST /drpc/reach HTTP/1.1\nHost: x\nContent-Length: 1000000000\n")
    assert (status, took < 1.5) == (401, True), (status, body, took)
    assert body.startswith('{"error": "this DRPC server wants its token')
    # the same with the token: over the limit, 413 at once
    status, body, took = raw(port, f"POST /drpc/reach HTTP/1.1\nHost: x\n{AUTH}Content-Length: 1000000000\n")
    assert (status, took < 1.5) == (413, True), (status, body, took)
    assert body == ('{"error": "the body is 1000000000 bytes, over this DRPC server\'s limit of 1000 bytes '
                    '(trident drpc --max-body-bytes)"}')
    status, body, _ = raw(port, f"POST /drpc/reach HTTP/1.1\nHost: x\n{AUTH}X-DRPC-Timeout: soon\nContent-Length: 1\n",
                          b"x")
    assert (status, body) == (400, '{"error": "X-DRPC-Timeout must be a number of seconds > 0 (e.g. 30); '
                                    'got \'soon\'"}')
    status, body, _ = raw(port, f"GET /drpc/reach/x HTTP/1.1\nHost: x\n{AUTH}X-DRPC-Timeout: -3\n")
    assert (status, body) == (400, '{"error": "X-DRPC-Timeout must be a number of seconds > 0 (e.g. 30); '
                                    'got \'-3\'"}')
    status, body, _ = raw(port, f"POST /drpc/reach HTTP/1.1\nHost: x\n{AUTH}Content-Length: 12abc\n", b"x")
    assert (status, body) == (400, '{"error": "Content-Length must be one number of bytes; got \'12abc\'"}')
    status, body, _ = raw(port, f"POST /drpc/reach HTTP/1.1\nHost: x\n{AUTH}Content-Length: 3\n", b"a\xffb")
    assert (status, body) == (400, '{"error": "the body is not UTF-8 text (invalid start byte at byte 1): send '
                                    'the args as UTF-8"}')
    # DRPCClient surfaces the answers with the server's reason and the status
    big = DRPCClient("127.0.0.1", port, timeout=5, token=TOKEN)
    with pytest.raises(DRPCExecutionException, match=r"^the body is 5000 bytes, over this DRPC server's limit of "
                                                     r"1000 bytes \(trident drpc --max-body-bytes\)$") as e:
        big.execute("reach", "x" * 5000)
    assert e.value.status == 413
    with pytest.raises(DRPCExecutionException, match="wants its token") as e:
        DRPCClient("127.0.0.1", port, timeout=5, token="wrong").execute("reach", "x" * 5000)
    assert e.value.status == 401
    assert "Traceback" not in guarded.log.read_text()
    assert TOKEN not in guarded.log.read_text()


def assert_unserved(client: DRPCClient, why: str) -> None:
    """The call of 'reach' gets 503 within 2 s, saying ``why`` the function is not served."""
    t0 = time.monotonic()
    with pytest.raises(DRPCExecutionException) as e:
        client.execute("reach", "foo.com/blog/1")
    assert (e.value.status, time.monotonic() - t0 < 2) == (503, True)
    assert str(e.value).startswith(f"DRPC function 'reach' is not served by any running topology on this server: "
                                   f"{why}; served now: none. Start the topology that serves it"), str(e.value)


def serve_reach(cluster: LocalCluster, server: Server) -> None:
    """Run ReachTopology in-process, serving ``server``."""
    cluster.submit_topology("reach", TopologyConfig(executor="in-process", progress=False, drpc_token=TOKEN,
                                                    drpc_servers=[server.address]),
                            reach.construct().create_remote_topology())


def test_a_function_no_running_topology_serves_fails_at_once_with_503(guarded: Server) -> None:
    client = DRPCClient("127.0.0.1", guarded.port, timeout=60, token=TOKEN)
    assert_unserved(client, "no topology has asked this server for its calls")
    with LocalCluster() as cluster:
        serve_reach(cluster, guarded)
        assert served(client, "reach", "foo.com/blog/1") == "16"
        cluster.kill_topology("reach")                  # its run ends: the driver unregisters
        assert_unserved(client, "its topology stopped")


def test_a_sigkilled_driver_stops_serving_after_its_lease(tmp_path: Path, guarded: Server) -> None:
    (tmp_path / "d").mkdir()
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "TRIDENT_DRPC_TOKEN": TOKEN}
    child = subprocess.Popen([PY, str(REPO / "tests" / "support" / "drpc_driver_child.py"), guarded.address, str(tmp_path / "d")],
                             cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "serving"
        client = DRPCClient("127.0.0.1", guarded.port, timeout=60, token=TOKEN)
        assert served(client, "gated", "a") == "a!"
        got: list[BaseException] = []

        def call() -> None:
            try:
                client.execute("gated", "slow")
            except DRPCExecutionException as e:
                got.append(e)
        t = threading.Thread(target=call)
        t.start()
        while not (tmp_path / "d" / "started").exists():
            time.sleep(0.01)
        child.send_signal(signal.SIGKILL)               # "slow" is in the dead driver's hands
        child.wait(10)
        t0 = time.monotonic()
        t.join(20)
        # the driver's last poll (1 s) + its lease (1 s) + a check (0.25 s), not the 60 s timeout
        assert time.monotonic() - t0 < 6 and len(got) == 1
        assert str(got[0]).startswith("DRPC function 'gated' is not served by any running topology on this "
                                      "server: its topology stopped (last asked for calls ")
        with pytest.raises(DRPCExecutionException, match="^DRPC function 'gated' is not served"):
            client.execute("gated", "b")
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
            child.wait(10)


def _trickle(port: int, head: bytes, closed: list[tuple[float, bytes]], t0: float) -> None:
    """Send ``head``, then one more byte every 0.1 s (of a header's value, or of the body)
    until the server answers or closes (or 8 s pass); record when, and its answer."""
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        try:
            s.sendall(head)
            for _ in range(80):
                s.sendall(b"z")
                if select.select([s], [], [], 0.1)[0]:
                    answer = s.recv(4096)
                    break
        except OSError:
            pass
        closed.append((time.monotonic() - t0, answer))


def test_slow_clients_never_hold_up_other_callers_and_are_closed_at_the_read_timeout(guarded: Server) -> None:
    with LocalCluster() as cluster:
        serve_reach(cluster, guarded)
        client = DRPCClient("127.0.0.1", guarded.port, timeout=30, token=TOKEN)
        assert served(client, "reach", "foo.com/blog/1") == "16"
        closed: list[tuple[float, bytes]] = []
        t0 = time.monotonic()
        heads = [b"POST /drpc/reach HTTP/1.1\r\nHost: x\r\n" + AUTH.encode() + b"X-Slow: ",                # headers
                 b"POST /drpc/reach HTTP/1.1\r\nHost: x\r\n" + AUTH.encode() + b"Content-Length: 500\r\n\r\n"]  # body
        threads = [threading.Thread(target=_trickle, args=(guarded.port, heads[i % 2], closed, t0), daemon=True)
                   for i in range(40)]
        for t in threads:
            t.start()
        time.sleep(0.5)                                 # every slow client is connected and trickling
        for args, want in [("foo.com/blog/1", "16"), ("engineering.twitter.com/blog/5", "14")]:
            t1 = time.monotonic()
            assert client.execute("reach", args) == want
            assert time.monotonic() - t1 < 2
        for t in threads:
            t.join(15)
        # each slow client was cut off at the 2 s read timeout (not after its 8 s of trickling)
        assert len(closed) == 40 and max(at for at, _ in closed) < 5, sorted(at for at, _ in closed)
        body_answers = [a for a in (ans for _, ans in closed) if a]
        assert all(a.startswith(b"HTTP/1.0 408") or a.startswith(b"HTTP/1.1 408") for a in body_answers), body_answers
        # those whose headers were read are answered 408 before the close; a client thread
        # the loaded machine does not run for a second may see the reset instead
        assert 0 < len(body_answers) <= 20
    assert "Traceback" not in guarded.log.read_text()
