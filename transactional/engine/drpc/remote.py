"""The DRPC sink of a remote topology: requests fetched from the ``trident drpc`` servers of
``TopologyConfig.drpc_servers`` (``transactional.ops.drpc_server``), answers posted back to
the server each came from (Storm's DRPCInvocationsClient).

One fetcher thread per (servers, function) in the driver process long-polls each server in
turn and keeps a few batches of requests ready; a server that is down is asked again with
a growing pause (logged once per outage). An answer for a server that is gone, or for a
call that is over, is dropped: the caller got its error from the server (or its
connection).
"""

from __future__ import annotations

import collections
import json
import logging
import os
import threading
import urllib.error
import urllib.parse
import urllib.request
import uuid

from transactional.engine.drpc.sink import Entry, InputListeners, Sink
from transactional.redaction import remember

log = logging.getLogger("trident")
POLL_SECS = 1.0        # a long poll's wait at a server
#: the environment variable that gives the DRPC token where none is given
TOKEN_ENV = "TRIDENT_DRPC_TOKEN"


def drpc_token(given: str | None) -> str | None:
    """The DRPC token, read in this one place for the server (``--token``), its callers
    (``DRPCClient(token=...)``) and the topologies (``TopologyConfig.drpc_token``): ``given``
    when not None, else ``TRIDENT_DRPC_TOKEN``; None when that is unset or empty. It is
    remembered as a secret: masked in every log line of this process, wherever it appears."""
    token = (given if given is not None else os.environ.get(TOKEN_ENV)) or None
    if token:
        remember([token])
    return token


class RemoteSink(Sink, InputListeners):
    """Requests of ``function`` from ``servers`` ("host:port" each). It fetches while a
    run's coordinator holds it open (``open``/``close``); each poll carries this sink's
    driver id and renews its lease on the function at the server (docs/drpc.md, "Which
    functions are served"), and the last ``close`` unregisters it."""

    def __init__(self, servers: tuple[str, ...], function: str, token: str | None, keep: int = 512) -> None:
        self.servers = servers
        self.function = function
        self._token = token
        self.keep = keep
        self._ready: collections.deque[Entry] = collections.deque()
        self._lock = threading.Condition()
        self._down: set[str] = set()
        self._users = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.driver = ""
        InputListeners.__init__(self)

    def __repr__(self) -> str:
        return f"RemoteSink({self.servers}, {self.function!r})"

    def open(self) -> None:
        with self._lock:
            self._users += 1
            if self._users > 1:
                return
            self.driver = uuid.uuid4().hex[:16]     # new each time: a server refuses polls of a closed id
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._fetch, args=(self._stop, self.driver),
                                            name=f"trident-drpc-{self.function}", daemon=True)
            self._thread.start()

    def close(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users > 0:
                return
            self._stop.set()
            self._ready.clear()                    # the servers hand these out again on unregister
            self._lock.notify_all()
        quote = urllib.parse.quote(self.function, safe="")
        for server in self.servers:
            try:
                self._request(server, f"/drpc-unregister/{quote}?driver={self.driver}", b"", timeout=2.0)
            except (urllib.error.URLError, OSError) as e:
                log.info("DRPC server %s not told that function %s is no longer served here: %s", server,
                         self.function, getattr(e, "reason", e))

    def _request(self, server: str, path: str, body: bytes | None = None, timeout: float = 10.0) -> bytes:
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        req = urllib.request.Request(f"http://{server}{path}", data=body, headers=headers,
                                     method="POST" if body is not None else "GET")
        with urllib.request.urlopen(req, timeout=timeout) as r:
            data: bytes = r.read()
            return data

    def _fetch(self, stop: threading.Event, driver: str) -> None:
        pause: dict[str, float] = {}
        quote = urllib.parse.quote(self.function, safe="")
        while not stop.is_set():
            for server in self.servers:
                with self._lock:                   # full: poll for none, to keep the lease
                    room = self.keep - len(self._ready)
                    if room <= 0 and self._lock.wait_for(lambda: len(self._ready) < self.keep or stop.is_set(),
                                                         POLL_SECS):
                        room = self.keep - len(self._ready)
                if stop.is_set():
                    return
                path = f"/drpc-invocations/{quote}?max={max(0, room)}&wait={POLL_SECS if room > 0 else 0}" \
                       f"&driver={driver}"
                try:
                    got = json.loads(self._request(server, path, timeout=POLL_SECS + 10))
                except (urllib.error.URLError, OSError, ValueError) as e:
                    if server not in self._down:
                        self._down.add(server)
                        log.warning("DRPC server %s (function %s) unreachable: %s; asking again", server,
                                    self.function, getattr(e, "reason", e))
                    pause[server] = min(2.0, pause.get(server, 0.05) * 2)
                    stop.wait(pause[server] / len(self.servers))
                    continue
                if server in self._down:
                    self._down.discard(server)
                    pause.pop(server, None)
                    log.warning("DRPC server %s (function %s) reachable again", server, self.function)
                if got and not stop.is_set():
                    with self._lock:
                        self._ready.extend([rid, args, 0, server] for rid, args in got)
                    self._heard()

    # -- the sink --------------------------------------------------------------------------------
    def has_requests(self) -> bool:
        return bool(self._ready)

    def waiting(self) -> int | None:
        return len(self._ready)

    def take(self, n: int, wait_secs: float = 0.0) -> list[Entry]:
        with self._lock:
            out: list[Entry] = []
            while self._ready and len(out) < n:
                out.append(self._ready.popleft())
            self._lock.notify_all()
            return out

    def _post(self, kind: str, request_id: str, text: str, origin: str) -> bool:
        try:
            self._request(origin, f"/{kind}/{urllib.parse.quote(request_id, safe='')}", text.encode())
            return True
        except urllib.error.HTTPError as e:
            if e.code != 410:
                log.warning("DRPC server %s refused the %s of request %s: HTTP %d", origin, kind, request_id, e.code)
            return False
        except (urllib.error.URLError, OSError) as e:
            log.warning("DRPC server %s unreachable: the %s of request %s is dropped (its caller got an error from "
                        "the server or its connection): %s", origin, kind, request_id, getattr(e, "reason", e))
            return False

    def answer(self, request_id: str, result: str, origin: str = "") -> bool:
        return self._post("drpc-result", request_id, result, origin)

    def fail(self, request_id: str, error: str, origin: str = "") -> bool:
        return self._post("drpc-failure", request_id, error, origin)

    def retry(self, entry: Entry, attempts: int) -> bool:
        with self._lock:
            self._ready.appendleft([entry[0], entry[1], attempts, entry[3]])
        return True


__all__ = ["RemoteSink", "TOKEN_ENV", "drpc_token"]
