"""Kafka records as tuple values: the deserializers and the fields a spout can emit
(``RECORD_FIELDS``); shared by the transactional and the core Kafka spouts."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from transactional.exceptions import ConfigError

__all__ = ["RECORD_FIELDS", "Deserializer", "deserializer_for", "record_values"]

#: Attributes of a Kafka record a spout can emit, in the order given by ``fields``.
RECORD_FIELDS = ("topic", "partition", "offset", "key", "value", "timestamp")

Deserializer = Callable[[bytes | None], Any]


def deserializer_for(spec: str | Deserializer, what: str) -> Deserializer:
    """The function turning a record's bytes into a value for ``spec``: ``'bytes'``,
    ``'utf-8'``, ``'json'`` or a callable of your own; ``what`` names the option in errors."""
    if callable(spec):
        return spec
    if spec == "bytes":
        return _identity
    if spec in ("utf-8", "utf8", "str"):
        return _utf8
    if spec == "json":
        return _json
    msg = f"{what} must be 'bytes', 'utf-8', 'json' or a callable(bytes) -> value; got {spec!r}"
    raise ConfigError(msg)


def record_values(m: Any, fields: Sequence[str], key_of: Deserializer, value_of: Deserializer, *,
                  expand: bool = False, head: tuple[Any, ...] = ()) -> tuple[Any, ...]:
    """The values of record ``m`` for ``fields`` (among ``RECORD_FIELDS``), after ``head``;
    ``expand``: the decoded value is a tuple of several fields' values, spliced in."""
    out = [*head]
    for f in fields:
        if f == "value":
            v = value_of(m.value())
            if expand:
                out.extend(v)
            else:
                out.append(v)
        elif f == "key":
            out.append(key_of(m.key()))
        elif f == "timestamp":
            out.append(m.timestamp()[1])
        else:
            out.append(getattr(m, f)())
    return tuple(out)


def _identity(b: bytes | None) -> Any:
    return b


def _utf8(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8")


def _json(b: bytes | None) -> Any:
    return None if b is None else json.loads(b)
