"""``trident replay ID --txids A..B --into NAMESPACE --file FILE``: re-emit batches a
topology committed, into scratch state, to see what they did (docs/verify.md).

A run with ``TopologyConfig.keep_batch_meta = N`` keeps the spout metadata of its last N
committed txids (``kept/<txid>`` in its coordinator state). ``replay`` reads the metadata
of txids A..B (refusing a txid whose metadata is gone, saying how many are kept), writes
it as the uncommitted txids of a fresh coordinator state under the topology id
``NAMESPACE``, and runs the topology file's topology under that id in this process: the
engine's recovery re-emits exactly those batches (a transactional spout emits what its
metadata names) and commits them into ``NAMESPACE:<map>``, never into ``ID:<map>``. The
scratch maps start empty, so they hold what batches A..B alone wrote. ``--trace
COMPONENT`` prints, per task of that bolt, the tuples in and out.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from typing import Any

from transactional.exceptions import TridentError

__all__ = ["ReplayError", "parse_txids", "replay", "add_parser", "command"]


class ReplayError(TridentError):
    """``trident replay`` cannot replay what was asked; the message says why and what to do."""


def parse_txids(text: str) -> tuple[int, int]:
    """``"A..B"`` (or one txid ``"A"``) as ``(A, B)``.

    >>> parse_txids("3..5"), parse_txids("7")
    ((3, 5), (7, 7))
    """
    m = re.fullmatch(r"\s*(\d+)\s*(?:\.\.\s*(\d+)\s*)?", text)
    if not m or int(m.group(1)) < 1 or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
        msg = f"--txids {text!r}: give a range of txids A..B with 1 <= A <= B (or one txid), e.g. --txids 3..5"
        raise ReplayError(msg)
    a = int(m.group(1))
    return a, int(m.group(2) or a)


def _ranges(txids: list[int]) -> str:
    """``[3, 4, 5, 9]`` as ``"3..5, 9"``; ``"none"`` when empty.

    >>> _ranges([3, 4, 5, 9]), _ranges([])
    ('3..5, 9', 'none')
    """
    runs: list[list[int]] = []
    for t in sorted(txids):
        if runs and t == runs[-1][1] + 1:
            runs[-1][1] = t
        else:
            runs.append([t, t])
    return ", ".join(f"{a}" if a == b else f"{a}..{b}" for a, b in runs) or "none"


def _check_namespace(namespace: str, topology_id: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", namespace or ""):
        msg = f"--into {namespace!r}: a scratch namespace is a topology id: letters, digits, '_', '.', '-'"
        raise ReplayError(msg)
    if namespace == topology_id:
        msg = (f"--into {namespace!r} is the topology's own id: replay never writes the production maps; "
               f"name a scratch namespace, e.g. --into {topology_id}-replay")
        raise ReplayError(msg)


def read_kept(coordination: str, topology_id: str, first: int, last: int, **options: Any) -> tuple[dict[int, dict[str, Any]], dict[str, Any] | None]:
    """The metadata of txids ``first..last`` of ``topology_id`` (kept after their commit, or
    still uncommitted) and of ``first - 1`` if kept (None if not). ``ReplayError`` naming the
    first txid whose metadata is gone, what is kept and the run's ``keep_batch_meta``."""
    from state.base import open_transactional_state
    from transactional.engine.store import CoordinatorStore

    state = open_transactional_state(coordination, topology_id, read_only=True, **options)
    try:
        committed = state.get("committed")
        if committed is None and not state.children("kept"):
            msg = f"topology {topology_id!r} has no coordinator state under {coordination}: check the id and --coordination"
            raise ReplayError(msg)
        kept = CoordinatorStore(state).kept_meta()
        for name in state.children("meta"):
            rec = state.get(f"meta/{name}")
            if rec is not None:
                kept.setdefault(int(name), {"meta": rec.get("meta"), "partitions": None})
    finally:
        state.close()
    missing = [t for t in range(first, last + 1) if t not in kept]
    if missing:
        have = sorted(kept)
        keep = max([int(r.get("keep") or 0) for r in kept.values()], default=0)
        msg = (f"topology {topology_id!r}: the metadata of txid {missing[0]} is gone, so its batch cannot be "
               f"re-emitted. It keeps the spout metadata of its last {keep} committed txid(s) "
               f"(keep_batch_meta = {keep}; kept now: {_ranges(have)}). Replay kept txids, or run the topology "
               "with a larger keep_batch_meta (TopologyConfig, --set keep_batch_meta=N) to keep more")
        raise ReplayError(msg)
    return {t: kept[t] for t in range(first, last + 1)}, kept.get(first - 1)


class Tracer:
    """Prints what each task of one component took in and gave out (``--trace``)."""

    def __init__(self, component: str, out: Any = None, limit: int = 20) -> None:
        self.component, self.out, self.limit = component, out or sys.stdout, limit
        self.seen = 0

    def __call__(self, component: str, task: int, attempt: Any, payloads: list[Any], records: list[Any]) -> None:
        if component != self.component:
            return
        self.seen += 1
        w = self.out.write
        n_in = sum(len(p[3]) for p in payloads)
        n_out = sum(len(r[1][3]) for r in records)
        w(f"trace {component} task {task} txid {attempt.txid}: {n_in} tuple(s) in, {n_out} out\n")
        for source, stream, source_task, values in payloads:
            for v in values[:self.limit]:
                w(f"  in  {source}[{source_task}] {stream}: {_show(v)}\n")
            if len(values) > self.limit:
                w(f"  in  ... {len(values) - self.limit} more from {source}[{source_task}]\n")
        for _key, (_src, stream, _task, values) in records:
            for v in values[:self.limit]:
                w(f"  out {stream}: {_show(v)}\n")
            if len(values) > self.limit:
                w(f"  out ... {len(values) - self.limit} more on {stream}\n")


def _show(values: Any) -> str:
    if isinstance(values, tuple) and values:
        values = values[1:]          # without the TransactionAttempt
    text = repr(values)
    return text if len(text) <= 200 else text[:197] + "..."


def replay(file: str, topology_id: str, txids: tuple[int, int], namespace: str, config: Any,
           trace: str | None = None, out: Any = None) -> dict[str, Any]:
    """Re-emit ``txids`` of ``topology_id`` (built from ``file``) into scratch state under
    ``namespace`` (module docstring); what the scratch maps hold afterwards, per map."""
    from state.base import open_transactional_state
    from transactional.engine.task import set_tracer
    from transactional.ops.run import run_topology
    from transactional.ops.topology_file import built_topology, load_topology_file

    _check_namespace(namespace, topology_id)
    first, last = txids
    options = {"auth": config.coordination_auth, "connect_timeout": config.connect_timeout_secs} \
        if config.coordination.startswith("zk:") else {}
    metas, before = read_kept(config.coordination, topology_id, first, last, **options)
    module = load_topology_file(file)
    topology = built_topology(module.build_topology(), file)
    if trace is not None and trace not in {c.id for c in topology.bolts}:
        msg = (f"--trace {trace!r}: no bolt of that id in {file}; its bolts are "
               f"{', '.join(c.id for c in topology.bolts)} (`trident describe {file}` shows them)")
        raise ReplayError(msg)
    scratch = open_transactional_state(config.coordination, namespace, **options)
    try:
        if scratch.get("committed") is not None or scratch.children("meta"):
            msg = (f"--into {namespace!r} already holds a run; replay starts from an empty namespace: "
                   "pick another --into")
            raise ReplayError(msg)
        scratch.set("committed", {"txid": first - 1, "meta": (before or {}).get("meta"),
                                  "partitions": (before or {}).get("partitions")})
        for t, rec in metas.items():
            scratch.set(f"meta/{t}", {"meta": rec["meta"], "attempts": 0, "commit_started": []})
    finally:
        scratch.close()
    run_config = config.model_copy(update={"executor": "in-process", "progress": False, "metrics_port": None,
                                           "idle_timeout_secs": 0.0, "keep_batch_meta": 0,
                                           "accept_state_loss": True})
    tracer = Tracer(trace, out) if trace is not None else None
    set_tracer(tracer)
    try:
        result = run_topology(dataclasses.replace(topology, topology_id=namespace), run_config,
                              max_batches=last - first + 1)
    finally:
        set_tracer(None)
    maps: dict[str, Any] = {}
    if config.state.startswith(("redis:", "rediss:")):
        from transactional.ops.snapshot import read_snapshot

        maps = {name: {repr(k): v for k, v in values.items()}
                for name, values in read_snapshot(config.state, config.coordination, namespace).items()}
    return {"topology_id": topology_id, "into": namespace, "txids": [first, last],
            "committed": [result.first_txid, result.last_txid], "maps": maps,
            "traced_tasks": tracer.seen if tracer is not None else None}


# -- the command --------------------------------------------------------------------------------------

def add_parser(sub: Any) -> None:
    """``trident replay``'s subcommand and flags (``transactional.ops.cli``)."""
    p = sub.add_parser("replay", help="re-emit committed batches (kept with keep_batch_meta) into a scratch "
                       "namespace, optionally tracing one bolt's tuples (docs/verify.md)")
    p.add_argument("topology_id", metavar="ID", help="the topology id whose batches to replay")
    p.add_argument("--file", required=True, help="the topology file that ran as ID")
    p.add_argument("--txids", required=True, metavar="A..B", help="the txids to replay")
    p.add_argument("--into", required=True, metavar="NAMESPACE",
                   help="a fresh scratch namespace (used as the topology id: maps NAMESPACE:<name>)")
    p.add_argument("--trace", metavar="COMPONENT", help="print each task's tuples in and out of this bolt")
    p.add_argument("--coordination", metavar="URL", help="ID's coordinator state (zk://host:port/root)")
    p.add_argument("--state", metavar="URL", help="the store the scratch maps go to (default: the settings')")
    p.add_argument("--config", metavar="FILE", help="a TOML settings file (default ./trident.toml)")
    p.add_argument("--json", action="store_true", help="the scratch maps as one JSON object")


def command(args: Any) -> int:
    """``trident replay``: prints what the scratch maps hold after the replay."""
    from transactional.ops.settings import DEFAULT_FILE, Layer, env_layer, file_layer, make_config
    from transactional.ops.topology_file import load_topology_file

    module = load_topology_file(args.file)
    layers = [Layer(f"CONFIG of {args.file}", dict(getattr(module, "CONFIG", None) or {}))]
    toml = file_layer(args.config) if args.config else file_layer(DEFAULT_FILE, required=False)
    if toml is not None:
        layers.append(toml)
    flags = {k: v for k, v in (("coordination", args.coordination), ("state", args.state)) if v is not None}
    config = make_config([*layers, env_layer(), Layer("command line", flags)])
    if not config.coordination.startswith("zk:"):
        msg = ("trident replay reads a topology's kept metadata from its durable coordinator state: "
               "--coordination zk://host:port/root (or coordination in trident.toml, TRIDENT_COORDINATION)")
        raise ReplayError(msg)
    done = replay(args.file, args.topology_id, parse_txids(args.txids), args.into, config, args.trace)
    if args.json:
        print(json.dumps(done, default=str))
        return 0
    print(f"{args.topology_id}: replayed txids {done['txids'][0]}..{done['txids'][1]} into {args.into}")
    for name, values in done["maps"].items():
        print(f"  {name}: " + ", ".join(f"{k}: {v!r}" for k, v in sorted(values.items())))
    return 0
