"""Where a run's settings come from: the layers of ``TopologyConfig`` keyword arguments.

Lowest first; a higher layer overrides a lower one setting by setting:

1. ``TopologyConfig``'s defaults;
2. the topology file's ``CONFIG`` dict;
3. a TOML file: ``trident.toml`` in the working directory, or ``--config FILE``; its keys
   are ``TopologyConfig`` field names, and tables fill the dict settings (``[conf]`` for
   the user settings handed to ``prepare``, ``[spark_conf]``, ``[state_options]``);
4. environment variables ``TRIDENT_<FIELD>`` (``TRIDENT_STATE=redis://...``,
   ``TRIDENT_MAX_SPOUT_PENDING=4``; dict settings as JSON, ``TRIDENT_CONF='{"k": 1}'``;
   list settings as JSON or comma-separated; ``null`` for None);
5. the command line's flags.

The dict settings (``conf``, ``spark_conf``, ``state_options``) merge key by key and the
list settings (``py_files``, ``archives``) add up across layers; every other setting is
the highest layer's. In a file or the environment a negative ``idle_timeout_secs`` or
``lock_wait_secs`` means forever (None), as ``--idle-timeout -1`` does. The TOML file
and the environment are read with pydantic-settings (``TomlConfigSettingsSource``,
``EnvSettingsSource``) against a settings model made from ``TopologyConfig``'s fields,
so a field added there is a key and a variable here at once.

An unknown key in a file is an error naming the file and the known settings. Other
``TRIDENT_*`` variables exist (fault injection, test and example knobs), so an unknown
variable is an error only when it looks like a misspelt setting
(``TRIDENT_MAX_SPOUT_PENDNG``); the rest are left alone.

>>> kw, origins = merge([Layer("CONFIG", {"max_spout_pending": 2, "conf": {"a": 1}}, "CONFIG"),
...                      Layer("trident.toml", {"conf": {"b": 2}}, "trident.toml")])
>>> kw == {"max_spout_pending": 2, "conf": {"a": 1, "b": 2}}, origins["conf"]
(True, 'trident.toml')
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import create_model
from pydantic_settings import BaseSettings, EnvSettingsSource, NoDecode, SettingsConfigDict, TomlConfigSettingsSource
from pydantic_settings.exceptions import SettingsError

from transactional.config import SETTINGS_DOC, TopologyConfig, unknown_setting
from transactional.exceptions import ConfigError

__all__ = ["Layer", "ENV_PREFIX", "DEFAULT_FILE", "known_settings", "file_layer", "env_layer", "merge",
           "make_config"]

ENV_PREFIX = "TRIDENT_"
#: the settings file read from the working directory when no ``--config`` is given
DEFAULT_FILE = "trident.toml"
_FOREVER = ("idle_timeout_secs", "lock_wait_secs")     # negative: None


@dataclass(frozen=True)
class Layer:
    """One place settings come from: ``values`` (``TopologyConfig`` keyword arguments),
    ``name`` for messages ("environment", "trident.toml"), and where each value came from
    (``origins``: field -> e.g. "TRIDENT_STATE"; ``default_origin`` for the rest)."""

    name: str
    values: Mapping[str, Any]
    default_origin: str = ""
    origins: Mapping[str, str] = field(default_factory=dict)

    def origin(self, key: str) -> str:
        """Where ``key``'s value came from, for a message."""
        return self.origins.get(key) or self.default_origin or self.name


def _aliases() -> dict[str, str]:
    """Other accepted names of fields (``state_provider`` -> ``state``)."""
    out: dict[str, str] = {}
    for name, f in TopologyConfig.model_fields.items():
        choices = getattr(f.validation_alias, "choices", None) or ()
        out.update({c: name for c in choices if isinstance(c, str) and c != name})
    return out


def known_settings() -> list[str]:
    """The setting names a file or ``TRIDENT_*`` variable may use: ``TopologyConfig``'s
    fields and their aliases."""
    return [*TopologyConfig.model_fields, *_aliases()]


def _kind(name: str) -> str:
    """"dict", "list" or "" for a field's annotation."""
    f = TopologyConfig.model_fields.get(name) or TopologyConfig.model_fields[_aliases()[name]]
    origin = typing.get_origin(f.annotation)
    return "dict" if origin is dict else "list" if origin is list else ""


class _SettingsBase(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, case_sensitive=False, extra="ignore",
                                      env_parse_none_str="null")


@functools.lru_cache(maxsize=1)
def _settings_model() -> type[BaseSettings]:
    """A pydantic-settings model with a field per setting name, typed as in
    ``TopologyConfig`` (lists not decoded: they may be comma-separated)."""
    fields: dict[str, Any] = {}
    for name in known_settings():
        f = TopologyConfig.model_fields.get(name) or TopologyConfig.model_fields[_aliases()[name]]
        ann = Annotated[f.annotation, NoDecode] if _kind(name) == "list" else f.annotation
        fields[name] = (ann, None)
    model: type[BaseSettings] = create_model("TridentSettings", __base__=_SettingsBase, **fields)
    return model


def _normalize(values: Mapping[str, Any]) -> dict[str, Any]:
    """Aliases to field names; a negative ``idle_timeout_secs``/``lock_wait_secs`` to None."""
    aliases = _aliases()
    out = {aliases.get(k, k): v for k, v in values.items()}
    for k in _FOREVER:
        if isinstance(out.get(k), (int, float)) and not isinstance(out[k], bool) and out[k] < 0:
            out[k] = None
        elif isinstance(out.get(k), str):
            try:
                if float(out[k]) < 0:
                    out[k] = None
            except ValueError:
                pass
    return out


def _unknown(keys: Iterable[str]) -> list[str]:
    known = set(known_settings())
    return sorted(k for k in keys if k not in known)




def file_layer(path: str | Path, *, required: bool = True) -> Layer | None:
    """The settings of a TOML file; None when the file does not exist and is not
    ``required``. Raises ``ConfigError`` naming the file for a missing required file, bad
    TOML or an unknown key."""
    p = Path(path)
    if not p.is_file():
        if required:
            msg = f"no such settings file: {p} (--config takes a TOML file of TopologyConfig fields)"
            raise ConfigError(msg)
        return None
    try:
        values = dict(TomlConfigSettingsSource(_settings_model(), toml_file=p)())
    except ValueError as e:      # tomllib.TOMLDecodeError is a ValueError
        msg = f"{p}: not valid TOML: {e}"
        raise ConfigError(msg) from None
    bad = _unknown(values)
    if bad:
        msg = (f"{p}: {'; '.join(f'{k!r}: {unknown_setting(k, known_settings())}' for k in bad)} (your own "
               "settings for prepare(conf, ...) go in a [conf] table)")
        raise ConfigError(msg)
    return Layer(str(p), _normalize(values))


def env_layer() -> Layer:
    """The settings of ``TRIDENT_<FIELD>`` environment variables. Raises ``ConfigError``
    naming the variable for a value that cannot be decoded, or for a variable that looks
    like a misspelt setting."""
    names = {k.upper(): k for k in os.environ if k.upper().startswith(ENV_PREFIX)}
    known = {ENV_PREFIX + k.upper() for k in known_settings()}
    for upper, var in sorted(names.items()):
        close = difflib.get_close_matches(upper[len(ENV_PREFIX):].lower(), known_settings(), n=1, cutoff=0.75)
        if upper not in known and close:
            msg = (f"environment variable {var} is not a setting (did you mean {ENV_PREFIX}{close[0].upper()}?); "
                   f"settings are {ENV_PREFIX}<FIELD>, and {SETTINGS_DOC}")
            raise ConfigError(msg)
    try:
        values = dict(EnvSettingsSource(_settings_model())())
    except SettingsError as e:
        m = re.search(r'field "(\w+)"', str(e))
        var = ENV_PREFIX + (m.group(1).upper() if m else "<FIELD>")
        msg = (f"environment variable {var}: {os.environ.get(var, '')!r} is not valid JSON; "
               f"e.g. {var}='{{\"key\": 1}}'")
        raise ConfigError(msg) from None
    for k, v in list(values.items()):
        if _kind(k) == "list" and isinstance(v, str):
            values[k] = json.loads(v) if v.strip().startswith("[") else [x.strip() for x in v.split(",") if x.strip()]
    aliases = _aliases()
    origins = {aliases.get(k, k): names.get(ENV_PREFIX + k.upper(), ENV_PREFIX + k.upper()) for k in values}
    return Layer("environment", _normalize(values), origins=origins)


def merge(layers: Iterable[Layer]) -> tuple[dict[str, Any], dict[str, str]]:
    """``TopologyConfig`` keyword arguments from ``layers`` (lowest first), and where each
    came from (field -> origin). Dict settings merge by key, list settings add up."""
    kw: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for layer in layers:
        for k, v in layer.values.items():
            kind = _kind(k) if k in TopologyConfig.model_fields else ""
            if kind == "dict" and isinstance(v, Mapping) and isinstance(kw.get(k), Mapping):
                kw[k] = {**kw[k], **v}
            elif kind == "list" and isinstance(v, (list, tuple)) and isinstance(kw.get(k), (list, tuple)):
                kw[k] = [*kw[k], *(x for x in v if x not in kw[k])]
            else:
                kw[k] = dict(v) if kind == "dict" and isinstance(v, Mapping) else v
            origins[k] = layer.origin(k)
    return kw, origins


def make_config(layers: Iterable[Layer]) -> TopologyConfig:
    """The ``TopologyConfig`` of ``layers`` (lowest first). A bad value is a
    ``ConfigError`` that also says where each offending setting came from."""
    kw, origins = merge(layers)
    try:
        return TopologyConfig(**kw)
    except ConfigError as e:
        text = str(e)
        named = [f"{k} from {o}" for k, o in origins.items()
                 if re.search(rf"(?:^|: |; ){re.escape(k)}(?:[.:])", text.removeprefix("invalid TopologyConfig: "))]
        raise ConfigError(text + (f" ({'; '.join(named)})" if named else "")) from None
