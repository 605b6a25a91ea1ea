"""A child process committing txid 2 of task 0 of a lake table's ``add`` state, SIGSTOPped
at ``<kind>.before_commit`` (``TRIDENT_PAUSE_AT``) while the test writes the table: the
concurrent-writer tests of tests/trident/test_delta_state.py and test_iceberg_state.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from crash_plans import REPO

CHILD = """
import sys
from lake_kill_topology import COUNTS
from trident.state import EPOCH, TOPOLOGY_ID
kind, where = sys.argv[1], sys.argv[2]
if kind == "delta":
    from trident.delta import DeltaStateFactory
    f = DeltaStateFactory(where, COUNTS, mode="add", key_fields=["word"])
else:
    from trident.iceberg import IcebergStateFactory, sql_catalog
    f = IcebergStateFactory(sql_catalog(where), "trident.counts", COUNTS, mode="add", key_fields=["word"])
st = f.make_state({EPOCH: 1, TOPOLOGY_ID: "t"}, None, 0, 1)
st.begin_commit(2); st.add_rows([("a", 10), ("b", 1)])
try:
    st.commit(2)
except Exception as e:
    print(type(e).__name__, e); sys.exit(3)
"""


def commit_paused(kind: str, where: Path, while_paused: Callable[[], object]) -> subprocess.CompletedProcess[str]:
    """Run the child until it stops before its commit, call ``while_paused()``, let it go on."""
    env = {**os.environ, "TRIDENT_PAUSE_AT": f"{kind}.before_commit:txid=2",
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "support"), str(REPO), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.Popen([sys.executable, "-c", CHILD, kind, str(where)], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stderr is not None
    line = p.stderr.readline()                          # written just before the child stops itself
    assert f"pause point {kind}.before_commit" in line, line + p.stderr.read()
    while_paused()
    os.kill(p.pid, signal.SIGCONT)
    out, err = p.communicate(timeout=60)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)
