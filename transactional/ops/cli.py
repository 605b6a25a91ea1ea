"""The ``trident`` command (docs/cli.md).

    trident run examples/global_count.py [--max-batches N] [--master local[2]]
                [--coordination zk://127.0.0.1:2181/trident] [--state redis://127.0.0.1:6379/0]
                [--max-spout-pending 3] [--set key=value ...] [--config trident.toml] [--json]
    trident describe FILE [FILE ...] [--format text|dot|svg|png] [-o OUT]
    trident package examples/global_count.py [-o DIR]    (a zip for spark-submit --py-files)
    trident status TOPOLOGY_ID [--coordination zk://127.0.0.1:2181/trident] [--json]
    trident list [TOPOLOGY_ID ...] [--coordination zk://127.0.0.1:2181/trident] [--json]
    trident deactivate|activate|kill TOPOLOGY_ID [--coordination zk://127.0.0.1:2181/trident]
    trident ui [--coordination zk://127.0.0.1:2181/trident] [--port 8080] [--host 127.0.0.1]
               [--control-token TOKEN]   (the status page of every topology under the root, no driver needed)
    trident verify FILE [--crash-points all|LIST] [--kills N] [--seed S] [--budget SECS] [--junit FILE] [--json]
                                          (exactly once, proven: runs under faults against a clean run; docs/verify.md)
    trident replay ID --file FILE --txids A..B --into NAMESPACE [--trace COMPONENT]
                                          (re-emit kept batches into scratch state; keep_batch_meta)
    trident rebalance ID -e COMPONENT=N [-e ...] [-w SECS]   (new task counts at a txid boundary)
    trident upgrade FILE --from ID [--dry-run] [--shadow A..B] [--allow-dropped-state] [run's options]
                                          (check a new version against the recorded layout, then run it)
    trident --version

A topology file defines ``build_topology()`` returning a ``TransactionalTopologyBuilder``,
a ``TopologyBuilder``, a ``trident.TridentTopology`` or a built ``Topology`` (called once
per file; it must be pure: ``trident describe`` calls it with network connections and
child processes refused), and optionally ``setup()`` for the work before a run (start a
broker, create a topic, produce: ``trident run`` calls it before ``build_topology()``,
``describe`` never), ``report(result)`` to print its results and ``CONFIG``, a dict of
``TopologyConfig`` settings. Settings come, lowest first, from ``TopologyConfig``'s
defaults, ``CONFIG``, ``trident.toml`` (or ``--config FILE``), ``TRIDENT_<FIELD>``
environment variables and the command line (``transactional.ops.settings``).

Spark's start-up banner and log4j lines, and kazoo's connection warnings, stay out of the
terminal unless ``--log-level DEBUG``; errors still show. Ctrl-C during ``trident run``
ends with one line, ``interrupted after txid N committed; run again to resume``, and exit
status 130.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from transactional.config import TopologyConfig
from transactional.exceptions import TridentError
from transactional.ops import rebalance as rebalance_command
from transactional.ops import replay as replay_command
from transactional.ops import upgrade as upgrade_command
from transactional.ops import verify as verify_command
from transactional.ops.logs import quiet_spark, setup_logging
from transactional.ops.progress import plural
from transactional.ops.settings import DEFAULT_FILE, Layer, env_layer, file_layer, make_config
from transactional.ops.topology_file import SideEffectError as SideEffectError  # noqa: F401 - re-exported
from transactional.ops.topology_file import built_topology, load_topology_file, no_side_effects
from transactional.redaction import redact_text

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
#: exit status of a run ended by Ctrl-C (128 + SIGINT, as shells report it)
INTERRUPTED = 130


def _version() -> str:
    try:
        return importlib.metadata.version("spark-trident")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


# -- topology files: transactional.ops.topology_file ------------------------------------------------


# -- settings ----------------------------------------------------------------------------------------

def _config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-batches", type=int, default=None, metavar="N", help="commit at most N batches, then stop")
    parser.add_argument("--master", metavar="URL", help="Spark master (default local[*]; spark://host:port, yarn, k8s://...)")
    parser.add_argument("--py-files", metavar="FILES", help="comma-separated .py/.zip/.egg files for executors (as spark-submit's); "
                        "for a non-local master the topology's local modules are zipped and shipped too")
    parser.add_argument("--archives", metavar="ARCHIVES", help="comma-separated archives unpacked on executors, e.g. venv.tar.gz#environment")
    parser.add_argument("--coordination", metavar="URL", help="memory:// or zk://host:port[,host:port]/<root>")
    parser.add_argument("--coordination-auth", metavar="USER:PASSWORD", help="ZooKeeper digest credentials user:password")
    parser.add_argument("--state", metavar="URL", help="memory:// or redis://[user:password@]host:port/db")
    parser.add_argument("--max-spout-pending", type=int, metavar="N", help="batches in flight at most")
    parser.add_argument("--message-timeout", type=float, metavar="SECS", help="seconds before an attempt is replayed")
    parser.add_argument("--idle-timeout", type=float, metavar="SECS", help="seconds to wait for new data before ending (-1: forever)")
    parser.add_argument("--lock-wait", type=float, metavar="SECS", help="seconds to wait for another driver's lock (-1: forever)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a TopologyConfig field, or conf.KEY for a user setting (JSON values)")
    parser.add_argument("--config", metavar="FILE",
                        help=f"a TOML file of TopologyConfig settings (default: ./{DEFAULT_FILE} if it exists)")
    parser.add_argument("--allow-memory-coordination", action="store_true",
                        help="no warning for durable --state with memory:// coordination")
    parser.add_argument("--accept-state-loss", action="store_true", default=None,
                        help="run although state an earlier run committed would be lost (another --state than the "
                             "one its txids were committed to, or zk:// coordination with memory:// state)")
    parser.add_argument("--allow-dropped-state", action="store_true", default=None,
                        help="run a new version that no longer has a state (or spout) an earlier version stored "
                             "values (or offsets) in: they stay unread")
    parser.add_argument("--metrics-port", type=int, metavar="PORT",
                        help="serve the status page (/) and Prometheus metrics (/metrics) on this port (0: a free one)")
    parser.add_argument("--metrics-host", metavar="ADDRESS", help="the address they bind (default 127.0.0.1)")
    parser.add_argument("--control-token", metavar="TOKEN",
                        help="turn on the status page's deactivate/activate/kill buttons; each request must carry "
                             "TOKEN (also TRIDENT_CONTROL_TOKEN)")
    parser.add_argument("--json", action="store_true", help="print the run summary as one JSON line")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    _log_level_arg(parser)


def _log_level_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS, metavar="LEVEL",
                        help="DEBUG, INFO (default: progress and warnings), WARNING or ERROR; DEBUG adds Spark's, py4j's and kazoo's own "
                             "output")


_FLAGS = (("master", "spark_master", "--master"), ("coordination", "coordination", "--coordination"),
          ("coordination_auth", "coordination_auth", "--coordination-auth"), ("state", "state", "--state"),
          ("max_spout_pending", "max_spout_pending", "--max-spout-pending"),
          ("message_timeout", "message_timeout_secs", "--message-timeout"),
          ("metrics_port", "metrics_port", "--metrics-port"), ("metrics_host", "metrics_host", "--metrics-host"),
          ("control_token", "control_token", "--control-token"))


def cli_layer(args: argparse.Namespace) -> Layer:
    """The settings the command line gives (the highest layer): flags, ``--set KEY=VALUE``
    (a JSON value, else the string; ``conf.KEY`` goes to ``conf``), ``-q``; a negative
    ``--idle-timeout``/``--lock-wait`` means forever."""
    kw: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for attr, key, flag in _FLAGS:
        if getattr(args, attr, None) is not None:
            kw[key], origins[key] = getattr(args, attr), flag
    for attr, key in (("py_files", "py_files"), ("archives", "archives")):
        v = getattr(args, attr, None)
        if v:
            kw[key], origins[key] = [x.strip() for x in v.split(",") if x.strip()], f"--{key.replace('_', '-')}"
    for attr, key in (("idle_timeout", "idle_timeout_secs"), ("lock_wait", "lock_wait_secs")):
        v = getattr(args, attr, None)
        if v is not None:
            kw[key], origins[key] = (None if v < 0 else v), f"--{attr.replace('_', '-')}"
    _set_items(getattr(args, "set", []), kw, origins)
    if getattr(args, "accept_state_loss", None):
        kw["accept_state_loss"], origins["accept_state_loss"] = True, "--accept-state-loss"
    if getattr(args, "allow_dropped_state", None):
        kw["allow_dropped_state"], origins["allow_dropped_state"] = True, "--allow-dropped-state"
    if getattr(args, "quiet", False):
        kw["progress"], origins["progress"] = False, "-q"
    return Layer("command line", kw, origins=origins)


def _set_items(items: list[str], kw: dict[str, Any], origins: dict[str, str]) -> None:
    """``--set KEY=VALUE`` items into ``kw`` (``conf.KEY`` into ``kw["conf"]``) and ``origins``."""
    for item in items:
        key, _, raw = item.partition("=")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        if key.startswith("conf."):
            kw.setdefault("conf", {})[key[5:]] = value
            origins["conf"] = f"--set {item}"
        else:
            kw[key], origins[key] = value, f"--set {item}"


def settings_layers(args: argparse.Namespace, defaults: dict[str, Any] | None = None,
                    defaults_from: str = "the topology file") -> list[Layer]:
    """Every settings layer of a command, lowest first: ``defaults`` (a topology file's
    ``CONFIG``), the TOML file (``--config``, else ``./trident.toml`` when it exists), the
    ``TRIDENT_*`` environment, the command line."""
    layers = [Layer(f"CONFIG of {defaults_from}", dict(defaults or {}), f"CONFIG in {defaults_from}")]
    path = getattr(args, "config", None)
    toml = file_layer(path) if path else file_layer(DEFAULT_FILE, required=False)
    if toml is not None:
        layers.append(toml)
    layers += [env_layer(), cli_layer(args)]
    return layers


def config_from_args(args: argparse.Namespace, defaults: dict[str, Any] | None = None,
                     defaults_from: str = "the topology file") -> TopologyConfig:
    """The ``TopologyConfig`` of a ``trident run``: every layer of ``settings_layers``;
    progress lines on unless ``-q`` or a layer says otherwise."""
    layers = settings_layers(args, defaults, defaults_from)
    if not any("progress" in layer.values for layer in layers):
        layers.append(Layer("trident run", {"progress": True}))
    return make_config(layers)


def _warn_memory_coordination(config: TopologyConfig, args: argparse.Namespace) -> None:
    from state.backends import COORDINATION, USER_STATE, backend_for

    if getattr(args, "allow_memory_coordination", False):
        return
    if backend_for(USER_STATE, config.state).shared and not backend_for(COORDINATION, config.coordination).shared:
        logging.getLogger("trident").warning(
            "state %s is durable but coordination is memory://: a second run starts at txid 1 again, finds "
            "values written by this run's txids and refuses to run; use --coordination zk://host:port/root "
            "(or --allow-memory-coordination)", config.redacted()["state"])


# -- commands -------------------------------------------------------------------------------------------

def _run(build: Callable[[], Any], where: str, report: Callable[[Any], None] | None, args: argparse.Namespace,
         defaults: dict[str, Any] | None, setup: Callable[[], Any] | None = None) -> int:
    """``trident run``: settings, the file's ``setup()``, the topology (``build`` called
    once), the run, its summary and ``report(result)``. Ctrl-C: one line naming the last
    txid this run committed."""
    setup_logging(args.log_level)
    last: list[int] = []
    try:
        if setup is not None:
            setup()
        return _run_until_done(build, where, report, args, defaults, last)
    except KeyboardInterrupt:
        done = f"after txid {last[0]} committed" if last else "before this run committed a txid"
        print(f"interrupted {done}; run again to resume", file=sys.stderr, flush=True)
        return INTERRUPTED


def _run_until_done(build: Callable[[], Any], where: str, report: Callable[[Any], None] | None,
                    args: argparse.Namespace, defaults: dict[str, Any] | None, last: list[int]) -> int:
    from transactional.ops.run import run_topology
    from transactional.ops.ship import code_zip, needs_shipping, under_spark_submit

    config = config_from_args(args, defaults, where)
    _warn_memory_coordination(config, args)
    topology = built_topology(build(), where)
    if config.executor == "spark" and needs_shipping(config.spark_master) and not under_spark_submit():
        # executors elsewhere import only what is installed there or shipped: ship this
        # package and every local module the topology imported (docs/cluster.md)
        config = config.model_copy(update={"py_files": [str(code_zip()), *config.py_files]})

    def committed(txid: int, _result: Any) -> None:
        last[:] = [txid]

    quiet = args.log_level != "DEBUG" and config.executor == "spark" and not under_spark_submit()
    with quiet_spark(quiet):
        result = run_topology(topology, config, max_batches=args.max_batches, on_commit=committed)
    print(summary_line(result.summary()) if not args.json else json.dumps(result.summary()))
    if report is not None:
        report(result)
    return 0


def summary_line(s: dict[str, Any]) -> str:
    """The one-line summary of a run (``RunResult.summary()``); a run that committed
    nothing says so instead of naming txids.

    >>> summary_line({"topology_id": "w", "batches_committed": 0, "first_txid": None, "last_txid": 0,
    ...               "attempts": 1, "failed_attempts": 1, "spout_tuples": 0, "wall_secs": 0.5,
    ...               "stopped_because": "max_batches"})
    'w: committed 0 batches (no batch committed by this run), 1 attempt, 1 failed; 0 tuples in 0.5 s; stopped: max_batches'
    """
    n = s["batches_committed"]
    if not n:
        txids = " (no batch committed by this run)"
    elif s["first_txid"] == s["last_txid"]:
        txids = f" (txid {s['last_txid']})"
    else:
        txids = f" (txids {s['first_txid']}..{s['last_txid']})"
    return (f"{s['topology_id']}: committed {plural(n, 'batch')}{txids}, {plural(s['attempts'], 'attempt')}, "
            f"{s['failed_attempts']} failed; {plural(s['spout_tuples'], 'tuple')} in {s['wall_secs']} s; "
            f"stopped: {s['stopped_because']}")


_SUFFIX = {"text": "txt", "dot": "dot", "svg": "svg", "png": "png"}
_FORMAT_OF_SUFFIX = {".txt": "text", ".dot": "dot", ".gv": "dot", ".svg": "svg", ".png": "png"}


def _describe(args: argparse.Namespace) -> int:
    """``trident describe``: each file's topology as text, DOT, SVG or PNG; one output each."""
    from transactional.ops.graph import render, to_dot

    setup_logging(args.log_level)
    out = Path(args.out) if args.out else None
    fmt = args.format or (_FORMAT_OF_SUFFIX.get(out.suffix.lower()) if out is not None else None) or "text"
    topologies = []
    for path in args.files:
        module = load_topology_file(path)
        with no_side_effects(path):
            topologies.append((path, built_topology(module.build_topology(), path)))
    to_dir = out is not None and (len(topologies) > 1 or out.is_dir() or args.out.endswith(os.sep))
    outputs: list[tuple[Path | None, bytes]] = []
    seen: dict[Path, str] = {}
    for path, topology in topologies:
        name = Path(f"{topology.topology_id}.{_SUFFIX[fmt]}")
        target = (None if fmt in ("text", "dot") else name) if out is None else (out / name if to_dir else out)
        if target is not None and target in seen:
            msg = (f"{seen[target]} and {path} both describe topology {topology.topology_id!r}, one output file "
                   f"{target} for both; describe them one at a time with -o FILE")
            raise TridentError(msg)
        if target is not None:
            seen[target] = path
        if fmt == "text":
            data = topology.describe().encode() + b"\n"
        elif fmt == "dot":
            data = to_dot(topology).encode()
        else:
            data = render(to_dot(topology), fmt)
        outputs.append((target, data))
    if to_dir and out is not None:
        out.mkdir(parents=True, exist_ok=True)
    for i, (target, data) in enumerate(outputs):
        if target is None:
            sys.stdout.write(("\n" if i else "") + data.decode())
        else:
            target.write_bytes(data)
            print(target)
    return 0


def run_example(build: Callable[[], Any], report: Callable[[Any], None] | None = None,
                argv: Sequence[str] | None = None, defaults: dict[str, Any] | None = None,
                setup: Callable[[], Any] | None = None) -> None:
    """``python examples/x.py [options]``: the same options as ``trident run`` (``setup``
    runs first, as a topology file's ``setup()`` does under ``trident run``)."""
    main_module = sys.modules["__main__"]
    parser = argparse.ArgumentParser(description=(main_module.__doc__ or "").strip().split("\n")[0])
    _config_args(parser)
    args = parser.parse_args(argv)
    where = getattr(main_module, "__file__", None) or "the example"
    sys.exit(_guard(lambda: _run(build, where, report, args, defaults, setup)))


def _guard(fn: Callable[[], int]) -> int:
    try:
        return fn()
    except TridentError as e:
        print(redact_text(f"trident: error: {e}"), file=sys.stderr)
        return 1


def _suggest(word: str, choices: Sequence[str]) -> str:
    """`` (did you mean X?)`` for the closest of ``choices`` to ``word``, else ""."""
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser.parse_args(argv)``, with "did you mean" for a mistyped subcommand or flag."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    words = list(sys.argv[1:] if argv is None else argv)
    first = next((w for w in words if not w.startswith("-")), None)
    if first is not None and first not in sub.choices:
        parser.error(f"argument command: invalid choice: {first!r}{_suggest(first, list(sub.choices))} "
                     f"(choose from {', '.join(sub.choices)})")
    args, extra = parser.parse_known_args(words)
    if extra:
        command = sub.choices[args.command]
        flags = [o for a in command._actions for o in a.option_strings]
        shown = [x + (_suggest(x.split("=")[0], flags) if x.startswith("-") else "") for x in extra]
        command.error(f"unrecognized arguments: {' '.join(shown)}")
    return args


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trident", description="Exactly-once stream processing on PySpark")
    parser.add_argument("--version", action="version", version=f"trident (spark-trident) {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="run a topology file")
    p_run.add_argument("file", help="a topology file: defines build_topology(), optionally setup(), report(result) "
                                    "and CONFIG")
    _config_args(p_run)
    p_desc = sub.add_parser("describe", help="a picture of topologies: components, groupings, phases")
    p_desc.add_argument("files", nargs="+", metavar="FILE", help="topology files (each one's build_topology() is called once)")
    p_desc.add_argument("--format", choices=list(_SUFFIX), metavar="FORMAT", help="text (default), dot (Graphviz source), svg or png "
                        "(drawn by Graphviz's dot: apt-get install graphviz); default from -o's suffix")
    p_desc.add_argument("-o", "--out", help="a file, or a directory for one file per topology named after it "
                        "(default: text and dot to stdout, svg and png to ./<topology id>.<format>)")
    _log_level_arg(p_desc)
    p_pkg = sub.add_parser("package", help="zip this package and the topology's local modules for "
                           "spark-submit --py-files (docs/cluster.md)")
    p_pkg.add_argument("file", help="a topology file")
    p_pkg.add_argument("-o", "--out-dir", default=".", help="where to write trident-code-<hash>.zip (default .)")
    _log_level_arg(p_pkg)
    p_status = sub.add_parser("status", help="a topology's coordinator state and its last run")
    p_status.add_argument("topology_id", help="the topology id (the builder's first argument)")
    _coordination_args(p_status)
    p_list = sub.add_parser("list", help="every topology under the coordination root: last txid, driver, state")
    p_list.add_argument("topology_ids", nargs="*", metavar="TOPOLOGY_ID",
                        help="only these (an id that never ran there is an error)")
    _coordination_args(p_list)
    p_ui = sub.add_parser("ui", help="serve the status page of every topology under the coordination root, "
                          "from its coordinator state (no driver needed)")
    _coordination_args(p_ui)
    p_ui.add_argument("--topology", metavar="TOPOLOGY_ID", help="the topology shown first (default: the first listed)")
    p_ui.add_argument("--port", type=int, default=8080, help="the port to serve on (default 8080; 0: a free one)")
    p_ui.add_argument("--host", default="127.0.0.1", metavar="ADDRESS", help="the address to bind (default 127.0.0.1)")
    p_ui.add_argument("--control-token", metavar="TOKEN",
                      help="turn on the deactivate/activate/kill buttons; each request must carry TOKEN "
                           "(also TRIDENT_CONTROL_TOKEN)")
    p_drpc = sub.add_parser("drpc", help="run a DRPC server: callers POST /drpc/<function>, remote DRPC topologies "
                            "fetch the requests (docs/drpc.md)")
    from transactional.ops.drpc_server import add_arguments as drpc_arguments

    drpc_arguments(p_drpc)
    _log_level_arg(p_drpc)
    for action, what in (("deactivate", "stop emitting new batches (those in flight commit); the driver waits"),
                         ("activate", "emit again after deactivate"),
                         ("kill", "stop the running driver after its commit under way; it releases the lock")):
        p = sub.add_parser(action, help=what)
        p.add_argument("topology_id", help="the topology id")
        _coordination_args(p)
    verify_command.add_parser(sub)
    replay_command.add_parser(sub)
    upgrade_command.add_parser(sub, _config_args)
    rebalance_command.add_parser(sub, _coordination_args)
    from transactional.ops import dev_servers, doctor, kafka_broker

    kafka_broker.add_parser(sub)
    dev_servers.add_parser(sub)
    doctor.add_parser(sub)
    return parser


def _coordination_args(p: argparse.ArgumentParser) -> None:
    """The flags of the commands that read or write a coordinator state."""
    p.add_argument("--coordination", metavar="URL", help="zk://host:port[,host:port]/<root> (default: from --config, "
                   f"./{DEFAULT_FILE} or TRIDENT_COORDINATION)")
    p.add_argument("--coordination-auth", metavar="USER:PASSWORD", help="ZooKeeper digest credentials")
    p.add_argument("--config", metavar="FILE", help=f"a TOML settings file (default ./{DEFAULT_FILE})")
    p.add_argument("--json", action="store_true", help="the answer as one JSON object")
    _log_level_arg(p)


def _coordination_config(args: argparse.Namespace) -> TopologyConfig:
    """The settings of a command that reaches a coordinator state, which must be named."""
    setup_logging(args.log_level)
    config = make_config(settings_layers(args, defaults_from=f"trident {args.command}"))
    if args.coordination is None and "coordination" not in config.model_fields_set:
        msg = (f"trident {args.command} needs the coordinator state's address: --coordination zk://host:port/root, "
               f"coordination in {DEFAULT_FILE}, or TRIDENT_COORDINATION")
        raise TridentError(msg)
    return config


def _manage(args: argparse.Namespace) -> int:
    """``trident list`` and ``trident deactivate|activate|kill``."""
    config = _coordination_config(args)
    if args.command == "list":
        from transactional.ops.status import format_list, topology_list

        rows = topology_list(config.coordination, auth=config.coordination_auth,
                             connect_timeout=config.connect_timeout_secs, only=args.topology_ids)
        print(json.dumps(rows) if args.json else format_list(rows, config.coordination))
        return 0
    from transactional.ops.control import request

    done = request(config.coordination, args.topology_id, args.command, auth=config.coordination_auth,
                   connect_timeout=config.connect_timeout_secs)
    if args.json:
        print(json.dumps(done))
    elif args.command == "kill":
        print(f"{args.topology_id}: asked {done['lock_holder']} to stop after its commit under way")
    else:
        print(f"{args.topology_id}: {done['state']}" + (f" (driver {done['lock_holder']})" if done["lock_holder"]
                                                       else " (no driver running: the next run starts so)"))
    return 0


def _status(args: argparse.Namespace) -> int:
    from transactional.ops.status import format_status, topology_status

    config = _coordination_config(args)
    st = topology_status(config.coordination, args.topology_id, auth=config.coordination_auth,
                         connect_timeout=config.connect_timeout_secs)
    print(json.dumps(st) if args.json else format_status(st))
    if not st["exists"]:
        print(f"trident: error: no topology {args.topology_id!r} under {config.coordination}", file=sys.stderr)
        return 1
    return 0


def _ui(args: argparse.Namespace) -> int:
    """``trident ui``: the status page of the topologies under the root, until Ctrl-C."""
    from transactional.ops.status import topology_list
    from transactional.ops.webui.history import HistorySource
    from transactional.ops.webui.server import Controls, StatusServer

    config = _coordination_config(args)
    # fail early, naming the address, when the coordinator state cannot be read
    topology_list(config.coordination, auth=config.coordination_auth, connect_timeout=config.connect_timeout_secs)
    source = HistorySource(config.coordination, auth=config.coordination_auth,
                           connect_timeout=config.connect_timeout_secs, topology_id=args.topology)
    controls = Controls(config.control_token, config.coordination, config.coordination_auth,
                        config.connect_timeout_secs)
    server = StatusServer(source, args.host, args.port, controls)
    try:
        server.start()
    except OSError as e:
        msg = f"cannot serve on {args.host}:{args.port}: {e.strerror or e}; pick another --port (0: a free one)"
        raise TridentError(msg) from None
    print(f"trident ui: {server.url} (topologies under {config.redacted()['coordination']}"
          f"{'; controls on' if controls.enabled else ''}); Ctrl-C to stop", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The ``trident`` command: ``run``, ``describe``, ``package``, ``status``, ``list``,
    ``deactivate``, ``activate``, ``kill``, ``ui``, ``verify``, ``replay``, ``upgrade``, ``rebalance``, ``drpc`` or
    ``kafka-broker``; returns the exit status."""
    args = parse_args(_parser(), argv)
    command = _COMMANDS.get(args.command, _status)
    return _guard(lambda: command(args))


def _run_command(args: argparse.Namespace) -> int:
    module = load_topology_file(args.file)
    return _run(module.build_topology, args.file, getattr(module, "report", None), args,
                getattr(module, "CONFIG", None), getattr(module, "setup", None))


def _package(args: argparse.Namespace) -> int:
    from transactional.ops.ship import SUBMIT_SCRIPT, code_zip

    module = load_topology_file(args.file)
    setup_logging(args.log_level)
    built_topology(module.build_topology(), args.file)   # imports what building it imports
    path = code_zip(args.out_dir)
    print(path)
    print(f"spark-submit --master MASTER --py-files {path} --files {args.file} "
          f"{SUBMIT_SCRIPT} run {Path(args.file).name} [options]", file=sys.stderr)
    return 0


def _drpc(args: argparse.Namespace) -> int:
    from transactional.ops.drpc_server import main as drpc_main

    setup_logging(args.log_level)
    return drpc_main(args)


def _kafka_broker(args: argparse.Namespace) -> int:
    from transactional.ops import kafka_broker

    return kafka_broker.run(args)


def _ops_command(module: str, args: argparse.Namespace) -> int:
    """A subcommand whose module under ``transactional.ops`` has ``run(args)``."""
    import importlib

    run: Callable[[argparse.Namespace], int] = importlib.import_module(f"transactional.ops.{module}").run
    return run(args)


#: what each subcommand runs (``status`` otherwise), inside ``_guard``
_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": _run_command, "describe": _describe, "package": _package,
    "list": _manage, "deactivate": _manage, "activate": _manage, "kill": _manage, "ui": _ui,
    "verify": lambda args: verify_command.command(args), "replay": lambda args: replay_command.command(args),
    "drpc": _drpc, "kafka-broker": _kafka_broker,
    "upgrade": lambda args: upgrade_command.command(args, _run, config_from_args),
    "rebalance": lambda args: rebalance_command.command(args, _coordination_config),
    "dev-servers": lambda args: _ops_command("dev_servers", args),
    "doctor": lambda args: _ops_command("doctor", args),
}

if __name__ == "__main__":
    sys.exit(main())
