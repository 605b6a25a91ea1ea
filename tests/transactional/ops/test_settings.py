"""Settings layers of ``trident run``: TopologyConfig defaults < the file's ``CONFIG`` <
``trident.toml`` / ``--config`` < ``TRIDENT_*`` < flags (``transactional.ops.settings``)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from transactional.exceptions import ConfigError
from transactional.ops.cli import _parser, config_from_args
from transactional.ops.settings import Layer, env_layer, file_layer, make_config, merge


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No TRIDENT_* variable of the outer environment; a working directory of our own."""
    for k in list(os.environ):
        if k.upper().startswith("TRIDENT_"):
            monkeypatch.delenv(k)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run_config(*argv: str, defaults: dict | None = None):
    return config_from_args(_parser().parse_args(["run", "x.py", *argv]), defaults, "x.py")


def test_each_layer_overrides_the_one_below(monkeypatch, tmp_path):
    defaults = {"max_spout_pending": 2, "message_timeout_secs": 11, "max_attempts": 7, "poll_interval_secs": 0.3}
    (tmp_path / "trident.toml").write_text("message_timeout_secs = 12\nmax_attempts = 8\npoll_interval_secs = 0.4\n")
    monkeypatch.setenv("TRIDENT_MAX_ATTEMPTS", "9")
    monkeypatch.setenv("TRIDENT_POLL_INTERVAL_SECS", "0.5")
    c = run_config("--set", "poll_interval_secs=0.6", defaults=defaults)
    assert (c.max_spout_pending, c.message_timeout_secs, c.max_attempts, c.poll_interval_secs) == (2, 12, 9, 0.6)
    assert c.retry_backoff_secs == 0.5, "TopologyConfig's default under everything"


def test_config_flag_replaces_the_working_directory_file(tmp_path):
    (tmp_path / "trident.toml").write_text("max_attempts = 8\n")
    other = tmp_path / "prod.toml"
    other.write_text("max_attempts = 3\nstate_provider = 'redis://127.0.0.1:6379/2'\n")
    c = run_config("--config", str(other))
    assert c.max_attempts == 3 and c.state == "redis://127.0.0.1:6379/2"


def test_dict_settings_merge_by_key_and_lists_add_up(monkeypatch, tmp_path):
    (tmp_path / "trident.toml").write_text('py_files = ["b.zip"]\n[conf]\nthreshold = 5\nname = "file"\n'
                                           '[spark_conf]\n"spark.executor.memory" = "1g"\n')
    monkeypatch.setenv("TRIDENT_CONF", '{"name": "env"}')
    monkeypatch.setenv("TRIDENT_PY_FILES", "c.zip, d.zip")
    c = run_config("--set", "conf.flag=true", "--py-files", "e.zip", defaults={"conf": {"a": 1}, "py_files": ["a.zip"]})
    assert c.conf == {"a": 1, "threshold": 5, "name": "env", "flag": True}
    assert c.py_files == ["a.zip", "b.zip", "c.zip", "d.zip", "e.zip"]
    assert c.spark_conf == {"spark.executor.memory": "1g"}


def test_environment_values_decode_by_the_field_type(monkeypatch):
    monkeypatch.setenv("TRIDENT_SPARK_UI", "false")
    monkeypatch.setenv("TRIDENT_STATE_OPTIONS", '{"serializer": "json"}')
    monkeypatch.setenv("TRIDENT_ARCHIVES", '["env.tar.gz#environment"]')
    monkeypatch.setenv("TRIDENT_IDLE_TIMEOUT_SECS", "-1")
    monkeypatch.setenv("TRIDENT_LOCK_WAIT_SECS", "null")
    monkeypatch.setenv("TRIDENT_STATE_PROVIDER", "redis://127.0.0.1:6379/3")
    c = run_config()
    assert c.spark_ui is False and c.state_options == {"serializer": "json"}
    assert c.archives == ["env.tar.gz#environment"]
    assert c.idle_timeout_secs is None and c.lock_wait_secs is None
    assert c.state == "redis://127.0.0.1:6379/3"
    assert env_layer().origin("state") == "TRIDENT_STATE_PROVIDER"


def test_negative_waits_in_a_file_mean_forever(tmp_path):
    (tmp_path / "trident.toml").write_text("idle_timeout_secs = -1\nlock_wait_secs = 30\n")
    c = run_config()
    assert c.idle_timeout_secs is None and c.lock_wait_secs == 30


def test_progress_is_on_for_a_run_unless_quiet_or_a_layer_says(monkeypatch):
    assert run_config().progress is True
    assert run_config("-q").progress is False
    monkeypatch.setenv("TRIDENT_PROGRESS", "false")
    assert run_config().progress is False


def test_other_trident_variables_are_left_alone(monkeypatch):
    for k in ("TRIDENT_CRASH_AT", "TRIDENT_PAUSE_AT", "TRIDENT_WORDS_TAKE", "TRIDENT_TEST_TOPOLOGY",
              "TRIDENT_ZOOKEEPER_CLASSPATH"):
        monkeypatch.setenv(k, "x")
    assert env_layer().values == {}


def test_a_misspelt_variable_is_an_error_naming_it_and_the_right_name(monkeypatch):
    monkeypatch.setenv("TRIDENT_IDLE_TIMEOUT", "5")
    with pytest.raises(ConfigError, match=r"^environment variable TRIDENT_IDLE_TIMEOUT is not a setting \(did you "
                                          r"mean TRIDENT_IDLE_TIMEOUT_SECS\?\); settings are TRIDENT_<FIELD>, and the "
                                          r"settings are TopologyConfig's fields: README's configuration table"):
        env_layer()


def test_a_variable_that_is_not_json_names_itself(monkeypatch):
    monkeypatch.setenv("TRIDENT_SPARK_CONF", "spark.x=1")
    with pytest.raises(ConfigError, match=r"^environment variable TRIDENT_SPARK_CONF: 'spark.x=1' is not valid JSON"):
        env_layer()


def test_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("max_spout_pendng = 3\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(bad))}: 'max_spout_pendng': unknown setting \(did you mean "
                                          r"'max_spout_pending'\?\) \(your own settings for prepare\(conf, \.\.\.\) "
                                          r"go in a \[conf\] table\)$"):
        file_layer(bad)
    broken = tmp_path / "broken.toml"
    broken.write_text("max_spout_pending = \n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(broken))}: not valid TOML: "):
        file_layer(broken)
    with pytest.raises(ConfigError, match="no such settings file: .*missing.toml"):
        file_layer(tmp_path / "missing.toml")
    assert file_layer(tmp_path / "missing.toml", required=False) is None


def test_a_bad_value_names_where_it_came_from(monkeypatch, tmp_path):
    (tmp_path / "trident.toml").write_text("max_attempts = 0\n")
    with pytest.raises(ConfigError, match=r"max_attempts: must be >= 1 \(got 0\) \(max_attempts from trident.toml\)$"):
        run_config()
    with pytest.raises(ConfigError, match=r"\(max_spout_pending from CONFIG in x.py\)$"):
        run_config("--set", "max_attempts=2", defaults={"max_spout_pending": 0})
    with pytest.raises(ConfigError, match=r"nope: unknown setting; .*\(nope from --set nope=1\)$"):
        run_config("--set", "nope=1", "--set", "max_attempts=2")


def test_merge_and_make_config_are_plain_functions_of_layers():
    layers = [Layer("a", {"max_attempts": 2, "conf": {"x": 1}}), Layer("b", {"conf": {"y": 2}}, "B")]
    kw, origins = merge(layers)
    assert kw == {"max_attempts": 2, "conf": {"x": 1, "y": 2}} and origins == {"max_attempts": "a", "conf": "B"}
    assert make_config(layers).conf == {"x": 1, "y": 2}
