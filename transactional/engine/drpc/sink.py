"""Where a DRPC topology takes requests and returns answers: the interface both the local
queues (``transactional.engine.drpc``) and the remote servers
(``transactional.engine.drpc.remote``) implement."""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Entry", "Sink"]

#: one entry of a batch's metadata: [request id, args, attempts so far, origin server or ""]
Entry = list[Any]


class Sink(abc.ABC):
    """Where a DRPC topology takes requests and returns answers (one per function and
    source, in the driver process): a ``LocalDRPC``'s queue here, or the ``trident drpc``
    servers (``transactional.engine.drpc.remote``). ``origin`` names the server a request came
    from ("" for a local one)."""

    @abc.abstractmethod
    def has_requests(self) -> bool:
        """True when a request waits for a batch (asked before each batch; must be quick)."""

    def waiting(self) -> int | None:
        """How many requests wait for a batch (None: the sink cannot tell quickly)."""
        return None

    @abc.abstractmethod
    def take(self, n: int, wait_secs: float = 0.0) -> list[Entry]:
        """Up to ``n`` waiting requests as batch entries."""

    @abc.abstractmethod
    def answer(self, request_id: str, result: str, origin: str = "") -> bool:
        """Answer a request; False when it was over already (the answer is dropped)."""

    @abc.abstractmethod
    def fail(self, request_id: str, error: str, origin: str = "") -> bool:
        """End a request with ``DRPCExecutionException(error)``."""

    @abc.abstractmethod
    def retry(self, entry: Entry, attempts: int) -> bool:
        """Queue a failed request again after its ``attempts``-th failure."""

    def open(self) -> None:  # noqa: B027 - an optional hook
        """A run's spout starts taking requests from this sink (once per run's coordinator)."""

    def close(self) -> None:  # noqa: B027 - an optional hook
        """That run ended: it takes no more requests (once per ``open``)."""

    def on_input(self, callback: Callable[[], None], listen: bool = True) -> None:  # noqa: B027 - optional
        """Call ``callback()`` whenever a request arrives (``listen`` False: no more); a sink
        that cannot tell is polled (``has_requests``)."""


class InputListeners:
    """The callbacks that hear every request that starts waiting (the driver's wakeup):
    ``on_input`` registers one, ``_heard`` calls them all; shared by the local queue and the
    remote sink."""

    def __init__(self) -> None:
        self._listeners: list[Callable[[], None]] = []
        self._listeners_guard = threading.Lock()

    def on_input(self, callback: Callable[[], None], listen: bool = True) -> None:
        """Call ``callback()`` whenever a request starts waiting (``listen`` False: no more)."""
        with self._listeners_guard:
            if listen:
                self._listeners.append(callback)
            elif callback in self._listeners:
                self._listeners.remove(callback)

    def _heard(self) -> None:
        with self._listeners_guard:
            callbacks = list(self._listeners)
        for callback in callbacks:
            callback()
