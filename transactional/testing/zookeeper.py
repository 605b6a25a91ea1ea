"""A real ZooKeeper 3.8 server for tests, as kazoo's ``ManagedZooKeeper``: one java process
on a free loopback port with a temporary data dir, started from the jars of Debian's
``zookeeper`` package (``apt-get install -y zookeeper``).

>>> zk = ManagedZooKeeper()          # doctest: +SKIP
>>> zk.start().url("my-tests")       # doctest: +SKIP
'zk://127.0.0.1:40123/my-tests'
>>> zk.restart(); zk.destroy()       # doctest: +SKIP

``stop()`` / ``kill()`` keep the data dir, so ``start()`` brings the same tree (and the
sessions the server had persisted) back on the same port; ``destroy()`` removes it.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
from pathlib import Path

from transactional.testing._process import ManagedProcess

__all__ = ["ManagedZooKeeper", "TcpProxy", "zookeeper_classpath"]

#: Where Debian's ``zookeeper`` package puts its jars; ``zookeeper.jar`` names its own
#: dependencies in its manifest's Class-Path, so only a logging binding is added.
JAR_DIR = Path("/usr/share/java")
_LOGGING_JARS = ("slf4j-simple.jar", "slf4j-nop.jar")


def zookeeper_classpath(jar_dir: Path = JAR_DIR) -> str:
    """The java class path of the installed ZooKeeper server.

    ``TRIDENT_ZOOKEEPER_CLASSPATH`` overrides it (e.g. the ``lib/*`` of a tarball).
    Raises ``RuntimeError`` naming the fix when ZooKeeper is not installed.
    """
    override = os.environ.get("TRIDENT_ZOOKEEPER_CLASSPATH")
    if override:
        return override
    server = jar_dir / "zookeeper.jar"
    if not server.exists():
        msg = (
            f"ZooKeeper is not installed: {server} is missing; install it with "
            "'apt-get install -y zookeeper' or set TRIDENT_ZOOKEEPER_CLASSPATH"
        )
        raise RuntimeError(msg)
    parts = [str(server)]
    for name in _LOGGING_JARS:
        if (jar_dir / name).exists():
            parts.append(str(jar_dir / name))
            break
    return ":".join(parts)


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        msg = (
            "java is not on PATH; install a JRE (openjdk-17-jre-headless) "
            "or set JAVA_HOME"
        )
        raise RuntimeError(msg)
    return found


class ManagedZooKeeper(ManagedProcess):
    """A standalone ZooKeeper server for tests (not for production use).

    ``tick_time_ms`` sets ZooKeeper's tick: sessions may be negotiated between 2 and 20
    ticks, and expired sessions are noticed within a tick, so a small tick (e.g. 250 ms)
    makes session-expiry tests fast. The admin server (Jetty, port 8080) is off; the
    four-letter words ``ruok, stat, srvr, mntr, cons`` are on.
    """

    name = "zookeeper"
    start_timeout = 30.0

    def __init__(self, port: int | None = None, workdir: str | Path | None = None, *,
                 tick_time_ms: int = 2000, heap_mb: int = 256) -> None:
        super().__init__(port, workdir)
        self.tick_time_ms = tick_time_ms
        self.heap_mb = heap_mb

    @property
    def hosts(self) -> str:
        """``127.0.0.1:<port>``: the connect string for a client."""
        return f"127.0.0.1:{self.port}"

    def url(self, root: str = "trident") -> str:
        """The coordination URL of this server with ``root`` as the root znode,
        e.g. ``zk://127.0.0.1:40123/trident``."""
        return f"zk://{self.hosts}/{root.strip('/')}"

    @property
    def config_path(self) -> Path:
        """Where ``write_config`` puts ``zoo.cfg``: in the work dir."""
        return self.workdir / "zoo.cfg"

    def write_config(self) -> Path:
        """Write ``zoo.cfg`` (data under the work dir, loopback only, admin server off)."""
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            f"tickTime={self.tick_time_ms}\n"
            f"dataDir={data}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,stat,srvr,mntr,cons\n"
            "maxClientCnxns=0\n"
            "autopurge.purgeInterval=0\n")
        return self.config_path

    def command(self) -> list[str]:
        """Write ``zoo.cfg``, then the ``java`` command line of a standalone ZooKeeper server on it."""
        cfg = self.write_config()
        return [_java(), f"-Xmx{self.heap_mb}m", "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1", "-Dzookeeper.admin.enableServer=false",
                "-Dzookeeper.jmx.log4j.disable=true",
                "-cp", zookeeper_classpath(),
                "org.apache.zookeeper.server.ZooKeeperServerMain", str(cfg)]

    def four_letter(self, word: str, timeout: float = 1.0) -> str:
        """Send a four-letter word (``ruok``, ``srvr``, ``mntr`` ...) and return the answer
        ("" when the server does not answer)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
                s.sendall(word.encode("ascii"))
                chunks = []
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    chunks.append(chunk)
                return b"".join(chunks).decode("utf-8", "replace")
        except OSError:
            return ""

    def is_ready(self) -> bool:
        """True once the server answers ``ruok`` with ``imok`` and ``srvr`` shows it serving."""
        return self.four_letter("ruok", 0.5) == "imok" and "Mode:" in self.four_letter("srvr", 0.5)


class TcpProxy:
    """A loopback TCP proxy to a server, to cut clients off from it (a network partition)
    while the server stays up -- e.g. to let ZooKeeper expire a driver's session.

    >>> proxy = TcpProxy(zk.port)                     # doctest: +SKIP
    >>> url = f"zk://127.0.0.1:{proxy.port}/trident"  # doctest: +SKIP
    >>> proxy.cut(); ...; proxy.heal(); proxy.close()  # doctest: +SKIP

    ``cut()`` closes every proxied connection and refuses new ones until ``heal()``.
    """

    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._cut = threading.Event()
        self._conns: list[socket.socket] = []
        self._guard = threading.Lock()
        threading.Thread(target=self._accept, name=f"proxy-{self.port}", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self._listener.accept()
            except OSError:
                return  # closed
            if self._cut.is_set():
                down.close()
                continue
            try:
                up = socket.create_connection(self.upstream, timeout=5)
                up.settimeout(None)
            except OSError:
                down.close()
                continue
            with self._guard:
                self._conns += [down, up]
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        """Drop every connection through the proxy and refuse new ones."""
        self._cut.set()
        with self._guard:
            conns, self._conns = self._conns, []
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def heal(self) -> None:
        """Accept and forward connections again."""
        self._cut.clear()

    def close(self) -> None:
        """Cut every connection and stop listening, for good."""
        self.cut()
        self._listener.close()
