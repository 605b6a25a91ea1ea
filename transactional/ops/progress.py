"""Progress lines of a run: a listener of the coordinator's transitions.

``Progress`` hears every ``transactional.engine.events.Transition`` ("launched",
"processed", "failed", "committing", "committed", "stopped") and logs the first commit at
once, then at most one line per ``interval_secs``::

    words: committed txid 12 (12 batches), 2 txids in flight, 1 failed attempt, 2,400 tuples, 480 tuples/s

and, from ``final()``, one closing line::

    words: committed txids 1..20 (20 batches), 1 failed attempt, 4,000 tuples in 8.1 s, 494 tuples/s; stopped: spout has nothing more

Tuples are the spouts' tuples of committed batches (the spouts' entries of a
``committed`` transition's ``info["emitted"]``); the rate counts from the first launched
batch, not from the start of the process (Spark's start-up is not the topology's speed).
A run that commits nothing says so ("no batch committed"), never "txids None..0".
The clock is a parameter: tests pass a fake one and advance it.

>>> lines = []
>>> now = [0.0]
>>> p = Progress("doc", ["spout"], interval_secs=2.0, clock=lambda: now[0], log=lines.append)
>>> from transactional.engine.events import Transition
>>> p(Transition("launched", 1, 1, 0.0))
>>> now[0] = 2.5
>>> p(Transition("committed", 1, 1, 2.5, {"emitted": {"spout": 10, "count": 4}}))
>>> lines
['doc: committed txid 1 (1 batch), 0 txids in flight, 0 failed attempts, 10 tuples, 4 tuples/s']
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from typing import Any

__all__ = ["Progress"]

_log = logging.getLogger("trident")


def plural(n: int, word: str) -> str:
    """``n`` and ``word``, in the plural unless ``n`` is 1: "1 batch", "2 batches"."""
    return f"{n:,} {word if n == 1 else word + ('es' if word.endswith('ch') else 's')}"


class Progress:
    """Logs a run's progress from the coordinator's transitions; add it to the engine's
    listeners (``progress = Progress(...)``; each transition: ``progress(t)``; when the
    run ends, however it ends: ``progress.final()``).

    ``topology_id`` starts every line; ``spout_ids`` are the components whose emitted
    tuples count as the run's tuples; ``interval_secs`` is the least time between two
    lines (the first commit is logged at once; before it, a line comes ``interval_secs``
    after the first transition heard); ``clock`` gives seconds (monotonic);
    ``log`` takes each line (default: the "trident" logger at INFO).
    """

    def __init__(self, topology_id: str, spout_ids: Collection[str], *, interval_secs: float = 2.0,
                 clock: Callable[[], float] = time.monotonic, log: Callable[[str], Any] | None = None) -> None:
        self.topology_id = topology_id
        self.spout_ids = frozenset(spout_ids)
        self.interval_secs = interval_secs
        self.clock = clock
        self.log: Callable[[str], Any] = log if log is not None else _log.info
        self.first_txid: int | None = None      # first txid this run committed
        self.last_txid: int | None = None       # last txid this run committed
        self.batches = 0                        # txids committed by this run
        self.failed = 0                         # failed attempts
        self.tuples = 0                         # spout tuples of committed batches
        self.in_flight: set[int] = set()        # launched, not yet committed
        self.started: float | None = None       # when the first batch was launched
        self.stopped_because = ""
        self._last_line: float | None = None    # when the last line was logged (or the first event)
        self._commit_logged = False

    @classmethod
    def for_topology(cls, topology: Any, **kwargs: Any) -> Progress:
        """A ``Progress`` for a built ``Topology``: its id, its spouts' ids."""
        spouts = [c.id for c in topology.components if c.kind == "spout"]
        return cls(topology.topology_id, spouts, **kwargs)

    def __call__(self, t: Any) -> None:
        """Hear one transition (a ``Transition``: ``kind``, ``txid``, ``info``); log a line
        when ``interval_secs`` passed since the last one."""
        now = self.clock()
        if t.kind == "launched":
            self.in_flight.add(t.txid)
            if self.started is None:
                self.started = now
        elif t.kind == "failed":
            self.failed += 1
        elif t.kind == "committed":
            self.in_flight.discard(t.txid)
            self.batches += 1
            if self.first_txid is None:
                self.first_txid = t.txid
            self.last_txid = t.txid
            emitted = t.info.get("emitted", {}) if t.info else {}
            self.tuples += sum(n for c, n in emitted.items() if c in self.spout_ids)
        elif t.kind == "stopped":
            self.in_flight.clear()
            self.stopped_because = (t.info or {}).get("reason", "")
        # the first commit is logged at once, also when a line came shortly before it (a
        # "no batch committed yet" line while the first jobs ran): a run that goes idle
        # after its first batches would otherwise never show a commit
        first_commit = t.kind == "committed" and not self._commit_logged
        if self._last_line is None:
            self._last_line = now
        if t.kind != "stopped" and (first_commit or now - self._last_line >= self.interval_secs):
            self._last_line = now
            self._commit_logged = self._commit_logged or t.kind == "committed"
            self.log(self.line())

    def rate(self) -> float:
        """Spout tuples per second since the first batch was launched (0 before)."""
        if self.started is None:
            return 0.0
        secs = self.clock() - self.started
        return self.tuples / secs if secs > 0 else 0.0

    def line(self) -> str:
        """The progress line as of now."""
        done = (f"committed txid {self.last_txid} ({plural(self.batches, 'batch')})"
                if self.last_txid is not None else "no batch committed yet")
        flight = len(self.in_flight)
        return (f"{self.topology_id}: {done}, {flight} txid{'' if flight == 1 else 's'} in flight, "
                f"{plural(self.failed, 'failed attempt')}, {plural(self.tuples, 'tuple')}, "
                f"{self.rate():,.0f} tuples/s")

    def final_line(self) -> str:
        """The closing line: what the run committed, its failures, tuples and rate."""
        if self.last_txid is None:
            done = "no batch committed"
        elif self.first_txid == self.last_txid:
            done = f"committed txid {self.last_txid} (1 batch)"
        else:
            done = f"committed txids {self.first_txid}..{self.last_txid} ({plural(self.batches, 'batch')})"
        secs = self.clock() - self.started if self.started is not None else 0.0
        text = (f"{self.topology_id}: {done}, {plural(self.failed, 'failed attempt')}, "
                f"{plural(self.tuples, 'tuple')} in {secs:.1f} s, {self.rate():,.0f} tuples/s")
        return text + (f"; stopped: {self.stopped_because}" if self.stopped_because else "")

    def final(self) -> None:
        """Log the closing line (call once when the run ends, however it ends)."""
        self.log(self.final_line())
