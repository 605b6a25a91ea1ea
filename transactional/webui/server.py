"""The driver's HTTP server: the status page, its JSON, and the Prometheus metrics.

``StatusServer(observer, host, port)`` serves, from a daemon thread
(``http.server.ThreadingHTTPServer``, one thread per request):

* ``/``            the status page: one self-contained HTML page (its CSS and script are
                   package files inlined when served; nothing is loaded from elsewhere),
                   polling ``/api/status`` every second;
* ``/api/status``  ``RunObserver.snapshot()`` as JSON;
* ``/metrics``     the run's metrics in Prometheus text format.

Port 0 binds a free port; ``address`` and ``url`` tell which. Nothing here changes the
run: a request only reads the observer.
"""

from __future__ import annotations

import json
import logging
import threading
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import TYPE_CHECKING

from transactional.redaction import redact, redact_text
from transactional.webui.metrics import CONTENT_TYPE

if TYPE_CHECKING:
    from transactional.webui.observer import RunObserver

__all__ = ["StatusServer", "status_page"]

log = logging.getLogger("trident.webui")


@cache
def status_page() -> bytes:
    """The status page: ``status.html`` with ``status.css`` and ``status.js`` inlined."""
    files = resources.files("transactional.webui")
    html = (files / "status.html").read_text("utf-8")
    css = (files / "status.css").read_text("utf-8")
    js = (files / "status.js").read_text("utf-8")
    return html.replace("/*STATUS_CSS*/", css).replace("/*STATUS_JS*/", js).encode("utf-8")


class StatusServer:
    """Serves one observer's page, JSON and metrics on ``host``:``port`` (0: a free port).
    ``start()`` binds and serves from a daemon thread; ``stop()`` closes the socket."""

    def __init__(self, observer: RunObserver, host: str = "127.0.0.1", port: int = 0) -> None:
        self.observer = observer
        self.host = host
        self.port = port
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
        handler = type("_BoundHandler", (_Handler,), {"observer": self.observer})
        httpd = ThreadingHTTPServer((self.host, self.port), handler)
        httpd.daemon_threads = True
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                        name=f"trident-status-{self.observer.topology_id}", daemon=True)
        self._thread.start()
        return self

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
    observer: RunObserver
    server_version = "trident"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = self.path.split("?", 1)[0]
        try:
            if path in ("/", "/index.html"):
                self._send(200, "text/html; charset=utf-8", status_page())
            elif path == "/api/status":
                body = json.dumps(redact(self.observer.snapshot()), default=str).encode("utf-8")
                self._send(200, "application/json", body)
            elif path == "/metrics":
                text = self.observer.metrics.exposition().decode("utf-8")
                self._send(200, CONTENT_TYPE, redact_text(text).encode("utf-8"))
            elif path == "/favicon.ico":
                self._send(204, "image/x-icon", b"")
            else:
                self._send(404, "text/plain; charset=utf-8", b"not found: try /, /api/status or /metrics\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as e:  # noqa: BLE001 - a request must not take the server down
            log.warning("status server: %s failed: %r", path, e)
            try:
                self._send(500, "text/plain; charset=utf-8", redact_text(f"{type(e).__name__}: {e}\n").encode())
            except OSError:
                pass

    def _send(self, code: int, ctype: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
        log.debug("status server: " + format, *args)
