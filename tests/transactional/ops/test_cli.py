"""The ``trident`` command as a user runs it (subprocesses: a fresh driver each)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from transactional.testing._process import free_port, wait_until

REPO = Path(__file__).resolve().parents[3]
#: what Spark, the JVM and kazoo print that a user should not see unless --log-level DEBUG
NOISE = ("log4j", "jdk.incubator.vector", "Setting default log level", "sc.setLogLevel", "NativeCodeLoader",
         "Connection dropped", "kazoo.client")

TOPOLOGY = '''
import os
from spouts import MemoryTransactionalSpout
from transactional import BaseBatchBolt, Fields, TransactionalTopologyBuilder

class Count(BaseBatchBolt):
    def prepare(self, conf, context, collector, id):
        self.n = 0
    def execute(self, tuple):
        self.n += 1
    def finish_batch(self):
        pass
    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "n"))

def build_topology():
    with open(os.environ["BUILD_COUNT_FILE"], "a") as f:     # one line per call
        f.write(__file__ + "\\n")
    spout = MemoryTransactionalSpout({0: [("a",), ("b",), ("c",)]}, Fields("word"), 1)
    b = TransactionalTopologyBuilder(TOPOLOGY_ID, "words", spout, 1)
    b.set_bolt("count", Count(), 2).shuffle_grouping("words")
    return b
'''


def trident(*args: str, timeout: float = 240, cwd: Path = REPO, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "transactional.ops.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def topology_file(tmp_path: Path, name: str, topology_id: str) -> Path:
    p = tmp_path / f"{name}.py"
    p.write_text(f"TOPOLOGY_ID = {topology_id!r}\n" + TOPOLOGY)
    return p


def test_trident_run_prints_the_summary_progress_and_exact_results_and_no_spark_noise():
    p = trident("run", "examples/global_count.py", "--master", "local[1]", "--max-spout-pending", "2")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "global-count: committed 3 batches (txids 1..3), 3 attempts, 0 failed; 18 tuples" in p.stdout
    assert "global count: 18 (expected 18)" in p.stdout
    assert re.search(r"committed txids? (1\.\.)?3\b", p.stderr), "progress lines on stderr"
    assert "Spark UI of trident-global-count (master local[1]): http://" in p.stderr, "the UI is on and named"
    assert not [n for n in NOISE if n in p.stderr], p.stderr


def test_log_level_debug_lets_spark_speak_and_warning_hides_progress():
    p = trident("run", "examples/global_count.py", "--master", "local[1]", "--max-batches", "1",
                "--log-level", "debug")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "jdk.incubator.vector" in p.stderr or "log4j" in p.stderr, "DEBUG shows the JVM's own lines"
    assert "committed 1 batch (txid 1), 1 attempt, 0 failed" in p.stdout
    p = trident("run", "examples/global_count.py", "--set", "executor=in-process", "--log-level", "WARNING")
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stderr == "", "nothing at WARNING on a clean run"


def test_version_names_the_package_version():
    from importlib.metadata import version

    p = trident("--version")
    assert p.returncode == 0 and p.stdout.strip() == f"trident (spark-trident) {version('spark-trident')}"


def test_trident_describe_reads_the_topology_without_running_it():
    p = trident("describe", "examples/transactional_words.py")
    assert p.returncode == 0, p.stderr
    assert "count (KeyedCountUpdater) x3 [commit committer]" in p.stdout
    assert "bucketize (Bucketize) x2 [commit]" in p.stdout
    assert "<- spout/default fields on ('word',)" in p.stdout


def test_describe_draws_dot_svg_and_png_one_output_per_file(tmp_path):
    p = trident("describe", "examples/transactional_words.py", "--format", "dot")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith('digraph "transactional-words" {')
    assert '"spout" -> "count" [label="fields (word)"];' in p.stdout

    files = ["examples/global_count.py", "examples/trident_word_count.py", "examples/transactional_words.py"]
    p = trident("describe", *files, "--format", "png", "-o", str(tmp_path / "pictures"))
    assert p.returncode == 0, p.stderr
    written = [Path(line) for line in p.stdout.split()]
    assert [w.name for w in written] == ["global-count.png", "trident-word-count.png", "transactional-words.png"]
    assert all(w.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") for w in written)

    p = trident("describe", str(REPO / "examples/global_count.py"), "--format", "svg", cwd=tmp_path)   # ./<id>.svg
    assert p.returncode == 0, p.stderr
    assert "<svg" in (tmp_path / "global-count.svg").read_text() and p.stdout.strip() == "global-count.svg"

    p = trident("describe", str(REPO / "examples/global_count.py"), "-o", str(tmp_path / "g.dot"))   # format from -o
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "g.dot").read_text().startswith('digraph "global-count"')


def test_describe_without_graphviz_names_the_package_and_dot_still_works(tmp_path):
    no_dot = {"PATH": str(tmp_path)}     # python is run by its full path; `dot` is nowhere
    p = trident("describe", "examples/global_count.py", "--format", "png", "-o", str(tmp_path / "g.png"),
                env=no_dot)
    assert p.returncode == 1
    assert p.stderr.strip().splitlines() == [
        "trident: error: drawing png needs Graphviz's `dot` program, which is not installed (or not on PATH): "
        "apt-get install graphviz (or bash scripts/install.sh); --format text and --format dot work without it"]
    assert not (tmp_path / "g.png").exists()
    p = trident("describe", "examples/global_count.py", "--format", "dot", env=no_dot)
    assert p.returncode == 0 and p.stdout.startswith("digraph")


def test_build_topology_runs_once_per_file_in_run_and_describe(tmp_path):
    counter = tmp_path / "builds.txt"
    env = {"BUILD_COUNT_FILE": str(counter)}
    a, b = topology_file(tmp_path, "a", "once-a"), topology_file(tmp_path, "b", "once-b")
    p = trident("run", str(a), "--set", "executor=in-process", env=env)
    assert p.returncode == 0, p.stderr
    assert "once-a: committed 3 batches (txids 1..3)" in p.stdout
    assert counter.read_text().splitlines() == [str(a)]
    counter.unlink()
    p = trident("describe", str(a), str(b), "--format", "dot", env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("digraph") == 2
    assert counter.read_text().splitlines() == [str(a), str(b)]


#: storm-starter's committers keep their "database" in a module global of maps holding locks
LOCKED_TOPOLOGY = '''
import threading
from spouts import MemoryTransactionalSpout
from transactional import BaseBatchBolt, BaseTransactionalBolt, Committer, Fields, TransactionalTopologyBuilder, Values

DATABASE = {"global-count": {"lock": threading.Lock(), "count": 0, "txid": None}}

class BatchCount(BaseBatchBolt):
    def prepare(self, conf, context, collector, id):
        self.collector, self.id, self.count = collector, id, 0
    def execute(self, tuple):
        self.count += 1
    def finish_batch(self):
        PEEK()
        self.collector.emit(Values(self.id, self.count))
    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "count"))

class UpdateGlobalCount(BaseTransactionalBolt, Committer):
    def prepare(self, conf, context, collector, attempt):
        self.attempt, self.sum = attempt, 0
    def execute(self, tuple):
        self.sum += tuple["count"]
    def finish_batch(self):
        val = DATABASE["global-count"]
        with val["lock"]:
            if val["txid"] != self.attempt.txid:
                val["count"] += self.sum
                val["txid"] = self.attempt.txid
    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id"))

def build_topology():
    spout = MemoryTransactionalSpout({0: [("a",)] * 6, 1: [("b",)] * 4, 2: [("c",)] * 8}, Fields("word"), 3)
    b = TransactionalTopologyBuilder("locked-db", "spout", spout, 3)
    b.set_bolt("partial-count", BatchCount(), 5).shuffle_grouping("spout")
    b.set_bolt("sum", UpdateGlobalCount()).global_grouping("partial-count")
    return b

def report(result):
    print("DATABASE:", DATABASE["global-count"]["count"], "at txid", DATABASE["global-count"]["txid"])
'''


def test_a_committer_keeps_its_database_in_a_module_global_holding_locks(tmp_path):
    f = tmp_path / "locked_db.py"
    f.write_text("def PEEK():\n    pass\n" + LOCKED_TOPOLOGY)
    p = trident("run", str(f), "--master", "local[2]", "--max-spout-pending", "2")
    assert p.returncode == 0, p.stderr
    assert "DATABASE: 18 at txid 3" in p.stdout.splitlines()


def test_a_module_global_an_executor_bolt_cannot_take_is_named_with_its_module_and_fix(tmp_path):
    f = tmp_path / "peeking_db.py"
    f.write_text("def PEEK():\n    DATABASE['global-count']['lock'].locked()\n" + LOCKED_TOPOLOGY)
    for command in (["run", str(f), "--master", "local[2]"], ["describe", str(f)]):
        p = trident(*command)
        assert p.returncode == 1
        assert p.stderr.strip().splitlines() == [
            "trident: error: component 'partial-count' (BatchCount) runs on Spark executors, but PEEK() reads "
            f"the module global DATABASE of trident_topology_peeking_db ({f}), which cannot be pickled: cannot "
            "pickle '_thread.lock' object. Executors cannot import that module, so its code goes to them by "
            "value with the globals it reads, and they are other processes: they never share the driver's "
            "DATABASE. Create what DATABASE holds (locks, connections) in prepare(), or keep such state in a "
            "committer (it runs on the driver with commit_placement='driver', the default, sharing the "
            "module's globals), or in map state (context.map_state)"]


@pytest.mark.parametrize("returned, what", [("None", "None"), ("{'spout': 1}", "a dict"),
                                            ("MemoryTransactionalSpout({}, Fields('w'), 1)",
                                             "a MemoryTransactionalSpout")])
def test_build_topology_returning_the_wrong_thing_is_one_line(tmp_path, returned, what):
    f = tmp_path / "wrong.py"
    f.write_text("from spouts import MemoryTransactionalSpout\nfrom transactional import Fields\n"
                 f"def build_topology():\n    return {returned}\n")
    for command in (["run", str(f), "--set", "executor=in-process"], ["describe", str(f)]):
        p = trident(*command)
        assert p.returncode == 1
        assert p.stderr.strip().splitlines() == [
            f"trident: error: {f}: build_topology() returned {what}; it must return a TransactionalTopologyBuilder, "
            "a TopologyBuilder, a trident.TridentTopology or a built Topology"]


def test_bad_settings_and_files_get_one_clear_line(tmp_path):
    p = trident("run", "examples/global_count.py", "--max-spout-pending", "0")
    assert p.returncode == 1
    assert ("trident: error: invalid TopologyConfig: max_spout_pending: must be >= 1 (got 0) "
            "(max_spout_pending from --max-spout-pending)") in p.stderr
    p = trident("run", "examples/nope.py")
    assert p.returncode != 0 and "no such topology file: examples/nope.py" in p.stderr
    p = trident("run", "examples/global_count.py", "--state", "mysql://x")
    assert p.returncode == 1 and "state: state URL 'mysql://x' is not supported; use 'memory://' or 'redis://" in p.stderr
    p = trident("run", "examples/global_count.py", env={"TRIDENT_MAX_SPOUT_PENDING": "0"})
    assert p.returncode == 1 and "(max_spout_pending from TRIDENT_MAX_SPOUT_PENDING)" in p.stderr
    p = trident("run", "examples/global_count.py", env={"TRIDENT_MAX_SPOUT_PENDNG": "2"})
    assert p.returncode == 1
    assert "environment variable TRIDENT_MAX_SPOUT_PENDNG is not a setting (did you mean " \
           "TRIDENT_MAX_SPOUT_PENDING?)" in p.stderr
    (tmp_path / "trident.toml").write_text("max_spout_pending = 2\nstate_url = 'redis://x'\n")
    p = trident("run", str(REPO / "examples/global_count.py"), cwd=tmp_path)
    assert p.returncode == 1
    assert "trident: error: trident.toml: 'state_url': unknown setting (did you mean 'state'?) (your own " \
           "settings for prepare(conf, ...) go in a [conf] table)" in p.stderr
    assert "spark_master" not in p.stderr          # no list of every setting after a typo
    p = trident("run", "examples/global_count.py", "--set", "idle_timeout=3")
    assert p.returncode == 1
    assert "idle_timeout: unknown setting (did you mean 'idle_timeout_secs'?) (idle_timeout from --set " in p.stderr
    p = trident("run", "examples/global_count.py", "--config", str(tmp_path / "missing.toml"))
    assert p.returncode == 1 and f"no such settings file: {tmp_path / 'missing.toml'}" in p.stderr


def test_settings_file_environment_and_flags_reach_the_run(tmp_path):
    """trident.toml < TRIDENT_* < flags, seen in what the run does: the file's state is
    overridden by the environment's (an unreachable Redis, named in the error), whose
    max_spout_pending the flag overrides."""
    f = topology_file(tmp_path, "layers", "layers")
    port = free_port()
    (tmp_path / "trident.toml").write_text("state = 'redis://127.0.0.1:1/0'\nexecutor = 'in-process'\n"
                                           "connect_timeout_secs = 1\n[conf]\nk = 1\n")
    env = {"BUILD_COUNT_FILE": str(tmp_path / "n"), "TRIDENT_STATE": f"redis://127.0.0.1:{port}/0"}
    p = trident("run", str(f), "--allow-memory-coordination", cwd=tmp_path, env=env)
    assert p.returncode == 1
    assert f"127.0.0.1:{port}" in p.stderr and "127.0.0.1:1/" not in p.stderr, p.stderr
    p = trident("run", str(f), "--state", "memory://", cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stderr
    assert "layers: committed 3 batches" in p.stdout


def test_durable_state_with_memory_coordination_warns_once_unless_allowed(tmp_path):
    args = ("run", "examples/global_count.py", "--set", "executor=in-process", "--set", "connect_timeout_secs=1",
            "--state", f"redis://127.0.0.1:{free_port()}/0")
    p = trident(*args)
    assert p.returncode == 1        # nothing listens there: the run stops at start, naming it
    warnings = [line for line in p.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 1 and warnings[0].endswith(
        "is durable but coordination is memory://: a second run starts at txid 1 again, finds values written by "
        "this run's txids and refuses to run; use --coordination zk://host:port/root (or --allow-memory-coordination)")
    p = trident(*args, "--allow-memory-coordination")
    assert p.returncode == 1 and "WARNING" not in p.stderr and "trident: error:" in p.stderr


def test_kazoo_connection_warnings_only_at_debug():
    url = f"zk://127.0.0.1:{free_port()}/r"
    env = {"TRIDENT_CONNECT_TIMEOUT_SECS": "1"}
    p = trident("status", "words", "--coordination", url, env=env)
    assert p.returncode == 1
    assert p.stderr.strip().splitlines()[-1].startswith("trident: error: cannot connect to ZooKeeper at 127.0.0.1:")
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    p = trident("status", "words", "--coordination", url, "--log-level", "DEBUG", env=env)
    assert p.returncode == 1 and "Connection dropped" in p.stderr


def test_status_takes_coordination_from_the_environment_or_says_where_to_put_it():
    p = trident("status", "words", env={"TRIDENT_COORDINATION": "memory://"})
    assert p.returncode == 1 and "no coordinator state" in p.stdout      # a topology that never ran there
    assert p.stderr == "trident: error: no topology 'words' under memory://\n"
    p = trident("status", "words")
    assert p.returncode == 1 and "trident status needs the coordinator state's address: --coordination" in p.stderr


def test_ctrl_c_during_run_is_one_line_naming_the_last_committed_txid_and_exit_130():
    """A terminal's Ctrl-C: SIGINT to the whole process group (the driver, its JVM, the
    Python workers), once the run has committed a batch; it never ends by itself."""
    proc = subprocess.Popen([sys.executable, "-m", "transactional.ops.cli", "run", "examples/global_count.py",
                             "--master", "local[2]", "--idle-timeout", "-1"], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)   # type: ignore[arg-type]
    reader.start()
    try:
        wait_until(lambda: any("committed txid" in line for line in err) or proc.poll() is not None, 180,
                   what="a commit in the progress lines")
        assert proc.poll() is None, "".join(err)
        seen = max(int(m) for line in err for m in re.findall(r"committed txid (\d+)", line))
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)             # not communicate(): it would read stderr too, racing the reader
        out = proc.stdout.read()          # type: ignore[union-attr]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    reader.join(10)
    assert proc.returncode == 130, "".join(err)
    last = err[-1].rstrip("\n")
    m = re.fullmatch(r"interrupted after txid (\d+) committed; run again to resume", last)
    assert m and int(m.group(1)) >= seen, "".join(err)
    assert sum("interrupted" in line for line in err) == 1
    assert "Traceback" not in "".join(err) and "KeyboardInterrupt" not in "".join(err)
    assert out == ""


def test_describe_has_no_side_effects_and_run_calls_setup_first(tmp_path):
    (tmp_path / "impure.py").write_text(
        "import socket\n"
        "from transactional import TransactionalTopologyBuilder\n"
        "from spouts import MemoryTransactionalSpout\n"
        "def build_topology():\n"
        "    socket.create_connection(('127.0.0.1', 9), timeout=1)\n"
        "    return TransactionalTopologyBuilder('impure', 'spout', MemoryTransactionalSpout({0: []}, ('w',), 1))\n")
    p = trident("describe", "impure.py", cwd=tmp_path)
    assert p.returncode == 1
    assert ("trident: error: impure.py: build_topology() opened a network connection, but it must be pure: "
            "`trident describe` only reads the topology. Move setup work") in p.stderr, p.stderr
    (tmp_path / "pure.py").write_text(
        "import subprocess, sys\n"
        "from transactional import Fields, TopologyConfig\n"
        "from trident import Count, FixedBatchSpout, TridentTopology, state\n"
        "CONFIG = {'executor': 'in-process'}\n"
        "ORDER = []\n"
        "def setup():\n"
        "    subprocess.run([sys.executable, '-c', 'pass'], check=True)   # a side effect, allowed here\n"
        "    ORDER.append('setup')\n"
        "def build_topology():\n"
        "    ORDER.append('build')\n"
        "    t = TridentTopology('pure')\n"
        "    t.new_stream('s', FixedBatchSpout(Fields('w'), 2, ('a',), ('b',))).group_by(Fields('w'))"
        ".persistent_aggregate(state.transactional('c'), Count(), Fields('n'))\n"
        "    return t\n"
        "def report(result):\n"
        "    print('order', ORDER)\n")
    p = trident("describe", "pure.py", cwd=tmp_path)
    assert p.returncode == 0 and "persistent_aggregate(c)" in p.stdout, p.stderr
    p = trident("run", "pure.py", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "order ['setup', 'build']" in p.stdout


def test_describe_of_the_kafka_examples_starts_no_broker():
    for example in ("examples/kafka_word_count.py", "examples/trident_kafka_word_count.py"):
        p = trident("describe", example)
        assert p.returncode == 0, p.stderr
        assert "started a local Kafka-protocol broker" not in p.stdout + p.stderr
        assert "produced" not in p.stdout + p.stderr
