"""Exactly once into Delta Lake and Iceberg tables, and the cost of one cut across sinks
(docs/states.md, "Lakehouse tables" and "One cut across sinks"): one JSON line each.

    flock /tmp/heavy.lock python benchmarks/lake_bench.py [--batches 1000,10000,100000] [--commits 5]

1. rows/s into each table kind and mode per batch size: ``--commits`` batches of B rows
   (words of the benchmarks' Zipf corpus, ``transactional.testing.make_corpus``; ``add``:
   (word, 1) rows, so each commit merges into a table that grows) written by one task
   through the state API (``begin_commit``, ``add_rows``, ``commit``); rows/s = rows /
   the commits' wall time; every table read back and checked.
2. the cut: a Redis map, a PostgreSQL table and a Delta table of the same 10,000 word
   counts (private ``ManagedRedis``, ``ManagedPostgres``, ``ManagedZooKeeper``), read
   plainly and as of the coordinator's recorded txid (``trident.cut.read_cut``); median of
   7 reads each, in ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import Counter
from typing import Any

from transactional import Fields
from transactional.testing import make_corpus
from trident.state import EPOCH, TOPOLOGY_ID

COUNTS = Fields("word", "count", types={"word": "string", "count": "int64"})
LOG = Fields("word", types={"word": "string"})


def factory(kind: str, mode: str, where: str) -> Any:
    fields = LOG if mode == "append" else COUNTS
    keys = ["word"] if mode != "append" else []
    if kind == "delta":
        from trident.delta import DeltaStateFactory

        return DeltaStateFactory(f"{where}/{mode}", fields, mode=mode, key_fields=keys, create=True)
    from trident.iceberg import IcebergStateFactory, sql_catalog

    return IcebergStateFactory(sql_catalog(where), f"bench.{mode}", fields, mode=mode, key_fields=keys, create=True)


def write_rate(kind: str, mode: str, batch: int, commits: int, words: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as where:
        f = factory(kind, mode, where)
        st = f.make_state({EPOCH: 1, TOPOLOGY_ID: "bench"}, None, 0, 1)
        secs, want = 0.0, Counter[str]()
        for txid in range(1, commits + 1):
            chunk = words[(txid - 1) * batch: txid * batch]
            rows = [(w,) for w in chunk] if mode == "append" else [(w, 1) for w in chunk]
            want.update(chunk)
            t0 = time.perf_counter()
            st.begin_commit(txid)
            st.add_rows(rows)
            st.commit(txid)
            secs += time.perf_counter() - t0
        got = f.read_as_of(commits).to_pylist()
        seen = Counter(r["word"] for r in got) if mode == "append" else {r["word"]: r["count"] for r in got}
        assert seen == want, f"{kind} {mode}: read back differs"
    return {"bench": "lake-write", "table": kind, "mode": mode, "batch_rows": batch, "commits": commits,
            "rows_per_s": round(batch * commits / secs), "ms_per_commit": round(1000 * secs / commits, 1)}


def cut_cost(words: list[str]) -> list[dict[str, Any]]:
    from redis import Redis

    from state.base import open_transactional_state
    from state.map.openers import open_map_backing
    from transactional.testing import ManagedPostgres, ManagedRedis, ManagedZooKeeper
    from trident.cut import read_cut, read_map_as_of, read_postgres_as_of
    from trident.delta import DeltaStateFactory
    from trident.postgres import PostgresStateFactory

    counts = Counter(words)
    keys = sorted(counts)[:10_000]
    servers = [ManagedRedis(), ManagedPostgres(), ManagedZooKeeper()]
    for s in servers:
        s.start()
    try:
        redis, pg, zk = servers
        tid = "cutbench"
        open_map_backing(redis.url, f"{tid}:counts").multi_put(
            [json.dumps([k]) for k in keys], [{"txid": 2, "curr": counts[k], "prev": counts[k] - 1} for k in keys])
        pgf = PostgresStateFactory(pg.create_database("cut"), "counts", {"word": "text", "count": "bigint"},
                                   key_columns=["word"], add_columns=["count"], create_table=True)
        with tempfile.TemporaryDirectory() as where:
            df = DeltaStateFactory(f"{where}/counts", COUNTS, mode="add", key_fields=["word"], create=True)
            for f in (pgf, df):
                st = f.make_state({EPOCH: 1, TOPOLOGY_ID: tid}, None, 0, 1)
                for txid in (1, 2):
                    st.begin_commit(txid)
                    st.add_rows([(k, counts[k] - 1 if txid == 1 else 1) for k in keys])
                    st.commit(txid)
            coord = open_transactional_state(zk.url(), tid)
            coord.set("committed", {"txid": 1})
            coord.close()
            rc = Redis.from_url(redis.url)

            def plain() -> None:
                rc.mget(rc.keys(f"{tid}:counts*"))
                import psycopg

                with psycopg.connect(pgf.dsn) as c:
                    c.execute("SELECT word, count FROM counts").fetchall()
                df._table().to_pyarrow_table(columns=["word", "count"])

            def cut() -> None:
                read_cut(zk.url(), tid, {
                    "redis": lambda c: read_map_as_of(redis.url, f"{tid}:counts", c),
                    "postgres": lambda c: read_postgres_as_of(pgf, c, f"{tid}:counts"),
                    "delta": lambda c: df.read_as_of(c, ["word", "count"])})

            out = []
            for name, fn in (("plain reads of the three sinks", plain), ("read_cut as of the recorded txid", cut)):
                times = []
                for _ in range(7):
                    t0 = time.perf_counter()
                    fn()
                    times.append(1000 * (time.perf_counter() - t0))
                out.append({"bench": "cut-read", "what": name, "keys": len(keys),
                            "ms_median": round(statistics.median(times), 1)})
            return out
    finally:
        for s in servers:
            s.destroy()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batches", default="1000,10000,100000")
    p.add_argument("--commits", type=int, default=5)
    p.add_argument("--skip-cut", action="store_true")
    a = p.parse_args()
    sizes = [int(x) for x in a.batches.split(",")]
    words = [w for s in make_corpus(max(sizes) * a.commits // 10 + 1) for w in s.split()]
    for kind in ("delta", "iceberg"):
        for mode in ("append", "add"):
            for b in sizes:
                print(json.dumps(write_rate(kind, mode, b, a.commits, words)), flush=True)
    if not a.skip_cut:
        for line in cut_cost(words):
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
