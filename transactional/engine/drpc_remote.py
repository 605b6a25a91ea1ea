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
import threading
import urllib.error
import urllib.parse
import urllib.request

from transactional.engine.drpc_sink import Entry, Sink

log = logging.getLogger("trident")
POLL_SECS = 1.0        # a long poll's wait at a server


class RemoteSink(Sink):
    """Requests of ``function`` from ``servers`` ("host:port" each)."""

    def __init__(self, servers: tuple[str, ...], function: str, token: str | None, keep: int = 512) -> None:
        self.servers = servers
        self.function = function
        self._token = token
        self.keep = keep
        self._ready: collections.deque[Entry] = collections.deque()
        self._lock = threading.Condition()
        self._down: set[str] = set()
        self._thread = threading.Thread(target=self._fetch, name=f"trident-drpc-{function}", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"RemoteSink({self.servers}, {self.function!r})"

    def _request(self, server: str, path: str, body: bytes | None = None, timeout: float = 10.0) -> bytes:
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        req = urllib.request.Request(f"http://{server}{path}", data=body, headers=headers,
                                     method="POST" if body is not None else "GET")
        with urllib.request.urlopen(req, timeout=timeout) as r:
            data: bytes = r.read()
            return data

    def _fetch(self) -> None:
        pause: dict[str, float] = {}
        quote = urllib.parse.quote(self.function, safe="")
        while True:
            for server in self.servers:
                with self._lock:
                    self._lock.wait_for(lambda: len(self._ready) < self.keep)
                try:
                    got = json.loads(self._request(server, f"/drpc-invocations/{quote}?max={self.keep}&wait={POLL_SECS}",
                                                   timeout=POLL_SECS + 10))
                except (urllib.error.URLError, OSError, ValueError) as e:
                    if server not in self._down:
                        self._down.add(server)
                        log.warning("DRPC server %s (function %s) unreachable: %s; asking again", server,
                                    self.function, getattr(e, "reason", e))
                    pause[server] = min(2.0, pause.get(server, 0.05) * 2)
                    threading.Event().wait(pause[server] / len(self.servers))
                    continue
                if server in self._down:
                    self._down.discard(server)
                    pause.pop(server, None)
                    log.warning("DRPC server %s (function %s) reachable again", server, self.function)
                if got:
                    with self._lock:
                        self._ready.extend([rid, args, 0, server] for rid, args in got)

    # -- the sink --------------------------------------------------------------------------------
    def has_requests(self) -> bool:
        return bool(self._ready)

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


__all__ = ["RemoteSink"]
