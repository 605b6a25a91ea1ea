"""``DRPCClient(retries=N)`` (issue 39 item 5): a call is tried again when the server cannot
be reached or answers 503 (no topology serves the function now), never after an error the
call caused. The server here is a scripted HTTP endpoint speaking the DRPC server's answers
(the real server's own behaviour is tested in tests/transactional/ops/test_drpc_front_door.py)."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator

import pytest

from transactional.drpc import DRPCClient
from transactional.exceptions import DRPCExecutionException
from transactional.testing import free_port


class Scripted(http.server.BaseHTTPRequestHandler):
    answers: list[tuple[int, str]] = []
    seen: list[str] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"])).decode()
        Scripted.seen.append(body)
        code, text = Scripted.answers.pop(0)
        payload = (text if code == 200 else json.dumps({"error": text})).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[int]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    Scripted.seen = []
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_503_is_tried_again_until_the_function_is_served(server: int) -> None:
    Scripted.answers = [(503, "no running topology serves 'reach'"), (503, "no running topology serves 'reach'"),
                        (200, "16")]
    client = DRPCClient("127.0.0.1", server, retries=2, retry_backoff_secs=0.01)
    assert client.execute("reach", "foo.com/blog/1") == "16"
    assert Scripted.seen == ["foo.com/blog/1"] * 3


def test_retries_run_out_with_the_servers_reason(server: int) -> None:
    Scripted.answers = [(503, "no running topology serves 'reach'")] * 2
    client = DRPCClient("127.0.0.1", server, retries=1, retry_backoff_secs=0.01)
    with pytest.raises(DRPCExecutionException, match="no running topology serves 'reach'") as info:
        client.execute("reach", "x")
    assert info.value.status == 503 and len(Scripted.seen) == 2


def test_an_error_the_call_caused_is_not_retried(server: int) -> None:
    Scripted.answers = [(400, "the body is not UTF-8 text")]
    client = DRPCClient("127.0.0.1", server, retries=3, retry_backoff_secs=0.01)
    with pytest.raises(DRPCExecutionException, match="not UTF-8") as info:
        client.execute("reach", "x")
    assert info.value.status == 400 and len(Scripted.seen) == 1


def test_an_unreachable_server_is_tried_again_then_named() -> None:
    port = free_port()
    client = DRPCClient("127.0.0.1", port, retries=2, retry_backoff_secs=0.01)
    with pytest.raises(DRPCExecutionException, match=f"DRPC server 127.0.0.1:{port} unreachable") as info:
        client.execute("reach", "x")
    assert info.value.status == 0
    with pytest.raises(ValueError, match="retries must be an int >= 0"):
        DRPCClient("127.0.0.1", port, retries=-1)
