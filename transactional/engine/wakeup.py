"""What the driver sleeps on between actions (docs/design.md, "Latency"): an event that a
finished processing job, a spout's new input (a DRPC request), an operator's request (a
kill) or a timer sets, instead of sleeping a fixed interval and looking again.

>>> w = Wakeup()
>>> w.input()                 # a spout's coordinator: input arrived
>>> w.wait(10.0), w.take_input()
(True, True)
>>> w.wait(0.0), w.take_input()
(False, False)
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable

__all__ = ["Wakeup", "WakesDriver"]


class Wakeup:
    """A flag the driver waits on (``wait``) and anyone sets (``set``, ``input``), from
    any thread. A ``set`` before the ``wait`` is not lost: the next ``wait`` returns at once."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._set = False
        self._input = False

    def set(self) -> None:
        """Wake the driver: something happened (a job ended, the operator asked)."""
        with self._cond:
            self._set = True
            self._cond.notify_all()

    def input(self) -> None:
        """Wake the driver because a spout has input now: it asks the spouts at once
        (``Coordinator.ready``), not at its next poll."""
        with self._cond:
            self._set = self._input = True
            self._cond.notify_all()

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a ``set``; True when one came (and clear it)."""
        with self._cond:
            if not self._set and timeout > 0:
                self._cond.wait(timeout)
            woken, self._set = self._set, False
            return woken

    def take_input(self) -> bool:
        """True when input arrived since the last call (and forget it)."""
        with self._cond:
            got, self._input = self._input, False
            return got


class WakesDriver(abc.ABC):
    """A spout coordinator whose input arrives as events (a DRPC spout's requests) mixes
    this in: the driver gives it ``wake`` before the run's first plan, and it calls
    ``wake()`` (from any thread) whenever input arrives, so the driver plans the next
    batch at once instead of at its next poll (``poll_interval_secs``). ``is_ready`` is
    still asked before each plan; a coordinator without this mixin is polled."""

    @abc.abstractmethod
    def wake_on_input(self, wake: Callable[[], None] | None) -> None:
        """Call ``wake()`` whenever input arrives from now on (None: stop calling it)."""

    def gather_while(self, busy: Callable[[], bool] | None) -> None:  # noqa: B027 - an optional hook
        """The driver gives ``busy`` before the run's first plan (None at its end): while
        ``busy()`` is true, a batch of the run is processing, and a coordinator may hold back
        a part batch from ``is_ready`` so that what arrives meanwhile goes into the next one
        (the driver plans again when a batch's processing ends). Not overridden: no gathering."""
