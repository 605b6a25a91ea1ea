"""The status page's HTTP server: the page, its JSON, the Prometheus metrics, the controls.

``StatusServer(source, host, port, controls=None)`` serves, from a daemon thread
(``http.server.ThreadingHTTPServer``, one thread per request):

* ``/``               the status page: one self-contained HTML page (its CSS and script are
                      package files inlined when served; nothing is loaded from elsewhere),
                      with the status as it is now embedded in it (the first render shows
                      it, before any request of the page's own), then polling
                      ``/api/status`` every second; ``/?topology=ID`` picks a topology when
                      the source has several (``trident ui``);
* ``/api/status``     ``source.snapshot(topology)`` as JSON (``?topology=ID``);
* ``/api/topologies`` the topologies the source knows (``trident ui``: all under its root);
* ``/metrics``        a live run's metrics in Prometheus text format;
* ``POST /api/control`` ``{"topology": ID, "action": "deactivate" | "activate" | "kill"}``:
                      the same control record ``trident deactivate|activate|kill`` writes
                      (``transactional.ops.control``). Off (403) unless ``controls`` has a
                      token; a request without that token (``Authorization: Bearer TOKEN``
                      or ``X-Trident-Token: TOKEN``) is refused with 401 and never acted on.

A source is a ``RunObserver`` (a driver serving its own run) or a ``HistorySource``
(``trident ui``: what the coordinator state keeps). Port 0 binds a free port;
``address`` and ``url`` tell which. A GET only reads.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
from dataclasses import dataclass
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from transactional.ops.webui.metrics import CONTENT_TYPE
from transactional.redaction import redact, redact_text

__all__ = ["StatusServer", "StatusSource", "Controls", "status_page", "render_page"]

log = logging.getLogger("trident.webui")

#: the largest control request read (bytes)
MAX_BODY = 4096


class StatusSource(Protocol):
    """What a ``StatusServer`` serves."""

    @property
    def topology_id(self) -> str | None:
        """The topology served by default (None: several, none by default)."""

    def snapshot(self, topology: str | None = None) -> dict[str, Any] | None:
        """The status of ``topology`` (None: the source's default) as the page shows it;
        None for a topology the source does not know."""

    def topologies(self) -> list[dict[str, Any]]:
        """The topologies to offer (``topology_id`` and a few figures each)."""

    def exposition(self) -> bytes | None:
        """Prometheus metrics, or None when the source has none."""


@dataclass(frozen=True)
class Controls:
    """The page's deactivate, activate and kill buttons: off without ``token``; each
    request must carry ``token``; they write the control record of the topology under
    ``coordination`` (``transactional.ops.control.request``)."""

    token: str | None
    coordination: str
    auth: str | None = None
    connect_timeout: float = 10.0

    @property
    def enabled(self) -> bool:
        """True when a token is configured."""
        return bool(self.token)

    def allows(self, given: str | None) -> bool:
        """Whether ``given`` is the token (compared in constant time)."""
        return bool(self.token) and given is not None and hmac.compare_digest(given.encode(), str(self.token).encode())


@cache
def status_page() -> str:
    """The status page's template: ``status.html`` with ``status.css`` and ``status.js`` inlined."""
    files = resources.files("transactional.ops.webui")
    html = (files / "status.html").read_text("utf-8")
    css = (files / "status.css").read_text("utf-8")
    js = (files / "status.js").read_text("utf-8")
    return html.replace("/*STATUS_CSS*/", css).replace("/*STATUS_JS*/", js)


def render_page(initial: dict[str, Any] | None) -> bytes:
    """The status page with ``initial`` (the status now) embedded as JSON, safe inside a
    ``<script>`` element (``<``, ``>`` and ``&`` escaped)."""
    data = json.dumps(initial, default=str).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return status_page().replace("/*STATUS_INITIAL*/null", data).encode("utf-8")


class StatusServer:
    """Serves one source's page, JSON and metrics on ``host``:``port`` (0: a free port),
    and its controls when ``controls`` has a token. ``start()`` binds and serves from a
    daemon thread; ``stop()`` closes the socket."""

    def __init__(self, source: StatusSource, host: str = "127.0.0.1", port: int = 0,
                 controls: Controls | None = None) -> None:
        self.source = source
        self.host = host
        self.port = port
        self.controls = controls
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` bound (the port chosen when 0 was asked); before ``start``, as given."""
        if self._httpd is None:
            return self.host, self.port
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        """``http://host:port/``: the status page."""
        host, port = self.address
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{port}/"

    def start(self) -> StatusServer:
        """Bind and serve (returns self). Raises ``OSError`` when the address is taken."""
        if self._httpd is not None:
            return self
        handler = type("_BoundHandler", (_Handler,), {"source": self.source, "controls": self.controls})
        httpd = ThreadingHTTPServer((self.host, self.port), handler)
        httpd.daemon_threads = True
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                        name=f"trident-status-{self.source.topology_id or 'ui'}", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve until interrupted (``trident ui``): the serving thread is joined."""
        self.start()
        assert self._thread is not None
        while self._thread.is_alive():
            self._thread.join(0.5)

    def stop(self) -> None:
        """Stop serving and close the socket (requests in progress finish on their threads)."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


class _Handler(BaseHTTPRequestHandler):
    source: StatusSource
    controls: Controls | None
    server_version = "trident"

    def _snapshot(self, topology: str | None) -> dict[str, Any] | None:
        snap = self.source.snapshot(topology)
        if snap is not None:
            snap["controls"] = bool(self.controls is not None and self.controls.enabled)
        return snap

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        parts = urlsplit(self.path)
        path, query = parts.path, parse_qs(parts.query)
        topology = next(iter(query.get("topology", [])), None)
        try:
            if path in ("/", "/index.html"):
                self._page(topology)
            elif path == "/api/status":
                snap = self._snapshot(topology)
                if snap is None:
                    self._json(404, {"error": f"no topology {topology!r} here", "topologies": self.source.topologies()})
                else:
                    self._json(200, snap)
            elif path == "/api/topologies":
                self._json(200, self.source.topologies())
            elif path == "/metrics":
                self._metrics()
            elif path == "/favicon.ico":
                self._send(204, "image/x-icon", b"")
            else:
                self._text(404, "not found: try /, /api/status, /api/topologies or /metrics\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as e:  # noqa: BLE001 - a request must not take the server down
            self._failed(path, e)

    def _page(self, topology: str | None) -> None:
        snap = self._snapshot(topology)
        if snap is None and topology:
            self._text(404, f"no topology {topology!r} here: see /api/topologies\n")
            return
        initial = {"status": snap, "topologies": self.source.topologies()}
        self._send(200, "text/html; charset=utf-8", render_page(redact(initial)))

    def _metrics(self) -> None:
        body = self.source.exposition()
        if body is None:
            self._text(404, "no metrics here: a driver serves its run's (trident run --metrics-port)\n")
        else:
            self._send(200, CONTENT_TYPE, redact_text(body.decode("utf-8")).encode("utf-8"))

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        path = urlsplit(self.path).path
        try:
            if path != "/api/control":
                self._json(404, {"error": "not found: POST /api/control"})
                return
            self._control()
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as e:  # noqa: BLE001 - a request must not take the server down
            self._failed(path, e)

    def _control(self) -> None:
        from transactional.exceptions import TridentError
        from transactional.ops.control import ACTIONS, request

        controls = self.controls
        if controls is None or not controls.enabled:
            self._json(403, {"error": "the controls are off: start with --control-token (or TRIDENT_CONTROL_TOKEN) "
                                      "to turn them on"})
            return
        auth = self.headers.get("Authorization") or ""
        given = auth[7:] if auth.startswith("Bearer ") else self.headers.get("X-Trident-Token")
        if not controls.allows(given):
            self._json(401, {"error": "a control request needs the control token (Authorization: Bearer TOKEN)"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._json(413, {"error": f"a control request is at most {MAX_BODY} bytes"})
            return
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            self._json(400, {"error": 'the body must be JSON: {"topology": ID, "action": ACTION}'})
            return
        action = body.get("action") if isinstance(body, dict) else None
        topology = (body.get("topology") if isinstance(body, dict) else None) or self.source.topology_id
        if action not in ACTIONS or not isinstance(topology, str):
            self._json(400, {"error": f"action must be one of {', '.join(ACTIONS)}, with a topology id"})
            return
        who = f"status page ({self.client_address[0]})"
        try:
            done = request(controls.coordination, topology, action, auth=controls.auth,
                           connect_timeout=controls.connect_timeout, by=who)
        except TridentError as e:
            self._json(409, {"error": str(e)})
            return
        log.info("%s: %s by the %s", topology, action, who)
        self._json(200, done)

    def _failed(self, path: str, e: Exception) -> None:
        log.warning("status server: %s failed: %r", path, e)
        try:
            self._text(500, f"{type(e).__name__}: {e}\n")
        except OSError:
            pass

    def _json(self, code: int, value: Any) -> None:
        self._send(code, "application/json", json.dumps(redact(value), default=str).encode("utf-8"))

    def _text(self, code: int, text: str) -> None:
        self._send(code, "text/plain; charset=utf-8", redact_text(text).encode("utf-8"))

    def _send(self, code: int, ctype: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
        log.debug("status server: " + format, *args)
