"""Persistent core session windows under driver SIGKILLs, on a real redis-server: a
``BaseStatefulWindowedBolt`` with ``with_session_window`` and ``with_persistence`` reads
clicks from a Redis Stream, and records every session it fires in its own
``KeyValueState`` (checkpointed with the open sessions). Drivers are killed at every step
of the checkpoint protocol (each after 40 more clicks) and at a random moment, then one
runs to the end: every session is recorded exactly once, with exactly its clicks -- those
a fault-free run gives -- and every message was acked."""

from __future__ import annotations

import random
import signal
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import redis

from state.keyvalue import open_key_value_state

from test_core_servers import Driver, seeded_rng, sigkill_drivers

pytestmark = pytest.mark.integration
USERS = ["ann", "bob", "cid", "dan"]
GAP = 3000
POINTS = ["checkpoint.preparing", "checkpoint.before_prepared", "checkpoint.prepared", "checkpoint.after_commit"]


def clicks(n: int, seed: int) -> list[tuple[str, int]]:
    """``n`` clicks of four users, time moving on 0-1.5 s a click, one in four 1.5 s out of
    order (within the lag: never late), then a click far later that ends every session."""
    rng = random.Random(seed)
    out, now = [], 0
    for _ in range(n):
        now += rng.randint(0, 1500)
        out.append((rng.choice(USERS), max(0, now - rng.choice([0, 0, 0, 1500]))))
    return [*out, ("zz", now + 100_000)]


def fill(r: redis.Redis, stream: str, rows: list[tuple[str, int]]) -> None:
    pipe = r.pipeline(transaction=False)
    for user, ts in rows:
        pipe.xadd(stream, {"user": user, "ts": str(ts)})
    pipe.execute()


def fault_free(rows: list[tuple[str, int]]) -> dict[str, dict[str, Any]]:
    """The sessions a run without faults records (``transactional.engine.sessions``' rule
    over the clicks in stream order): ``"<user>/<start>"`` -> its times in arrival order,
    fired once. The last click's session never closes."""
    by_user: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for i, (user, ts) in enumerate(rows[:-1]):
        by_user[user].append((ts, i))
    want = {}
    for user, events in by_user.items():
        run: list[tuple[int, int]] = []
        for ts, i in sorted(events):
            if run and ts - run[-1][0] >= GAP:
                want[f"{user}/{run[0][0]}"] = {"ts": [t for t, _ in sorted(run, key=lambda e: e[1])], "fired": 1}
                run = []
            run.append((ts, i))
        want[f"{user}/{run[0][0]}"] = {"ts": [t for t, _ in sorted(run, key=lambda e: e[1])], "fired": 1}
    return want


def test_persistent_sessions_killed_at_every_checkpoint_step_and_at_random_fire_each_session_once(
        tmp_path: Path, redis_url: str, zk_url: str) -> None:
    rng = seeded_rng()
    r = redis.Redis.from_url(redis_url)
    stream = f"s-{uuid.uuid4().hex[:8]}"
    rows = clicks(240, seed=rng.randrange(1 << 20))
    chunks = [rows[i * 40:(i + 1) * 40] for i in range(6)] + [rows[240:]]   # the last: the closing click
    coordination = zk_url + "?session_timeout=1"
    # each driver gets 40 more clicks and dies at its first checkpoint's step, in turn ...
    for i, point in enumerate(POINTS):
        fill(r, stream, chunks[i])
        d = Driver(tmp_path, f"crash{i}", redis_url, stream, "sessions", coordination=coordination, crash_at=point)
        assert d.wait() == -signal.SIGKILL, (point, d.tail())
        assert f"crash point {point}" in d.tail()
    # ... then one at a random moment, once some more sessions fired
    fill(r, stream, chunks[4])
    sigkill_drivers(tmp_path, r, redis_url, stream, "sessions", coordination, "skill", f"{stream}:sessions",
                    [r.scard(f"{stream}:sessions") + rng.randint(1, 6)])
    fill(r, stream, chunks[5] + chunks[6])
    d = Driver(tmp_path, "last", redis_url, stream, "sessions", coordination=coordination)
    assert d.wait() == 0, d.tail()
    state = open_key_value_state(redis_url, f"core-sessions-{stream}:sessions:0")
    got = {k: v for k, v in state.items() if not str(k).startswith("__window__")}
    assert got == fault_free(rows) and len(got) > 10
    assert r.xpending(stream, "wc")["pending"] == 0
    assert not r.keys("core-sessions-*~prepare")                     # no prepared state left behind
