"""How long calls to ZooKeeper and Redis take: one hook the backends time their I/O with.

``state/zookeeper/`` and ``state/redis.py`` wrap each call to their server in
``with timed(backend, op):``. Whoever wants the figures (the driver's metrics,
``transactional.ops.webui``) registers a *sink*, ``sink(backend, op, seconds)``; with no sink
registered, ``timed`` returns one shared do-nothing context manager, so an unobserved run
pays a function call and a truth test per server call, nothing more.

``backend`` is ``"zookeeper"`` or ``"redis"``; ``op`` is what the call does, in the words
the backends' error messages use (``"reading"``, ``"writing"``, ``"deleting"``,
``"listing"``, ``"checking"``, ...). A sink is called in the thread that made the call,
after it returned or raised; it must be quick and thread-safe, and what it raises is
dropped (timing never breaks I/O). Sinks are per process: in a Spark executor nothing is
registered, so calls made there (commits on executors) are not timed.

>>> seen = []
>>> add_sink(lambda backend, op, secs: seen.append((backend, op)))
>>> with timed("redis", "reading"):
...     pass
>>> seen
[('redis', 'reading')]
>>> clear_sinks()
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType

__all__ = ["Sink", "timed", "add_sink", "remove_sink", "clear_sinks"]

#: ``sink(backend, op, seconds)``
Sink = Callable[[str, str, float], None]

_sinks: tuple[Sink, ...] = ()
_lock = threading.Lock()


class _Timer:
    """Times one call and hands the duration to every sink registered when it ends."""

    __slots__ = ("backend", "op", "t0")

    def __init__(self, backend: str, op: str) -> None:
        self.backend = backend
        self.op = op
        self.t0 = 0.0

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        secs = time.perf_counter() - self.t0
        for sink in _sinks:
            try:
                sink(self.backend, self.op, secs)
            except Exception:  # noqa: BLE001 - a broken sink must not fail the call it timed
                pass


class _Untimed:
    """The context manager of an unobserved call: does nothing."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None


_UNTIMED = _Untimed()


def timed(backend: str, op: str) -> _Timer | _Untimed:
    """A context manager timing one call of ``backend`` doing ``op`` (a no-op while no sink
    is registered)."""
    if not _sinks:
        return _UNTIMED
    return _Timer(backend, op)


def add_sink(sink: Sink) -> None:
    """Hand the duration of every later timed call to ``sink`` (once, however often added)."""
    global _sinks
    with _lock:
        if sink not in _sinks:
            _sinks = (*_sinks, sink)


def remove_sink(sink: Sink) -> None:
    """Stop calling ``sink`` (absent: nothing happens)."""
    global _sinks
    with _lock:
        _sinks = tuple(s for s in _sinks if s != sink)


def clear_sinks() -> None:
    """Remove every sink (tests)."""
    global _sinks
    with _lock:
        _sinks = ()
