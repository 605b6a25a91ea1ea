"""The ``trident verify`` command: its flags and its exit status (``transactional.ops.verify``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from transactional.ops.verify.model import CRASH_POINTS, SWITCH_POINTS, VerifyError, VerifyOptions
from transactional.ops.verify.report import format_table, junit_xml
from transactional.ops.verify.runs import verify

__all__ = ["add_parser", "command", "REFUSED"]

#: the exit status of ``--upgrade-to`` refused for unsafe changes (as ``trident upgrade``'s)
REFUSED = 2


# -- the command --------------------------------------------------------------------------------------

def add_parser(sub: Any) -> None:
    """``trident verify``'s subcommand and flags (``transactional.ops.cli``)."""
    p = sub.add_parser("verify", help="prove exactly-once for a topology file: a run without faults, runs under "
                       "driver kills and task failures in scratch namespaces, every key compared (docs/verify.md)")
    p.add_argument("file", help="a topology file, as `trident run` takes")
    p.add_argument("--crash-points", default="all", metavar="all|none|LIST",
                   help=f"kill the driver once at each of these commit crash points, one run each "
                        f"(comma-separated among {', '.join(CRASH_POINTS)}; default all)")
    p.add_argument("--kills", type=int, default=0, metavar="N",
                   help="one more run with N driver SIGKILLs at seeded random crash points and txids")
    p.add_argument("--seed", type=int, default=1, help="the seed of the random kills and task failures (default 1)")
    p.add_argument("--no-task-failures", action="store_true",
                   help="skip the run with failing tasks (FailedException in seeded-random bolt tasks)")
    p.add_argument("--server-faults", action="store_true",
                   help="one more run in which the Redis and the ZooKeeper that verify started are stopped and started "
                        "again mid-run (same port, same data); not with --state/--coordination")
    p.add_argument("--budget", type=float, default=None, metavar="SECS",
                   help="stop starting runs when this much time has passed; the table says what it had time for")
    p.add_argument("--max-batches", type=int, default=None, metavar="N",
                   help="commit N batches per run (for a spout that never runs dry)")
    p.add_argument("--state", metavar="URL", help="a Redis for the scratch maps (default: one verify starts)")
    p.add_argument("--coordination", metavar="URL", help="a ZooKeeper for the scratch coordinator state "
                   "(default: one verify starts)")
    p.add_argument("--master", default="local[2]", help="the Spark master of the runs (default local[2])")
    p.add_argument("--executor", choices=("spark", "in-process"), default=None,
                   help="where processing tasks run (default: the file's CONFIG, else spark)")
    p.add_argument("--upgrade-to", metavar="FILE2",
                   help="verify switching to a new version: every run runs FILE up to the switch, then FILE2 (checked "
                        "first as `trident upgrade` checks it: an unsafe change is REFUSED, exit 2, nothing run or "
                        "written); one more run kills the driver at each step of the switch (docs/operations.md)")
    p.add_argument("--switch-at", type=int, default=3, metavar="K",
                   help="with --upgrade-to: the first txid FILE2 runs (default 3: FILE commits txids 1 and 2)")
    p.add_argument("--switch-points", default="all", metavar="all|none|LIST",
                   help=f"with --upgrade-to: the kills of the run at the switch, one driver each, in turn "
                        f"(comma-separated among {', '.join(SWITCH_POINTS)}; P@-1: P of txid K-1; default all)")
    p.add_argument("--allow-dropped-state", action="store_true",
                   help="with --upgrade-to: FILE2 may drop a state FILE stored values in (allow_dropped_state)")
    p.add_argument("--junit", metavar="FILE", help="also write the verdict as JUnit XML, for CI")
    p.add_argument("--json", action="store_true", help="print the verdict as one JSON line instead of the table")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def command(args: Any) -> int:
    """``trident verify``: 0 when every run matched the reference, 2 when ``--upgrade-to``'s
    new version was refused (nothing ran), 1 otherwise."""
    points = _points(args.crash_points, CRASH_POINTS)
    if args.kills < 0:
        msg = f"--kills must be >= 0; got {args.kills}"
        raise VerifyError(msg)
    options = VerifyOptions(crash_points=points, kills=args.kills, seed=args.seed,
                            task_failures=not args.no_task_failures, budget_secs=args.budget, state=args.state,
                            coordination=args.coordination, master=args.master, executor=args.executor,
                            max_batches=args.max_batches, server_faults=args.server_faults,
                            upgrade_to=args.upgrade_to, switch_at=args.switch_at,
                            switch_points=_points(args.switch_points, SWITCH_POINTS),
                            allow_dropped_state=args.allow_dropped_state)

    def say(text: str) -> None:
        if not args.quiet:
            print(text, file=sys.stderr, flush=True)

    report = verify(args.file, options, say)
    print(json.dumps(report.to_json()) if args.json else format_table(report), flush=True)
    if args.junit:
        Path(args.junit).write_text(junit_xml(report))
    if report.refused:
        return REFUSED
    return 0 if report.passed else 1


def _points(text: str, every: tuple[str, ...]) -> tuple[str, ...]:
    """``all``, ``none`` or a comma-separated list."""
    if text == "all":
        return every
    if text == "none":
        return ()
    return tuple(p.strip() for p in text.split(",") if p.strip())
