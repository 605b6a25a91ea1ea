"""On a real Spark standalone cluster (``transactional.testing.ManagedSparkCluster``: a
master and one-core workers on loopback, each worker in its own directory with no
``PYTHONPATH``): ``trident run FILE --master spark://...`` ships the package and the
topology's local modules, and a run that loses a worker (kill -9 of the worker JVM and its
executor) mid-run completes with exact counts, commits on the driver or on executors.

The driver is a ``trident run`` subprocess (one SparkContext per process: the test
session's own is local)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from state import OpaqueMap, RedisMapBacking, TransactionalMap
from transactional.testing._process import wait_until
from transactional.testing.spark_cluster import ManagedSparkCluster

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

PROJECT = Path(__file__).resolve().parents[2] / "support" / "cluster_project"
sys.path.insert(0, str(PROJECT))
import topology as cluster_topology  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    c = ManagedSparkCluster(workers=2).start()
    yield c
    c.destroy()


def expected(sentences: int) -> dict[str, int]:
    return dict(Counter(w.lower() for rows in cluster_topology.sentences(sentences).values()
                        for s in rows for w in s.split()))


def trident_run(cluster: ManagedSparkCluster, tmp_path: Path, tid: str, *args: str, sentences: int = 40,
                per_batch: int = 4, opaque: bool = False) -> subprocess.Popen:
    """``trident run`` of the project's topology file against ``cluster``, from a directory
    that holds none of the project's code."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.update(CLUSTER_SENTENCES=str(sentences), CLUSTER_PER_BATCH=str(per_batch),
               CLUSTER_OPAQUE="1" if opaque else "0", CLUSTER_TOPOLOGY_ID=tid, SPARK_LOCAL_IP="127.0.0.1")
    cwd = tmp_path / "elsewhere"
    cwd.mkdir(exist_ok=True)
    out = open(tmp_path / f"{tid}.log", "w")   # noqa: SIM115 - closed by the caller's wait
    return subprocess.Popen([sys.executable, "-m", "transactional.ops.cli", "run", str(PROJECT / "topology.py"),
                             "--master", cluster.master_url, "--json", "--set", "spark_ui=false", *args],
                            cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def finished(p: subprocess.Popen, tmp_path: Path, tid: str, cluster: ManagedSparkCluster, timeout: float = 240) -> str:
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    log = (tmp_path / f"{tid}.log").read_text()
    assert p.returncode == 0, f"driver exited {p.returncode}:\n{log[-6000:]}\n{cluster.logs()[-4000:]}"
    return log


def committed(zk_url: str, tid: str) -> int:
    """The topology's last committed txid in ZooKeeper (0 before its first commit)."""
    from transactional.ops.status import topology_status

    try:
        return int(topology_status(zk_url, tid).get("last_committed_txid") or 0)
    except Exception:  # noqa: BLE001 - not created yet
        return 0


def stored(redis_url: str, tid: str, words: list[str]) -> tuple[dict, dict]:
    t = TransactionalMap(RedisMapBacking.from_url(redis_url, f"{tid}:t"))
    o = OpaqueMap(RedisMapBacking.from_url(redis_url, f"{tid}:o"))
    return dict(zip(words, t.multi_get(words), strict=True)), dict(zip(words, o.multi_get(words), strict=True))


def test_trident_run_ships_the_package_and_the_topologys_local_modules(cluster, redis_server, redis_url, tmp_path):
    """The bolts live in a sibling module that imports a local package; neither is on
    the workers' path. Each executor imports both, and this package, from the shipped zip."""
    tid = f"ship-{uuid.uuid4().hex[:8]}"
    p = trident_run(cluster, tmp_path, tid, "--state", redis_url)
    log = finished(p, tmp_path, tid, cluster)
    want = expected(40)
    assert stored(redis_url, tid, sorted(want)) == (want, want), log[-3000:]
    places = [k.decode() for k in redis_server.client().keys(f"{tid}:where:*")]
    assert places, "the committers recorded where the executors imported their code from"
    for key in places:
        wordlib_file, cwd, transactional_file = key.split("|")[1:4]
        assert "trident-code-" in wordlib_file and wordlib_file.endswith("wordlib/norm.py"), key
        assert "trident-code-" in transactional_file, key
        assert "trident-spark-worker-" in cwd and str(PROJECT) not in cwd, key



@pytest.mark.parametrize("placement,opaque", [("driver", False), ("executors", True)])
def test_a_worker_killed_mid_run_loses_nothing_and_counts_nothing_twice(
        cluster, redis_url, zk_url, tmp_path, placement, opaque):
    """kill -9 of a worker (its JVM and executor) at a random moment once a txid or more
    committed; another worker joins; the run completes with exact counts in both maps."""
    cluster.wait_for_workers(2)
    rng = random.Random(int(os.environ.get("TRIDENT_TEST_SEED", random.randrange(1 << 30))))
    tid = f"kill-{placement}-{uuid.uuid4().hex[:8]}"
    p = trident_run(cluster, tmp_path, tid, "--state", redis_url, "--coordination", zk_url,
                    "--set", f"commit_placement={placement}", "--message-timeout", "20",
                    sentences=120, per_batch=4, opaque=opaque)

    at = rng.randint(1, 12)
    wait_until(lambda: committed(zk_url, tid) >= at or p.poll() is not None, 180, 0.05,
               what=f"{at} committed txids")
    assert p.poll() is None, "the run ended before the fault: give it more data"
    victim = next(i for i, w in enumerate(cluster.workers) if w.running)
    cluster.kill_worker(victim)
    killed_at = committed(zk_url, tid)
    cluster.add_worker()
    log = finished(p, tmp_path, tid, cluster)
    want = expected(120)
    assert stored(redis_url, tid, sorted(want)) == (want, want), log[-3000:]
    assert committed(zk_url, tid) == 30 and killed_at < 30


def test_spark_submit_runs_a_packaged_topology(cluster, redis_url, tmp_path):
    """``trident package`` zips the code; ``spark-submit --py-files`` it, with the entry
    script, runs the topology (client deploy mode: Spark's standalone master has no
    cluster deploy mode for Python)."""
    import pyspark

    from transactional.ops.ship import SUBMIT_SCRIPT

    tid = f"submit-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, CLUSTER_TOPOLOGY_ID=tid, SPARK_LOCAL_IP="127.0.0.1")
    env.pop("PYTHONPATH", None)
    pkg = subprocess.run([sys.executable, "-m", "transactional.ops.cli", "package", str(PROJECT / "topology.py"),
                          "-o", str(tmp_path / "dist")], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert pkg.returncode == 0, pkg.stderr
    code = pkg.stdout.strip()
    assert code.endswith(".zip") and "spark-submit --master MASTER --py-files" in pkg.stderr
    submit = str(Path(pyspark.__file__).parent / "bin" / "spark-submit")
    env["SPARK_HOME"] = str(Path(pyspark.__file__).parent)
    env["PYSPARK_PYTHON"] = sys.executable
    p = subprocess.run([submit, "--master", cluster.master_url, "--py-files", code, SUBMIT_SCRIPT,
                        "run", str(PROJECT / "topology.py"), "--state", redis_url, "--json", "-q",
                        "--set", "spark_ui=false"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=240)
    assert p.returncode == 0, p.stderr[-6000:]
    assert f'"topology_id": "{tid}"' in p.stdout and '"batches_committed": 10' in p.stdout, p.stdout
    want = expected(40)
    assert stored(redis_url, tid, sorted(want)) == (want, want)


def test_a_driver_killed_mid_run_against_the_cluster_resumes_exactly(cluster, redis_url, zk_url, tmp_path):
    """SIGKILL of the driver (and its Spark JVM) with commits on executors, after a few
    txids; a new driver resumes from ZooKeeper on the same cluster; exact counts."""
    cluster.wait_for_workers(2)
    tid = f"driver-kill-{uuid.uuid4().hex[:8]}"
    args = ("--state", redis_url, "--coordination", zk_url, "--set", "commit_placement=executors",
            "--lock-wait", "30")
    p = trident_run(cluster, tmp_path, tid, *args, sentences=60, per_batch=4, opaque=True)
    wait_until(lambda: committed(zk_url, tid) >= 3 or p.poll() is not None, 180, 0.05, what="3 committed txids")
    assert p.poll() is None, "the run ended before the kill"
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    assert 3 <= committed(zk_url, tid) < 15
    again = trident_run(cluster, tmp_path, tid, *args, sentences=60, per_batch=4, opaque=True)
    log = finished(again, tmp_path, tid, cluster)
    want = expected(60)
    assert stored(redis_url, tid, sorted(want)) == (want, want), log[-3000:]
    assert committed(zk_url, tid) == 15


def test_a_core_topology_on_the_cluster_through_a_worker_kill_acks_every_sentence_once(
        cluster, redis_server, redis_url, zk_url, tmp_path):
    """A core topology (spouts on the driver, the split shipped to the executors, a stateful
    count on Redis): kill -9 of a worker mid-run. Spark recomputes what it lost with the
    same tuple ids, or the micro-batch fails and its sentences are replayed; either way
    every sentence is acked once and, the state being written only at checkpoints, every
    count is exact."""
    cluster.wait_for_workers(2)
    tid = f"core-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, CLUSTER_TOPOLOGY_ID=tid, CLUSTER_SENTENCES="1500", SPARK_LOCAL_IP="127.0.0.1")
    env.pop("PYTHONPATH", None)
    cwd = tmp_path / "elsewhere"
    cwd.mkdir(exist_ok=True)
    with open(tmp_path / f"{tid}.log", "w") as out:
        p = subprocess.Popen([sys.executable, "-m", "transactional.ops.cli", "run", str(PROJECT / "core_topology.py"),
                              "--master", cluster.master_url, "--json", "--set", "spark_ui=false", "--state", redis_url,
                              "--coordination", zk_url, "--set", "micro_batch_size=40", "--message-timeout", "20",
                              "--set", "checkpoint_interval_ms=200"],
                             cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    wait_until(lambda: committed(zk_url, tid) >= 3 or p.poll() is not None, 180, 0.05, what="3 micro-batches")
    assert p.poll() is None, "the run ended before the fault: give it more data"
    cluster.kill_worker(next(i for i, w in enumerate(cluster.workers) if w.running))
    cluster.add_worker()
    log = finished(p, tmp_path, tid, cluster)
    assert "acked 1500 failed " in log and "pending 0" in log, log[-3000:]
    import core_topology

    want = Counter(w.lower() for s in core_topology.sentences(1500) for w in s.split())
    got: Counter = Counter()
    for t in range(2):
        for k, v in redis_server.client().hgetall(f"{tid}:count:{t}").items():
            got[k.decode()] += int(v)
    assert got == want
