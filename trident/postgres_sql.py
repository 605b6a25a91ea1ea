"""PostgreSQL's side of ``trident.postgres``: names as SQL (the one place every table and
column name is quoted), values as ``COPY`` sends them, and types compared as PostgreSQL
spells them."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable
from typing import Any

from state.errors import ConfigError

__all__ = ["MAX_NAME_BYTES", "check_ident", "sql_name", "regclass", "sql_names", "same_type", "timestamp_at",
           "json_values"]

MAX_NAME_BYTES = 63          # PostgreSQL's NAMEDATALEN - 1: a longer name is cut short


def check_ident(name: str, what: str, *, qualified: bool = False) -> str:
    """``name`` if PostgreSQL can hold it as written (``qualified``: ``schema.table`` too)."""
    parts = name.split(".") if qualified and isinstance(name, str) else [name]
    why = ("is not a str" if not isinstance(name, str) else
           "has more than one '.' (name a table as table or schema.table)" if len(parts) > 2 else
           "is empty" if any(p == "" for p in parts) else
           "holds a NUL character" if "\x00" in name else
           f"is longer than {MAX_NAME_BYTES} bytes (PostgreSQL would cut it short)"
           if any(len(p.encode()) > MAX_NAME_BYTES for p in parts) else None)
    if why:
        msg = f"{what} {name!r} {why}; give a name PostgreSQL can hold as written"
        raise ConfigError(msg)
    return name


def quote_ident(name: str) -> str:
    """``name`` as a quoted SQL identifier in text (``"WordCounts"``; a ``"`` doubled), for SQL
    built as a string; ``sql_name`` is the composable form."""
    return '"' + name.replace('"', '""') + '"'


def sql_name(name: str, *, qualified: bool = False) -> Any:
    """The one place names become SQL: ``name`` quoted (``psycopg.sql.Identifier``),
    used exactly as written; ``qualified``: ``schema.table`` is two names."""
    from psycopg import sql

    return sql.Identifier(*(name.split(".") if qualified else [name]))


def regclass(table: str) -> str:
    """``table`` as the text ``to_regclass`` parses back to the same table (quoted)."""
    return str(sql_name(table, qualified=True).as_string())


def sql_names(names: Iterable[str], prefix: str = "") -> Any:
    """``a, b, c`` quoted (``prefix``: ``t.`` for a table alias)."""
    from psycopg import sql

    return sql.SQL(", ").join(sql.SQL(prefix) + sql_name(n) for n in names)


#: what a PostgreSQL server that is up answers when it refuses a connection for good (its
#: ``FATAL`` messages; a server starting up, shutting down or full is an outage, retried)
_ALIASES = {"int": "integer", "int4": "integer", "int8": "bigint", "bool": "boolean", "float8": "double precision",
            "float4": "real", "varchar": "character varying", "timestamptz": "timestamp with time zone",
            "timestamp": "timestamp without time zone", "numeric": "numeric", "decimal": "numeric"}


def same_type(declared: str, actual: str) -> bool:
    """True when a declared type and PostgreSQL's ``format_type`` name the same type."""
    d = declared.split("(")[0].strip().lower()
    return _ALIASES.get(d, d) == actual.split("(")[0].strip().lower()


def timestamp_at(ms: int) -> datetime.datetime:
    """``ms`` since the epoch as a ``timestamptz`` value."""
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)


def json_values(r: tuple[Any, ...]) -> tuple[Any, ...]:
    """dicts and lists as JSON text (for json/jsonb columns)."""
    if any(type(v) in (dict, list) for v in r):
        return tuple(json.dumps(v) if type(v) in (dict, list) else v for v in r)
    return r


#: what a PostgreSQL server that is up answers when it refuses a connection for good (its
#: ``FATAL`` messages; a server starting up, shutting down or full is an outage, retried)
_REFUSALS = ("does not exist", "password authentication failed", "no pg_hba.conf entry", "permission denied",
             "authentication failed", "is not permitted to log in")


def refusal(error: str) -> str:
    """The server's ``FATAL`` reason when ``error`` is a refusal that retrying cannot change, else ""."""
    for line in error.splitlines():
        reason = line.partition("FATAL:")[2].strip()
        if reason and any(r in reason for r in _REFUSALS):
            return reason
    return ""
