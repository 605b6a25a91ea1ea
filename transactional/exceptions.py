"""Errors of spark-trident: one root, messages that name the thing and the fix. The root,
``ConfigError`` and the state errors are defined by the bottom layer (``state.errors``) and
re-exported here: import any of them from this module."""

from __future__ import annotations

from state.errors import (
    ConfigError,
    ConflictingWriteError,
    LeadershipLostError,
    LockHeldError,
    StateAheadError,
    StateCorruptError,
    StateError,
    StateLossError,
    StateRefusedError,
    StateUnavailableError,
    StateValueError,
    TridentError,
    UnstorableValueError,
)
from state.redaction import redact_text

__all__ = ["TridentError", "ConfigError", "TopologyError", "InvalidTupleError", "FailedException",
           "TopologyFailedError", "StateError", "StateUnavailableError", "StateRefusedError", "StateCorruptError",
           "StateAheadError", "StateValueError", "UnstorableValueError", "ConflictingWriteError",
           "StateLossError", "LockHeldError", "LeadershipLostError", "SpoutError", "AggregateOverflowError",
           "DRPCExecutionException", "ColumnTypeError"]


class TopologyError(TridentError, ValueError):
    """The topology is malformed (unknown component or field, cycle, ...); raised by ``build()``."""


class InvalidTupleError(TridentError):
    """A component emitted a tuple that breaks the contract (no TransactionAttempt first,
    wrong number of values, undeclared stream). A programming error: the run stops at once."""


class FailedException(TridentError):
    """Raise anywhere in a bolt or emitter to fail only the current batch; it is replayed.

    As Storm's ``FailedException``: the batch (and every later batch still in flight) is
    re-emitted with a new attempt id. Other exceptions are retried the same way but count
    towards ``max_attempts``; so does this one.
    """


class TopologyFailedError(TridentError):
    """The run stopped: a txid failed ``max_attempts`` times, or an unrecoverable error.

    Attributes name where: ``txid``, ``component``, ``task`` and ``cause`` (a text).
    """

    def __init__(self, message: str, *, txid: int | None = None, component: str | None = None,
                 task: int | None = None, cause: str | None = None) -> None:
        super().__init__(message)
        self.txid = txid
        self.component = component
        self.task = task
        self.cause = redact_text(cause) if cause is not None else None


class SpoutError(TridentError):
    """A spout cannot deliver what the coordinator planned (e.g. an offset range deleted by
    retention), or its coordinator planned metadata JSON cannot hold. The run stops; the
    message names the spout (topic, partition, offsets) or field, and the txid."""


class ColumnTypeError(SpoutError, ValueError):
    """A spout's value does not fit the Arrow type its ``Fields`` declare for it
    (``Fields(..., types={"n": "int64"})``), as the spout builds a batch of columns for
    consumers that take them. The message names the field, the declared type and the
    value; the run stops (a replay holds the same value)."""


class AggregateOverflowError(TridentError, ArithmeticError):
    """A ``Count``/``Sum`` of a batch does not fit the 64-bit integers (Arrow's ``int64``,
    ``uint64``, or a decimal's precision) it is computed in. The batch stops rather than
    give a wrapped number; the message names the stage, the field, the txid and the fix.
    The run stops: a replay adds the same numbers."""


class DRPCExecutionException(TridentError):
    """A Distributed RPC call got no result (Storm's ``DRPCExecutionException``): the
    function is unknown, the args are not text, the request failed ``max_attempts`` times
    (the message carries the error), or it was not answered within
    ``drpc_request_timeout_secs`` ("timed out"). From a ``trident drpc`` server, ``status``
    is its HTTP answer: 503 (no running topology serves the function), 500 (the call
    failed), 504 (timed out), 401, 400, 413 (the request was refused); 0 when the server
    could not be reached; None otherwise."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
