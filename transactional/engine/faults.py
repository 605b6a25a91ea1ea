"""Crash points: SIGKILL (or SIGSTOP) this process at an exact moment, for recovery tests.

Set ``TRIDENT_CRASH_AT`` to ``name[:label=value[,label=value]]`` (several separated by
``;``), e.g. ``commit.before_record:txid=3`` or ``commit.after_task:txid=2,task=0``; or
``TRIDENT_PAUSE_AT`` (same form) to stop the process with SIGSTOP there instead, as a
long GC pause or a frozen VM would (the test sends SIGCONT; each pause point pauses once).
Both print a line ``trident: crash point ...`` / ``trident: pause point ...`` to stderr
first. The engine calls ``crash_point(name, **labels)`` at:

* ``process.after_meta``   txid's metadata is durable, its batch not yet launched
* ``commit.before``        txid processed, about to run the committers
* ``commit.after_task``    one committer task finished (labels txid, component, task)
* ``commit.before_write``  committers ran (updates buffered), user state not yet written
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
_PAUSE = _parse(os.environ.get("TRIDENT_PAUSE_AT", ""))


def crash_point(name: str, **labels: object) -> None:
    """SIGKILL this process if ``TRIDENT_CRASH_AT`` names this point; SIGSTOP it (once per
    point) if ``TRIDENT_PAUSE_AT`` does."""
    if not _SPEC and not _PAUSE:
        return
    for spec, what, sig in ((_SPEC, "crash", signal.SIGKILL), (_PAUSE, "pause", signal.SIGSTOP)):
        for want, kv in list(spec):
            if want == name and all(str(labels.get(k)) == v for k, v in kv.items()):
                sys.stderr.write(f"trident: {what} point {name} {labels} reached; {sig.name}\n")
                sys.stderr.flush()
                if sig == signal.SIGSTOP:
                    spec.remove((want, kv))
                os.kill(os.getpid(), sig)
