"""Version 1, or version 2 with one accepted change of tests/transactional/ops/test_upgrade.py's
``ACCEPTED`` (``TRIDENT_TEST_CHANGE``), of that file's word count, for the upgrade matrix
killed at its switch (tests/transactional/ops/test_upgrade_matrix.py). ``TRIDENT_TEST_TOPOLOGY``:
the id."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "transactional" / "ops"))

from test_upgrade import ACCEPTED, build  # noqa: E402  (beside its tests, not in tests/support)

__all__ = ["build_topology"]


def build_topology():
    change = os.environ.get("TRIDENT_TEST_CHANGE")
    v = {k: x for k, x in ACCEPTED[change].items() if k != "allow_dropped_state"} if change else {}
    return build(os.environ["TRIDENT_TEST_TOPOLOGY"], **v)
