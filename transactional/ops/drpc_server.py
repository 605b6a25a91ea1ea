"""``trident drpc``: Storm's DRPC server as its own process (docs/drpc.md).

Callers (``transactional.drpc.DRPCClient``, curl) and topologies meet here, over HTTP:

* ``POST /drpc/<function>`` with the args as the body, or ``GET /drpc/<function>/<args>``
  (Storm's ``drpc.http.port`` shape): waits for the answer; 200 with the result as text, or
  an error as JSON ``{"error": ...}``: 503 for a function no running topology serves, 500
  for a request that failed, 504 for one not answered within the timeout ("timed out");
* ``GET /drpc-invocations/<function>?max=N&wait=S&driver=D``: topology driver ``D`` takes
  up to N requests (``[[id, args], ...]``), waiting up to S seconds for one. Each such poll
  is also D's heartbeat: D serves the function for ``serve_lease_secs`` after its last poll;
* ``POST /drpc-unregister/<function>?driver=D``: D stops serving it (a topology's run ended);
* ``POST /drpc-result/<id>`` and ``POST /drpc-failure/<id>``: it answers one (200; 410 when
  the call is over: answered, failed or timed out -- an answer is given at most once).

**Which functions are served.** A function is served while at least one driver's lease on
it is live: a poll of it is under way, or the driver's last poll ended less than
``serve_lease_secs`` ago (its fetcher polls again at once, so a live driver renews it about
every second). A call of a function without a live driver gets 503 at once, naming the
function. A call waiting when the last driver's lease ends -- the driver unregistered (its
topology was killed) or stopped polling (SIGKILL) -- gets the same 503 then, unless
another driver serves the function; a call handed to a driver whose lease ended is handed
to another one at once. A request handed to a live driver and not answered within
``lease_secs`` is handed out again (the driver may have lost it): DRPC is at least once per
request; the caller still gets one answer.

**What it remembers of drivers** is bounded: each driver id (new at every run of a
topology) is forgotten ``forget_secs`` after its last poll ended or it unregistered, except
the last of each function (which says, in a 503, when its topology stopped). A server that
outlives many runs keeps the live drivers and one more per function, not one per run.

**The front door.** With a token (``--token`` / ``TRIDENT_DRPC_TOKEN``) every call must carry
``Authorization: Bearer <token>``, checked from the headers before any body is read (401);
the token is never logged. A body over ``max_body_bytes`` gets 413 without being read; a
``Content-Length`` or ``X-DRPC-Timeout`` that is not a number, a chunked body, or a body that
is not UTF-8 gets 400 (411 for chunked) with the reason. Each connection runs on its own
thread, and a request (its line, headers and body) must arrive within
``read_timeout_secs`` or the connection is closed (408 when the headers were read): many
slow clients hold threads of their own for at most that long and never delay other callers.
"""

from __future__ import annotations

import argparse
import collections
import hmac
import io
import json
import logging
import math
import re
import socket
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from transactional.engine.drpc.queue import RequestQueue
from transactional.engine.drpc.remote import drpc_token

__all__ = ["DRPCServer", "main", "DEFAULT_MAX_BODY_BYTES"]
log = logging.getLogger("trident.drpc")
DEFAULT_PORT = 3774       # Storm's drpc.port is 3772, drpc.invocations.port 3773, drpc.http.port 3774
DEFAULT_MAX_BODY_BYTES = 1 << 20
MAX_POLL_WAIT_SECS = 30.0
#: a driver that stopped polling (or unregistered) this long ago is forgotten (``DRPCServer``)
FORGET_SECS = 300.0
_TICK = 0.25              # how often a waiting call checks that its function is still served


class Refused(Exception):
    """An HTTP request answered with an error: ``status`` and the reason for the caller."""

    def __init__(self, status: int, reason: str, close: bool = False) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.close = close               # the rest of the request cannot be read: close the connection


class DRPCServer:
    """The server's state and its HTTP front (``serve_forever`` in ``main``): one engine
    ``RequestQueue`` per function (``transactional.engine.drpc.queue``, the queue a
    ``LocalDRPC`` holds), and which drivers serve each function."""

    def __init__(self, host: str = "127.0.0.1", port: int = DEFAULT_PORT, *, token: str | None = None,
                 timeout_secs: float = 600.0, lease_secs: float = 60.0, serve_lease_secs: float = 15.0,
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, read_timeout_secs: float = 10.0,
                 forget_secs: float = FORGET_SECS, clock: Callable[[], float] = time.monotonic) -> None:
        if not forget_secs >= 2 * MAX_POLL_WAIT_SECS:
            msg = (f"DRPCServer: forget_secs={forget_secs!r} must be at least {2 * MAX_POLL_WAIT_SECS:g} s "
                   "(twice the longest poll), or a late poll of a driver that unregistered could serve again")
            raise ValueError(msg)
        self.token = token
        self.timeout_secs = timeout_secs
        self.lease_secs = lease_secs
        self.serve_lease_secs = serve_lease_secs
        self.max_body_bytes = max_body_bytes
        self.read_timeout_secs = read_timeout_secs
        self.forget_secs = forget_secs
        #: the clock of the drivers' leases (``time.monotonic``; tests pass their own)
        self.clock = clock
        self._lock = threading.Lock()         # the queues and the drivers' leases
        self._queues: dict[str, RequestQueue] = {}
        self._by_prefix: dict[str, RequestQueue] = {}   # a call id's prefix -> its queue
        self._seen: dict[str, dict[str, float]] = collections.defaultdict(dict)    # function -> driver -> last poll
        self._polling: collections.Counter[tuple[str, str]] = collections.Counter()  # polls under way
        self._gone: dict[str, dict[str, float]] = collections.defaultdict(dict)  # drivers that unregistered -> when
        handler = type("Handler", (_Handler,), {"drpc": self})
        self.http = _HTTPServer((host, port), handler)

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self.http.server_address[1])

    def _queue(self, function: str) -> RequestQueue:
        """The queue of ``function`` (made on first use; call holding ``_lock``). Its ids
        start with a prefix of its own, unique across restarts."""
        q = self._queues.get(function)
        if q is None:
            q = self._queues[function] = RequestQueue(function, self.timeout_secs, uuid.uuid4().hex[:12])
            self._by_prefix[q.prefix] = q
        return q

    # -- who serves what ------------------------------------------------------------------------
    def _live(self, function: str, driver: str, now: float) -> bool:
        if self._polling[(function, driver)] > 0:
            return True
        seen = self._seen.get(function, {}).get(driver)
        return seen is not None and now - seen <= self.serve_lease_secs

    def serving(self, function: str) -> list[str]:
        """The drivers whose lease on ``function`` is live now."""
        with self._lock:
            now = self.clock()
            return [d for d in self._seen.get(function, {}) if self._live(function, d, now)]

    def remembered(self) -> int:
        """How many driver ids the server keeps (live, stopped, unregistered), over all
        functions: bounded by the live ones and one per function (``forget_secs``)."""
        with self._lock:
            return sum(len(d) for d in self._seen.values()) + sum(len(d) for d in self._gone.values())

    def _forget(self, now: float) -> None:
        """Forget the drivers that stopped ``forget_secs`` ago (call holding ``_lock``),
        keeping the last of each function's stopped ones and every live one."""
        horizon = now - self.forget_secs
        for function, drivers in self._seen.items():
            stopped = {d: at for d, at in drivers.items() if not self._live(function, d, now)}
            last = max(stopped.values(), default=None)
            for d in [d for d, at in stopped.items() if at < horizon and at != last]:
                del drivers[d]
        for gone in self._gone.values():
            last = max(gone.values(), default=None)
            for d in [d for d, at in gone.items() if at < horizon and at != last]:
                del gone[d]

    def _unserved(self, function: str, now: float) -> str | None:
        """Why ``function`` is not served now (None when a driver serves it)."""
        drivers = self._seen.get(function) or {}
        if any(self._live(function, d, now) for d in drivers):
            return None
        served = sorted(f for f, ds in self._seen.items() if any(self._live(f, d, now) for d in ds))
        if drivers:
            why = f"its topology stopped (last asked for calls {now - max(drivers.values()):.0f} s ago)"
        elif self._gone.get(function):
            why = "its topology stopped"
        else:
            why = "no topology has asked this server for its calls"
        return (f"DRPC function {function!r} is not served by any running topology on this server: {why}; "
                f"served now: {served or 'none'}. Start the topology that serves it, with "
                "TopologyConfig.drpc_servers naming this server")

    # -- callers --------------------------------------------------------------------------------
    def call(self, function: str, args: str, timeout: float | None) -> tuple[int, str]:
        """``(status, body)`` of one call, once it is answered, failed or timed out."""
        with self._lock:
            why = self._unserved(function, self.clock())
            if why is not None:
                return 503, _error(why)
            q = self._queue(function)
        c = q.submit(args, self.timeout_secs if timeout is None else min(timeout, self.timeout_secs))
        q.settle(c, _TICK, lambda c: self._check(q, c))
        if c.error is not None:
            return c.status, _error(c.error)
        return 200, c.result or ""

    def _check(self, q: RequestQueue, c: Any) -> None:
        """A waiting call whose driver's lease ended goes to another driver, or gets 503."""
        with self._lock:
            now = self.clock()
            driver = c.driver
            if c.handed is not None and driver is not None and not self._live(q.function, driver, now):
                if q.hand_back(lambda x: x is c and x.driver == driver):
                    log.info("request %s of %s: driver %s stopped serving it; handed out again", c.id, q.function,
                             driver)
            why = self._unserved(q.function, now) if c.handed is None else None
        if why is not None:
            q.fail(c.id, why, 503)

    # -- topologies -----------------------------------------------------------------------------
    def invocations(self, function: str, most: int, wait: float, driver: str = "") -> list[list[str]]:
        """Up to ``most`` requests of ``function`` for ``driver`` (waiting up to ``wait``
        s); the poll renews the driver's lease on the function."""
        deadline = time.monotonic() + wait
        with self._lock:
            if driver in self._gone.get(function, ()):
                return []                # a late poll of a driver that unregistered
            self._polling[(function, driver)] += 1
            q = self._queue(function)
        try:
            return self._take(q, most, deadline, driver)
        finally:
            with self._lock:
                self._polling[(function, driver)] -= 1
                if self._polling[(function, driver)] <= 0:
                    del self._polling[(function, driver)]
                now = self.clock()
                if driver not in self._gone.get(function, ()):
                    self._seen[function][driver] = now
                self._forget(now)

    def _take(self, q: RequestQueue, most: int, deadline: float, driver: str) -> list[list[str]]:
        while True:
            self._lease_expired(q)
            with self._lock:
                if driver in self._gone.get(q.function, ()):
                    return []            # it unregistered during this poll
            left = deadline - time.monotonic()
            if most <= 0:                # a poll for none (the driver's queue is full): only its lease
                if left <= 0:
                    return []
                q.pause(min(0.5, left))
                continue
            got = q.take(most, min(0.5, max(0.0, left)), driver)
            if got or left <= 0:
                break
        with self._lock:
            if driver in self._gone.get(q.function, ()):     # it unregistered while taking: hand them on
                ids = {e[0] for e in got}
                q.hand_back(lambda c: c.id in ids)
                return []
        return [[e[0], e[1]] for e in got]

    def unregister(self, function: str, driver: str = "") -> None:
        """``driver`` no longer serves ``function``: its open calls go to another driver,
        or, when none is left, get 503."""
        with self._lock:
            now = self.clock()
            self._seen[function].pop(driver, None)
            self._gone[function][driver] = now
            q = self._queue(function)
            q.hand_back(lambda c: c.driver == driver)
            why = self._unserved(function, now)
            self._forget(now)
        q.wake()
        if why is not None:
            q.fail_all(why, 503, waiting_only=True)

    def _lease_expired(self, q: RequestQueue) -> None:
        now = time.monotonic()
        for rid in q.hand_back(lambda c: c.handed is not None and now - c.handed > self.lease_secs):
            log.info("request %s of %s handed out %.0f s ago and not answered: handed out again", rid, q.function,
                     self.lease_secs)

    def _owner(self, request_id: str) -> RequestQueue | None:
        with self._lock:
            return self._by_prefix.get(request_id.rpartition("-")[0])

    def result(self, request_id: str, result: str) -> bool:
        """Answer a call; False when it is over already."""
        q = self._owner(request_id)
        return q is not None and q.answer(request_id, result)

    def failure(self, request_id: str, error: str) -> bool:
        """Fail a call with ``error`` (500 to its caller)."""
        q = self._owner(request_id)
        return q is not None and q.fail(request_id, error, 500)

    def authorized(self, header: str | None) -> bool:
        """True without a token, or when ``header`` is ``Bearer <token>``."""
        if not self.token:
            return True
        return header is not None and hmac.compare_digest(header.encode(), f"Bearer {self.token}".encode())


def _error(message: str) -> str:
    return json.dumps({"error": message})


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that broke mid-request: one line in the log, no traceback."""
        log.info("connection from %s ended: %s", client_address[0], sys.exc_info()[1])


class _DeadlineReader(io.RawIOBase):
    """The socket's input, failing with ``TimeoutError`` once ``deadline`` has passed: one
    request must arrive whole by then, however slowly its bytes trickle in."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.deadline = math.inf

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            msg = "the request did not arrive in time"
            raise TimeoutError(msg)
        self.sock.settimeout(left)
        return self.sock.recv_into(b)


_ROUTES = {("POST", "drpc", 2), ("GET", "drpc", 3), ("GET", "drpc-invocations", 2), ("POST", "drpc-result", 2),
           ("POST", "drpc-failure", 2), ("POST", "drpc-unregister", 2)}


class _Handler(BaseHTTPRequestHandler):
    drpc: DRPCServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.rfile.close()               # the base class's reader: ours keeps the request's deadline
        self._raw = _DeadlineReader(self.connection)
        self.rfile = io.BufferedReader(self._raw)
        self._pending = 0                # body bytes announced and not read

    def handle_one_request(self) -> None:
        self._raw.deadline = time.monotonic() + self.drpc.read_timeout_secs
        super().handle_one_request()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug("%s %s", self.address_string(), format % args)    # the request line: never a header

    def _send(self, status: int, body: str, kind: str = "text/plain; charset=utf-8") -> None:
        data = body.encode()
        self.connection.settimeout(self.drpc.read_timeout_secs)
        self.send_response(status)
        self.send_header("Content-Type", "application/json" if body.startswith('{"error"') else kind)
        self.send_header("Content-Length", str(len(data)))
        if self._pending or self.close_connection:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)
        if self._pending:
            self._discard()

    def _discard(self) -> None:
        """Read and drop the unread body, when it is at most 16 times the limit and comes
        within a second (so that a client still sending it reads the answer rather than a
        reset connection); else just close."""
        if self._pending > 16 * self.drpc.max_body_bytes:
            return
        self._raw.deadline = time.monotonic() + 1.0
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)       # the answer is complete: the client may read it
            while self._pending > 0:
                got = self.rfile.read1(min(self._pending, 1 << 16))
                if not got:
                    break
                self._pending -= len(got)
        except OSError:              # TimeoutError included: the connection is closed anyway
            pass

    def _route(self, method: str) -> None:
        self._pending = 0
        try:
            self._pending = _content_length(self.headers) if method == "POST" else 0
            self._serve(method)
        except Refused as r:
            self.close_connection = self.close_connection or r.close
            self._send(r.status, _error(r.reason))
        except TimeoutError:
            self._send(408, _error(f"the request did not arrive within {self.drpc.read_timeout_secs:g} s "
                                   "(trident drpc --read-timeout)"))

    def _serve(self, method: str) -> None:
        if not self.drpc.authorized(self.headers.get("Authorization")):
            raise Refused(401, "this DRPC server wants its token: Authorization: Bearer <token> "
                               "(DRPCClient(token=...) or TRIDENT_DRPC_TOKEN)")
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/")[1:]]
        if (method, parts[0], min(len(parts), 3)) not in _ROUTES or (parts[0] != "drpc" and len(parts) != 2):
            raise Refused(404, f"no such DRPC endpoint: {method} {url.path}; use POST /drpc/<function> "
                               "or GET /drpc/<function>/<args>")
        timeout = _timeout(self.headers.get("X-DRPC-Timeout"))
        body = self._body() if method == "POST" else ""
        query = urllib.parse.parse_qs(url.query)
        kind, name = parts[0], parts[1]
        if kind == "drpc":
            self._send(*self.drpc.call(name, body if method == "POST" else "/".join(parts[2:]), timeout))
        elif kind == "drpc-invocations":
            most, wait = _query_number(query, "max", 100, int), _query_number(query, "wait", 0.0, float)
            got = self.drpc.invocations(name, most, min(wait, MAX_POLL_WAIT_SECS), _driver(query))
            self._send(200, json.dumps(got), "application/json")
        elif kind == "drpc-unregister":
            self.drpc.unregister(name, _driver(query))
            self._send(200, "")
        else:
            self._answer(kind, name, body)

    def _answer(self, kind: str, request_id: str, body: str) -> None:
        ok = self.drpc.result(request_id, body) if kind == "drpc-result" else self.drpc.failure(request_id, body)
        self._send(200 if ok else 410, "")

    def _body(self) -> str:
        if self.headers.get("Transfer-Encoding"):
            raise Refused(411, "send the body with a Content-Length: chunked bodies are not read", close=True)
        n = self._pending
        if n > self.drpc.max_body_bytes:
            if self.path.startswith("/drpc-result/"):
                rid = urllib.parse.unquote(self.path.split("/")[2])
                self.drpc.failure(rid, f"the topology's answer is {n} bytes, over this DRPC server's limit of "
                                       f"{self.drpc.max_body_bytes} bytes (trident drpc --max-body-bytes)")
            raise Refused(413, f"the body is {n} bytes, over this DRPC server's limit of {self.drpc.max_body_bytes} "
                               "bytes (trident drpc --max-body-bytes)")
        data = self.rfile.read(n) if n else b""
        self._pending = n - len(data)
        if self._pending:
            self._pending = 0            # the client closed its side: nothing more to read
            raise Refused(400, f"the body ended after {len(data)} of the {n} bytes its Content-Length announced",
                          close=True)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise Refused(400, f"the body is not UTF-8 text ({e.reason} at byte {e.start}): send the args as "
                               "UTF-8") from None

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self._route("POST")


def _content_length(headers: Any) -> int:
    values = headers.get_all("Content-Length") or []
    if not values:
        return 0
    if len(set(values)) > 1 or not re.fullmatch(r"[0-9]{1,18}", values[0].strip()):
        shown = values[0][:40] if len(set(values)) == 1 else ", ".join(v[:20] for v in values)
        raise Refused(400, f"Content-Length must be one number of bytes; got {shown!r}", close=True)
    return int(values[0])


def _timeout(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        secs = float(raw)
    except ValueError:
        secs = math.nan
    if not math.isfinite(secs) or secs <= 0:
        raise Refused(400, f"X-DRPC-Timeout must be a number of seconds > 0 (e.g. 30); got {raw[:40]!r}")
    return secs


def _query_number(query: dict[str, list[str]], name: str, default: Any, kind: type) -> Any:
    raw = query.get(name, [None])[0]
    if raw is None:
        return default
    try:
        value = kind(raw)
    except ValueError:
        value = -1
    if not math.isfinite(value) or value < 0:
        raise Refused(400, f"{name} must be a number >= 0; got {raw[:40]!r}")
    return value


def _driver(query: dict[str, list[str]]) -> str:
    return query.get("driver", [""])[0][:80]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``trident drpc``'s flags."""
    p.add_argument("--host", default="127.0.0.1", metavar="ADDRESS", help="the address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"the port (default {DEFAULT_PORT}; 0: a free one)")
    p.add_argument("--token", help="a shared secret every call must carry (also TRIDENT_DRPC_TOKEN)")
    p.add_argument("--timeout", type=float, default=600.0, metavar="SECS",
                   help="a call not answered by then gets 'timed out' (Storm's drpc.request.timeout.secs; default 600)")
    p.add_argument("--lease-secs", type=float, default=60.0, metavar="SECS",
                   help="a request a topology took and did not answer by then is handed out again (default 60)")
    p.add_argument("--serve-lease-secs", type=float, default=15.0, metavar="SECS",
                   help="a topology serves a function until this long after its last poll for calls; then calls "
                        "of the function get 503 (default 15)")
    p.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES, metavar="N",
                   help=f"a request body (args, answer) over N bytes gets 413 (default {DEFAULT_MAX_BODY_BYTES})")
    p.add_argument("--read-timeout", type=float, default=10.0, metavar="SECS",
                   help="a request (line, headers, body) must arrive within SECS, else the connection is "
                        "closed (default 10)")


def main(args: argparse.Namespace) -> int:
    """Serve until killed; prints ``listening on http://HOST:PORT`` once it accepts calls."""
    token = drpc_token(args.token)        # masked in every log line of this process, wherever it appears
    server = DRPCServer(args.host, args.port, token=token, timeout_secs=args.timeout, lease_secs=args.lease_secs,
                        serve_lease_secs=args.serve_lease_secs, max_body_bytes=args.max_body_bytes,
                        read_timeout_secs=args.read_timeout)
    print(f"trident drpc: listening on http://{args.host}:{server.port}{' (token required)' if token else ''}",
          flush=True)
    try:
        server.http.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.http.server_close()
    return 0
