"""Key identity and state names: one definition for every backing (docs/design.md §5).

**Key identity.** Two map keys are the same key exactly when ``encode_key`` gives the
same string. That string is what every backing stores under (the Redis key suffix, the
memory backing's dict key), so a key means the same thing in memory and in Redis:

* ``str`` keys are themselves (``"apple"``); one starting with ``~`` gets ``~s`` in front;
* ``bytes`` are ``~b<hex>``;
* everything else JSON can hold (int, float, bool, None, tuples and lists of those) is
  ``~j<compact JSON>``; a dict is refused (``{1: 2}`` and ``{"1": 2}`` would be one key).

So ``1``, ``1.0``, ``True`` and ``"1"`` are four different keys (as in Trident, where keys
are compared with Java's ``equals``: ``Integer(1)``, ``Double(1.0)``, ``Boolean(true)``
differ), while ``("a", 2)`` and ``["a", 2]`` are one key (JSON has no tuples).

**Map identity.** A map is its namespace ``<scope>:<name>`` (the engine's scope is the
topology id, which has no ``:``). Two (map, key) pairs are the same stored key exactly when
their namespaces and their encoded keys are equal: the memory backing keeps one dict per
namespace, and the Redis backing stores under ``stored_key(namespace, encoded_key)``,
which is ``<scope>:<name_segment(name)>:<encoded key>``. ``name_segment`` is the name
itself when it has no ``:`` and does not start with ``~`` (every name stored before names
could hold ``:``: their keys did not move), and otherwise ``~`` followed by the name with
``%`` and ``:`` percent-encoded (``a:b`` -> ``~a%3Ab``). A segment never holds ``:``, so
the scope ends at the first ``:``, the segment at the second, and the encoded key is the
rest: map ``a:b`` key ``x`` (``t:~a%3Ab:x``) and map ``a`` key ``b:x`` (``t:a:b:x``) never
meet, and no map key meets the scope's own keys (``<scope>:~fence``, ``<scope>:~claims:...``:
a segment starting with ``~`` holds ``%3A`` or starts with ``~~``).

**State names** (``check_state_name``): any non-empty ``str`` that can be stored (UTF-8
encodable) and does not start with ``~`` (the framework's own namespaces do).
"""

from __future__ import annotations

import json
from typing import Any

from state.errors import ConfigError

__all__ = ["encode_key", "decode_key", "hashable_key", "check_state_name", "name_segment", "key_prefix",
           "stored_key"]


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
        if _has_dict(key):   # {1: 2} and {"1": 2} would be one key (JSON object keys are str)
            msg = "dicts are not keys"
            raise TypeError(msg)
        return "~j" + json.dumps(key, separators=(",", ":"), sort_keys=True, ensure_ascii=False,
                                 allow_nan=False)
    except (TypeError, ValueError) as e:
        msg = (
            f"map key {key!r} of type {type(key).__name__} cannot be stored: use str, "
            "bytes, int, float, bool, None or tuples of those"
        )
        raise TypeError(msg) from e


def _has_dict(key: Any) -> bool:
    return isinstance(key, dict) or (isinstance(key, (list, tuple)) and any(map(_has_dict, key)))


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
    """``name`` if it can name a map: a non-empty ``str``, UTF-8 encodable (every backing
    can store it), not starting with ``~`` (the framework's own namespaces). ``:`` is
    allowed: ``name_segment`` keeps such a map's keys apart from every other map's.

    >>> check_state_name("counts"), check_state_name("counts:x")
    ('counts', 'counts:x')
    >>> check_state_name("~counts")
    Traceback (most recent call last):
    ...
    state.errors.ConfigError: map state name '~counts' starts with '~', ...
    """
    if not isinstance(name, str) or not name:
        msg = f"map state name must be a non-empty str such as 'counts'; got {name!r}"
        raise ConfigError(msg)
    if name.startswith("~"):
        msg = (
            f"map state name {name!r} starts with '~', which marks the framework's "
            f"own keys; use e.g. {name.lstrip('~') or 'counts'!r}"
        )
        raise ConfigError(msg)
    try:
        name.encode()
    except UnicodeEncodeError as e:
        msg = (
            f"map state name {name!r} cannot be stored: {e.reason} at position {e.start} "
            "(a lone surrogate, e.g. from bytes decoded with errors='surrogateescape'); "
            "use a name of valid Unicode text"
        )
        raise ConfigError(msg) from None
    return name


def name_segment(name: str) -> str:
    """The part of a stored key that names map ``name`` (see the module docstring):
    injective, and never holding ``:``.

    >>> name_segment("counts"), name_segment("a:b"), name_segment("~epoch"), name_segment("50%:x")
    ('counts', '~a%3Ab', '~~epoch', '~50%25%3Ax')
    """
    if ":" not in name and not name.startswith("~"):
        return name
    return "~" + name.replace("%", "%25").replace(":", "%3A")


def key_prefix(namespace: str) -> str:
    """What every stored key of the map ``namespace`` (``<scope>:<name>``) starts with:
    ``<scope>:<name_segment(name)>:``. ``ConfigError`` for a namespace that is not
    ``<scope>:<name>`` with a non-empty scope and name.

    >>> key_prefix("wc:counts"), key_prefix("wc:a:b")
    ('wc:counts:', 'wc:~a%3Ab:')
    """
    scope, sep, name = namespace.partition(":") if isinstance(namespace, str) else ("", "", "")
    if not (scope and sep and name):
        msg = (
            f"map namespace must be '<scope>:<name>' (the engine's is '<topology_id>:<state "
            f"name>'), e.g. 'wc:counts'; got {namespace!r}"
        )
        raise ConfigError(msg)
    return f"{scope}:{name_segment(name)}:"


def stored_key(namespace: str, key: str) -> str:
    """The stored key of encoded key ``key`` of map ``namespace``: one string per (map,
    key) pair, what the Redis backing stores under.

    >>> stored_key("wc:counts", "apple"), stored_key("wc:a:b", "x"), stored_key("wc:a", "b:x")
    ('wc:counts:apple', 'wc:~a%3Ab:x', 'wc:a:b:x')
    """
    return key_prefix(namespace) + key
