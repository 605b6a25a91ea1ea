"""How long a rebalance takes and how long the topology pauses (docs/operations.md,
"Changing a running topology"); one JSON line per measurement.

    flock /tmp/heavy.lock python benchmarks/rebalance.py [--keys 1000000] [--only map,keyvalue]

A private redis-server (no AOF). In-process executor, so the figures are the driver's own.

- ``map``: a Trident word count whose transactional Redis map ``counts`` holds ``--keys``
  keys besides the words (written beforehand with MSET, as stored values of txid 1). The
  run is asked ``trident rebalance`` (``request``) right after txid 4 commits, moving
  the map's stage from 2 to 3 tasks. A Trident map is keyed by key, not by task: nothing
  moves, the driver stops after its commit, records the new counts and goes on. Reported:
  the gap between the commits of txids 4 and 5 (the pause a reader sees: no commit),
  against the median gap between other commits.
- ``keyvalue``: a core topology's stateful word count whose ``KeyValueState`` holds
  ``--keys`` keys over 2 tasks; the next start runs it with 3 tasks, which moves every key
  whose task changed as one checkpoint (transactional/engine/core/checkpoint.py).
  Reported: that start's move (the log line's checkpoint, timed around ``rebalance``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from spouts import MemoryTransactionalSpout  # noqa: E402
from transactional import Fields, TopologyConfig, run_topology  # noqa: E402
from transactional.ops.control import request  # noqa: E402
from transactional.testing.redis import ManagedRedis  # noqa: E402
from trident import Count, TridentTopology, state  # noqa: E402

COUNTS = "persistent_aggregate(counts)"
WORDS = ["cat", "dog", "cow", "moon", "apple", "the", "a", "man"]


def fill_map(url: str, namespace: str, keys: int) -> float:
    """``keys`` stored values of txid 1 under the map ``namespace``; seconds taken."""
    import redis

    from state.keys import key_prefix

    r = redis.Redis.from_url(url)
    prefix = key_prefix(namespace)
    t0 = time.perf_counter()
    chunk = 20_000
    for start in range(0, keys, chunk):
        r.mset({f"{prefix}k{i:08d}": b'{"txid":1,"val":1,"prev":null}' for i in range(start, min(keys, start + chunk))})
    return time.perf_counter() - t0


def bench_map(url: str, keys: int) -> dict[str, object]:
    tid = f"rb-map-{uuid.uuid4().hex[:6]}"
    data = {p: [(" ".join(WORDS[(i + j + p) % len(WORDS)] for j in range(3)),) for i in range(400)] for p in range(2)}

    def topology() -> object:
        t = TridentTopology(tid)
        (t.new_stream("s", MemoryTransactionalSpout(data, Fields("sentence"), 20)).parallelism_hint(2)
         .flat_map(lambda tup: [(w,) for w in tup["sentence"].split()], Fields("word"))
         .group_by(Fields("word")).persistent_aggregate(state.transactional("counts"), Count(), Fields("count"))
         .parallelism_hint(2))
        return t.build()

    cfg = TopologyConfig(executor="in-process", progress=False, state=url, max_spout_pending=2)
    run_topology(topology(), cfg, max_batches=1)
    fill = fill_map(url, f"{tid}:counts", keys)
    at: dict[int, float] = {}

    def committed(txid: int, _r: object) -> None:
        at[txid] = time.perf_counter()
        if txid == 4:
            request("memory://", tid, "rebalance", tasks={COUNTS: 3}, by="bench")

    r = run_topology(topology(), cfg, on_commit=committed)
    gaps = {t: at[t] - at[t - 1] for t in sorted(at) if t - 1 in at}
    pause = gaps.pop(5)
    return {"bench": "rebalance-map", "keys": keys, "fill_secs": round(fill, 2), "txids": r.last_txid,
            "pause_secs": round(pause, 4), "median_commit_gap_secs": round(statistics.median(gaps.values()), 4)}


def bench_keyvalue(url: str, keys: int) -> dict[str, object]:
    from state.keyvalue import open_key_value_state
    from transactional.engine.core import checkpoint
    from transactional.engine.routing import stable_hash

    from test_core_topology import WordCount, stateful_topology  # tests/: the core stateful word count

    name = f"rb-kv-{uuid.uuid4().hex[:6]}"
    cfg = TopologyConfig(executor="in-process", progress=False, state=url, checkpoint_interval_ms=0)
    run_topology(stateful_topology(name, WordCount(), ["the cow"], tasks=2), cfg)
    t0 = time.perf_counter()
    stores = [open_key_value_state(url, f"{name}:count:{t}") for t in range(2)]
    for i in range(keys):
        w = f"w{i:08d}"
        stores[stable_hash(w) % 2].put(w, 1)
    c = 10_000
    for s in stores:
        s.prepare_commit(c)
        s.commit(c)
    fill = time.perf_counter() - t0
    moved: list[float] = []
    original = checkpoint.Checkpointer._move

    def timed(self: object, *args: object) -> None:
        t = time.perf_counter()
        original(self, *args)  # type: ignore[arg-type]
        moved.append(time.perf_counter() - t)
    checkpoint.Checkpointer._move = timed  # type: ignore[method-assign]
    try:
        t1 = time.perf_counter()
        run_topology(stateful_topology(name, WordCount(), ["the cow"], tasks=3), cfg)
        wall = time.perf_counter() - t1
    finally:
        checkpoint.Checkpointer._move = original  # type: ignore[method-assign]
    return {"bench": "rebalance-keyvalue", "keys": keys, "fill_secs": round(fill, 2),
            "move_secs": round(sum(moved), 2), "start_to_end_secs": round(wall, 2)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--only", default="map,keyvalue")
    args = p.parse_args()
    _tests = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
    sys.path[:0] = [os.path.join(_tests, "transactional", "engine"), os.path.join(_tests, "support")]
    server = ManagedRedis(appendonly=False)
    server.start()
    try:
        for which in args.only.split(","):
            out = bench_map(server.url, args.keys) if which == "map" else bench_keyvalue(server.url, args.keys)
            print(json.dumps(out), flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
