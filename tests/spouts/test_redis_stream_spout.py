"""``RedisStreamSpout`` against a real redis-server: messages stay pending until acked,
failed ones come again, a restarted reader re-emits what it had not acked, another
consumer's stale messages are claimed, and a reader killed with SIGKILL loses nothing."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from redis_stream_child import Collector, Ctx

from spouts.redis_stream import RedisStreamSpout
from transactional.tuples import Fields

pytestmark = pytest.mark.integration
TESTS = Path(__file__).resolve().parents[1]


def opened(url: str, stream: str, **kw: Any) -> tuple[RedisStreamSpout, Collector]:
    s, c = RedisStreamSpout(url, stream, "g", **kw), Collector()
    s.open({}, Ctx(), c)
    return s, c


def add(url: str, stream: str, n: int) -> list[str]:
    r = redis.Redis.from_url(url)
    return [r.xadd(stream, {"word": f"w{i}"}).decode() for i in range(n)]


def test_messages_stay_pending_until_acked_and_failed_ones_come_again(redis_url: str) -> None:
    stream = f"s-{uuid.uuid4().hex[:8]}"
    ids = add(redis_url, stream, 5)
    s, c = opened(redis_url, stream, fields=Fields("id", "word"))
    s.next_tuple()
    got = c.take()
    assert got == [((i, f"w{n}"), i) for n, i in enumerate(ids)] and s.pending() == 5
    for _, msg_id in got[:3]:
        s.ack(msg_id)
    s.fail(ids[4])
    assert s.pending() == 2
    s.next_tuple()
    assert c.take() == [((ids[4], "w4"), ids[4])]      # the failed one again, nothing new
    s.ack(ids[4])
    assert s.pending() == 1
    s.next_tuple()
    assert c.take() == []


def test_a_reopened_reader_emits_what_it_had_not_acked_first(redis_url: str) -> None:
    stream = f"s-{uuid.uuid4().hex[:8]}"
    ids = add(redis_url, stream, 4)
    s, c = opened(redis_url, stream)
    s.next_tuple()
    s.ack(c.take()[0][1])                               # one acked, three pending: then a crash
    more = add(redis_url, stream, 2)
    s2, c2 = opened(redis_url, stream)                  # the same consumer name: spout-0
    s2.next_tuple()
    assert [m for _, m in c2.take()] == ids[1:]
    s2.next_tuple()
    assert [(v[0], v[1]["word"]) for v, _ in c2.take()] == [(more[0], "w0"), (more[1], "w1")]


def test_messages_left_pending_by_a_dead_consumer_are_claimed(redis_url: str) -> None:
    stream = f"s-{uuid.uuid4().hex[:8]}"
    ids = add(redis_url, stream, 3)
    dead, c = opened(redis_url, stream, consumer="dead")
    dead.next_tuple()
    assert len(c.take()) == 3
    alive, c2 = opened(redis_url, stream, consumer="alive", claim_idle_secs=0.2)
    alive.next_tuple()
    assert c2.take() == []                              # not idle long enough yet
    deadline = time.monotonic() + 10
    got: list[Any] = []
    while len(got) < 3 and time.monotonic() < deadline:
        alive.next_tuple()
        got += [m for _, m in c2.take()]
    assert sorted(got) == sorted(ids)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="count must be >= 1"):
        RedisStreamSpout("redis://127.0.0.1:1/0", "s", "g", count=0)


def test_a_reader_killed_with_sigkill_and_restarted_loses_nothing(redis_url: str) -> None:
    """At least once: every message is processed (pushed to a list) at least once
    through three SIGKILLs at random moments; duplicates only where a kill fell between
    the processing and the ack."""
    stream, total = f"s-{uuid.uuid4().hex[:8]}", 400
    ids = add(redis_url, stream, total)
    r = redis.Redis.from_url(redis_url)
    rng = random.Random(int(os.environ.get("TRIDENT_TEST_SEED", random.randrange(1 << 30))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS.parent), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, str(TESTS / "support" / "redis_stream_child.py"), redis_url, stream, str(total)]
    for kill in range(3):
        p = subprocess.Popen(cmd, env=env)
        at = rng.randint(1, total // 4) + kill * total // 4
        deadline = time.monotonic() + 60
        while r.llen(f"{stream}:processed") < at and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        p.send_signal(signal.SIGKILL)
        p.wait()
    p = subprocess.run(cmd, env=env, timeout=120)
    assert p.returncode == 0
    processed = [x.decode() for x in r.lrange(f"{stream}:processed", 0, -1)]
    assert set(processed) == set(ids)
    assert len(processed) - len(ids) <= 3 * 7          # at most a read's worth redone per kill
    assert r.xpending(stream, "g")["pending"] == 0


def test_a_reader_does_not_claim_its_own_messages_still_in_flight(redis_url: str) -> None:
    """A slow tree is not a lost message: idle past ``claim_idle_secs`` at this very reader,
    an emitted message whose fate the spout has not heard is not emitted again."""
    stream = f"s-{uuid.uuid4().hex[:8]}"
    ids = add(redis_url, stream, 3)
    s, c = opened(redis_url, stream, claim_idle_secs=0.1)
    s.next_tuple()
    assert [m for _, m in c.take()] == ids
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:            # several claim rounds pass
        s.next_tuple()
        assert c.take() == []
    s.fail(ids[1])
    s.next_tuple()
    assert [m for _, m in c.take()] == [ids[1]]    # a failed one does come again
