"""A real Spark standalone cluster for tests: a master and N workers, each a JVM started
with ``spark-class`` from the pip-installed pyspark, on free loopback ports, as
``ManagedZooKeeper`` is for ZooKeeper.

>>> cluster = ManagedSparkCluster(workers=2).start()    # doctest: +SKIP
>>> cluster.master_url                                  # doctest: +SKIP
'spark://127.0.0.1:40123'
>>> cluster.kill_worker(0); cluster.add_worker()        # doctest: +SKIP
>>> cluster.destroy()                                   # doctest: +SKIP

Each worker has one core and runs in its own temporary directory, with ``PYTHONPATH``
removed from its environment: its executors (and their Python workers) start there, so
nothing of the caller's working directory or path is importable on them by accident;
code reaches them only as Spark ships it (``--py-files``, ``spark.submit.pyFiles``).
Master, workers and the driver bind 127.0.0.1 (``SPARK_LOCAL_IP``).
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any, cast

from transactional.testing._process import ManagedProcess, free_port, wait_until

__all__ = ["ManagedSparkCluster", "spark_class"]


def spark_class() -> str:
    """The ``spark-class`` script of the installed pyspark."""
    import pyspark

    path = Path(pyspark.__file__).parent / "bin" / "spark-class"
    if not path.exists():
        msg = f"pyspark has no {path}; install pyspark from PyPI (pip install pyspark)"
        raise RuntimeError(msg)
    return str(path)


def _spark_env(drop_pythonpath: bool) -> dict[str, str]:
    import pyspark

    env = dict(os.environ)
    env["SPARK_HOME"] = str(Path(pyspark.__file__).parent)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env.setdefault("PYTHONHASHSEED", "0")
    env.setdefault("SPARK_DAEMON_JAVA_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")   # master, workers
    if drop_pythonpath:
        env.pop("PYTHONPATH", None)
    if "JAVA_HOME" not in env:
        for jdk in sorted(Path("/usr/lib/jvm").glob("java-17-openjdk-*")):
            env["JAVA_HOME"] = str(jdk)
            break
    return env


class SparkMaster(ManagedProcess):
    """The standalone master: RPC on ``port``, web UI (and its JSON at ``/json/``) on ``ui_port``."""

    name = "spark-master"
    start_timeout = 60.0

    def __init__(self, port: int | None = None, workdir: str | Path | None = None) -> None:
        super().__init__(port, workdir)
        self.ui_port = free_port()

    def command(self) -> list[str]:
        return [spark_class(), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                "--port", str(self.port), "--webui-port", str(self.ui_port)]

    def env(self) -> dict[str, str]:
        return _spark_env(drop_pythonpath=True)

    def is_ready(self) -> bool:
        return self.state() is not None

    def state(self) -> dict[str, Any] | None:
        """The master's JSON status (workers, applications), or None if it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=1.0) as r:
                return cast("dict[str, Any]", json.loads(r.read()))
        except (OSError, ValueError):
            return None


class SparkWorker(ManagedProcess):
    """One worker with ``cores`` cores, registered with ``master``; ``work-dir`` in its own
    temporary directory, which is also its working directory."""

    name = "spark-worker"
    start_timeout = 60.0

    def __init__(self, master: SparkMaster, cores: int = 1, memory: str = "1g") -> None:
        super().__init__()
        self.master, self.cores, self.memory = master, cores, memory
        self.ui_port = free_port()

    def command(self) -> list[str]:
        return [spark_class(), "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{self.master.port}",
                "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.ui_port),
                "--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(self.workdir / "work")]

    def env(self) -> dict[str, str]:
        return _spark_env(drop_pythonpath=True)

    def is_ready(self) -> bool:
        """Registered with the master, and alive there."""
        st = self.master.state() or {}
        return any(w.get("port") == self.port and w.get("state") == "ALIVE" for w in st.get("workers", []))


class ManagedSparkCluster:
    """A standalone master and ``workers`` one-core workers on loopback (tests only).

    ``stop_worker(i)`` stops worker i gracefully, ``kill_worker(i)`` kills its JVM and the
    executor it runs with SIGKILL, as a lost machine; ``add_worker()`` starts another;
    ``restart_worker(i)`` brings worker i back. ``destroy()`` stops everything and removes
    the directories."""

    def __init__(self, workers: int = 2, *, cores: int = 1, memory: str = "1g") -> None:
        self.master = SparkMaster()
        self.workers: list[SparkWorker] = []
        self.n, self.cores, self.memory = workers, cores, memory

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:<port>``, for ``TopologyConfig(spark_master=...)``."""
        return f"spark://127.0.0.1:{self.master.port}"

    @property
    def ui_url(self) -> str:
        """The master's web UI."""
        return f"http://127.0.0.1:{self.master.ui_port}"

    def start(self) -> ManagedSparkCluster:
        """Start the master and the workers; returns when every worker is registered."""
        self.master.start()
        while len(self.workers) < self.n:
            self.add_worker()
        return self

    def add_worker(self) -> SparkWorker:
        """Start one more worker; returns when the master lists it alive."""
        w = SparkWorker(self.master, self.cores, self.memory)
        self.workers.append(w)
        w.start()
        return w

    def alive_workers(self) -> int:
        """Workers the master lists as alive."""
        st = self.master.state() or {}
        return sum(1 for w in st.get("workers", []) if w.get("state") == "ALIVE")

    def stop_worker(self, i: int) -> None:
        """Stop worker i gracefully (its executor goes with it)."""
        self.workers[i].stop()

    def kill_worker(self, i: int) -> None:
        """SIGKILL worker i's process group: the worker JVM and the executor it started."""
        self.workers[i].kill()

    def restart_worker(self, i: int) -> None:
        """Start worker i again (same ports, same directory)."""
        self.workers[i].start()

    def applications(self) -> list[dict[str, Any]]:
        """The master's running applications (id, name, cores ...)."""
        return list((self.master.state() or {}).get("activeapps", []))

    def wait_for_workers(self, n: int, timeout: float = 60.0) -> None:
        """Wait until the master lists ``n`` workers alive."""
        wait_until(lambda: self.alive_workers() >= n, timeout, 0.2, what=f"{n} alive Spark workers")

    def logs(self) -> str:
        """The master's and the workers' logs, for a failing test's report."""
        parts = [f"----- {self.master.name} -----\n{self.master.logs()}"]
        parts += [f"----- worker {i} -----\n{w.logs()}" for i, w in enumerate(self.workers)]
        return "\n".join(parts)

    def destroy(self) -> None:
        """Stop the workers and the master and remove their directories."""
        for w in self.workers:
            w.destroy()
        self.master.destroy()

    def __enter__(self) -> ManagedSparkCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.destroy()
