"""Errors of spark-trident: one root, messages that name the thing and the fix."""

from __future__ import annotations

from typing import Any

from transactional.redaction import redact_text


class TridentError(Exception):
    """Root of every error raised by spark-trident. Its message is redacted as it is made
    (``transactional.redaction``): no password or token a URL or setting carried shows in it."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*(redact_text(a) if isinstance(a, str) else a for a in args))


class ConfigError(TridentError, ValueError):
    """A configuration value is invalid; raised before anything runs."""


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


class StateError(TridentError):
    """User or coordinator state is unusable: unreachable, corrupt, or ahead of the coordinator."""


class StateValueError(StateError, TypeError):
    """A value given to the coordinator state is not JSON (a set, an object, NaN...); the
    message names the path and the field. Nothing of it is stored."""


class StateUnavailableError(StateError):
    """A state server (ZooKeeper, Redis) cannot be reached; the message names its address."""


class StateCorruptError(StateError):
    """A stored value is not in the form the wrapper expects; the message names the key."""


class UnstorableValueError(StateError, TypeError):
    """A map was handed a value it cannot store (not encodable by the backing's serializer,
    e.g. a set for JSON; not a number for a counter map). Found before anything of the
    commit is written; the message names the map, the key and the value. The run stops:
    the same batch would produce the same value again."""


class StateAheadError(StateError):
    """A stored txid is newer than the batch being committed: a second writer, or a reused
    topology id. The run stops rather than corrupting counts."""


class ConflictingWriteError(StateError):
    """Two writers of one attempt (committer tasks on executors) updated the same key of a
    map; the second write is refused before anything of it is stored. The run stops: route
    the key to one task (fields grouping) or commit on the driver."""


class StateLossError(StateError, ConfigError):
    """A run would silently drop state an earlier run committed: its user state is not the
    store the coordinator's committed txids were written to, durable coordination is paired
    with state that dies with the process, or a stateful bolt's state cannot be moved to
    its new parallelism. Raised before anything is written; the message names both sides
    and the fix (``accept_state_loss`` / ``--accept-state-loss`` accepts a loss knowingly)."""


class LockHeldError(StateError):
    """Another driver holds the lock of this topology id; the message names the holder."""


class LeadershipLostError(StateError):
    """This driver lost its lock (session expired): it must not commit any more."""


class SpoutError(TridentError):
    """A spout cannot deliver what the coordinator planned (e.g. an offset range deleted by
    retention), or its coordinator planned metadata JSON cannot hold. The run stops; the
    message names the spout (topic, partition, offsets) or field, and the txid."""


class AggregateOverflowError(TridentError, ArithmeticError):
    """A ``Count``/``Sum`` of a batch does not fit the 64-bit integers (Arrow's ``int64``,
    ``uint64``, or a decimal's precision) it is computed in. The batch stops rather than
    give a wrapped number; the message names the stage, the field, the txid and the fix.
    The run stops: a replay adds the same numbers."""
