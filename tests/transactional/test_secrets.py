"""Secrets stay secret: a Redis password or a ZooKeeper digest password, given in any form
the clients accept (URL userinfo, query string, state_options, settings file, environment),
never shows on the status page, /api/status, /metrics, `trident status`, the status record,
log lines, error messages or RunResult's repr. Real servers: redis-server --requirepass,
ZooKeeper with digest auth."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spouts import MemoryTransactionalSpout
from state.base import open_transactional_state
from transactional import (
    BaseBatchBolt,
    BaseTransactionalBolt,
    Committer,
    ConfigError,
    Fields,
    TopologyConfig,
    TransactionalTopologyBuilder,
    Values,
)
from transactional.exceptions import StateUnavailableError
from transactional.ops.run import OperatedRun as Engine
from transactional.ops.status import format_status, topology_status
from transactional.ops.webui import attach
from transactional.redaction import redact, redact_text, redact_url
from transactional.testing._process import free_port

REPO = Path(__file__).resolve().parents[2]
SECRET = "Redis-pw-s3cr3t-77"          # redis-server --requirepass
ZK_SECRET = "zk-digest-pw-42x"         # coordination_auth app:<this>
TOKEN = "conf-api-tok-9931"            # a user setting under a secret-looking key
FAILED_ONCE: list[int] = []


def uid(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


# -- the forms, one function --------------------------------------------------------------------------

@pytest.mark.parametrize("url, shown", [
    ("redis://:pw-one@h:6379/0", "redis://:***@h:6379/0"),
    ("redis://app:pw-one@h:6379/0", "redis://app:***@h:6379/0"),
    ("rediss://h:6379/0?password=pw-one&ssl_ca_certs=/ca.pem", "rediss://h:6379/0?password=***&ssl_ca_certs=/ca.pem"),
    ("redis://h/0?username=app&password=pw-one&ssl_password=pw-two", "redis://h/0?username=app&password=***&ssl_password=***"),
    ("zk://app:pw-one@h1:2181,h2:2181/root", "zk://app:***@h1:2181,h2:2181/root"),
    ("zk://h1:2181/root?session_timeout=4", "zk://h1:2181/root?session_timeout=4"),
    ("memory://", "memory://"),
])
def test_redact_url_masks_passwords_and_secret_parameters_only(url, shown):
    assert redact_url(url) == shown
    assert redact_text(f"cannot reach {url!r}: refused") == f"cannot reach {shown!r}: refused"


def test_settings_under_secret_keys_are_masked_and_remembered_everywhere():
    c = TopologyConfig(state="redis://127.0.0.1:6379/0", state_options={"password": "opt-pw-81a", "db": 2},
                       coordination_auth="app:auth-pw-19b", spark_conf={"spark.authenticate.secret": "spark-pw-33c"},
                       conf={"service": {"api_token": "api-tok-44d"}, "level": 3})
    shown = [repr(c), str(c), json.dumps(c.redacted())]
    for text in shown:
        for secret in ("opt-pw-81a", "auth-pw-19b", "spark-pw-33c", "api-tok-44d"):
            assert secret not in text
    assert c.redacted()["state_options"] == {"password": "***", "db": 2}
    assert c.redacted()["conf"] == {"service": {"api_token": "***"}, "level": 3}
    # given once to a config, a secret is masked in any later text (a client's error, a log line)
    assert redact_text("AUTH failed for auth-pw-19b / api-tok-44d") == "AUTH failed for *** / ***"
    assert redact({"note": "opt-pw-81a was refused"}) == {"note": "*** was refused"}
    assert c.state_options["password"] == "opt-pw-81a", "the run itself gets the secret"


def test_figures_of_components_with_secret_looking_names_are_kept():
    import doctest

    import transactional.redaction

    status = {"executed": {"tokenizer": 12, "auth-check": 3}, "errors": {"tokenizer": {"message": "boom"}},
              "components": [{"id": "tokenizer", "executed": 12}]}
    assert redact(status) == status
    assert doctest.testmod(transactional.redaction).failed == 0


def test_a_url_with_credentials_is_refused_without_showing_them():
    with pytest.raises(ConfigError) as e:
        TopologyConfig(state="redis://:r-pw-6@h:x/0")
    assert str(e.value) == "invalid TopologyConfig: state: state URL 'redis://:***@h:x/0': the port of 'h:x' is not a number"
    # kazoo takes no credentials in its hosts: a zk:// URL carrying some is refused when opened
    config = TopologyConfig(coordination="zk://app:zk-url-pw-5@127.0.0.1:2181/trident")
    assert "zk-url-pw-5" not in repr(config)
    with pytest.raises(ConfigError) as e:
        open_transactional_state(config.coordination, "t")
    assert str(e.value) == (
        "coordination URL 'zk://app:***@127.0.0.1:2181/trident' carries credentials; pass them as "
        "coordination_auth='user:password' (--coordination-auth) instead, so they do not show up in logs and "
        "status output")


# -- a real run against servers that need the passwords -----------------------------------------------

class Count(BaseBatchBolt):
    def prepare(self, conf, context, collector, id):
        self.collector, self.id, self.n = collector, id, 0

    def execute(self, tuple):
        self.n += 1

    def finish_batch(self):
        if self.id.transaction_id == 2 and not FAILED_ONCE:
            FAILED_ONCE.append(1)       # as a client library might: the URL and the password in its text
            msg = f"could not reach redis://:{SECRET}@127.0.0.1:1/0 (password {SECRET}, token {TOKEN})"
            raise RuntimeError(msg)
        self.collector.emit(Values(self.id, self.n))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "n"))


class Total(BaseTransactionalBolt, Committer):
    def prepare(self, conf, context, collector, attempt):
        self.sum, self.counts = 0, context.map_state("total")

    def execute(self, tuple):
        self.sum += tuple["n"]

    def finish_batch(self):
        self.counts.multi_combine(["n"], [self.sum], "sum")

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id"))


def topology(tid: str) -> TransactionalTopologyBuilder:
    data = {0: [(w,) for w in "abcdef"], 1: [(w,) for w in "ghij"]}
    b = TransactionalTopologyBuilder(tid, "spout", MemoryTransactionalSpout(data, Fields("w"), 2), 2)
    b.set_bolt("count", Count(), 2).shuffle_grouping("spout")
    b.set_bolt("total", Total()).global_grouping("count")
    return b


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode("utf-8")


def assert_nowhere(surfaces: dict[str, str]) -> None:
    for name, text in surfaces.items():
        for secret in (SECRET, ZK_SECRET, TOKEN):
            assert secret not in text, f"{secret!r} shows in {name}"


@pytest.mark.integration
@pytest.mark.parametrize("form", ["userinfo", "query", "state_options"])
def test_passwords_the_servers_need_show_on_no_surface(form, redis_factory, zk_server, caplog):
    redis = redis_factory(password=SECRET, appendonly=False)
    base = f"127.0.0.1:{redis.port}/0"
    state, options = {"userinfo": (f"redis://:{SECRET}@{base}", {}),
                      "query": (f"redis://{base}?password={SECRET}", {}),
                      "state_options": (f"redis://{base}", {"password": SECRET})}[form]
    zk_url, tid = zk_server.url(uid("secrets")), uid("secrets")
    config = TopologyConfig(executor="in-process", progress=False, metrics_port=0, coordination=zk_url,
                            coordination_auth=f"app:{ZK_SECRET}", state=state, state_options=options,
                            conf={"api_token": TOKEN}, retry_backoff_secs=0)
    FAILED_ONCE.clear()
    caplog.set_level(logging.DEBUG)
    engine = Engine(topology(tid).build(), config)
    observer = attach(engine.listeners, engine.topology, config)
    try:
        result = engine.run(None)
        page, api, metrics = get(observer.url), get(observer.url + "api/status"), get(observer.url + "metrics")
    finally:
        observer.stop()
    assert (result.batches_committed, len(result.failures)) == (3, 1), "the run used the passwords"
    assert result.map_state("total").get("n") == 10
    status = json.loads(api)
    assert (status["errors"]["count"]["error_type"], status["errors"]["count"]["message"]) == (
        "RuntimeError", "could not reach redis://:***@127.0.0.1:1/0 (password ***, token ***)")
    raw = open_transactional_state(zk_url, tid, auth=f"app:{ZK_SECRET}", read_only=True)
    try:
        record = json.dumps(raw.get("status"))
    finally:
        raw.close()
    st = topology_status(zk_url, tid, auth=f"app:{ZK_SECRET}")
    cli = subprocess.run([sys.executable, "-m", "transactional.ops.cli", "status", tid, "--coordination", zk_url,
                          "--coordination-auth", f"app:{ZK_SECRET}"], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert cli.returncode == 0 and "last error in count (task" in cli.stdout, cli.stderr
    assert_nowhere({"status page": page, "/api/status": api, "/metrics": metrics, "RunResult repr": repr(result),
                    "RunResult summary": json.dumps(result.summary()), "status record": record,
                    "topology_status": json.dumps(st), "format_status": format_status(st),
                    "trident status": cli.stdout + cli.stderr, "logs": caplog.text,
                    "config repr": repr(config), "failures": repr(result)})
    assert "could not reach redis://:***@127.0.0.1:1/0" in caplog.text


@pytest.mark.integration
def test_errors_of_servers_unreachable_or_refusing_show_no_password(redis_factory):
    redis = redis_factory(password=SECRET, appendonly=False)
    closed = free_port()
    for state, error in [(f"redis://127.0.0.1:{closed}/0?password={SECRET}", StateUnavailableError),
                         (f"redis://:{SECRET}@127.0.0.1:{closed}/0", StateUnavailableError),
                         (f"redis://127.0.0.1:{redis.port}/0?password=wrong-{SECRET}", ConfigError)]:
        config = TopologyConfig(executor="in-process", progress=False, state=state, connect_timeout_secs=2)
        with pytest.raises(error) as e:
            Engine(topology(uid("unreachable")).build(), config).run(None)
        assert SECRET not in str(e.value) and SECRET not in repr(e.value)
        assert "127.0.0.1:" in str(e.value)


@pytest.mark.integration
def test_trident_run_with_secrets_from_the_settings_file_and_the_environment(redis_factory, zk_server, tmp_path):
    redis = redis_factory(password=SECRET, appendonly=False)
    f = tmp_path / "leaky.py"
    f.write_text(
        "import os\n"
        "from transactional import BaseBatchBolt, Fields\n"
        "from test_secrets import topology\n"
        "def build_topology():\n"
        "    return topology(os.environ['TID'])\n")
    (tmp_path / "trident.toml").write_text(f"executor = 'in-process'\nretry_backoff_secs = 0\n"
                                           f"[state_options]\npassword = '{SECRET}'\n"
                                           f"[conf]\napi_token = '{TOKEN}'\n")
    env = {**os.environ, "TID": uid("cli"), "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests" / "support"), str(Path(__file__).parent)]),
           "TRIDENT_STATE": f"redis://127.0.0.1:{redis.port}/0",
           "TRIDENT_COORDINATION": zk_server.url(uid("cli")), "TRIDENT_COORDINATION_AUTH": f"app:{ZK_SECRET}"}
    p = subprocess.run([sys.executable, "-m", "transactional.ops.cli", "run", str(f), "--log-level", "DEBUG",
                        "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=180, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout.splitlines()[-1])["batches_committed"] == 3
    assert "could not reach redis://:***@127.0.0.1:1/0 (password ***, token ***)" in p.stderr
    assert_nowhere({"stdout": p.stdout, "stderr": p.stderr})


# -- PostgreSQL passwords in every form libpq reads (property) -----------------------------------------

#: a password: distinctive pieces (so that a piece found in a text is a leak, not a
#: coincidence) joined by the characters that break naive redaction
_PIECE = st.from_regex(r"[A-Za-zéλ中]{3,5}[0-9]{2,3}[A-Za-zéλ]{1,3}", fullmatch=True)
_GLUE = st.text(alphabet=" '\\=@:/\"#&?%\t中", min_size=1, max_size=3)
PASSWORDS = st.tuples(st.lists(_PIECE, min_size=1, max_size=3), st.lists(_GLUE, min_size=3, max_size=3))


def _libpq_quoted(pw: str) -> str:
    return "'" + pw.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _libpq_escaped(pw: str) -> str:
    return "".join("\\" + c if c.isspace() or c in "'\\" else c for c in pw)


def _surfaces(dsn: str, *, log_dsn: bool = True) -> dict[str, str]:
    """What a user can see of a PostgreSQL state given ``dsn`` whose server is down: the
    error (str, repr, logged with its traceback), the DSN as shown and logged."""
    from state.redaction import LOG_FILTER, redact_dsn
    from trident.postgres import PostgresStateFactory

    seen: dict[str, str] = {"redact_dsn": redact_dsn(dsn)}
    if log_dsn:
        seen |= {"log line": redact_text(f"connecting to {dsn} now"), "settings": repr(redact({"dsn": dsn}))}
    try:
        PostgresStateFactory(dsn, "wc", ["word"], mode="append", connect_timeout=1).connect()
    except (StateUnavailableError, ConfigError) as e:
        record = logging.LogRecord("trident", logging.ERROR, __file__, 1, "state failed: %s", (e,),
                                   (type(e), e, e.__traceback__))
        LOG_FILTER.filter(record)
        seen |= {"error": str(e), "repr": repr(e), "logged": logging.Formatter().format(record)}
    else:
        pytest.fail(f"{dsn!r} connected")
    return seen


@given(PASSWORDS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_no_piece_of_a_postgres_password_shows_in_any_form_libpq_reads(parts) -> None:
    pieces, glue = parts
    pw = glue[0] + "".join(p + g for p, g in zip(pieces, glue[1:] * 3, strict=False))
    port = free_port()
    base = f"host=127.0.0.1 port={port} dbname=x user=u"
    forms = {"quoted": (f"{base} password={_libpq_quoted(pw)} connect_timeout=1", True),
             "spaced": (f"password = {_libpq_quoted(pw)} {base}", True),
             "escaped": (f"{base} password={_libpq_escaped(pw)}", True),
             "url": (f"postgresql://u:{quote(pw, safe='')}@127.0.0.1:{port}/x?connect_timeout=1", True),
             "url query": (f"postgresql://u@127.0.0.1:{port}/x?password={quote(pw, safe='')}", True),
             # not quoted though it should be: libpq reads it its own way; no error may quote it
             "unquoted": (f"{base} password={pw}", False)}
    for form, (dsn, log_dsn) in forms.items():
        for where, text in _surfaces(dsn, log_dsn=log_dsn).items():
            leaked = [p for p in pieces if p in text]
            assert not leaked, f"{form}: {where} shows {leaked} of {pw!r}: {text}"
    os.environ["PGPASSWORD"] = pw
    try:
        for where, text in _surfaces(base).items():
            assert not [p for p in pieces if p in text], f"PGPASSWORD: {where}: {text}"
    finally:
        del os.environ["PGPASSWORD"]


def test_the_quoted_password_of_the_issue_is_masked_whole() -> None:
    from state.redaction import redact_dsn

    dsn = f"host=127.0.0.1 port={free_port()} password='Vw47 otherpart' dbname=x"
    assert redact_dsn(dsn).endswith("dbname=x password='***'")
    assert redact_text(f"cannot be reached at {dsn}: refused") == (
        f"cannot be reached at {dsn.split(' password')[0]} password='***' dbname=x: refused")
    assert redact_text("at host=h password=plain: refused") == "at host=h password=*** refused"   # to a space
