"""Key identity and state names: one definition for every backing (docs/design.md §5).

**Key identity.** Two map keys are the same key exactly when ``encode_key`` gives the
same string. That string is what every backing stores under (the Redis key suffix, the
memory backing's dict key), so a key means the same thing in memory and in Redis:

* ``str`` keys are themselves (``"apple"``); one starting with ``~`` gets ``~s`` in front;
* ``bytes`` are ``~b<hex>``;
* everything else JSON can hold (int, float, bool, None, tuples and lists of those) is
  ``~j<compact JSON>``.

So ``1``, ``1.0``, ``True`` and ``"1"`` are four different keys (as in Trident, where keys
are compared with Java's ``equals``: ``Integer(1)``, ``Double(1.0)``, ``Boolean(true)``
differ), while ``("a", 2)`` and ``["a", 2]`` are one key (JSON has no tuples).

**State names.** A map's namespace is ``<topology_id>:<name>``; the topology id has no
``:``, and ``check_state_name`` refuses names with ``:`` or a leading ``~``, so no two
(map, key) pairs share a stored key, and no map key meets the topology's bookkeeping
(``<topology_id>:~fence``).
"""

from __future__ import annotations

import json
from typing import Any

from state.errors import ConfigError

__all__ = ["encode_key", "decode_key", "hashable_key", "check_state_name"]


def encode_key(key: Any) -> str:
    """The identity of a map key as a string: equal strings, equal keys.

    >>> encode_key("apple"), encode_key(1), encode_key(1.0), encode_key(True)
    ('apple', '~j1', '~j1.0', '~jtrue')
    >>> encode_key(("a", 2)) == encode_key(["a", 2]), encode_key("~x")
    (True, '~s~x')
    """
    if type(key) is str:
        return "~s" + key if key.startswith("~") else key
    if isinstance(key, str):
        return encode_key(str(key))
    if isinstance(key, (bytes, bytearray)):
        return "~b" + bytes(key).hex()
    try:
        return "~j" + json.dumps(key, separators=(",", ":"), sort_keys=True, ensure_ascii=False,
                                 allow_nan=False)
    except (TypeError, ValueError) as e:
        msg = (
            f"map key {key!r} of type {type(key).__name__} cannot be stored: use str, "
            "bytes, int, float, bool, None or tuples of those"
        )
        raise TypeError(msg) from e


def decode_key(suffix: str) -> Any:
    """Inverse of ``encode_key`` (tuples come back as lists).

    >>> decode_key("apple"), decode_key("~j1"), decode_key("~s~x")
    ('apple', 1, '~x')
    """
    if not suffix.startswith("~"):
        return suffix
    tag, body = suffix[1:2], suffix[2:]
    if tag == "s":
        return body
    if tag == "b":
        return bytes.fromhex(body)
    if tag == "j":
        return json.loads(body)
    msg = f"{suffix!r} is not an encoded map key"
    raise ValueError(msg)


def hashable_key(key: Any) -> Any:
    """A decoded key as a dict key: JSON lists become tuples."""
    return tuple(hashable_key(x) for x in key) if isinstance(key, list) else key


def check_state_name(name: Any) -> str:
    """``name`` if it can name a map (non-empty str, no ``:``, not starting with ``~``).

    >>> check_state_name("counts")
    'counts'
    >>> check_state_name("counts:x")
    Traceback (most recent call last):
    ...
    state.errors.ConfigError: map state name 'counts:x' contains ':'; ...
    """
    if not isinstance(name, str) or not name:
        msg = f"map state name must be a non-empty str such as 'counts'; got {name!r}"
        raise ConfigError(msg)
    if ":" in name:
        msg = (
            f"map state name {name!r} contains ':'; the stored key of map 'a' key "
            "'b:c' would be that of map 'a:b' key 'c'. Use another separator, "
            f"e.g. {name.replace(':', '-')!r}"
        )
        raise ConfigError(msg)
    if name.startswith("~"):
        msg = (
            f"map state name {name!r} starts with '~', which marks the framework's "
            f"own keys; use e.g. {name.lstrip('~') or 'counts'!r}"
        )
        raise ConfigError(msg)
    return name
