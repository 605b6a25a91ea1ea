"""The errors of the bottom layer: ``TridentError`` (the root of every error spark-trident
raises), ``ConfigError`` and the state errors ``state/`` raises. ``transactional.exceptions``
re-exports them, so ``from transactional.exceptions import X`` and ``except X`` name these
very classes."""

from __future__ import annotations

from typing import Any

from state.redaction import redact_text

__all__ = ["TridentError", "ConfigError", "StateError", "StateUnavailableError", "StateRefusedError",
           "StateCorruptError",
           "StateAheadError", "StateValueError", "UnstorableValueError", "ConflictingWriteError",
           "StateLossError", "LockHeldError", "LeadershipLostError"]


class TridentError(Exception):
    """Root of every error raised by spark-trident. Its message is redacted as it is made
    (``state.redaction``): no password or token a URL or setting carried shows in it."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*(redact_text(a) if isinstance(a, str) else a for a in args))


class ConfigError(TridentError, ValueError):
    """A configuration value is invalid; raised before anything runs."""


class StateError(TridentError):
    """User or coordinator state is unusable: unreachable, corrupt, or ahead of the coordinator."""


class StateValueError(StateError, TypeError):
    """A value given to the coordinator state is not JSON (a set, an object, NaN...); the
    message names the path and the field. Nothing of it is stored."""


class StateUnavailableError(StateError):
    """A state server (ZooKeeper, Redis) cannot be reached; the message names its address."""


class StateRefusedError(StateError, ConfigError):
    """A server that is up refused this client for good: a database or role that does not exist,
    a wrong password, no access. Stops the run at the first attempt: retrying cannot help."""


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
