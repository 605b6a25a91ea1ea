"""``trident rebalance`` of a Trident window stage 1 -> 3 -> 1 under driver SIGKILLs, on a
real redis-server (transactional/engine/layout.py ``windows_stay``; docs/windows.md,
"Rebalancing"): sessions open across the rebalances fire once each, exactly as in a run
without rebalances or kills, and the tasks a rebalance added never hold a window's tuple."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import pytest
import rebalance_window_topology as rw
from crash_plans import run_topology_file

from state.base import open_transactional_state
from transactional.ops.control import request
from transactional.ops.snapshot import read_snapshot

pytestmark = pytest.mark.integration


def test_a_session_window_stage_rebalanced_1_3_1_under_sigkills_fires_each_session_once(
        tmp_path: Path, zk_url: str, redis_url: str) -> None:
    coordination = zk_url + "?session_timeout=1"

    def run(tid: str, crash_at: str | None, *args: str):      # noqa: ANN202 - a CompletedProcess
        return run_topology_file(tmp_path, "rebalance_window_topology.py", zk_url, crash_at,
                                 {"TRIDENT_TEST_TOPOLOGY": tid}, ["--state", redis_url, *args])

    def tasks(tid: str) -> tuple[int, int]:
        st = open_transactional_state(coordination, tid, read_only=True)
        try:
            return st.get("layout")["components"][rw.WINDOW]["tasks"], int(st.get("committed")["txid"])
        finally:
            st.close()

    clean = f"rbwc-{uuid.uuid4().hex[:6]}"
    assert run(clean, None).returncode == 0
    want = read_snapshot(redis_url, coordination, clean)
    assert sum(want["fired"].values()) >= 6          # sessions fired, some of them after txid 2 and 4

    tid = f"rbw-{uuid.uuid4().hex[:6]}"
    assert run(tid, None, "--max-batches", "2").returncode == 0
    request(coordination, tid, "rebalance", tasks={rw.WINDOW: 3})
    p = run(tid, "rebalance.recorded")                         # killed right after the new count is recorded
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    p = run(tid, None, "--max-batches", "2")
    assert p.returncode == 0, p.stderr[-3000:]
    assert tasks(tid) == (3, 4)
    request(coordination, tid, "rebalance", tasks={rw.WINDOW: 1})
    p = run(tid, "rebalance.before_record")                    # killed right before it is recorded
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    assert tasks(tid) == (3, 4)                                # the old layout, whole
    snap = read_snapshot(redis_url, coordination, tid)
    assert [len(snap["sessions"][f"window:{t}"]["events"]) for t in (1, 2)] == [0, 0]
    assert snap["sessions"]["window:0"]["events"]              # sessions open across the move
    p = run(tid, None)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "finishing the rebalance" in p.stderr and tasks(tid)[0] == 1
    got = read_snapshot(redis_url, coordination, tid)
    assert got["fired"] == want["fired"]
    assert got["sessions"]["window:0"]["events"] == want["sessions"]["window:0"]["events"]
