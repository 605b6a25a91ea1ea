"""``trident upgrade FILE --from ID``: run a new version of a topology over the state an
earlier version committed, after checking every change (docs/operations.md, "Changing a
running topology").

1. build ``FILE``'s topology under the id ``ID``;
2. read ``ID``'s recorded layout and last committed txid (read only);
3. classify every change (``transactional.engine.changes``) and print one line each;
   an unsafe change: exit 2, nothing written;
4. ``--dry-run``: stop here. ``--shadow A..B``: replay the kept txids A..B with the new
   code into a scratch namespace (``transactional.ops.replay``) and print, per map, the
   keys whose value differs from what ``ID`` holds (exact when A..B are all the txids
   ``ID`` committed: the scratch maps hold only A..B);
5. otherwise run it as ``trident run`` does: the driver checks again under the
   topology's lock, and the new version writes from the next txid on (a txid boundary:
   the new layout is recorded before its first commit).
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from transactional.exceptions import TridentError

__all__ = ["add_parser", "command", "plan_upgrade"]

#: the exit status of an upgrade refused for unsafe changes
REFUSED = 2


class UpgradeError(TridentError):
    """``trident upgrade`` cannot compare or run what was asked; the message says why."""


def plan_upgrade(topology: Any, config: Any) -> tuple[int, list[Any]]:
    """``(last committed txid, classified changes)`` of running ``topology`` over its
    recorded state (read only); ``UpgradeError`` when nothing is recorded."""
    from state.base import open_transactional_state
    from transactional.engine import layout
    from transactional.engine.changes import classify

    options = {"auth": config.coordination_auth, "connect_timeout": config.connect_timeout_secs} \
        if config.coordination.startswith("zk:") else {}
    state = open_transactional_state(config.coordination, topology.topology_id, read_only=True, **options)
    try:
        old = layout.recorded(state)
        committed = int((state.get("committed") or {}).get("txid") or 0)
        pending = layout.pending_started(state)
    finally:
        state.close()
    if old is None:
        msg = (f"topology {topology.topology_id!r} has no recorded layout under {config.coordination}: it never "
               "ran there (check the id and --coordination), or last ran before layouts were recorded (one "
               "`trident run` of the current version records it)")
        raise UpgradeError(msg)
    return committed, classify(old, layout.layout_of(topology), committed=committed,
                               allow_dropped_state=config.allow_dropped_state, pending_txid=pending)


def add_parser(sub: Any, config_args: Any) -> None:
    """``trident upgrade``'s subcommand and flags (``transactional.ops.cli``); ``config_args``
    adds ``trident run``'s settings flags."""
    p = sub.add_parser("upgrade", help="check a new version of a topology against the state an earlier one "
                       "committed, then run it from the next txid (docs/operations.md)")
    p.add_argument("file", help="the new version's topology file")
    p.add_argument("--from", dest="from_id", required=True, metavar="ID", help="the running topology's id")
    p.add_argument("--dry-run", action="store_true", help="print the classification of every change; run nothing")
    p.add_argument("--shadow", metavar="A..B", help="first replay the kept txids A..B with the new code into a "
                   "scratch namespace and print per-key differences")
    config_args(p)


def command(args: Any, run: Any, config_from_args: Any) -> int:
    """``trident upgrade`` (module docstring); ``run(build, where, report, args, defaults)``
    and ``config_from_args(args, defaults, where)`` are ``trident run``'s."""
    from transactional.ops.logs import setup_logging
    from transactional.ops.topology_file import built_topology, load_topology_file

    setup_logging(args.log_level)
    module = load_topology_file(args.file)
    defaults = getattr(module, "CONFIG", None)
    config = config_from_args(args, defaults, args.file)
    topology = dataclasses.replace(built_topology(module.build_topology(), args.file), topology_id=args.from_id)
    committed, changes = plan_upgrade(topology, config)
    print(f"{args.from_id}: {len(changes)} change(s) against the recorded layout (last committed txid {committed})")
    for c in changes:
        print("  " + c.line())
    if any(c.level == "unsafe" for c in changes):
        print(f"refused: nothing was written; fix the unsafe change(s) above and run `trident upgrade {args.file} "
              f"--from {args.from_id} --dry-run` again")
        return REFUSED
    if args.shadow:
        _shadow(args, topology, config)
    if args.dry_run:
        print(f"dry run: the new version would write from txid {committed + 1}")
        return 0
    return int(run(lambda: topology, args.file, getattr(module, "report", None), args, defaults))


def _shadow(args: Any, topology: Any, config: Any) -> None:
    """Replay ``--shadow A..B`` with the new code into scratch maps, and print per key
    what differs from the maps ``ID`` holds."""
    from transactional.ops.replay import parse_txids, replay
    from transactional.ops.snapshot import read_snapshot

    if not (config.coordination.startswith("zk:") and config.state.startswith(("redis:", "rediss:"))):
        msg = "--shadow reads kept metadata and maps: give --coordination zk://... and --state redis://..."
        raise UpgradeError(msg)
    into = f"{args.from_id}-shadow-{uuid.uuid4().hex[:6]}"
    done = replay(args.file, args.from_id, parse_txids(args.shadow), into, config)
    live = read_snapshot(config.state, config.coordination, args.from_id)
    print(f"shadow: txids {args.shadow} replayed with the new code into {into}")
    for name, values in sorted(done["maps"].items()):
        old = {repr(k): v for k, v in live.get(name, {}).items()}
        diff = [(k, old.get(k), v) for k, v in sorted(values.items()) if old.get(k) != v]
        diff += [(k, v, None) for k, v in sorted(old.items()) if k not in values]
        print(f"  {name}: {len(diff)} key(s) differ" + ("" if diff else " (none)"))
        for k, before, after in diff[:50]:
            print(f"    {k}: {before!r} -> {after!r}")
