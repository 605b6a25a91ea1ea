"""Crash points: SIGKILL this process at an exact moment, for recovery tests.

Set ``TRIDENT_CRASH_AT`` to ``name[:label=value[,label=value]]`` (several separated by
``;``), e.g. ``commit.before_record:txid=3`` or ``commit.after_task:txid=2,task=0``. The
engine calls ``crash_point(name, **labels)`` at:

* ``process.after_meta``   txid's metadata is durable, its batch not yet launched
* ``commit.before``        txid processed, about to run the committers
* ``commit.after_task``    one committer task finished (labels txid, component, task)
* ``commit.before_record`` user state written for txid, txid not yet recorded
* ``commit.after_record``  txid recorded, its metadata not yet dropped
"""

from __future__ import annotations

import os
import signal
import sys

_SPEC: list[tuple[str, dict[str, str]]] = []


def _parse(text: str) -> list[tuple[str, dict[str, str]]]:
    out = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, _, labels = part.partition(":")
        kv = dict(item.split("=", 1) for item in labels.split(",") if "=" in item)
        out.append((name, kv))
    return out


_SPEC = _parse(os.environ.get("TRIDENT_CRASH_AT", ""))


def crash_point(name: str, **labels: object) -> None:
    """Kill this process with SIGKILL if ``TRIDENT_CRASH_AT`` names this point."""
    if not _SPEC:
        return
    for want, kv in _SPEC:
        if want == name and all(str(labels.get(k)) == v for k, v in kv.items()):
            sys.stderr.write(f"trident: crash point {name} {labels} reached; SIGKILL\n")
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)
