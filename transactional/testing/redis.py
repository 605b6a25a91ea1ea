"""A real ``redis-server`` for tests: a temp dir, a free loopback port, logs kept.

    with ManagedRedis(appendonly=True) as server:
        backing = RedisMapBacking.from_url(server.url, "topo:counts")
        ...
        server.restart()          # AOF replayed: every acknowledged write is still there

``stop()`` (SIGTERM: Redis fsyncs its AOF and exits) and ``kill()`` (SIGKILL, a crash)
both keep the data directory; ``start()`` on the same object comes back on the same port
with the data (``appendonly=True``; with ``appendfsync always`` even a SIGKILL loses no
acknowledged write). ``destroy()`` removes the directory. Needs ``redis-server`` on PATH
(Debian: ``apt-get install redis-server``).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import quote

from transactional.testing._process import ManagedProcess

__all__ = ["ManagedRedis", "redis_server_binary", "make_tls_files"]


def redis_server_binary() -> str | None:
    """Path of ``redis-server``, or None when it is not installed."""
    return shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None)


class ManagedRedis(ManagedProcess):
    """``redis-server --port P --bind 127.0.0.1 --save '' --appendonly yes|no --dir <tmp>``.

    ``password`` adds ``--requirepass``; ``appendfsync`` defaults to ``always`` when AOF is
    on so a SIGKILL of the server loses nothing that was acknowledged; ``tls`` (a dict with
    ``cert``, ``key``, ``ca`` file paths) serves TLS only, on the same port (``rediss://``);
    ``extra_args`` are appended as they are.
    """

    name = "redis"
    start_timeout = 20.0

    def __init__(self, port: int | None = None, workdir: str | Path | None = None, *,
                 appendonly: bool = True, appendfsync: str | None = None,
                 password: str | None = None, tls: dict[str, str] | None = None,
                 extra_args: list[str] | None = None) -> None:
        super().__init__(port, workdir)
        self.appendonly = appendonly
        self.appendfsync = appendfsync or ("always" if appendonly else "everysec")
        self.password = password
        self.tls = tls
        self.extra_args = list(extra_args or [])

    def command(self) -> list[str]:
        """The ``redis-server`` command line for these settings; ``RuntimeError`` when Redis is not
        installed."""
        binary = redis_server_binary()
        if binary is None:
            msg = (
                "redis-server is not installed; install it with "
                "`apt-get install -y redis-server` (Debian/Ubuntu)"
            )
            raise RuntimeError(msg)
        cmd = [binary, "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "yes" if self.appendonly else "no",
               "--appendfsync", self.appendfsync, "--dir", str(self.workdir),
               "--logfile", "", "--daemonize", "no", "--protected-mode", "no"]
        if self.tls:
            cmd += ["--port", "0", "--tls-port", str(self.port),
                    "--tls-cert-file", self.tls["cert"], "--tls-key-file", self.tls["key"],
                    "--tls-ca-cert-file", self.tls["ca"], "--tls-auth-clients", "no"]
        else:
            cmd += ["--port", str(self.port)]
        if self.password is not None:
            cmd += ["--requirepass", self.password]
        return cmd + self.extra_args

    def is_ready(self) -> bool:
        """Up and done loading its AOF: answers PING (after AUTH) with PONG."""
        if self.tls:
            return super().is_ready()
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                msg = b""
                if self.password is not None:
                    msg += _resp("AUTH", self.password)
                msg += _resp("PING")
                s.sendall(msg)
                reply = b""
                while b"PONG" not in reply and not reply.startswith(b"-"):
                    chunk = s.recv(4096)
                    if not chunk:
                        return False
                    reply += chunk
                return b"+PONG" in reply
        except OSError:
            return False

    @property
    def url(self) -> str:
        """``redis://[:password@]127.0.0.1:<port>/0`` (``rediss://`` with TLS)."""
        return self.url_for(0)

    def url_for(self, db: int = 0, password: str | None = None, username: str | None = None) -> str:
        """The URL of database ``db``; ``password``/``username`` override the server's."""
        pw = self.password if password is None else password
        auth = ""
        if pw is not None or username is not None:
            auth = f"{quote(username or '', safe='')}:{quote(pw or '', safe='')}@"
        scheme = "rediss" if self.tls else "redis"
        query = f"?ssl_ca_certs={quote(self.tls['ca'])}" if self.tls else ""
        return f"{scheme}://{auth}127.0.0.1:{self.port}/{db}{query}"

    def client(self, db: int = 0, **options: Any) -> Any:
        """A ``redis.Redis`` on database ``db`` (bytes replies)."""
        from state.redis import client_from_url  # state/redis.py is the one redis importer

        return client_from_url(self.url_for(db), **options)

    def aof_files(self) -> list[Path]:
        """The AOF files on disk (Redis 7 keeps them in ``appendonlydir``)."""
        return sorted(p for p in self.workdir.rglob("*.aof*") if p.is_file())


def _resp(*parts: str) -> bytes:
    out = [f"*{len(parts)}\r\n".encode()]
    for p in parts:
        b = p.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def make_tls_files(directory: str | Path) -> dict[str, str]:
    """A self-signed CA and a server certificate for 127.0.0.1 (uses the ``openssl`` CLI).
    Returns ``{"cert", "key", "ca"}`` paths for ``ManagedRedis(tls=...)``."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    ca_key, ca, key, csr, cert = (str(d / n) for n in ("ca.key", "ca.pem", "server.key", "server.csr", "server.pem"))
    ext = d / "ext.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca,
        "-days", "2", "-subj", "/CN=trident-test-ca")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
        "-subj", "/CN=127.0.0.1")
    run("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
        "-out", cert, "-days", "2", "-extfile", str(ext))
    return {"cert": cert, "key": key, "ca": ca}
