"""``trident rebalance ID -e COMPONENT=N [-e ...] [-w SECS]``: change the task counts of a
running topology at a txid boundary, without a restart (Storm's ``storm rebalance``;
docs/operations.md, "Changing a running topology"). The request goes to the driver through
the topology's ``control`` record (``transactional.ops.control``); the driver records the
new counts in one write and goes on with them (``transactional.engine.layout``)."""

from __future__ import annotations

import json
from typing import Any

from transactional.exceptions import TridentError

__all__ = ["add_parser", "command", "parse_tasks"]


def parse_tasks(items: list[str]) -> dict[str, int]:
    """``["count=3", "split=2"]`` as ``{"count": 3, "split": 2}``.

    >>> parse_tasks(["persistent_aggregate(counts)=3"])
    {'persistent_aggregate(counts)': 3}
    """
    out: dict[str, int] = {}
    for item in items:
        comp, sep, n = item.rpartition("=")
        if not sep or not comp or not n.strip().isdigit() or int(n) < 1:
            msg = f"-e {item!r}: give COMPONENT=N with N >= 1 tasks, e.g. -e count=3"
            raise TridentError(msg)
        out[comp] = int(n)
    return out


def add_parser(sub: Any, coordination_args: Any) -> None:
    """``trident rebalance``'s subcommand and flags (``transactional.ops.cli``)."""
    p = sub.add_parser("rebalance", help="change the task counts of a running topology's components at a txid "
                       "boundary, without a restart (docs/operations.md)")
    p.add_argument("topology_id", help="the topology id")
    p.add_argument("-e", "--executors", action="append", default=[], metavar="COMPONENT=N", required=True,
                   help="a component and its new task count (repeatable)")
    p.add_argument("-w", "--wait", type=float, default=0.0, metavar="SECS",
                   help="emit no new batches for SECS before the switch (those in flight commit)")
    coordination_args(p)


def command(args: Any, coordination_config: Any) -> int:
    """``trident rebalance``: writes the request; prints what the driver will do."""
    from transactional.ops.control import request

    config = coordination_config(args)
    tasks = parse_tasks(args.executors)
    done = request(config.coordination, args.topology_id, "rebalance", auth=config.coordination_auth,
                   connect_timeout=config.connect_timeout_secs, tasks=tasks, wait=args.wait)
    if getattr(args, "json", False):
        print(json.dumps(done))
        return 0
    who = (f"driver {done['lock_holder']} switches" if done["lock_holder"]
           else "no driver runs it now: the next run starts")
    print(f"{args.topology_id}: rebalance to {', '.join(f'{c}={n}' for c, n in tasks.items())} asked; {who} "
          f"after the commit under way{f' and a wait of {args.wait:g} s' if args.wait else ''}")
    return 0
