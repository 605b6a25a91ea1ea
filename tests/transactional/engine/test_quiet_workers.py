"""A cancelled job's workers end without a traceback in the user's terminal: PySpark's
daemon would print ``BrokenPipeError`` for every task whose executor hung up."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

CHILD = textwrap.dedent("""
    import sys
    from transactional.engine.daemon import quiet_broken_pipes

    def worker(sock, authenticated):
        raise BrokenPipeError(32, "Broken pipe")

    quiet_broken_pipes(worker)(None, True)
    print("not reached")
""")


def _child(env_extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **env_extra}
    env.pop("TRIDENT_WORKER_DEBUG", None) if "TRIDENT_WORKER_DEBUG" not in env_extra else None
    return subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=60)


def test_a_broken_pipe_ends_the_worker_quietly() -> None:
    p = _child({})
    assert p.returncode == 1 and p.stdout == "" and p.stderr == ""


def test_debug_shows_the_broken_pipe() -> None:
    p = _child({"TRIDENT_WORKER_DEBUG": "1"})
    assert p.returncode == 1 and "BrokenPipeError: [Errno 32] Broken pipe" in p.stderr


TOPOLOGY = textwrap.dedent("""
    import time
    from transactional import Fields, TopologyConfig
    from trident import BaseFunction, Count, FixedBatchSpout, TridentTopology, state

    CONFIG = TopologyConfig(spark_master="local[2]", spark_ui=False, message_timeout_secs=1, max_attempts=3,
                            retry_backoff_secs=0.1)

    class Slow(BaseFunction):
        def execute(self, tuple, collector):
            for i in range(2000):
                collector.emit((tuple[0] * 1000 + str(i),))
            time.sleep(0.4)

    def build_topology():
        t = TridentTopology("cancelled")
        (t.new_stream("s", FixedBatchSpout(Fields("w"), 4, *[(str(i),) for i in range(16)])).parallelism_hint(2)
          .each(Fields("w"), Slow(), Fields("x")).shuffle().each(Fields("x"), Slow(), Fields("y"))
          .group_by(Fields("y")).persistent_aggregate(state.transactional("c"), Count(), Fields("n")))
        return t
""")


def test_cancelled_jobs_leave_no_traceback_in_the_terminal(tmp_path: Path) -> None:
    (tmp_path / "slow.py").write_text(TOPOLOGY)
    p = subprocess.run([sys.executable, "-m", "transactional.ops.cli", "run", "slow.py"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert p.stderr.count("its job was cancelled; replaying") == 2, p.stderr[-3000:]   # jobs were cancelled
    assert "BrokenPipeError" not in p.stderr and "Traceback" not in p.stderr, p.stderr[-3000:]


def test_workers_fork_from_a_frozen_heap(spark_context) -> None:
    """PySpark's daemon runs ``gc.collect()`` in a reused worker after every task; the
    daemon freezes what it imported before forking, so that collection skips the modules
    (≈15 ms of CPU a task before, 80 % of a trivial task's CPU)."""
    def frozen(_: object) -> int:
        import gc

        return gc.get_freeze_count()

    counts = spark_context.parallelize(range(4), 4).map(frozen).collect()
    assert min(counts) > 10_000, counts


def test_a_context_on_this_machine_does_not_compress_its_broadcasts(spark_context) -> None:
    """The topology (with a memory spout's data) is broadcast to workers on the same
    machine: LZ4 over it only delays the first batch (docs/performance.md)."""
    assert spark_context.getConf().get("spark.broadcast.compress") == "false"
