"""The requests of a DRPC function waiting for its topology, and their callers
(``RequestQueue``); the queues of this process's ``LocalDRPC``s (``local_queues``) and a
queue as a topology's sink."""

from __future__ import annotations

import collections
import itertools
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from transactional.engine.drpc.sink import Entry, InputListeners, Sink
from transactional.exceptions import DRPCExecutionException

#: Storm's default ``drpc.request.timeout.secs``
DEFAULT_TIMEOUT_SECS = 600.0


# -- requests and the callers waiting for them ---------------------------------------------------

@dataclass
class _Call:
    """One request and its caller; ``handed``/``driver``: when and to which driver (a
    ``trident drpc`` server's) a topology took it last; ``status``: how it ended, as HTTP
    (200 answered, 500 failed, 504 timed out, 503 no topology serves it)."""

    id: str
    args: str
    deadline: float
    attempts: int = 0
    done: threading.Event = field(default_factory=threading.Event)
    result: str | None = None
    error: str | None = None
    status: int = 200
    handed: float | None = None
    driver: str | None = None


class RequestQueue(InputListeners):
    """The requests of one function waiting for its topology, and their callers (thread
    safe; lives in the process that serves the calls: a ``LocalDRPC``'s, or the ``trident
    drpc`` server's, ``transactional.ops.drpc_server``, which is an HTTP front over one
    queue per function). ``take`` hands requests to a batch (or to a remote driver);
    ``answer``/``fail`` end a call once (a second answer, or one for a call that timed
    out, is dropped); ``retry`` and ``hand_back`` put a request back at the front.
    ``on_input`` callbacks hear every request that starts waiting (the driver's wakeup)."""

    def __init__(self, function: str, timeout_secs: float | None = None, id_prefix: str | None = None) -> None:
        self.function = function
        self.timeout_secs = timeout_secs
        self.max_attempts = 5
        self._lock = threading.Condition()
        self._waiting: collections.deque[str] = collections.deque()
        self._calls: dict[str, _Call] = {}
        self._ids = itertools.count(1)
        #: the start of every id of this queue (``<prefix>-<n>``)
        self.prefix = id_prefix or uuid.uuid4().hex[:8]
        InputListeners.__init__(self)

    # the caller's side
    def submit(self, args: str, timeout_secs: float | None = None) -> _Call:
        """Queue a request; returns its call (``wait`` for the answer)."""
        timeout = timeout_secs if timeout_secs is not None else (
            self.timeout_secs if self.timeout_secs is not None else DEFAULT_TIMEOUT_SECS)
        call = _Call(f"{self.prefix}-{next(self._ids)}", args, time.monotonic() + timeout)
        with self._lock:
            self._calls[call.id] = call
            self._waiting.append(call.id)
            self._lock.notify_all()
        self._heard()
        return call

    def settle(self, call: _Call, every: float | None = None, check: Callable[[_Call], None] | None = None) -> None:
        """Wait until ``call`` ends: answered, failed, or "timed out" (504) at its deadline;
        ``check(call)`` runs every ``every`` seconds meanwhile (the server's: is its
        function still served?)."""
        while True:
            left = call.deadline - time.monotonic()
            if call.done.wait(max(0.0, left if every is None else min(every, left))):
                return
            if time.monotonic() >= call.deadline:
                self._end(call.id, None, "timed out", 504)   # nobody answered it: over for everyone
            elif check is not None:
                check(call)

    def wait(self, call: _Call) -> str:
        """The call's result; ``DRPCExecutionException`` with the error, or "timed out"."""
        self.settle(call)
        if call.error is not None:
            raise DRPCExecutionException(call.error)
        assert call.result is not None
        return call.result

    # the topology's side
    def has_requests(self) -> bool:
        """True when a request waits for a batch."""
        return bool(self._waiting)

    def waiting(self) -> int:
        """How many requests wait for a batch."""
        return len(self._waiting)

    def take(self, n: int, wait_secs: float = 0.0, driver: str = "") -> list[Entry]:
        """Up to ``n`` waiting requests as batch entries, waiting up to ``wait_secs`` for one;
        ``driver``: who takes them (a server's remote driver, "" for a local batch)."""
        with self._lock:
            if not self._waiting and wait_secs > 0:
                self._lock.wait_for(lambda: bool(self._waiting), wait_secs)
            out: list[Entry] = []
            now = time.monotonic()
            while self._waiting and len(out) < n:
                call = self._calls.get(self._waiting.popleft())
                if call is not None:
                    call.handed, call.driver = now, driver
                    out.append([call.id, call.args, call.attempts, ""])
            return out

    def answer(self, request_id: str, result: str) -> bool:
        """Answer the call ``request_id`` with ``result``; False when it was answered, failed
        or timed out already (the answer is dropped: never twice, never to another)."""
        return self._end(request_id, result, None)

    def fail(self, request_id: str, error: str, status: int = 500) -> bool:
        """End the call ``request_id`` with ``DRPCExecutionException(error)``."""
        return self._end(request_id, None, error, status)

    def retry(self, request_id: str, attempts: int) -> bool:
        """Queue the request again (first in line) after its ``attempts``-th failure."""
        with self._lock:
            call = self._calls.get(request_id)
            if call is None or call.done.is_set():
                return False
            call.attempts = attempts
            self._waiting.appendleft(request_id)
            self._lock.notify_all()
        self._heard()
        return True

    def hand_back(self, which: Callable[[_Call], bool]) -> list[str]:
        """Queue again, first in line, every call handed to a driver for which ``which(call)``
        holds (its driver stopped, or held it too long); their ids."""
        with self._lock:
            waiting = set(self._waiting)
            back = [c for c in self._calls.values() if c.handed is not None and c.id not in waiting and which(c)]
            for c in back:
                c.handed, c.driver = None, None
                self._waiting.appendleft(c.id)
            if back:
                self._lock.notify_all()
        if back:
            self._heard()
        return [c.id for c in back]

    def wake(self) -> None:
        """Wake whoever waits in ``take`` or ``pause`` (to look again at why it waits)."""
        with self._lock:
            self._lock.notify_all()

    def pause(self, secs: float) -> None:
        """Wait ``secs``, or until the queue changes or ``wake`` is called."""
        with self._lock:
            self._lock.wait(secs)

    def fail_all(self, error: str, status: int = 500, waiting_only: bool = False) -> int:
        """End every call still open with ``error`` (the topology serving them stopped);
        ``waiting_only``: only those no driver holds."""
        with self._lock:
            ids = [c.id for c in self._calls.values() if not waiting_only or c.handed is None]
        return sum(self.fail(i, error, status) for i in ids)

    def _end(self, request_id: str, result: str | None, error: str | None, status: int = 200) -> bool:
        with self._lock:
            call = self._calls.pop(request_id, None)
            if call is None or call.done.is_set():
                return False
            try:
                self._waiting.remove(request_id)
            except ValueError:
                pass
            call.result, call.error, call.status = result, error, status
            call.done.set()
            return True


class _LocalSink(Sink):
    """A ``RequestQueue`` as a topology's sink."""

    def __init__(self, queue: RequestQueue) -> None:
        self.queue = queue

    def has_requests(self) -> bool:
        return self.queue.has_requests()

    def waiting(self) -> int | None:
        return self.queue.waiting()

    def take(self, n: int, wait_secs: float = 0.0) -> list[Entry]:
        return self.queue.take(n, wait_secs)

    def answer(self, request_id: str, result: str, origin: str = "") -> bool:
        return self.queue.answer(request_id, result)

    def fail(self, request_id: str, error: str, origin: str = "") -> bool:
        return self.queue.fail(request_id, error)

    def retry(self, entry: Entry, attempts: int) -> bool:
        return self.queue.retry(entry[0], attempts)

    def on_input(self, callback: Callable[[], None], listen: bool = True) -> None:
        self.queue.on_input(callback, listen)


#: the queues of this process's LocalDRPCs: source key ("local:<id>") -> function -> queue
_LOCAL: dict[str, dict[str, RequestQueue]] = {}


def local_queues(key: str) -> dict[str, RequestQueue]:
    """The queues of the ``LocalDRPC`` with source key ``key`` (made on first use)."""
    return _LOCAL.setdefault(key, {})

