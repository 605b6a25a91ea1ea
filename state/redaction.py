r"""Secrets stay secret: the one redaction applied wherever settings, URLs and errors are shown.

A password or token reaches spark-trident in a URL's userinfo
(``redis://user:secret@host:6379/0``), in its query string (``?password=secret``), in
``coordination_auth`` (``user:secret``) or in a dict setting under a secret-looking key
(``state_options``, ``spark_conf``, ``conf``: ``password``, ``token``, ``*.secret`` ...),
from the code, a settings file or the environment alike. ``redact`` hides them in
whatever is about to be shown: the config's repr and ``redacted()``, error messages
(every ``TridentError``), the status page, ``/api/status`` and ``/metrics``, the status
record ``trident status`` reads, ``RunResult``'s repr, and log lines (``LOG_FILTER``).

Two mechanisms, both in ``redact_text``: the *form* of a secret (a URL's password, a
secret-named query parameter or key) is masked wherever it appears, and every secret a
``TopologyConfig`` was given is *remembered* (``remember``) and masked wherever its value
appears, e.g. echoed inside a client library's error text.

The forms include every one libpq accepts for a PostgreSQL password: ``password=secret``,
``password = 'A B'`` (quoted, ``\'`` and ``\\`` escaped inside), ``password=A\ B``
(escaped, unquoted), ``postgresql://user:secret@host/db`` and ``?password=`` in a URL,
and ``PGPASSWORD`` in the environment (``remember_environment``). ``redact_dsn`` shows a
connection string as libpq itself parses it, without its secrets.

>>> redact_text("host=db password='A B' user=app")
"host=db password='***' user=app"
>>> redact_dsn("password='A B' host=db port=5432 dbname=app")
"host=db port=5432 dbname=app password='***'"

>>> redact_url("redis://app:s3cret@db:6379/0?password=s3cret&socket_timeout=5")
'redis://app:***@db:6379/0?password=***&socket_timeout=5'
>>> redact({"state": "redis://:pw@h:1/0", "state_options": {"password": "pw", "db": 2}})
{'state': 'redis://:***@h:1/0', 'state_options': {'password': '***', 'db': 2}}
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, unquote

__all__ = ["MASK", "is_secret_key", "redact", "redact_dsn", "redact_text", "redact_url", "remember",
           "remember_environment", "secrets_in", "LOG_FILTER", "RedactingFilter"]

#: what a secret is replaced with
MASK = "***"

#: names (of query parameters, settings, dict keys) whose values are secrets
_SECRET_NAME = re.compile(r"pass(word|wd)?(?![a-z])|pwd|secret|token|credential|auth(?!or|enticate$)|"
                          r"api[-_.]?key|access[-_.]?key|private[-_.]?key", re.IGNORECASE)
#: a URL in free text (up to a quote, a space or a bracket)
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>()\[\]{},]+(?:,[^\s'\"<>()\[\]{},]+)*")
#: ``name=value`` in a URL's query string
_PARAM = re.compile(r"(?P<name>[A-Za-z_][\w.-]*)=(?P<value>[^&;#\s'\"]*)")
#: ``name=value`` in free text, as libpq reads it: spaces around ``=``; a value quoted
#: (``'A \' B'``, backslash escapes inside; an unclosed quote runs to the end) or not
#: (up to a space, a backslash escaping the next character)
_KEYWORD = r"(?P<name>[A-Za-z_][\w.-]*)(?P<eq>[ \t]*=[ \t]*)(?P<value>'(?:\\.|[^'\\])*(?:'|\\?$)|(?:\\.|[^\s\\])*)"
#: a URL or a ``name=value`` in free text, whichever starts first
_TEXT = re.compile(f"(?P<url>{_URL.pattern})|{_KEYWORD}", re.DOTALL)
_QUOTED_MASK = f"'{MASK}'"
#: what help texts write where a secret goes (``coordination_auth='user:password'``): kept
_PLACEHOLDERS = frozenset({"user:password", "password", "<password>", "...", MASK})
#: environment variables holding a password (libpq's)
ENV_SECRETS = ("PGPASSWORD",)
#: secrets shorter than this are masked by their form only (masking every "ab" in a text
#: would garble it and still say nothing)
_MIN_REMEMBERED = 4

_remembered: set[str] = set()
_lock = threading.Lock()


def is_secret_key(name: Any) -> bool:
    """True when a setting, dict key or query parameter called ``name`` holds a secret
    (``password``, ``ssl_password``, ``coordination_auth``, ``spark.authenticate.secret``,
    ``token`` ...)."""
    return isinstance(name, str) and _SECRET_NAME.search(name) is not None


def _mask_params(text: str) -> str:
    return _PARAM.sub(lambda m: f"{m['name']}={MASK}" if is_secret_key(m["name"]) and m["value"] else m[0], text)


def redact_url(url: str) -> str:
    """``url`` with the password of its userinfo and its secret query parameters masked
    (the user name, host, path and other parameters kept)."""
    if not isinstance(url, str):
        return url
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _mask_params(url)
    cut = len(rest)
    for ch in "/?#":
        i = rest.find(ch)
        if i != -1:
            cut = min(cut, i)
    netloc, tail = rest[:cut], rest[cut:]
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":" + MASK
        netloc = f"{userinfo}@{host}"
    return f"{scheme}://{netloc}{_mask_params(tail)}"


def _redact_span(m: re.Match[str]) -> str:
    if m["url"]:
        return redact_url(m["url"])
    if is_secret_key(m["name"]) and m["value"] and _libpq_value(m["value"]) not in _PLACEHOLDERS:
        # quoted stays quoted: what follows is kept
        return f"{m['name']}{m['eq']}{_QUOTED_MASK if m['value'].startswith(chr(39)) else MASK}"
    value = m["value"]                       # not a secret's name: its value may hold one
    return f"{m['name']}{m['eq']}{_TEXT.sub(_redact_span, value) if value else value}"


def redact_text(text: str) -> str:
    """``text`` (a message, a log line, a repr) with every URL redacted (``redact_url``),
    every secret-named ``name=value`` masked (in every form libpq reads) and every
    remembered secret masked."""
    if not isinstance(text, str) or not text:
        return text
    text = _TEXT.sub(_redact_span, text)
    for secret in sorted(_remembered, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def redact(value: Any) -> Any:
    """A copy of ``value`` (JSON-like: dicts, lists, tuples, strings) safe to show: text
    under secret keys masked, every string through ``redact_text``.

    >>> redact({"api_token": "t0k3n-1", "tokenizer": 12, "password": {"note": "x"}})
    {'api_token': '***', 'tokenizer': 12, 'password': {'note': 'x'}}
    """
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        # only text under a secret-looking key is a secret: {"tokenizer": 12} counts tuples
        return {k: MASK if is_secret_key(k) and isinstance(v, str) and v else redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v) for v in value)
    return value


def _libpq_value(value: str) -> str:
    """A value as libpq reads it: quotes taken off, backslash escapes resolved."""
    if value.startswith("'"):
        value = value[1:-1] if len(value) > 1 and value.endswith("'") and not value.endswith("\\'") else value[1:]
    return re.sub(r"\\(.)", r"\1", value, flags=re.DOTALL)


def redact_dsn(dsn: str) -> str:
    """A PostgreSQL connection string (``key=value`` or URL) as libpq parses it, with its
    secrets masked: the one way a DSN is shown. One libpq cannot parse is not shown
    (its parser's own message would quote a piece of it)."""
    try:
        from psycopg.conninfo import conninfo_to_dict
        parts = conninfo_to_dict(dsn)
    except Exception:  # noqa: BLE001 - psycopg missing, or a string libpq refuses
        return "<a connection string libpq cannot parse>"
    first = ("host", "hostaddr", "port", "dbname", "user", "password")
    order = sorted(parts, key=lambda k: (first.index(k) if k in first else len(first), k))
    shown = {k: MASK if is_secret_key(k) else str(parts[k]) for k in order if parts[k] is not None}
    if "://" in dsn.split("=", 1)[0]:
        user = quote(shown.pop("user", ""), safe="") + (f":{shown.pop('password')}" if "password" in shown else "")
        hosts, ports = shown.pop("host", "").split(","), shown.pop("port", "").split(",")
        netloc = ",".join(h + (f":{p}" if p else "") for h, p in zip(hosts, ports + [""] * len(hosts), strict=False))
        query = "&".join(f"{k}={quote(v, safe='*')}" for k, v in shown.items() if k != "dbname")
        return (f"{dsn.split('://', 1)[0]}://{user + '@' if user else ''}{quote(netloc, safe=',:[]')}/"
                f"{quote(shown.get('dbname', ''), safe='')}{'?' + query if query else ''}")
    return " ".join(f"{k}={_QUOTED_MASK if v == MASK else _libpq_quote(v)}" for k, v in shown.items())


def _libpq_quote(v: str) -> str:
    if v and not re.search(r"[\s'\\]", v):
        return v
    return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"


def remember_environment() -> None:
    """Remember the passwords the environment holds for the clients (``ENV_SECRETS``:
    libpq's ``PGPASSWORD``), so that they are masked wherever they show up."""
    remember(os.environ[name] for name in ENV_SECRETS if os.environ.get(name))


def secrets_in(value: Any) -> list[str]:
    """The secrets ``value`` holds: passwords of URLs (as given and decoded), values of
    secret query parameters, values under secret keys (of ``user:password``, the password),
    in dicts and lists at any depth."""
    out: list[str] = []
    if isinstance(value, str):
        for m in _URL.finditer(value):
            netloc = m[0].partition("://")[2].split("/", 1)[0].split("?", 1)[0]
            if "@" in netloc and ":" in netloc.rsplit("@", 1)[0]:
                out.append(netloc.rsplit("@", 1)[0].split(":", 1)[1])
        out += [p["value"] for p in _PARAM.finditer(value) if is_secret_key(p["name"]) and p["value"]]
        out += [_libpq_value(p["value"]) for p in re.finditer(_KEYWORD, value)
                if is_secret_key(p["name"]) and p["value"]]
    elif isinstance(value, dict):
        for k, v in value.items():
            if is_secret_key(k) and isinstance(v, str):
                out.append(v.split(":", 1)[1] if ":" in v else v)     # user:password: the password
            else:
                out += secrets_in(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            out += secrets_in(v)
    return [x for s in out for x in {s, unquote(s), quote(unquote(s), safe="")} if x]


def remember(secrets: Iterable[str]) -> None:
    """Mask these secrets wherever ``redact_text`` later finds them (for the life of the
    process; ``TopologyConfig`` remembers the secrets it is given)."""
    with _lock:
        _remembered.update(s for s in secrets if isinstance(s, str) and len(s) >= _MIN_REMEMBERED)


class RedactingFilter(logging.Filter):
    """A logging filter that renders each record's message through ``redact_text`` (its
    arguments merged in first), and the text of its exception."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact ``record`` in place; always let it through."""
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is logging's to report
            return True
        record.msg, record.args = redact_text(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        return True


#: the filter on spark-trident's loggers and on the handler ``trident`` installs
LOG_FILTER = RedactingFilter()
for _name in ("trident", "trident.webui", "trident.kafka", "trident.kafka.client", "state.zookeeper",
              "state.redis", "kazoo.client"):
    logging.getLogger(_name).addFilter(LOG_FILTER)
