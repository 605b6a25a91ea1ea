"""The crash plan of the state kill tests: every commit crash point once (txids 2, 4, 6 ...),
then up to ``TRIDENT_TEST_KILLS`` more at random points of the next txids (seed ``TRIDENT_TEST_SEED``,
printed), each a driver SIGKILLed there before the one that runs to the end; and the driver
child those tests run (``run_topology_file``, ``kill_at_every_crash_point``)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CRASH_POINTS = ["commit.before", "commit.after_task", "commit.before_write", "commit.before_record",
                "commit.after_record"]
LAST_TXID = 14     # tests/support/trident_kill_topology.py's DATA: 60 sentences a partition, 4 a batch


def crash_plan() -> list[str]:
    """``point:txid=N`` specs, in order."""
    plan = [f"{p}:txid={2 * i + 2}" for i, p in enumerate(CRASH_POINTS)]
    kills = int(os.environ.get("TRIDENT_TEST_KILLS", "0"))
    if kills:
        seed = int(os.environ.get("TRIDENT_TEST_SEED", random.randrange(1 << 30)))
        print(f"TRIDENT_TEST_SEED={seed}")
        rng = random.Random(seed)
        txid = 2 * len(CRASH_POINTS)
        for _ in range(kills):
            txid += 1                 # a recorded txid never comes again: each kill a later one
            if txid > LAST_TXID:
                break
            plan.append(f"{rng.choice(CRASH_POINTS)}:txid={txid}")
    return plan


def run_topology_file(tmp_path: Path, topology_file: str, zk_url: str, crash_at: str | None,
                      env_vars: dict[str, str], args: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    """``trident run tests/<topology_file>`` in a driver child: in-process, coordinated by the
    ZooKeeper at ``zk_url``, memory state, ``env_vars`` set, and ``TRIDENT_CRASH_AT=crash_at``
    when given (the child SIGKILLs itself there)."""
    env = {**os.environ, **env_vars,
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "support"), str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("TRIDENT_CRASH_AT", None)
    if crash_at:
        env["TRIDENT_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, "-m", "transactional.ops.cli", "run", str(REPO / "tests" / "support" / topology_file),
         "--set", "executor=in-process", "--coordination", zk_url + "?session_timeout=1", "--state", "memory://",
         "--max-spout-pending", "3", "--lock-wait", "30", "-q", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, start_new_session=True)


def kill_at_every_crash_point(run: Callable[[str | None], subprocess.CompletedProcess[str]],
                              announced: bool = True) -> None:
    """``run(spec)`` once per ``crash_plan()`` spec: each driver dies by SIGKILL at its point
    (``announced``: saying so on stderr); then ``run(None)`` runs to the end."""
    for spec in crash_plan():
        point = spec.split(":")[0]
        p = run(spec)
        assert p.returncode == -signal.SIGKILL, (point, p.returncode, p.stderr[-2000:])
        if announced:
            assert f"crash point {point}" in p.stderr
    p = run(None)
    assert p.returncode == 0, p.stderr[-3000:]
