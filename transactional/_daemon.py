"""PySpark's worker daemon with the task modules imported before it forks workers.

Spark starts one daemon per executor (``python -m pyspark.daemon``) that forks a Python
worker for each concurrent task slot. Every worker then imports what its tasks use: this
package, ``trident``, pyarrow and PySpark's own worker modules (compiled from
``pyspark.zip`` each time, having no bytecode cache there): about 1.3 s of CPU per worker,
paid inside the first batch. Run as ``spark.python.daemon.module`` (set by
``get_or_create_context`` for ``local[...]`` masters, where the workers run this very
Python environment), this module imports them once in the daemon, and forked workers
inherit them. A module that fails to import is skipped: the worker imports it as before.
"""

from __future__ import annotations

import importlib

PRELOAD = ("pyspark.worker", "pyspark.cloudpickle", "pyarrow", "pyarrow.compute", "pyarrow.ipc",
           "transactional._plan", "transactional._task", "transactional._spout", "trident._runtime",
           "trident.builtin", "state.map")


def preload(modules: tuple[str, ...] = PRELOAD) -> list[str]:
    """Import ``modules``; return those that failed."""
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the worker imports what it needs itself
            failed.append(name)
    return failed


if __name__ == "__main__":
    preload()
    from pyspark import daemon

    daemon.manager()
