"""The ``trident`` command as a user runs it (subprocesses: a fresh driver each)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def trident(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "transactional.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def test_trident_run_prints_the_summary_progress_and_exact_results():
    p = trident("run", "examples/global_count.py", "--master", "local[1]", "--max-spout-pending", "2")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "global-count: committed 3 batches (txids 1..3), 3 attempts, 0 failed; 18 tuples" in p.stdout
    assert "global count: 18 (expected 18)" in p.stdout
    assert "committed txid 3: 3 batches" in p.stderr, "progress lines on stderr"
    assert "Spark UI of trident-global-count (master local[1]): http://" in p.stderr, "the UI is on and named"


def test_trident_describe_reads_the_topology_without_running_it():
    p = trident("describe", "examples/transactional_words.py")
    assert p.returncode == 0, p.stderr
    assert "count (KeyedCountUpdater) x3 [commit committer]" in p.stdout
    assert "bucketize (Bucketize) x2 [commit]" in p.stdout
    assert "<- spout/default fields on ('word',)" in p.stdout


def test_bad_settings_and_files_get_one_clear_line():
    p = trident("run", "examples/global_count.py", "--max-spout-pending", "0")
    assert p.returncode == 1
    assert "trident: error: invalid TopologyConfig: max_spout_pending: must be >= 1 (got 0)" in p.stderr
    p = trident("run", "examples/nope.py")
    assert p.returncode != 0 and "no such topology file: examples/nope.py" in p.stderr
    p = trident("run", "examples/global_count.py", "--state", "mysql://x")
    assert p.returncode == 1 and "state: state URL 'mysql://x' is not supported; use 'memory://' or 'redis://" in p.stderr
