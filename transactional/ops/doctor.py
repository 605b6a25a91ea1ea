"""``trident doctor``: is this machine ready to run topologies, and what to fix if not.

    trident doctor [--coordination URL] [--state URL] [--config trident.toml] [--json]

It checks, each on one line with its fix when it fails: the Python running ``trident``;
Java 17 or newer (Spark 4 needs it); PySpark; the Python the Spark workers will run (the
same version as the driver's, or pickled functions do not load); each optional extra
(Kafka, the local broker, PostgreSQL, Parquet on fsspec, DuckDB, Delta Lake, Iceberg,
Redis' fast parser) with the ``pip install 'spark-trident[...]'`` that adds it; each
server the settings name (``coordination``, ``state`` from the command line,
``trident.toml`` or ``TRIDENT_*``) reachable; and the dev servers ``trident dev-servers``
started. The exit status is 1 when a check FAILs; a missing extra only warns.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from transactional.extras import EXTRAS

__all__ = ["Check", "add_parser", "checks", "run"]


@dataclass
class Check:
    """One line of the report: ``status`` is ``ok``, ``warn`` or ``FAIL``."""

    status: str
    what: str
    detail: str
    fix: str = ""


def _python() -> Check:
    v = sys.version_info
    where = f"{sys.version.split()[0]} ({sys.executable})"
    if v < (3, 10):
        return Check("FAIL", "python", where, "spark-trident needs Python 3.10 or newer")
    venv = sys.prefix != sys.base_prefix
    return Check("ok", "python", where + ("" if venv else "; not a virtual environment"))


def java_version(java: str) -> int | None:
    """The major version ``java -version`` reports (8 for 1.8), None when it does not run."""
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=20).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def _java() -> Check:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    fix = "apt-get install -y openjdk-17-jre-headless, or set JAVA_HOME to a JDK 17+ (source scripts/env.sh)"
    if not java or not Path(java).exists():
        return Check("FAIL", "java", "no java" + (f" in JAVA_HOME={home}" if home else " on PATH"), fix)
    major = java_version(java)
    if major is None or major < 17:
        return Check("FAIL", "java", f"{java}: version {major or 'unknown'}; Spark 4 needs 17 or newer", fix)
    return Check("ok", "java", f"{major} ({java})")


def _spark() -> Check:
    if importlib.util.find_spec("pyspark") is None:
        return Check("FAIL", "pyspark", "not installed", "pip install -e . (or bash scripts/install.sh)")
    import pyspark

    return Check("ok", "pyspark", f"{pyspark.__version__} ({Path(pyspark.__file__).parent})")


def _workers_python() -> Check:
    chosen = os.environ.get("PYSPARK_PYTHON")
    if not chosen:
        return Check("ok", "workers' python", f"the driver's own ({sys.executable})")
    try:
        out = subprocess.run([chosen, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
    except OSError as e:
        return Check("FAIL", "workers' python", f"PYSPARK_PYTHON={chosen}: {e.strerror or e}",
                     "unset PYSPARK_PYTHON, or point it at an interpreter that exists")
    ours = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if out != ours:
        return Check("FAIL", "workers' python", f"PYSPARK_PYTHON={chosen} is Python {out or '?'}, the driver {ours}",
                     "unset PYSPARK_PYTHON (the workers then run the driver's interpreter)")
    return Check("ok", "workers' python", f"PYSPARK_PYTHON={chosen} (Python {out})")


def _extras() -> list[Check]:
    out = []
    for module, (extra, what) in EXTRAS.items():
        if importlib.util.find_spec(module) is not None:
            out.append(Check("ok", f"extra {extra}", f"{what} ({module})"))
        else:
            out.append(Check("warn", f"extra {extra}", f"{what}: {module} is not installed",
                             f"pip install 'spark-trident[{extra}]'"))
    return out


def _server(what: str, url: str, probe: Callable[[str], None]) -> Check:
    from state.redaction import redact_url

    shown = redact_url(url)
    try:
        probe(url)
    except Exception as e:  # noqa: BLE001 - any failure to reach it is the finding
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return Check("FAIL", what, f"{shown}: {first}",
                     "start it (trident dev-servers start for local work) or fix the URL")
    return Check("ok", what, f"{shown} answers")


def _probe_zookeeper(url: str) -> None:
    from transactional.ops.status import topology_list

    topology_list(url, connect_timeout=5.0)


def _probe_redis(url: str) -> None:
    from state.redis import client_from_url

    client_from_url(url, connect_timeout=5.0).ping()


def _servers(coordination: str, state: str) -> list[Check]:
    out = []
    if coordination.startswith("zk://"):
        out.append(_server("coordination", coordination, _probe_zookeeper))
    else:
        out.append(Check("ok", "coordination", f"{coordination} (in this process: nothing to reach)"))
    if state.startswith(("redis://", "rediss://")):
        out.append(_server("state", state, _probe_redis))
    else:
        out.append(Check("ok", "state", f"{state} (in this process: nothing to reach)"))
    return out


def _dev_servers() -> list[Check]:
    from transactional.ops import dev_servers

    return [Check("ok" if up else "FAIL", f"dev server {s.name}", f"{s.url} (pid {s.pid})" + ("" if up else ": down"),
                  "" if up else "trident dev-servers start")
            for s, up in dev_servers.status(dev_servers.default_dir())]


def checks(coordination: str, state: str) -> list[Check]:
    """Every check, in report order."""
    return [_python(), _java(), _spark(), _workers_python(), *_extras(), *_servers(coordination, state),
            *_dev_servers()]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``doctor`` subcommand's options."""
    p = sub.add_parser("doctor", help="check Java, Spark, the workers' Python, the extras and the configured "
                       "servers; say what to fix")
    p.add_argument("--coordination", metavar="URL", help="the coordination URL to check (default: the settings')")
    p.add_argument("--state", metavar="URL", help="the state URL to check (default: the settings')")
    p.add_argument("--config", metavar="FILE", help="a TOML settings file (default ./trident.toml)")
    p.add_argument("--json", action="store_true", help="the checks as one JSON list")


def _settings(args: argparse.Namespace) -> tuple[str, str]:
    from transactional.ops.settings import DEFAULT_FILE, Layer, env_layer, file_layer, make_config

    layers = [layer for layer in (file_layer(args.config) if args.config else
                                  file_layer(DEFAULT_FILE, required=False), env_layer()) if layer is not None]
    cli = {k: v for k, v in (("coordination", args.coordination), ("state", args.state)) if v}
    config = make_config([*layers, Layer("the command line", cli)])
    return config.coordination, config.state


def run(args: argparse.Namespace) -> int:
    """``trident doctor``; 1 when any check FAILs."""
    found = checks(*_settings(args))
    if args.json:
        print(json.dumps([asdict(c) for c in found]))
    else:
        for c in found:
            print(f"{c.status:<4}  {c.what:<22} {c.detail}" + (f"\n      fix: {c.fix}" if c.fix else ""))
        failed = sum(c.status == "FAIL" for c in found)
        print(f"{failed} problem(s) to fix" if failed else "ready: nothing to fix")
    return 1 if any(c.status == "FAIL" for c in found) else 0
