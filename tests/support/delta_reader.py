"""An independent reader of a Delta table for the tests: DuckDB reads the table's log
(``_delta_log/*.json``: the live files are those added and never removed, the ``txn``
actions) and then the Parquet files -- no delta-rs involved. (DuckDB's own ``delta``
extension is downloaded at first use, which this machine cannot do.)"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote


def _log(con, root: Path):
    return con.sql(f"SELECT * FROM read_json('{root}/_delta_log/*.json', format='newline_delimited', "
                   "union_by_name=true, filename=true)")


def live_files(root: Path) -> list[str]:
    """The data files of the table's latest version."""
    import duckdb

    con = duckdb.connect()
    log = _log(con, root)
    cols = log.columns
    if "add" not in cols:
        return []
    adds = {unquote(r[0]) for r in con.sql("SELECT add.path FROM log WHERE add IS NOT NULL").fetchall()}
    removes = ({unquote(r[0]) for r in con.sql("SELECT remove.path FROM log WHERE remove IS NOT NULL").fetchall()}
               if "remove" in cols else set())
    return sorted(str(root / p) for p in adds - removes)


def rows(root: Path, columns: str) -> list[tuple]:
    """``SELECT columns`` over the live files, sorted."""
    import duckdb

    files = live_files(root)
    if not files:
        return []
    return sorted(duckdb.connect().sql(f"SELECT {columns} FROM read_parquet({files!r})").fetchall())


def txn_versions(root: Path) -> dict[str, int]:
    """Each ``txn`` app id's newest version, as the log holds it."""
    import duckdb

    con = duckdb.connect()
    log = _log(con, root)
    if "txn" not in log.columns:
        return {}
    return dict(con.sql("SELECT txn.appId, max(txn.version) FROM log WHERE txn IS NOT NULL GROUP BY 1").fetchall())
