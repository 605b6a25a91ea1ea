"""End to end: ``trident run examples/transactional_words.py`` with ZooKeeper coordination
and Redis user state, as driver subprocesses, under the faults ZooKeeper is there for.

- the driver is SIGKILLed at 20 seeded-random moments (exact crash points in the commit
  protocol, and from outside while batches are processing) and restarted each time;
- ZooKeeper is killed and restarted under a running driver;
- a partition longer than the session timeout: ZooKeeper expires the driver's session,
  a second driver takes over, the first must stop without committing;
- two drivers started for one topology id.

Every scenario ends with the exact word counts and bucket sizes in Redis, and the
coordinator state clean (nothing uncommitted, lock free). Seed: ``TRIDENT_TEST_SEED``.
"""

from __future__ import annotations

import importlib.util
import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from state.map import TransactionalMap
from state.redis import RedisMapBacking
from state.zookeeper import ZooKeeperTransactionalState
from transactional.ops.status import topology_status
from transactional.testing._process import wait_until
from transactional.testing.zookeeper import ManagedZooKeeper, TcpProxy

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "transactional_words.py"
TOPOLOGY = "transactional-words"
PER_PARTITION = 280       # 3 partitions, 7 words a partition per batch: 40 txids
TAKE = 7
LAST_TXID = -(-PER_PARTITION // TAKE)
# the ZooKeeper restart test runs longer (120 txids): a driver that no longer idles between
# polls could otherwise finish every batch while the test waits for ZooKeeper to come back
RESTART_PER_PARTITION = 840


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("zk_engine_example_words", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EX = _example()


def expected(per_partition: int = PER_PARTITION) -> tuple[dict[str, int], dict[int, int]]:
    """(word -> count, bucket -> number of words) for the data the drivers run on."""
    counts: dict[str, int] = {}
    for rows in EX.make_data(per_partition=per_partition).values():
        for w in rows:
            counts[w] = counts.get(w, 0) + 1
    buckets: dict[int, int] = {}
    for c in counts.values():
        buckets[c // EX.BUCKET_SIZE] = buckets.get(c // EX.BUCKET_SIZE, 0) + 1
    return counts, buckets


def stored(redis_url: str, per_partition: int = PER_PARTITION) -> tuple[dict[str, int], dict[int, int]]:
    """What the committers left in Redis, read through the same TransactionalMap."""
    words = TransactionalMap(RedisMapBacking.from_url(redis_url, f"{TOPOLOGY}:words"))
    counts = {w: v["count"] for w, v in zip(EX.WORDS, words.multi_get(EX.WORDS), strict=True) if v}
    bmap = TransactionalMap(RedisMapBacking.from_url(redis_url, f"{TOPOLOGY}:buckets"))
    keys = list(range(per_partition * 3 // EX.BUCKET_SIZE + 1))
    return counts, {b: n for b, n in zip(keys, bmap.multi_get(keys), strict=True) if n}


class Driver:
    """``trident run examples/transactional_words.py`` in its own process group."""

    def __init__(self, tmp_path: Path, name: str, coordination: str, state: str, *,
                 crash_at: str | None = None, lock_wait: float = 30, executor: str = "spark",
                 per_partition: int = PER_PARTITION) -> None:
        self.name = name
        self.out_path = tmp_path / f"{name}.out"
        self.err_path = tmp_path / f"{name}.err"
        env = {**os.environ, "TRIDENT_WORDS_PER_PARTITION": str(per_partition),
               "TRIDENT_WORDS_TAKE": str(TAKE),
               "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        env.pop("TRIDENT_CRASH_AT", None)
        if crash_at:
            env["TRIDENT_CRASH_AT"] = crash_at
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "transactional.ops.cli", "run", str(EXAMPLE),
                 "--master", "local[2]", "--set", f"executor={executor}",
                 "--coordination", coordination, "--state", state,
                 "--max-spout-pending", "3", "--lock-wait", str(lock_wait), "-q"],
                cwd=REPO, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                start_new_session=True)

    @property
    def exited(self) -> bool:
        return self.proc.poll() is not None

    def wait(self, timeout: float = 180) -> int:
        try:
            rc = self.proc.wait(timeout)
        finally:
            self._reap()
        return rc

    def kill(self) -> None:
        """SIGKILL the driver and everything it started (its Spark JVM, Python workers)."""
        self._reap()
        self.proc.wait(30)

    def _reap(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    @property
    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def tail(self) -> str:
        return f"--- {self.name} stdout\n{self.stdout[-2000:]}\n--- stderr\n{self.stderr[-4000:]}"


class Watch:
    """Reads the topology's coordinator state in ZooKeeper (read-only, no lock)."""

    def __init__(self, coordination: str) -> None:
        self.coordination = coordination
        self.state = ZooKeeperTransactionalState.from_url(coordination, TOPOLOGY, read_only=True)

    def committed(self) -> int:
        return (self.state.get("committed") or {}).get("txid", 0)

    def status(self) -> dict[str, Any]:
        return topology_status(self.coordination, TOPOLOGY)

    def close(self) -> None:
        self.state.close()


def assert_finished_exactly(redis_url: str, watch: Watch, per_partition: int = PER_PARTITION) -> None:
    assert stored(redis_url, per_partition) == expected(per_partition)
    st = watch.status()
    assert st["last_committed_txid"] == -(-per_partition // TAKE)
    assert st["uncommitted"] == [] and st["lock_holder"] is None, st


CRASH_POINTS = ["process.after_meta", "commit.before", "commit.after_task",
                "commit.before_record", "commit.after_record"]


def test_sigkill_at_every_crash_point_and_random_moments_then_exact_counts(
        tmp_path: Path, zk_url: str, redis_url: str) -> None:
    """Eight SIGKILLs of the driver, in an order the seed shuffles: one at each crash point
    of the commit protocol (of a random upcoming txid) and three from outside right after
    a commit. After each, a restart resumes; at the end the counts are exact and every
    txid's metadata was replayed unchanged. ``TRIDENT_TEST_KILLS=n`` adds random kills."""
    seed = int(os.environ.get("TRIDENT_TEST_SEED", random.randrange(1 << 30)))
    print(f"TRIDENT_TEST_SEED={seed}")
    rng = random.Random(seed)
    url = zk_url + "?session_timeout=1"   # a killed driver's lock goes within ~1 s
    watch = Watch(url)
    metas: dict[int, Any] = {}            # txid -> the metadata first stored for it

    def check_metadata_is_replayed_unchanged() -> None:
        st = watch.status()
        seen = [(u["txid"], u["meta"]) for u in st["uncommitted"]]
        if st["last_committed_txid"]:
            seen.append((st["last_committed_txid"], st["committed_meta"]))
        for txid, meta in seen:
            assert metas.setdefault(txid, meta) == meta, f"txid {txid} got new metadata"

    try:
        log = []
        kinds = CRASH_POINTS + ["external"] * 3
        kinds += [rng.choice(CRASH_POINTS + ["external", "external"])
                  for _ in range(int(os.environ.get("TRIDENT_TEST_KILLS", "0")))]
        rng.shuffle(kinds)
        for i, kind in enumerate(kinds):
            before = watch.committed()
            assert before + 2 < LAST_TXID, f"data too short for {len(kinds)} kills: raise PER_PARTITION"
            if kind == "external":
                # from outside, right after the driver commits its target txid: later
                # batches are processing, the next commit may be under way
                target = before + rng.randint(1, 2)
                d = Driver(tmp_path, f"run{i}", url, redis_url)
                try:
                    wait_until(lambda d=d, target=target: watch.committed() >= target or d.exited, 120,
                               interval=0.01, what=f"the driver to commit txid {target}")
                    assert not d.exited, d.tail()
                finally:
                    d.kill()
                spec = f"SIGKILL after commit of {target}"
            else:
                txid = before + rng.randint(1, 2)
                spec = f"{kind}:txid={txid}"
                if kind == "commit.after_task":
                    spec += f",component={rng.choice(['count', 'buckets'])},task={rng.randint(0, 1)}"
                # a crash point is inside the driver's commit protocol: its tasks run
                # in-process there (no JVM to start); kills from outside hit a Spark driver
                d = Driver(tmp_path, f"run{i}", url, redis_url, crash_at=spec, executor="in-process")
                rc = d.wait()
                assert rc == -signal.SIGKILL, f"{spec}: exit {rc}\n{d.tail()}"
                after = watch.committed()
                if kind == "commit.after_record":
                    assert after == txid, (spec, after)
                elif kind.startswith("commit."):
                    assert after == txid - 1, (spec, after)
                else:
                    assert before <= after <= txid - 1, (spec, after)
            check_metadata_is_replayed_unchanged()
            log.append(f"{spec}: committed {before} -> {watch.committed()}")
        print("\n".join(log))

        final = Driver(tmp_path, "final", url, redis_url)
        assert final.wait() == 0, final.tail()
        check_metadata_is_replayed_unchanged()
        assert_finished_exactly(redis_url, watch)
    finally:
        watch.close()


def test_zookeeper_restarted_mid_run_keeps_counts_exact(
        tmp_path: Path, zk_factory, redis_url: str) -> None:
    # a tick of 1 s lets the session last 15 s: a restart on a loaded machine (CI) can take
    # several seconds to reconnect, and an expired session rightly stops the driver
    server: ManagedZooKeeper = zk_factory(tick_time_ms=1000)
    url = server.url("restart") + "?session_timeout=15"
    watch = Watch(url)
    try:
        d = Driver(tmp_path, "driver", url, redis_url, per_partition=RESTART_PER_PARTITION)
        for target in (3, 9):   # twice, each time while batches are in flight
            wait_until(lambda target=target, w=watch: w.committed() >= target or d.exited, 120, interval=0.01,
                       what=f"txid {target} committed")
            assert not d.exited, d.tail()
            server.kill()       # SIGKILL: a crash, not a clean shutdown
            server.start()
            # a new client reads at once: the old one reconnects on its own backoff, and the
            # driver may finish every batch meanwhile, which would leave no run to restart under
            watch.close()
            watch = Watch(url)
        assert d.wait() == 0, d.tail()
        assert "committed" in d.stdout and "exact: True" in d.stdout, d.tail()
        assert_finished_exactly(redis_url, watch, RESTART_PER_PARTITION)
    finally:
        watch.close()


def test_expired_session_never_lets_two_drivers_commit(
        tmp_path: Path, zk_server: ManagedZooKeeper, zk_url: str, redis_url: str) -> None:
    """Driver A is cut off from ZooKeeper longer than its session timeout. ZooKeeper
    expires its session, B takes the lock and finishes the topology; when A's link comes
    back A must stop (lock lost) without recording anything."""
    proxy = TcpProxy(zk_server.port)
    root = zk_url.rsplit("/", 1)[1]
    url_a = f"zk://127.0.0.1:{proxy.port}/{root}?session_timeout=1"
    watch = Watch(zk_url)
    try:
        a = Driver(tmp_path, "a", url_a, redis_url)
        wait_until(lambda: watch.committed() >= 2 or a.exited, 120, interval=0.01,
                   what="A committing txid 2")
        assert not a.exited, a.tail()
        proxy.cut()
        cut_at = watch.committed()
        b = Driver(tmp_path, "b", zk_url, redis_url, lock_wait=60)
        assert b.wait() == 0, b.tail()
        assert watch.committed() == LAST_TXID and cut_at < LAST_TXID
        proxy.heal()
        rc = a.wait(120)
        assert rc != 0, a.tail()
        assert "lost the lock" in a.stderr, a.tail()
        assert_finished_exactly(redis_url, watch)
    finally:
        proxy.close()
        watch.close()


def test_two_drivers_for_one_topology_only_one_commits(
        tmp_path: Path, zk_url: str, redis_url: str) -> None:
    url = zk_url + "?session_timeout=1"
    watch = Watch(url)
    try:
        first = Driver(tmp_path, "first", url, redis_url, lock_wait=0)
        wait_until(lambda: watch.status()["lock_holder"] is not None or first.exited, 60,
                   interval=0.02, what="the first driver taking the lock")
        holder = watch.status()["lock_holder"]
        refused = Driver(tmp_path, "refused", url, redis_url, lock_wait=0)
        waiting = Driver(tmp_path, "waiting", url, redis_url, lock_wait=120)
        assert refused.wait() == 1, refused.tail()
        assert "locked by" in refused.stderr and holder in refused.stderr, refused.tail()
        assert first.wait() == 0, first.tail()
        assert waiting.wait() == 0, waiting.tail()
        assert f"committed {LAST_TXID} batches" in first.stdout, first.tail()
        assert "committed 0 batches" in waiting.stdout, waiting.tail()
        assert_finished_exactly(redis_url, watch)
    finally:
        watch.close()
