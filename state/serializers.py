"""How the Redis backing's stored values become bytes: the ``Serializer`` protocol and the
default compact JSON (``orjson`` when installed)."""

from __future__ import annotations

import json
from typing import Any, Protocol, runtime_checkable

__all__ = ["Serializer", "JSONSerializer", "JSON"]


@runtime_checkable
class Serializer(Protocol):
    """How stored values become bytes. Any object with these two methods will do
    (``pickle`` itself does, but never unpickle data others can write)."""

    def dumps(self, value: Any) -> bytes | str:
        """The stored form of ``value`` (a wrapper dict such as ``{"txid": 1, "val": 3}``)."""
        ...

    def loads(self, data: bytes) -> Any:
        """The value back from what ``dumps`` returned (Redis hands back bytes)."""
        ...


class JSONSerializer:
    """Compact JSON, the default: readable with ``redis-cli GET``, safe to load.

    Tuples come back as lists and dict keys as strings, as with any JSON store. With
    ``orjson`` installed (the ``redis-fast`` extra) it encodes and decodes, several times
    faster than the standard library; a value it cannot take (an int beyond 64 bits, a
    NaN) goes through ``json``, so the stored text is JSON either way.

    >>> JSON.loads(JSON.dumps({"txid": 1, "val": [1, 2]}))
    {'txid': 1, 'val': [1, 2]}
    """

    _encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
    _decode = json.JSONDecoder().decode

    def dumps(self, value: Any) -> bytes:
        """``value`` as compact UTF-8 JSON bytes."""
        if _orjson is not None:
            try:
                return _orjson.dumps(value, option=_ORJSON_OPTIONS)
            except TypeError:
                pass
        return self._encode(value).encode()

    def loads(self, data: bytes | str) -> Any:
        """The value of JSON ``data`` (bytes as Redis returns them, or str)."""
        if _orjson is not None:
            try:
                return _orjson.loads(data)
            except _orjson.JSONDecodeError:
                pass
        return self._decode(data.decode() if isinstance(data, (bytes, bytearray)) else data)

    def __reduce__(self) -> str:
        return "JSON"  # unpickles as the module-level singleton

    def __repr__(self) -> str:
        return "JSON"


try:
    import orjson as _orjson

    _ORJSON_OPTIONS = _orjson.OPT_NON_STR_KEYS
except ImportError:  # pragma: no cover - the redis-fast extra is optional
    _orjson = None   # type: ignore[assignment]
    _ORJSON_OPTIONS = 0


#: The default serializer.
JSON = JSONSerializer()


def _dumps_batch(batch: list[list[str]]) -> bytes | str:
    """A counter batch as compact JSON (orjson when installed)."""
    if _orjson is not None:
        return _orjson.dumps(batch)
    return json.dumps(batch, ensure_ascii=False, separators=(",", ":"))

