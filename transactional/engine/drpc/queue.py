"""The requests of a DRPC function waiting for its topology, and their callers
(``RequestQueue``); the queues of this process's ``LocalDRPC``s (``local_queues``) and a
queue as a topology's sink."""

from __future__ import annotations

import collections
import itertools
import threading
import time
import uuid
from dataclasses import dataclass, field

from transactional.engine.drpc.sink import Entry, Sink
from transactional.exceptions import DRPCExecutionException

#: Storm's default ``drpc.request.timeout.secs``
DEFAULT_TIMEOUT_SECS = 600.0


# -- requests and the callers waiting for them ---------------------------------------------------

@dataclass
class _Call:
    """One request and its caller."""

    id: str
    args: str
    deadline: float
    attempts: int = 0
    done: threading.Event = field(default_factory=threading.Event)
    result: str | None = None
    error: str | None = None


class RequestQueue:
    """The requests of one function waiting for its topology, and their callers (thread
    safe; lives in the process that serves the calls: a ``LocalDRPC``'s, or the ``trident
    drpc`` server's). ``take`` hands requests to a batch; ``answer``/``fail`` end a call
    once (a second answer, or one for a call that timed out, is dropped); ``retry`` puts a
    failed request back at the front."""

    def __init__(self, function: str, timeout_secs: float | None = None) -> None:
        self.function = function
        self.timeout_secs = timeout_secs
        self.max_attempts = 5
        self._lock = threading.Condition()
        self._waiting: collections.deque[str] = collections.deque()
        self._calls: dict[str, _Call] = {}
        self._ids = itertools.count(1)
        self._prefix = uuid.uuid4().hex[:8]

    # the caller's side
    def submit(self, args: str, timeout_secs: float | None = None) -> _Call:
        """Queue a request; returns its call (``wait`` for the answer)."""
        timeout = timeout_secs if timeout_secs is not None else (
            self.timeout_secs if self.timeout_secs is not None else DEFAULT_TIMEOUT_SECS)
        call = _Call(f"{self._prefix}-{next(self._ids)}", args, time.monotonic() + timeout)
        with self._lock:
            self._calls[call.id] = call
            self._waiting.append(call.id)
            self._lock.notify_all()
        return call

    def wait(self, call: _Call) -> str:
        """The call's result; ``DRPCExecutionException`` with the error, or "timed out"."""
        if not call.done.wait(max(0.0, call.deadline - time.monotonic())):
            with self._lock:
                if not call.done.is_set():          # nobody answered it: it is over for everyone
                    self._calls.pop(call.id, None)
                    try:
                        self._waiting.remove(call.id)
                    except ValueError:
                        pass
                    call.error = "timed out"
                    call.done.set()
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

    def take(self, n: int, wait_secs: float = 0.0) -> list[Entry]:
        """Up to ``n`` waiting requests as batch entries, waiting up to ``wait_secs`` for one."""
        with self._lock:
            if not self._waiting and wait_secs > 0:
                self._lock.wait_for(lambda: bool(self._waiting), wait_secs)
            out: list[Entry] = []
            while self._waiting and len(out) < n:
                call = self._calls.get(self._waiting.popleft())
                if call is not None:
                    out.append([call.id, call.args, call.attempts, ""])
            return out

    def answer(self, request_id: str, result: str) -> bool:
        """Answer the call ``request_id`` with ``result``; False when it was answered, failed
        or timed out already (the answer is dropped: never twice, never to another)."""
        return self._end(request_id, result, None)

    def fail(self, request_id: str, error: str) -> bool:
        """End the call ``request_id`` with ``DRPCExecutionException(error)``."""
        return self._end(request_id, None, error)

    def retry(self, request_id: str, attempts: int) -> bool:
        """Queue the request again (first in line) after its ``attempts``-th failure."""
        with self._lock:
            call = self._calls.get(request_id)
            if call is None or call.done.is_set():
                return False
            call.attempts = attempts
            self._waiting.appendleft(request_id)
            self._lock.notify_all()
            return True

    def fail_all(self, error: str) -> int:
        """End every call still open with ``error`` (the topology serving them stopped)."""
        with self._lock:
            ids = list(self._calls)
        return sum(self.fail(i, error) for i in ids)

    def _end(self, request_id: str, result: str | None, error: str | None) -> bool:
        with self._lock:
            call = self._calls.pop(request_id, None)
            if call is None or call.done.is_set():
                return False
            try:
                self._waiting.remove(request_id)
            except ValueError:
                pass
            call.result, call.error = result, error
            call.done.set()
            return True


class _LocalSink(Sink):
    """A ``RequestQueue`` as a topology's sink."""

    def __init__(self, queue: RequestQueue) -> None:
        self.queue = queue

    def has_requests(self) -> bool:
        return self.queue.has_requests()

    def take(self, n: int, wait_secs: float = 0.0) -> list[Entry]:
        return self.queue.take(n, wait_secs)

    def answer(self, request_id: str, result: str, origin: str = "") -> bool:
        return self.queue.answer(request_id, result)

    def fail(self, request_id: str, error: str, origin: str = "") -> bool:
        return self.queue.fail(request_id, error)

    def retry(self, entry: Entry, attempts: int) -> bool:
        return self.queue.retry(entry[0], attempts)


#: the queues of this process's LocalDRPCs: source key ("local:<id>") -> function -> queue
_LOCAL: dict[str, dict[str, RequestQueue]] = {}


def local_queues(key: str) -> dict[str, RequestQueue]:
    """The queues of the ``LocalDRPC`` with source key ``key`` (made on first use)."""
    return _LOCAL.setdefault(key, {})

