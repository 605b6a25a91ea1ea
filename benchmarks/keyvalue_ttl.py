"""The cost of a time to live on ``KeyValueState``'s checkpoint (state/keyvalue.py), on a
private redis-server: one state of ``--keys`` keys, ``--checkpoints`` checkpoints each
putting every key (a word count's worst case), timed prepare and commit, without and with
``ttl`` (alternating, ``--rounds`` times). Prints one JSON line per run.

    python benchmarks/keyvalue_ttl.py [--keys 20000] [--checkpoints 6] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import time
import uuid

from state.keyvalue import open_key_value_state
from state.map.ttl import Ttl
from transactional.result import percentile
from transactional.testing import ManagedRedis


def run(url: str, keys: int, checkpoints: int, ttl: Ttl | None) -> dict[str, object]:
    ns = f"bench-{uuid.uuid4().hex[:8]}:count:0"
    kv = open_key_value_state(url, ns, fence_scope=ns.split(":")[0], epoch=1, ttl=ttl)
    prepare, commit = [], []
    base = int(time.time() * 1000)
    for c in range(1, checkpoints + 1):
        kv.at(base + c * 1000)
        for k in range(keys):
            kv.put(f"w{k}", kv.get(f"w{k}", 0) + 1)
        t0 = time.perf_counter()
        kv.prepare_commit(c)
        t1 = time.perf_counter()
        kv.commit(c)
        t2 = time.perf_counter()
        prepare.append(t1 - t0)
        commit.append(t2 - t1)
    check = open_key_value_state(url, ns)
    exact = dict(check.items()) == {f"w{k}": checkpoints for k in range(keys)}
    return {"benchmark": "keyvalue_ttl", "ttl_secs": None if ttl is None else ttl.ms / 1000, "keys": keys,
            "checkpoints": checkpoints, "prepare_p50_ms": round(percentile(prepare, 50) * 1000, 1),
            "commit_p50_ms": round(percentile(commit, 50) * 1000, 1),
            "checkpoint_p50_ms": round(percentile([a + b for a, b in zip(prepare, commit, strict=True)], 50) * 1000, 1),
            "exact": exact}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=20_000)
    ap.add_argument("--checkpoints", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ttl-secs", type=float, default=3600)
    args = ap.parse_args()
    server = ManagedRedis(appendonly=False)
    server.start()
    try:
        for _ in range(args.rounds):
            for ttl in (None, Ttl.of(args.ttl_secs)):
                print(json.dumps(run(server.url, args.keys, args.checkpoints, ttl)), flush=True)
    finally:
        server.destroy()


if __name__ == "__main__":
    main()
