"""An upgrade killed at its switch (transactional/engine/layout.py): version 2 (a new
state) is killed by SIGKILL after its first txid was written and before it was recorded.
Version 1 is then refused (that txid began under version 2: a mix), version 2 finishes it,
and the Redis maps hold the fault-free counts: every word once in ``counts``, and in
``more`` every word longer than one letter from the switch on."""

from __future__ import annotations

import signal
import uuid
from collections import Counter
from pathlib import Path

import pytest
from crash_plans import run_topology_file

from transactional.ops.snapshot import read_snapshot

from trident_kill_topology import DATA, expected

pytestmark = pytest.mark.integration


def test_an_upgrade_killed_at_its_switch_resumes_the_new_version_never_a_mix(
        tmp_path: Path, zk_url: str, redis_url: str) -> None:
    tid = f"upk-{uuid.uuid4().hex[:6]}"

    def run(version: int, crash_at: str | None, *args: str):
        return run_topology_file(tmp_path, "upgrade_kill_topology.py", zk_url, crash_at,
                                 {"TRIDENT_TEST_TOPOLOGY": tid, "TRIDENT_TEST_VERSION": str(version)},
                                 ["--state", redis_url, *args])

    assert run(1, None, "--max-batches", "3").returncode == 0
    p = run(2, "commit.before_record:txid=4")
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    p = run(1, None)
    assert p.returncode == 1
    assert ("txid 4 began to commit with the recorded topology and is not recorded: a new version must not "
            "finish it; run the recorded topology once more to finish it") in p.stderr
    p = run(2, None)
    assert p.returncode == 0, p.stderr[-3000:]
    maps = read_snapshot(redis_url, zk_url + "?session_timeout=1", tid)
    assert {str(k): v for k, v in maps["counts"].items()} == expected()
    later = Counter(w for p in DATA for (s,) in DATA[p][12:] for w in s.split() if len(w) > 1)
    assert {str(k): v for k, v in maps["more"].items()} == dict(later)
