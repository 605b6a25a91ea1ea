"""Topology files of the upgrade matrix for ``trident verify --upgrade-to``
(tests/transactional/ops/test_upgrade_verify.py): version 1 of tests/transactional/ops/test_upgrade.py's
word count, and version 2 with one kind of change of its ``ACCEPTED`` or ``REFUSED``."""

from __future__ import annotations

from pathlib import Path

__all__ = ["write_versions"]

_HERE = Path(__file__).resolve().parent
_OPS = _HERE.parent / "transactional" / "ops"

_FILE = '''"""{what} (written by tests/support/upgrade_versions.py)."""
import sys

sys.path[:0] = [{support!r}, {ops!r}]

import test_upgrade as u  # noqa: E402  (beside its tests, not in tests/support)

CONFIG = {config!r}


def build_topology():
    v = {{**u.ACCEPTED, **{{k: w[0] for k, w in u.REFUSED.items()}}, **{extra}}}.get({change!r}, {{}})
    return u.build("upgrade-verify", **{{k: x for k, x in v.items() if k != "allow_dropped_state"}})
'''


def write_versions(folder: Path, change: str, extra: str = "{}") -> tuple[str, str]:
    """``(version 1's file, version 2's file)`` in ``folder``: version 2 makes ``change``
    (a key of ``ACCEPTED`` or ``REFUSED``, or of ``extra``: the source of a dict of more
    kinds, evaluated in the file with ``u`` the test module)."""
    from test_upgrade import ACCEPTED

    paths = []
    for name, what, kind in (("v1.py", "version 1", None), ("v2.py", f"version 2: {change}", change)):
        allow = bool(kind and ACCEPTED.get(kind, {}).get("allow_dropped_state"))
        config = {"executor": "in-process", "max_spout_pending": 1, **({"allow_dropped_state": True} if allow else {})}
        path = folder / name
        path.write_text(_FILE.format(what=what, support=str(_HERE), ops=str(_OPS), config=config, change=kind,
                                     extra=extra))
        paths.append(str(path))
    return paths[0], paths[1]
