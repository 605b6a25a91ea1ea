"""A real PostgreSQL 15 server for tests: ``initdb`` into a temp dir, a free loopback port.

    with ManagedPostgres() as pg:
        dsn = pg.create_database("t1")      # postgresql://postgres@127.0.0.1:<port>/t1
        ...
        pg.kill()                           # SIGKILL: a crash (WAL replayed on start())

Uses the Debian ``postgresql`` package's binaries (``/usr/lib/postgresql/<v>/bin``).
``initdb`` refuses to run as root: as root, the server runs as the ``postgres`` user
(``runuser``) on a directory chowned to it. ``stop()`` is a fast shutdown, ``kill()`` a
crash; both keep the data; ``destroy()`` removes it.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

from transactional.testing._process import ManagedProcess

__all__ = ["ManagedPostgres", "postgres_bin_dir"]


def postgres_bin_dir() -> Path | None:
    """The newest ``/usr/lib/postgresql/<v>/bin`` holding ``initdb``, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    w = shutil.which("initdb")
    return Path(w).parent if w else None


def _runuser() -> str:
    """``runuser``: on PATH, else where util-linux puts it (``/usr/sbin``, ``/sbin``: not on a
    non-root user's PATH, nor on one set to ``/usr/bin:/bin``)."""
    return shutil.which("runuser") or shutil.which("runuser", path="/usr/sbin:/sbin") or "runuser"


class ManagedPostgres(ManagedProcess):
    """``postgres -D <tmp>/data -p P -k <tmp> -c listen_addresses=127.0.0.1`` (trust auth,
    superuser ``postgres``; fsync off unless ``durable=True``: tests crash the clients, and
    ``kill()`` keeps what was committed either way, as the OS does not crash)."""

    name = "postgres"
    start_timeout = 60.0
    stop_signal = signal.SIGINT      # PostgreSQL's fast shutdown: clients disconnected, data kept

    def __init__(self, port: int | None = None, workdir: str | Path | None = None, *, durable: bool = False) -> None:
        super().__init__(port, workdir)
        self.durable = durable
        self.bin = postgres_bin_dir()
        self.as_user = "postgres" if os.geteuid() == 0 else None

    def _run_as(self, cmd: list[str]) -> list[str]:
        return [_runuser(), "-u", self.as_user, "--", *cmd] if self.as_user else cmd

    @property
    def data_dir(self) -> Path:
        """The cluster's data directory."""
        return self.workdir / "data"

    def _initdb(self) -> None:
        if self.bin is None:
            msg = ("PostgreSQL is not installed; install it with `apt-get install -y postgresql` "
                   "(Debian/Ubuntu: the binaries go to /usr/lib/postgresql/<version>/bin)")
            raise RuntimeError(msg)
        if (self.data_dir / "PG_VERSION").exists():
            return
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.as_user:
            pw = pwd.getpwnam(self.as_user)
            os.chown(self.workdir, pw.pw_uid, pw.pw_gid)
        r = subprocess.run(self._run_as([str(self.bin / "initdb"), "-D", str(self.data_dir), "-A", "trust",
                                         "-U", "postgres", "--no-sync"]),
                           capture_output=True, text=True, cwd="/")
        if r.returncode != 0:
            msg = f"initdb failed ({r.returncode}): {r.stderr or r.stdout}"
            raise RuntimeError(msg)

    def command(self) -> list[str]:
        """The ``postgres`` command line."""
        self._initdb()
        assert self.bin is not None
        cmd = [str(self.bin / "postgres"), "-D", str(self.data_dir), "-p", str(self.port), "-k", str(self.workdir),
               "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200"]
        if not self.durable:
            cmd += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
        return self._run_as(cmd)

    def is_ready(self) -> bool:
        """Accepts a connection and answers a query."""
        try:
            import psycopg

            with psycopg.connect(self.dsn("postgres"), connect_timeout=1) as c:
                c.execute("SELECT 1")
            return True
        except Exception:  # noqa: BLE001 - not up yet
            return False

    def dsn(self, database: str = "postgres") -> str:
        """``postgresql://postgres@127.0.0.1:<port>/<database>``."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create database ``name`` (dropped first if it exists); returns its DSN."""
        import psycopg

        with psycopg.connect(self.dsn("postgres"), autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            c.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def connect(self, database: str = "postgres", **kw: Any) -> Any:
        """A ``psycopg.Connection`` to ``database``."""
        import psycopg

        return psycopg.connect(self.dsn(database), **kw)
