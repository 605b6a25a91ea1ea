"""The ``trident`` command.

    trident run examples/global_count.py [--max-batches N] [--master local[2]]
                [--coordination zk://127.0.0.1:2181/trident] [--state redis://127.0.0.1:6379/0]
                [--max-spout-pending 3] [--set key=value ...] [--json]
    trident describe examples/global_count.py
    trident package examples/global_count.py [-o DIR]    (a zip for spark-submit --py-files)
    trident status TOPOLOGY_ID --coordination zk://127.0.0.1:2181/trident [--json]

A topology file defines ``build_topology()`` returning a ``TransactionalTopologyBuilder``
(or a built ``Topology``), and optionally ``report(result)`` to print its results and
``CONFIG``, a dict of ``TopologyConfig`` defaults.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from transactional.config import TopologyConfig
from transactional.exceptions import TridentError


def load_topology_file(path: str) -> ModuleType:
    """Import a topology file as a module. Executors cannot import a file by path: its
    classes and functions go to them by value, in the components' executor blobs only
    (``transactional.topology.ship_by_value``); on the driver the commit phase and the
    spout's coordinator run the module's own classes."""
    p = Path(path)
    if not p.is_file():
        msg = f"trident: no such topology file: {path}"
        raise SystemExit(msg)
    name = f"trident_topology_{p.stem}"
    spec = importlib.util.spec_from_file_location(name, p)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(p.resolve().parent))
    spec.loader.exec_module(module)
    from transactional.topology import ship_by_value

    ship_by_value(module)   # executors cannot import a file by path
    if not hasattr(module, "build_topology"):
        msg = (
            f"trident: {path} defines no build_topology(); it must return a "
            "TransactionalTopologyBuilder, a trident.TridentTopology or a built Topology"
        )
        raise SystemExit(msg)
    return module


def _config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-batches", type=int, default=None, help="commit at most N batches, then stop")
    parser.add_argument("--master", help="Spark master (default local[*]; spark://host:port, yarn, k8s://...)")
    parser.add_argument("--py-files", help="comma-separated .py/.zip/.egg files for executors (as spark-submit's); "
                        "for a non-local master the topology's local modules are zipped and shipped too")
    parser.add_argument("--archives", help="comma-separated archives unpacked on executors, e.g. venv.tar.gz#environment")
    parser.add_argument("--coordination", help="memory:// or zk://host:port[,host:port]/<root>")
    parser.add_argument("--coordination-auth", help="ZooKeeper digest credentials user:password")
    parser.add_argument("--state", help="memory:// or redis://[user:password@]host:port/db")
    parser.add_argument("--max-spout-pending", type=int, help="batches in flight at most")
    parser.add_argument("--message-timeout", type=float, help="seconds before an attempt is replayed")
    parser.add_argument("--idle-timeout", type=float, help="seconds to wait for new data before ending (-1: forever)")
    parser.add_argument("--lock-wait", type=float, help="seconds to wait for another driver's lock (-1: forever)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a TopologyConfig field, or conf.KEY for a user setting (JSON values)")
    parser.add_argument("--json", action="store_true", help="print the run summary as one JSON line")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def config_from_args(args: argparse.Namespace, defaults: dict | None = None) -> TopologyConfig:
    """The ``TopologyConfig`` for parsed command-line options on top of ``defaults`` (a
    topology file's ``CONFIG``): ``--set KEY=VALUE`` takes a JSON value (else the string;
    ``conf.KEY`` goes to ``conf``); a negative ``--idle-timeout``/``--lock-wait`` means forever."""
    kw: dict[str, Any] = dict(defaults or {})
    for attr, field in (("master", "spark_master"), ("coordination", "coordination"),
                        ("coordination_auth", "coordination_auth"), ("state", "state"),
                        ("max_spout_pending", "max_spout_pending"), ("message_timeout", "message_timeout_secs")):
        if getattr(args, attr, None) is not None:
            kw[field] = getattr(args, attr)
    for attr, field in (("py_files", "py_files"), ("archives", "archives")):
        v = getattr(args, attr, None)
        if v:
            kw[field] = [*kw.get(field, []), *(x.strip() for x in v.split(",") if x.strip())]
    for attr, field in (("idle_timeout", "idle_timeout_secs"), ("lock_wait", "lock_wait_secs")):
        v = getattr(args, attr, None)
        if v is not None:
            kw[field] = None if v < 0 else v
    for item in getattr(args, "set", []):
        key, _, raw = item.partition("=")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        if key.startswith("conf."):
            kw.setdefault("conf", {})[key[5:]] = value
        else:
            kw[key] = value
    if getattr(args, "quiet", False):
        kw["progress"] = False
    elif "progress" not in kw:
        kw["progress"] = True
    return TopologyConfig(**kw)


def _run(build: Callable[[], Any], report: Callable[[Any], None] | None, args: argparse.Namespace,
         defaults: dict | None) -> int:
    from transactional._runner import run_topology
    from transactional.ship import code_zip, needs_shipping, under_spark_submit

    config = config_from_args(args, defaults)
    logging.basicConfig(level=logging.INFO if config.progress else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for noisy in ("py4j", "kazoo"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    topology = build()
    if hasattr(topology, "build"):
        topology = topology.build()
    if config.executor == "spark" and needs_shipping(config.spark_master) and not under_spark_submit():
        # executors elsewhere import only what is installed there or shipped: ship this
        # package and every local module the topology imported (docs/cluster.md)
        config = config.model_copy(update={"py_files": [str(code_zip()), *config.py_files]})
    result = run_topology(topology, config, max_batches=args.max_batches)
    if args.json:
        print(json.dumps(result.summary()))
    else:
        s = result.summary()
        print(f"{s['topology_id']}: committed {s['batches_committed']} batches (txids {s['first_txid']}.."
              f"{s['last_txid']}), {s['attempts']} attempts, {s['failed_attempts']} failed; "
              f"{s['spout_tuples']} tuples in {s['wall_secs']} s; stopped: {s['stopped_because']}")
    if report is not None:
        report(result)
    return 0


def run_example(build: Callable[[], Any], report: Callable[[Any], None] | None = None,
                argv: Sequence[str] | None = None, defaults: dict | None = None) -> None:
    """``python examples/x.py [options]``: the same options as ``trident run``."""
    parser = argparse.ArgumentParser(description=(sys.modules["__main__"].__doc__ or "").strip().split("\n")[0])
    _config_args(parser)
    args = parser.parse_args(argv)
    sys.exit(_guard(lambda: _run(build, report, args, defaults)))


def _guard(fn: Callable[[], int]) -> int:
    try:
        return fn()
    except TridentError as e:
        print(f"trident: error: {e}", file=sys.stderr)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    """The ``trident`` command: ``run``, ``describe`` or ``status``; returns the exit status."""
    parser = argparse.ArgumentParser(prog="trident", description="Exactly-once stream processing on PySpark")
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="run a topology file")
    p_run.add_argument("file")
    _config_args(p_run)
    p_desc = sub.add_parser("describe", help="print a topology's components and groupings")
    p_desc.add_argument("file")
    p_pkg = sub.add_parser("package", help="zip this package and the topology's local modules for "
                           "spark-submit --py-files (docs/cluster.md)")
    p_pkg.add_argument("file")
    p_pkg.add_argument("-o", "--out-dir", default=".", help="where to write trident-code-<hash>.zip (default .)")
    p_status = sub.add_parser("status", help="a topology's coordinator state")
    p_status.add_argument("topology_id")
    p_status.add_argument("--coordination", required=True, help="zk://host:port[,host:port]/<root>")
    p_status.add_argument("--coordination-auth", help="user:password")
    p_status.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    if args.command == "run":
        module = load_topology_file(args.file)
        return _guard(lambda: _run(module.build_topology, getattr(module, "report", None), args,
                                   getattr(module, "CONFIG", None)))
    if args.command == "package":
        module = load_topology_file(args.file)

        def package() -> int:
            from transactional.ship import SUBMIT_SCRIPT, code_zip

            module.build_topology()          # imports what building it imports
            path = code_zip(args.out_dir)
            print(path)
            print(f"spark-submit --master MASTER --py-files {path} --files {args.file} "
                  f"{SUBMIT_SCRIPT} run {Path(args.file).name} [options]", file=sys.stderr)
            return 0
        return _guard(package)
    if args.command == "describe":
        module = load_topology_file(args.file)

        def describe() -> int:
            t = module.build_topology()
            print((t.build() if hasattr(t, "build") else t).describe())
            return 0
        return _guard(describe)

    def status() -> int:
        from transactional.status import format_status, topology_status

        st = topology_status(args.coordination, args.topology_id, auth=args.coordination_auth)
        print(json.dumps(st, indent=None if args.json else 2) if args.json else format_status(st))
        return 0
    return _guard(status)


if __name__ == "__main__":
    sys.exit(main())
