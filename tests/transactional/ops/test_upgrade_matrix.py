"""The upgrade matrix, killed at the switch: for each accepted kind of change of
tests/transactional/ops/test_upgrade.py (``ACCEPTED``), version 1 commits two txids, then version 2 -- the
change -- is SIGKILLed at its first txid, before the switch is recorded (kinds in even
places) or just after (odd places), and runs again to the end. The Redis map ``counts``
then holds every word once (the fault-free counts), and ``more`` (the kind that adds it)
every word from the switch on: nothing lost or doubled, never a mix of versions."""

from __future__ import annotations

import signal
import uuid
from collections import Counter
from pathlib import Path

import pytest
from crash_plans import run_topology_file

from transactional.ops.snapshot import read_snapshot

from test_upgrade import ACCEPTED
from trident_kill_topology import DATA, expected

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_every_accepted_change_killed_at_its_switch_counts_every_word_once(
        tmp_path: Path, zk_url: str, redis_url: str) -> None:
    for i, change in enumerate(sorted(ACCEPTED)):
        tid = f"upm-{uuid.uuid4().hex[:6]}"
        point = "commit.before_record" if i % 2 == 0 else "commit.after_record"
        extra = ["--set", "allow_dropped_state=true"] if ACCEPTED[change].get("allow_dropped_state") else []

        def run(changed: str | None, crash_at: str | None, *args: str, tid: str = tid, extra: list[str] = extra):
            env = {"TRIDENT_TEST_TOPOLOGY": tid, **({"TRIDENT_TEST_CHANGE": changed} if changed else {})}
            return run_topology_file(tmp_path, "upgrade_matrix_topology.py", zk_url, crash_at, env,
                                     ["--state", redis_url, "--max-spout-pending", "1", *extra, *args])

        p = run(None, None, "--max-batches", "2")
        assert p.returncode == 0, (change, p.stderr[-2000:])
        p = run(change, f"{point}:txid=3")
        assert p.returncode == -signal.SIGKILL, (change, p.stderr[-2000:])
        p = run(change, None)
        assert p.returncode == 0, (change, p.stderr[-3000:])
        maps = read_snapshot(redis_url, zk_url + "?session_timeout=1", tid)
        if not ACCEPTED[change].get("drop"):
            counts = maps.get("word-counts", maps.get("counts"))
            assert {str(k): v for k, v in counts.items()} == expected(), (change, point)
        if ACCEPTED[change].get("second"):
            later = Counter(w for part in DATA for (s,) in DATA[part][2 * 4:] for w in s.split())
            assert {str(k): v for k, v in maps["more"].items()} == dict(later), (change, point)
