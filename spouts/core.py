"""Core spouts: Storm's ``IRichSpout`` for at-least-once topologies (docs/design.md §7).

A core spout is asked for tuples (``next_tuple``) and told their fate: ``ack(msg_id)``
when a tuple's whole tree was processed, ``fail(msg_id)`` when it failed or timed out, so
that the spout replays it. A tuple emitted without a ``msg_id`` is not tracked.
"""

from __future__ import annotations

import abc
from typing import Any, Protocol

from spouts.base import OutputDeclarer, SpoutContext


class SpoutOutputCollector(Protocol):
    """Given to ``open``: where a core spout emits."""

    def emit(self, values: tuple[Any, ...], msg_id: Any = None, stream: str = "default") -> Any:
        """Send ``values`` to the subscribers of ``stream``; with a ``msg_id``, the tuple's
        tree is tracked and ``ack(msg_id)`` or ``fail(msg_id)`` follows."""


class BaseRichSpout(abc.ABC):
    """Storm's ``BaseRichSpout``: override ``next_tuple`` and ``declare_output_fields``;
    ``open``, ``ack``, ``fail`` and ``close`` do nothing unless overridden."""

    def open(self, conf: dict[str, Any], context: SpoutContext, collector: SpoutOutputCollector) -> None:
        """Called once before the first ``next_tuple`` (connect, keep the collector)."""
        return None

    @abc.abstractmethod
    def next_tuple(self) -> None:
        """Emit zero or more tuples; return soon (the caller polls again)."""

    def ack(self, msg_id: Any) -> None:
        """The tuple emitted with ``msg_id`` was fully processed."""
        return None

    def fail(self, msg_id: Any) -> None:
        """The tuple emitted with ``msg_id`` failed or timed out: replay it if it matters."""
        return None

    def close(self) -> None:
        """Called once at the end (may not be called after a crash)."""
        return None

    @abc.abstractmethod
    def declare_output_fields(self, declarer: OutputDeclarer) -> None:
        """Name the fields of each output stream."""
