"""PySpark's worker daemon with the task modules imported before it forks workers.

Spark starts one daemon per executor (``python -m pyspark.daemon``) that forks a Python
worker for each concurrent task slot. Every worker then imports what its tasks use: this
package, ``trident``, pyarrow and PySpark's own worker modules (compiled from
``pyspark.zip`` each time, having no bytecode cache there): about 1.3 s of CPU per worker,
paid inside the first batch (and pyspark compiled from its zip: see
``prefer_installed_pyspark``). Run as ``spark.python.daemon.module`` (set by
``get_or_create_context`` for ``local[...]`` masters, where the workers run this very
Python environment), this module imports them once in the daemon, and forked workers
inherit them. A module that fails to import is skipped: the worker imports it as before.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

PRELOAD = ("pyspark.worker", "pyspark.cloudpickle", "pyarrow", "pyarrow.compute", "pyarrow.ipc",
           "transactional.engine.plan", "transactional.engine.stage_tasks", "transactional.engine.executors",
           "transactional.engine.task", "transactional.engine.core.task_kind", "transactional.engine.spout_planner",
           "transactional.engine.accumulator",
           "trident.runtime.bolt", "trident.builtin", "state.map",
           "spouts.kafka.emitter")     # with confluent-kafka, when it is installed: ≈50 ms a worker


def prefer_installed_pyspark() -> bool:
    """Spark puts ``pyspark.zip`` first on the workers' path; modules in a zip have no
    bytecode cache and are compiled again in every process (0.6 s here). When that zip is
    the one inside the installed ``pyspark`` package (a pip install: the same code), move
    it behind the installed package, whose modules are cached. True if moved."""
    zips = [p for p in sys.path if p.endswith(os.sep + "pyspark.zip")]
    for z in zips:
        package = os.path.dirname(os.path.dirname(os.path.dirname(z)))      # .../pyspark
        if os.path.basename(package) == "pyspark" and os.path.isfile(os.path.join(package, "__init__.py")):
            sys.path.remove(z)
            sys.path.append(z)
            return True
    return False


def preload(modules: tuple[str, ...] = PRELOAD) -> list[str]:
    """Import ``modules``; return those that failed."""
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the worker imports what it needs itself
            failed.append(name)
    return failed


def quiet_broken_pipes(worker: Callable[[Any, bool], int]) -> Callable[[Any, bool], int]:
    """PySpark's forked ``worker(sock, authenticated)``, ending quietly when its executor
    hung up. A cancelled job (a timed-out or superseded attempt) closes its tasks' sockets;
    the worker's last flush then raises ``BrokenPipeError``, and PySpark's daemon prints the
    traceback to the terminal, where it reads as a crash. The process still ends as before
    (exit status 1); the traceback is written only with ``TRIDENT_WORKER_DEBUG=1`` (set for
    ``--log-level DEBUG``)."""
    def run(sock: Any, authenticated: bool) -> int:
        try:
            return worker(sock, authenticated)
        except (BrokenPipeError, ConnectionResetError):
            if os.environ.get("TRIDENT_WORKER_DEBUG") == "1":
                traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
    return run


if __name__ == "__main__":
    if "pyspark" not in sys.modules:
        prefer_installed_pyspark()
    preload()
    from pyspark import daemon

    # PySpark's daemon runs a full gc.collect() in a reused worker after every task; with
    # the modules above in the heap that is ≈15 ms of CPU a task (80 % of a trivial task's
    # CPU here). Frozen, what was imported is left out of every collection.
    gc.freeze()
    daemon.worker = quiet_broken_pipes(daemon.worker)  # type: ignore[assignment]  # manager() calls it
    daemon.manager()
