"""``trident rebalance`` of core stateful windowed bolts 2 -> 3 -> 1 under driver SIGKILLs
at the rebalance's fence points, on a real redis-server and ZooKeeper
(transactional/engine/core/window_moves.py): a word count over a tumbling count window and
a sliding event-time window, both fed by a fields grouping on the word
(tests/support/core_stream_topology.py, ``winrb``). Each rebalance is asked between two
runs; drivers die at each step of recording it and of the move's checkpoint, then one runs
the next sentences. Every window result equals a fault-free run's with the same
rebalances, every key lies in the task its grouping sends it to, nothing stays pending."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from transactional.engine.routing import stable_hash
from transactional.ops.control import request

from test_core_servers import WORDS, Driver

pytestmark = pytest.mark.integration
BOLTS = ("tumbling", "sliding")
#: each step's drivers die at these points in turn (the first at its first such point)
KILLS = {3: ["rebalance.before_record", "rebalance.preparing", "rebalance.before_prepared"],
         1: ["rebalance.recorded", "checkpoint.prepared", "checkpoint.after_commit", "rebalance.before_record"]}


def sentences(part: int) -> list[dict[str, str]]:
    """40 sentences of four words, 250 ms apart in event time (in stream order)."""
    return [{"sentence": " ".join(WORDS[(7 * i + 3 * k + part) % len(WORDS)] for k in range(4)),
             "ts": str(part * 10_000 + i * 250)} for i in range(40)]


def sliding_truth() -> dict[str, list[list[int]]]:
    """Each word's windows ``[end - 2000, end)`` (every 1000 ms) holding it, with its count,
    up to the last end the final watermark (the greatest time - 500 ms lag) reached."""
    timed = [(w, int(s["ts"])) for p in range(3) for s in sentences(p) for w in s["sentence"].split()]
    last = max(ts for _w, ts in timed) - 500
    out: dict[str, list[list[int]]] = {}
    for end in range(1000, last + 1, 1000):
        counts: dict[str, int] = {}
        for w, ts in timed:
            if end - 2000 <= ts < end:
                counts[w] = counts.get(w, 0) + 1
        for w, n in counts.items():
            out.setdefault(w, []).append([end - 2000, end, n])
    return {w: sorted(ws) for w, ws in out.items()}


def results(r: redis.Redis, stream: str, tasks: int) -> dict[str, dict[str, list[list[Any]]]]:
    """Each bolt's recorded windows per word, from every task's state; asserts each word
    lies in the task the fields grouping sends it to."""
    from state.keyvalue import open_key_value_state

    out: dict[str, dict[str, list[list[Any]]]] = {}
    url = r.connection_pool.connection_kwargs
    redis_url = f"redis://{url['host']}:{url['port']}/{url.get('db', 0)}"
    for bolt in BOLTS:
        got: dict[str, list[list[Any]]] = {}
        for t in range(3):
            kv = open_key_value_state(redis_url, f"core-winrb-{stream}:{bolt}:{t}")
            for k, v in kv.items():
                if str(k).startswith("__window__"):
                    continue
                assert t < tasks and stable_hash(k) % tasks == t, (bolt, k, t, tasks)
                assert k not in got, (bolt, k)
                got[str(k)] = [list(x) for x in v]
        out[bolt] = got
    return out


def run_with_rebalances(tmp_path: Path, r: redis.Redis, redis_url: str, coordination: str, kills: bool) -> Any:
    """Two tasks on part 0, then 3 on part 1, then 1 on part 2 (each asked between runs;
    ``kills``: drivers die at ``KILLS`` first). Returns the stream and the results."""
    stream = f"w-{uuid.uuid4().hex[:8]}"
    tid = f"core-winrb-{stream}"

    def fill(part: int) -> None:
        pipe = r.pipeline(transaction=False)
        for entry in sentences(part):
            pipe.xadd(stream, entry)
        pipe.execute()

    def driver(name: str, crash_at: str | None = None) -> Driver:
        return Driver(tmp_path, f"{stream}-{name}", redis_url, stream, "winrb", coordination=coordination,
                      crash_at=crash_at)

    fill(0)
    d = driver("first")
    assert d.wait() == 0, d.tail()
    for part, tasks in ((1, 3), (2, 1)):
        request(coordination, tid, "rebalance", tasks=dict.fromkeys(BOLTS, tasks), by="test")
        fill(part)
        for point in KILLS[tasks] if kills else []:
            d = driver(f"{tasks}-{point}", crash_at=point)
            assert d.wait() == -signal.SIGKILL, (point, d.tail())
            assert f"crash point {point}" in d.tail()
        d = driver(f"to{tasks}")
        assert d.wait() == 0, d.tail()
        if tasks == 3:
            results(r, stream, 3)                    # every key in its new task
    assert r.xpending(stream, "wc")["pending"] == 0
    return stream, results(r, stream, 1)


def test_core_windows_rebalanced_2_3_1_under_driver_sigkills_fire_what_a_fault_free_run_fires(
        tmp_path: Path, redis_url: str, zk_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    coordination = zk_url + "?session_timeout=1"
    _, want = run_with_rebalances(tmp_path, r, redis_url, coordination, kills=False)
    stream, got = run_with_rebalances(tmp_path, r, redis_url, coordination, kills=True)
    assert got == want
    # and what any task count gives: each word's sliding windows, every one fired once
    assert {w: sorted(ws) for w, ws in got["sliding"].items()} == sliding_truth()
    fired = sum(n for ws in got["tumbling"].values() for _s, _e, n in ws)
    assert 480 - 3 < fired <= 480               # every tuple in one tumbling window but the last one's
    assert not r.keys(f"core-winrb-{stream}*~prepare")                  # no prepared state left behind
