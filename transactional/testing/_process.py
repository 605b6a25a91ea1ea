"""A server process for tests: a temp dir, a free loopback port, logs kept for failures.

Built like kazoo's ``ManagedZooKeeper``: ``start()``, ``stop()`` (keeps data, can start
again on the same port), ``kill()`` (SIGKILL), ``destroy()`` (stop and remove the dir).
Subclasses give ``command()`` and ``is_ready()``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _die_with_parent() -> None:
    """In the child: SIGKILL me when the process that started me dies (Linux), so a
    killed test run leaves no server behind. Linux ties this to the starting *thread*,
    so it is only asked for from the main thread (see ``start``)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.05, what: str = "condition",
               clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
    """Poll ``predicate`` until true; raise TimeoutError naming ``what`` after ``timeout``."""
    deadline = clock() + timeout
    while True:
        if predicate():
            return
        if clock() >= deadline:
            msg = f"timed out after {timeout}s waiting for {what}"
            raise TimeoutError(msg)
        sleep(interval)


class ManagedProcess:
    """Base of the managed servers. ``name`` appears in messages and log file names."""

    name = "server"
    start_timeout = 30.0
    #: SIGKILL the server when the process that started it dies (tests); ``trident dev-servers``
    #: turns it off so its servers outlive the command
    die_with_parent = True

    def __init__(self, port: int | None = None, workdir: str | Path | None = None) -> None:
        self.port = port or free_port()
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix=f"trident-{self.name}-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.workdir / f"{self.name}.log"

    # -- to override ----------------------------------------------------------------------
    def command(self) -> list[str]:
        raise NotImplementedError

    def is_ready(self) -> bool:
        return port_open(self.port)

    def env(self) -> dict[str, str] | None:
        return None

    # -- lifecycle --------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> ManagedProcess:
        """Launch the server and wait until ``is_ready`` (``start_timeout``)."""
        if self.running:
            return self
        self.launch()
        self.wait_ready()
        return self

    def launch(self) -> None:
        """Start the process without waiting for it to be ready (servers that are ready only
        together, e.g. an ensemble, are launched first and waited for after)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=self.workdir,
                                     env=self.env(), start_new_session=True,
                                     preexec_fn=_die_with_parent if self.die_with_parent
                                     and threading.current_thread() is threading.main_thread() else None)
        log.close()

    def wait_ready(self) -> None:
        """Wait until ``is_ready``; ``RuntimeError`` with the log when the process exits."""

        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                msg = (
                    f"{self.name} exited with {self.proc.returncode} at start; "
                    f"log:\n{self.logs()}"
                )
                raise RuntimeError(msg)
            return self.is_ready()

        wait_until(ready, self.start_timeout, what=f"{self.name} on 127.0.0.1:{self.port}")

    #: the signal of a graceful stop (a server whose fast shutdown is another overrides it)
    stop_signal = signal.SIGTERM

    def stop(self, timeout: float = 10.0) -> None:
        """Stop gracefully (``stop_signal``, then SIGKILL); data stays for a later ``start()``."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, self.stop_signal)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def kill(self) -> None:
        """SIGKILL the server's process group, as a crash would."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def logs(self, tail: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    def __enter__(self) -> ManagedProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.destroy()
