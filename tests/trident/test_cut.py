"""One cut across sinks (trident.cut): a reader polling a Redis map, a PostgreSQL table and
a Delta table as of the coordinator's last recorded txid, while drivers are SIGKILLed at
seeded-random commit steps, sees the same counts in all three, and exactly the fault-free
counts of txids 1..C, at every poll."""

from __future__ import annotations

import os
import random
import signal
import threading
import uuid
from pathlib import Path

import cut_topology as ct
import pytest
from crash_plans import CRASH_POINTS, run_topology_file

from trident.cut import (
    committed_txid,
    map_committed_txid,
    postgres_committed_txid,
    read_cut,
    read_map_as_of,
    read_postgres_as_of,
)

pytestmark = pytest.mark.integration


def test_a_reader_of_three_sinks_sees_one_cut_while_drivers_die(
        tmp_path: Path, zk_url: str, redis_url: str, pg_dsn: str) -> None:
    tid = f"cut-{uuid.uuid4().hex[:6]}"
    lake = tmp_path / "lake"
    env = {"TRIDENT_TEST_PG": pg_dsn, "TRIDENT_TEST_LAKE_DIR": str(lake), "TRIDENT_TEST_TOPOLOGY": tid}
    pg, delta = ct.pg_counts(pg_dsn), ct.delta_counts(str(lake))
    readers = {
        "redis": lambda c: {k[0] if isinstance(k, tuple) else k: v
                            for k, v in read_map_as_of(redis_url, f"{tid}:counts", c).items()},
        "postgres": lambda c: dict(read_postgres_as_of(pg, c, f"{tid}:cut_counts")),
        "delta": lambda c: {r["word"]: r["count"] for r in delta.read_as_of(c, ["word", "count"]).to_pylist()},
    }
    polls: list[tuple[int, dict]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def poll() -> None:
        try:
            while not stop.is_set():
                if committed_txid(zk_url, tid) >= 1:          # every sink exists from txid 1 on
                    polls.append(read_cut(zk_url, tid, readers))
                stop.wait(0.02)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)
    reader = threading.Thread(target=poll)
    reader.start()
    seed = int(os.environ.get("TRIDENT_TEST_SEED", random.randrange(1 << 30)))
    print(f"TRIDENT_TEST_SEED={seed}")
    rng = random.Random(seed)
    try:
        for txid in (2, 4, 7, 9, 12):
            spec = f"{rng.choice([*CRASH_POINTS, 'delta.before_commit'])}:txid={txid}"
            p = run_topology_file(tmp_path, "cut_topology.py", zk_url, spec, env, ("--state", redis_url))
            assert p.returncode == -signal.SIGKILL, (spec, p.stderr[-2000:])
        p = run_topology_file(tmp_path, "cut_topology.py", zk_url, None, env, ("--state", redis_url))
        assert p.returncode == 0, p.stderr[-3000:]
    finally:
        stop.set()
        reader.join()
    assert not errors, errors
    polls.append(read_cut(zk_url, tid, readers))
    cuts = [c for c, _ in polls]
    assert cuts == sorted(cuts) and cuts[-1] == 15 and len(set(cuts)) >= 5, cuts
    for c, seen in polls:
        want = ct.expected_as_of(c)
        assert seen == {"redis": want, "postgres": want, "delta": want}, (
            c, {n: {w: (v.get(w), want.get(w)) for w in set(v) | set(want) if v.get(w) != want.get(w)} for n, v in seen.items()},
            delta.commits())
    # how far each sink has got: the last txid, in all three
    assert map_committed_txid(redis_url, f"{tid}:counts") == postgres_committed_txid(pg, f"{tid}:cut_counts") \
        == delta.committed_txid() == 15
