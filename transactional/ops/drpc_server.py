"""``trident drpc``: Storm's DRPC server as its own process (docs/drpc.md).

Callers (``transactional.drpc.DRPCClient``, curl) and topologies meet here, over HTTP:

* ``POST /drpc/<function>`` with the args as the body, or ``GET /drpc/<function>/<args>``
  (Storm's ``drpc.http.port`` shape): waits for the answer; 200 with the result as text, or
  an error as JSON ``{"error": ...}``: 404 for a function no topology serves, 500 for a
  request that failed, 504 for one not answered within the timeout ("timed out").
* ``GET /drpc-invocations/<function>?max=N&wait=S``: a topology takes up to N requests
  (``[[id, args], ...]``), waiting up to S seconds for one;
* ``POST /drpc-result/<id>`` and ``POST /drpc-failure/<id>``: it answers one (200; 410 when
  the call is over: answered, failed or timed out -- an answer is given at most once).

A request handed to a topology and not answered within ``lease_secs`` is handed out again
(the driver that took it may have died): DRPC is at least once per request; the caller
still gets one answer. With a token (``--token`` / ``TRIDENT_DRPC_TOKEN``) every call must
carry ``Authorization: Bearer <token>``, else 401; the token is never logged.
"""

from __future__ import annotations

import argparse
import collections
import hmac
import json
import logging
import os
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from transactional.redaction import remember

__all__ = ["DRPCServer", "main"]
log = logging.getLogger("trident.drpc")
DEFAULT_PORT = 3774       # Storm's drpc.port is 3772, drpc.invocations.port 3773, drpc.http.port 3774


@dataclass
class _Call:
    id: str
    function: str
    args: str
    deadline: float
    handed: float | None = None          # when a topology took it last
    done: threading.Event = field(default_factory=threading.Event)
    result: str | None = None
    error: str | None = None
    status: int = 200


class DRPCServer:
    """The server's state and its HTTP front (``serve_forever`` in ``main``)."""

    def __init__(self, host: str = "127.0.0.1", port: int = DEFAULT_PORT, *, token: str | None = None,
                 timeout_secs: float = 600.0, lease_secs: float = 60.0) -> None:
        self.token = token
        self.timeout_secs = timeout_secs
        self.lease_secs = lease_secs
        self._lock = threading.Condition()
        self._calls: dict[str, _Call] = {}
        self._waiting: dict[str, collections.deque[str]] = collections.defaultdict(collections.deque)
        self._served: set[str] = set()        # functions a topology asked for
        self._prefix = uuid.uuid4().hex[:12]  # ids stay unique across restarts
        self._n = 0
        server = self
        handler = type("Handler", (_Handler,), {"drpc": server})
        self.http = ThreadingHTTPServer((host, port), handler)
        self.http.daemon_threads = True

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self.http.server_address[1])

    # -- callers --------------------------------------------------------------------------------
    def call(self, function: str, args: str, timeout: float | None) -> tuple[int, str]:
        """``(status, body)`` of one call, once it is answered, failed or timed out."""
        with self._lock:
            if function not in self._served:
                return 404, _error(f"unknown DRPC function {function!r}: no topology serves it on this server "
                                   f"(served: {sorted(self._served) or 'none'})")
            self._n += 1
            wait = self.timeout_secs if timeout is None else min(timeout, self.timeout_secs)
            c = _Call(f"{self._prefix}-{self._n}", function, args, time.monotonic() + wait)
            self._calls[c.id] = c
            self._waiting[function].append(c.id)
            self._lock.notify_all()
        if not c.done.wait(wait):
            self._end(c.id, None, "timed out", 504)
        if c.error is not None:
            return c.status, _error(c.error)
        return 200, c.result or ""

    # -- topologies -----------------------------------------------------------------------------
    def invocations(self, function: str, most: int, wait: float) -> list[list[str]]:
        """Up to ``most`` requests of ``function`` for a topology (waiting up to ``wait`` s)."""
        deadline = time.monotonic() + wait
        with self._lock:
            self._served.add(function)
            while True:
                self._lease_expired(function)
                q = self._waiting[function]
                if q or time.monotonic() >= deadline:
                    break
                self._lock.wait(min(0.5, max(0.0, deadline - time.monotonic())))
            out: list[list[str]] = []
            while q and len(out) < most:
                c = self._calls.get(q.popleft())
                if c is not None:
                    c.handed = time.monotonic()
                    out.append([c.id, c.args])
            return out

    def _lease_expired(self, function: str) -> None:
        now = time.monotonic()
        waiting = set(self._waiting[function])
        for c in self._calls.values():
            if c.function == function and c.handed is not None and now - c.handed > self.lease_secs \
                    and c.id not in waiting:
                c.handed = None
                self._waiting[function].appendleft(c.id)
                log.info("request %s of %s handed out %.0f s ago and not answered: handed out again",
                         c.id, function, self.lease_secs)

    def _end(self, request_id: str, result: str | None, error: str | None, status: int = 200) -> bool:
        with self._lock:
            c = self._calls.pop(request_id, None)
            if c is None:
                return False
            try:
                self._waiting[c.function].remove(request_id)
            except ValueError:
                pass
            c.result, c.error, c.status = result, error, status
            c.done.set()
            return True

    def result(self, request_id: str, result: str) -> bool:
        """Answer a call; False when it is over already."""
        return self._end(request_id, result, None)

    def failure(self, request_id: str, error: str) -> bool:
        """Fail a call with ``error`` (500 to its caller)."""
        return self._end(request_id, None, error, 500)

    def authorized(self, header: str | None) -> bool:
        """True without a token, or when ``header`` is ``Bearer <token>``."""
        if not self.token:
            return True
        return header is not None and hmac.compare_digest(header.encode(), f"Bearer {self.token}".encode())


def _error(message: str) -> str:
    return json.dumps({"error": message})


class _Handler(BaseHTTPRequestHandler):
    drpc: DRPCServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug("%s %s", self.address_string(), format % args)    # the request line: never a header

    def _send(self, status: int, body: str, kind: str = "text/plain; charset=utf-8") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json" if body.startswith('{"error"') else kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> str:
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n).decode() if n else ""

    def _route(self, method: str) -> None:
        body = self._body() if method == "POST" else ""
        if not self.drpc.authorized(self.headers.get("Authorization")):
            self._send(401, _error("this DRPC server wants its token: Authorization: Bearer <token> "
                                   "(DRPCClient(token=...) or TRIDENT_DRPC_TOKEN)"))
            return
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/")[1:]]
        query = urllib.parse.parse_qs(url.query)
        timeout = self.headers.get("X-DRPC-Timeout")
        if parts[:1] == ["drpc"] and len(parts) == 2 and method == "POST":
            self._send(*self.drpc.call(parts[1], body, float(timeout) if timeout else None))
        elif parts[:1] == ["drpc"] and len(parts) >= 3 and method == "GET":
            self._send(*self.drpc.call(parts[1], "/".join(parts[2:]), float(timeout) if timeout else None))
        elif parts[:1] == ["drpc-invocations"] and len(parts) == 2 and method == "GET":
            most = int(query.get("max", ["100"])[0])
            wait = float(query.get("wait", ["0"])[0])
            self._send(200, json.dumps(self.drpc.invocations(parts[1], most, wait)), "application/json")
        elif parts[:1] == ["drpc-result"] and len(parts) == 2 and method == "POST":
            self._send(200 if self.drpc.result(parts[1], body) else 410, "")
        elif parts[:1] == ["drpc-failure"] and len(parts) == 2 and method == "POST":
            self._send(200 if self.drpc.failure(parts[1], body) else 410, "")
        else:
            self._send(404, _error(f"no such DRPC endpoint: {method} {url.path}; use POST /drpc/<function> "
                                   "or GET /drpc/<function>/<args>"))

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self._route("POST")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``trident drpc``'s flags."""
    p.add_argument("--host", default="127.0.0.1", metavar="ADDRESS", help="the address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"the port (default {DEFAULT_PORT}; 0: a free one)")
    p.add_argument("--token", help="a shared secret every call must carry (also TRIDENT_DRPC_TOKEN)")
    p.add_argument("--timeout", type=float, default=600.0, metavar="SECS",
                   help="a call not answered by then gets 'timed out' (Storm's drpc.request.timeout.secs; default 600)")
    p.add_argument("--lease-secs", type=float, default=60.0, metavar="SECS",
                   help="a request a topology took and did not answer by then is handed out again (default 60)")


def main(args: argparse.Namespace) -> int:
    """Serve until killed; prints ``listening on http://HOST:PORT`` once it accepts calls."""
    token = args.token or os.environ.get("TRIDENT_DRPC_TOKEN") or None
    if token:
        remember([token])     # masked in every log line of this process, wherever it appears
    server = DRPCServer(args.host, args.port, token=token, timeout_secs=args.timeout, lease_secs=args.lease_secs)
    print(f"trident drpc: listening on http://{args.host}:{server.port}{' (token required)' if token else ''}",
          flush=True)
    try:
        server.http.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.http.server_close()
    return 0
