"""One driver process of ``trident verify`` (``transactional.ops.verify``); not for users.

    python -m transactional.ops.verify.child FILE --topology-id ID --state URL --coordination URL
        [--master local[2]] [--executor spark|in-process] [--until-txid T]

It loads the topology file, builds its topology under the scratch topology id ``ID`` (so
every map it writes is ``ID:<name>``, never the user's own keys), makes its settings (the
file's ``CONFIG``, then the scratch servers given here), starts Spark and its Python
workers, then prints ``@verify ready`` and waits for a line ``go`` on stdin before it runs:
``trident verify`` starts the next driver while the current one runs, and a restart after a
SIGKILL then costs no Spark start-up. While it runs it prints ``@verify commit {...}`` after
each commit and ``@verify done {...}`` (the run's summary) at the end. A crash point
(``TRIDENT_CRASH_AT``) or the parent's SIGKILL ends it at any moment before that.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from transactional.ops.verify.model import PREFIX, last_committed_txid


def _say(what: str, payload: Any = None) -> None:
    line = PREFIX + what + ("" if payload is None else " " + json.dumps(payload, default=str))
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    """Run one driver of a verify run (module docstring); the exit status of the run."""
    p = argparse.ArgumentParser(prog="python -m transactional.ops.verify.child")
    p.add_argument("file")
    p.add_argument("--topology-id", required=True)
    p.add_argument("--state", required=True)
    p.add_argument("--coordination", required=True)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--executor", default=None)
    p.add_argument("--until-txid", type=int, default=None)
    p.add_argument("--fault", default="none", help="the fault of this run, for the status record")
    p.add_argument("--kafka-end-offsets", default=None,
                   help="JSON {topic: {partition: offset}}: Kafka spouts read no further (a fixed range)")
    p.add_argument("--allow-dropped-state", action="store_true",
                   help="a new version may drop a state (trident verify --upgrade-to --allow-dropped-state)")
    p.add_argument("--no-wait", action="store_true", help="run at once (no 'go' line)")
    args = p.parse_args(argv)

    from transactional.ops.run import run_topology
    from transactional.ops.settings import Layer, env_layer, make_config
    from transactional.ops.topology_file import built_topology, load_topology_file

    module = load_topology_file(args.file)
    built = built_topology(module.build_topology(), args.file)
    topology = dataclasses.replace(built, topology_id=args.topology_id)
    scratch: dict[str, Any] = {"state": args.state, "coordination": args.coordination, "spark_master": args.master,
                               "progress": False, "spark_ui": False, "metrics_port": None, "idle_timeout_secs": 0.0,
                               "lock_wait_secs": 120.0,
                               # the status page and `trident status` say it is a verify run
                               "conf": {"trident.verify": {"of": built.topology_id, "fault": args.fault,
                                                           "file": args.file}}}
    if args.kafka_end_offsets:
        # spouts.kafka.END_OFFSETS_CONF (spouts sit above this package: the name, not an import)
        scratch["conf"]["trident.kafka.end_offsets"] = json.loads(args.kafka_end_offsets)
    if args.executor:
        scratch["executor"] = args.executor
    if args.allow_dropped_state:
        scratch["allow_dropped_state"] = True
    config = make_config([Layer(f"CONFIG of {args.file}", dict(getattr(module, "CONFIG", None) or {})),
                          env_layer(), Layer("trident verify", scratch)])
    sc = None
    if config.executor == "spark":
        from transactional.engine.spark import get_or_create_context, spark_app_name

        sc = get_or_create_context(config, spark_app_name(args.topology_id))
        sc.parallelize([0], 1).count()          # the Python workers start now, not in the first batch
    if not args.no_wait:
        _say("ready")
        if sys.stdin.readline().strip() != "go":
            return 0
    max_batches = None
    if args.until_txid is not None:
        max_batches = max(0, args.until_txid - last_committed_txid(args.coordination, args.topology_id))

    def on_commit(txid: int, result: Any) -> None:
        s = result.summary()
        _say("commit", {"txid": txid, "attempts": s["attempts"], "failed": s["failed_attempts"],
                        "batches": s["batches_committed"]})

    result = run_topology(topology, config, max_batches=max_batches, spark_context=sc, on_commit=on_commit)
    s = result.summary()
    _say("done", {k: s[k] for k in ("last_txid", "attempts", "failed_attempts", "batches_committed", "wall_secs",
                                    "stopped_because")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
