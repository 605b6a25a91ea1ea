"""A newcomer's first day (issue 39): ``trident dev-servers``, ``trident doctor``, a missing
extra in one line, permanent errors stopped at once and outages retried without a traceback.

Real servers throughout: dev-servers starts ZooKeeper and Redis processes and the test
talks to them; the PostgreSQL cases use the session's server (tests/support/fixtures_postgres.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from spouts import MemoryTransactionalSpout
from state.errors import ConfigError, StateRefusedError
from transactional import (
    BaseTransactionalBolt,
    Committer,
    Fields,
    TopologyConfig,
    TopologyFailedError,
    TransactionalTopologyBuilder,
    run_topology,
)
from transactional.ops import dev_servers
from transactional.testing import free_port
from transactional.testing._process import port_open
from trident import TridentTopology
from trident.operation import BaseFunction
from trident.postgres import PostgresStateFactory, PostgresUpdater

REPO = Path(__file__).resolve().parents[1]


def trident(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``trident ARGS`` in a child process (this checkout first on its path)."""
    full = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-m", "transactional.ops.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=full, cwd=REPO)


# -- trident dev-servers ----------------------------------------------------------------------------

@pytest.mark.integration
def test_dev_servers_start_outlive_the_command_and_stop(tmp_path: Path) -> None:
    home = tmp_path / "dev"
    toml = tmp_path / "trident.toml"
    toml.write_text('max_spout_pending = 2\nstate = "memory://"\n')
    started = trident("dev-servers", "start", "--with", "redis,zookeeper", "--dir", str(home), "--any-port",
                      "--write-config", str(toml))
    assert started.returncode == 0, started.stderr
    servers = dev_servers.load(home)
    try:
        assert sorted(servers) == ["redis", "zookeeper"]
        # the command has exited; its servers answer
        from state.redis import client_from_url

        assert client_from_url(servers["redis"].url).ping() is True
        from transactional.ops.status import topology_list

        assert topology_list(servers["zookeeper"].url, connect_timeout=5.0) == []
        # the printed URLs and the TOML file name them
        assert f"export TRIDENT_STATE={servers['redis'].url}" in started.stdout
        assert f"export TRIDENT_COORDINATION={servers['zookeeper'].url}" in started.stdout
        text = toml.read_text()
        assert f'state = "{servers["redis"].url}"' in text and "max_spout_pending = 2" in text
        assert 'state = "memory://"' not in text
        # starting again starts nothing new
        again = trident("dev-servers", "start", "--with", "redis", "--dir", str(home), "--any-port")
        assert again.returncode == 0 and dev_servers.load(home)["redis"].pid == servers["redis"].pid
        status = trident("dev-servers", "status", "--dir", str(home))
        assert status.returncode == 0 and status.stdout.count("running") == 2
        env = trident("dev-servers", "env", "--dir", str(home))
        assert env.stdout.split() == ["export", f"TRIDENT_COORDINATION={servers['zookeeper'].url}", "export",
                                      f"TRIDENT_STATE={servers['redis'].url}"]
    finally:
        stopped = trident("dev-servers", "stop", "--dir", str(home), "--clean")
    assert stopped.returncode == 0 and stopped.stdout.strip() == "stopped redis, zookeeper"
    for s in servers.values():
        assert not dev_servers._pid_alive(s.pid), f"{s.name} still runs"
        assert not port_open(s.port)
    assert not home.exists()


def test_dev_servers_refuse_an_unknown_server(tmp_path: Path) -> None:
    r = trident("dev-servers", "start", "--with", "redis,mysql", "--dir", str(tmp_path))
    assert r.returncode == 1
    assert r.stderr.strip() == ("trident: error: --with: unknown server(s) mysql; choose from "
                                "zookeeper,redis,postgres,kafka")
    assert dev_servers.load(tmp_path) == {}


def test_dev_servers_status_when_none_were_started(tmp_path: Path) -> None:
    r = trident("dev-servers", "status", "--dir", str(tmp_path))
    assert r.returncode == 0
    assert r.stdout.strip() == f"no dev servers recorded in {tmp_path}; start them: trident dev-servers start"


# -- trident doctor ---------------------------------------------------------------------------------

@pytest.mark.integration
def test_doctor_passes_with_a_reachable_state_and_names_an_unreachable_one(redis_url: str) -> None:
    ok = trident("doctor", "--state", redis_url, "--coordination", "memory://")
    assert ok.returncode == 0, ok.stdout
    assert "ok    java" in ok.stdout and "ok    pyspark" in ok.stdout
    assert "ok    state                  redis://127.0.0.1:" in ok.stdout
    assert ok.stdout.rstrip().endswith("ready: nothing to fix")
    port = free_port()
    bad = trident("doctor", "--state", f"redis://127.0.0.1:{port}/0")
    assert bad.returncode == 1
    line = next(ln for ln in bad.stdout.splitlines() if ln.startswith("FAIL  state"))
    assert f"redis://127.0.0.1:{port}/0" in line
    assert "fix: start it (trident dev-servers start for local work) or fix the URL" in bad.stdout
    assert bad.stdout.rstrip().endswith("1 problem(s) to fix")


def test_doctor_names_a_workers_python_of_another_version(tmp_path: Path) -> None:
    fake = tmp_path / "python9"
    fake.write_text("#!/bin/sh\necho 9.9\n")
    fake.chmod(0o755)
    r = trident("doctor", env={"PYSPARK_PYTHON": str(fake)})
    assert r.returncode == 1
    ours = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert f"FAIL  workers' python        PYSPARK_PYTHON={fake} is Python 9.9, the driver {ours}" in r.stdout


# -- a missing extra is one line --------------------------------------------------------------------

BLOCK = textwrap.dedent("""
    import sys
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == {module!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
    sys.meta_path.insert(0, Block())
""")


@pytest.mark.parametrize(("module", "imported", "needed_by", "extra"), [
    ("psycopg", "trident.postgres", "trident.postgres", "postgres"),
    ("confluent_kafka", "trident.kafka", "trident.kafka", "kafka"),
    ("confluent_kafka", "spouts.kafka", "spouts.kafka (the Kafka spouts)", "kafka"),
])
def test_importing_a_module_without_its_extra_names_the_pip_install(module: str, imported: str, needed_by: str,
                                                                     extra: str) -> None:
    code = BLOCK.format(module=module) + textwrap.dedent(f"""
        try:
            import {imported}
        except ImportError as e:
            print(type(e).__name__, e)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.stdout.strip() == (f"MissingExtraError {needed_by} needs {module}, which is not installed: "
                                f"pip install 'spark-trident[{extra}]'")


def test_trident_run_of_a_file_needing_a_missing_extra_prints_one_line(tmp_path: Path) -> None:
    runner = tmp_path / "run_blocked.py"
    runner.write_text(BLOCK.format(module="psycopg") + "from transactional.ops.cli import main\nsys.exit(main())\n")
    topo = tmp_path / "pg_topology.py"
    topo.write_text("from trident.postgres import PostgresStateFactory\n\ndef build_topology():\n    pass\n")
    r = subprocess.run([sys.executable, str(runner), "run", str(topo)], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 1
    assert r.stderr.strip() == ("trident: error: trident.postgres needs psycopg, which is not installed: "
                                "pip install 'spark-trident[postgres]'")


# -- permanent errors stop at once; outages are retried, then stop without a traceback --------------

def _pg_topology(dsn: str) -> TridentTopology:
    t = TridentTopology(f"first-day-{time.monotonic_ns()}")
    spout = MemoryTransactionalSpout({0: [("a",), ("b",), ("a",)]}, Fields("word"), 2)
    factory = PostgresStateFactory(dsn, "words", {"word": "text"}, mode="append", create_table=True,
                                   connect_timeout=1)
    t.new_stream("words", spout).partition_persist(factory, Fields("word"), PostgresUpdater())
    return t


@pytest.mark.integration
@pytest.mark.parametrize(("dsn_of", "reason"), [
    (lambda pg: pg.dsn("no_such_database"), 'database "no_such_database" does not exist'),
    (lambda pg: f"postgresql://no_such_role@127.0.0.1:{pg.port}/postgres", 'role "no_such_role" does not exist'),
])
def test_a_permanent_postgres_refusal_stops_before_the_first_attempt(pg_server, dsn_of, reason) -> None:  # noqa: ANN001
    config = TopologyConfig(executor="in-process", progress=False, max_attempts=5, retry_backoff_secs=0.01)
    launched: list[int] = []
    with pytest.raises(StateRefusedError) as info:
        run_topology(_pg_topology(dsn_of(pg_server)), config, on_start=lambda: launched.append(1))
    text = str(info.value)
    assert text.startswith("PostgreSQL at postgresql://") and reason in text, text
    assert launched == []                                # found when the driver started, before any batch
    assert "retrying cannot help" in text and "Traceback" not in text
    assert issubclass(StateRefusedError, ConfigError)    # what the engine stops on at once


def test_a_server_that_is_down_is_retried_then_stops_with_its_message_and_no_traceback() -> None:
    dsn = f"postgresql://postgres@127.0.0.1:{free_port()}/x"
    config = TopologyConfig(executor="in-process", progress=False, max_attempts=3, retry_backoff_secs=0.01,
                            retry_backoff_max_secs=0.02)
    with pytest.raises(TopologyFailedError) as info:
        run_topology(_pg_topology(dsn), config)
    text = str(info.value)
    assert text.startswith("txid 1 failed 3 times (max_attempts=3); last failure: txid 1 (attempt 3)"), text
    assert "StateUnavailableError: PostgreSQL for table 'words' cannot be reached" in text
    assert "Start the server or fix the connection string" in text
    assert "Traceback" not in text and len(text.splitlines()) == 1


# -- polish a new user noticed ---------------------------------------------------------------------

def test_a_mistyped_flag_or_command_gets_did_you_mean() -> None:
    r = trident("run", "examples/global_count.py", "--max-spout-pendng", "3")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == ("trident run: error: unrecognized arguments: --max-spout-pendng "
                                                 "(did you mean --max-spout-pending?) 3")
    r = trident("stauts", "x")
    assert r.returncode == 2
    assert "trident: error: argument command: invalid choice: 'stauts' (did you mean status?)" in r.stderr


@pytest.mark.integration
def test_trident_list_calls_a_trident_topology_trident(zk_url: str) -> None:
    from trident import Count, FixedBatchSpout, state

    t = TridentTopology(f"kinds-{time.monotonic_ns()}")
    t.new_stream("s", FixedBatchSpout(Fields("w"), 2, ("a",), ("b",))).group_by(Fields("w")) \
        .persistent_aggregate(state.transactional("c"), Count(), Fields("n"))
    run_topology(t, TopologyConfig(executor="in-process", progress=False, coordination=zk_url,
                                   accept_state_loss=True))
    r = trident("list", "--coordination", zk_url)
    assert r.returncode == 0, r.stderr
    row = next(ln for ln in r.stdout.splitlines() if ln.startswith(t.topology_id))
    assert row.split()[1] == "trident"


def test_an_idle_run_says_once_that_it_waits_and_for_what(caplog: pytest.LogCaptureFixture) -> None:
    t = TridentTopology(f"idle-{time.monotonic_ns()}")
    t.new_stream("words", MemoryTransactionalSpout({0: [("a",)]}, Fields("word"), 5)).each(
        Fields("word"), _Keep(), Fields("same"))
    with caplog.at_level("INFO", logger="trident"):
        run_topology(t, TopologyConfig(executor="in-process", progress=False, idle_timeout_secs=0.3,
                                       poll_interval_secs=0.05))
    lines = [r.getMessage() for r in caplog.records if "waiting for input" in r.getMessage()]
    assert lines == [f"{t.topology_id}: waiting for input: spout 'words' (MemoryTransactionalSpout) has nothing "
                     "new; asking again every 0.05 s for up to 0.3 s (idle_timeout_secs), then the run ends"]


class _Keep(BaseFunction):
    def execute(self, tuple, collector):
        collector.emit((tuple[0],))


@pytest.mark.integration
def test_a_missing_table_stops_the_run_before_any_batch(pg_dsn: str) -> None:
    t = TridentTopology(f"no-table-{time.monotonic_ns()}")
    spout = MemoryTransactionalSpout({0: [("a",)]}, Fields("word"), 1)
    seen: list[int] = []

    class Note(BaseFunction):
        def execute(self, tuple, collector):
            seen.append(1)
            collector.emit((tuple[0],))

    factory = PostgresStateFactory(pg_dsn, "no_such_table", {"word": "text"}, mode="append")
    t.new_stream("words", spout).each(Fields("word"), Note(), Fields("w")) \
        .partition_persist(factory, Fields("w"), PostgresUpdater())
    result_attempts: list[int] = []
    with pytest.raises(ConfigError, match=r"table 'no_such_table' does not exist; create it:\n  CREATE TABLE"):
        run_topology(t, TopologyConfig(executor="in-process", progress=False),
                     on_commit=lambda txid, r: result_attempts.append(txid))
    assert seen == [] and result_attempts == []       # no batch was processed


class _RowsIntoPostgres(BaseTransactionalBolt, Committer):
    """A transactional committer reaching the table through ``context.state``."""

    def __init__(self, factory):
        self.factory = factory

    def prepare(self, conf, context, collector, attempt):
        self.rows = context.state(self.factory)

    def execute(self, tuple):
        pass

    def finish_batch(self):
        pass


@pytest.mark.integration
def test_a_committers_refused_state_stops_at_the_first_attempt(pg_server) -> None:  # noqa: ANN001
    factory = PostgresStateFactory(pg_server.dsn("no_such_database"), "words", {"word": "text"}, mode="append",
                                   create_table=True, connect_timeout=1)
    b = TransactionalTopologyBuilder(f"refused-{time.monotonic_ns()}", "spout",
                                     MemoryTransactionalSpout({0: [("a",)]}, Fields("word"), 1))
    b.set_bolt("rows", _RowsIntoPostgres(factory)).global_grouping("spout")
    with pytest.raises(TopologyFailedError) as info:
        run_topology(b.build(), TopologyConfig(executor="in-process", progress=False, max_attempts=5))
    text = str(info.value)
    assert text.startswith("stopped: txid 1 (attempt 1), component 'rows', task 0: StateRefusedError: "), text
    assert 'database "no_such_database" does not exist' in text and "Traceback" not in text
