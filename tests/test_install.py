"""A non-editable install in a virtualenv, run without activating it from a directory outside
the checkout, as cron, systemd, CI jobs and IDE run configurations do: Spark's Python workers
must run the driver's own interpreter, not the ``python3`` first on PATH (which lacks the
project). And when they are told to run another interpreter, the run stops at once with a
message naming it and the fix (not ``max_attempts`` retries of a bare ModuleNotFoundError)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

TOPOLOGY = textwrap.dedent("""
    from transactional import Fields, TopologyConfig
    from trident import Count, FixedBatchSpout, TridentTopology, state

    CONFIG = TopologyConfig(spark_master="local[2]", spark_ui=False, max_attempts=3)

    def build_topology():
        spout = FixedBatchSpout(Fields("word"), 2, ("a",), ("b",), ("a",), ("c",), ("a",))
        t = TridentTopology("outside-checkout")
        (t.new_stream("words", spout).group_by(Fields("word"))
          .persistent_aggregate(state.transactional("counts"), Count(), Fields("count")).parallelism_hint(2))
        return t
""")


@pytest.fixture(scope="module")
def outside_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv holding a wheel of this checkout (``pip install .``, not ``-e``); its
    dependencies come from this interpreter's site-packages through a path entry (whose
    own .pth files, among them this checkout's editable install, are not processed)."""
    root = tmp_path_factory.mktemp("venv")
    wheels = root / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(REPO)],
                   check=True, capture_output=True)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (wheel,) = wheels.glob("spark_trident-*.whl")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", str(wheel)],
                   check=True, capture_output=True)
    check = subprocess.run([str(py), "-c", "import transactional; print(transactional.__file__)"],
                           capture_output=True, text=True, cwd=root, check=True)
    assert check.stdout.startswith(purelib), check.stdout   # the installed copy, not this checkout
    return venv


def _system_env() -> dict[str, str]:
    """PATH of the system's own directories only: the ``python3`` there cannot import the
    project (this test would prove nothing if it could)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    return env


def test_system_python3_lacks_the_project() -> None:
    probe = subprocess.run(["python3", "-c", "import transactional"], env=_system_env(), capture_output=True,
                           cwd="/", text=True)
    assert probe.returncode != 0, "the python3 on the system PATH imports the project: the tests below prove nothing"


def test_venv_trident_runs_without_activation(outside_venv: Path, tmp_path: Path) -> None:
    (tmp_path / "my_topology.py").write_text(TOPOLOGY)
    run = subprocess.run([str(outside_venv / "bin" / "trident"), "run", "my_topology.py"], cwd=tmp_path,
                         env=_system_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "committed 3 batches (txids 1..3)" in run.stdout, run.stdout


def test_venv_python_runs_a_job_without_activation(outside_venv: Path, tmp_path: Path) -> None:
    (tmp_path / "my_job.py").write_text(TOPOLOGY + textwrap.dedent("""
        from transactional import run_topology
        result = run_topology(build_topology(), CONFIG)
        print(result.first_txid, result.last_txid, result.batches_committed)
    """))
    run = subprocess.run([str(outside_venv / "bin" / "python"), "my_job.py"], cwd=tmp_path,
                         env=_system_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == "1 3 3", run.stdout


def test_workers_without_the_project_stop_at_once_naming_the_interpreter(outside_venv: Path,
                                                                          tmp_path: Path) -> None:
    (tmp_path / "my_topology.py").write_text(TOPOLOGY)
    env = _system_env() | {"PYSPARK_PYTHON": "/usr/bin/python3"}
    run = subprocess.run([str(outside_venv / "bin" / "trident"), "run", "my_topology.py"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert "Spark's Python workers cannot import spark-trident: they run /usr/bin/python3" in run.stderr, \
        run.stderr[-3000:]
    assert "PYSPARK_PYTHON" in run.stderr
    assert "attempt 2" not in run.stderr     # fatal: not retried
