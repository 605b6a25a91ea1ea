"""``trident verify FILE --upgrade-to FILE2 [--switch-at K]``: prove that switching a running
topology to a new version keeps exactly once (``transactional.ops.verify``; docs/operations.md,
"Changing a running topology").

1. **The check, before anything runs.** ``FILE2``'s topology is compared with ``FILE``'s
   layout as ``trident upgrade`` compares it with a recorded one
   (``transactional.engine.changes.classify``, ``K - 1`` txids committed): an unsafe change
   is reported ``REFUSED`` with ``trident upgrade``'s lines, and no server is started, no
   driver run, nothing written. The new version's drivers check again for real at their
   start (``transactional.engine.layout.check``), as at every ``trident run``.
2. **Every run has two legs** (``Leg``): drivers of ``FILE`` until txid ``K - 1`` is
   committed, then drivers of ``FILE2`` from ``K`` on. The reference runs them without
   faults; every run under faults has the same two legs, its kills landing in either.
3. **The run killed at the switch** (``SWITCH_POINTS``): one run whose drivers are
   SIGKILLed in turn at ``FILE``'s ``commit.after_record`` of ``K - 1`` (the driver that
   resumes is ``FILE2``'s), before and after ``FILE2``'s driver records its layout
   (``upgrade.before_record``, ``upgrade.recorded``) and at each commit step of ``K``;
   then judged against the reference as every run is.
"""

from __future__ import annotations

from typing import Any

from transactional.ops.verify.model import VerifyError, VerifyOptions, VerifyReport

__all__ = ["check_options", "load_new_version", "classify_upgrade", "refusal_lines"]


def check_options(options: VerifyOptions) -> None:
    """``VerifyError`` for ``--upgrade-to`` flags that cannot be run."""
    from transactional.ops.verify.model import CRASH_POINTS

    if options.switch_at < 2:
        msg = (f"--switch-at must be 2 or more (the first version commits txids 1..K-1 before the switch); "
               f"got {options.switch_at}")
        raise VerifyError(msg)
    if options.server_faults:
        msg = "--server-faults is not combined with --upgrade-to; verify the upgrade and the server restarts apart"
        raise VerifyError(msg)
    known = (*CRASH_POINTS, "upgrade.before_record", "upgrade.recorded")
    for p in options.switch_points:
        if p.partition("@")[0] not in known:
            msg = f"unknown switch point {p!r}; the points are {', '.join(known)} (P@-1: P of the txid before the switch)"
            raise VerifyError(msg)
    if options.max_batches is not None and options.max_batches < options.switch_at:
        msg = (f"--max-batches {options.max_batches} ends the run before the switch at txid {options.switch_at}; "
               "give more batches or a smaller --switch-at")
        raise VerifyError(msg)


def load_new_version(new_file: str) -> tuple[Any, Any]:
    """``(module, built topology)`` of the new version's file."""
    from transactional.ops.topology_file import built_topology, load_topology_file

    module = load_topology_file(new_file)
    return module, built_topology(module.build_topology(), new_file)


def classify_upgrade(old: Any, new: Any, new_module: Any, new_file: str, options: VerifyOptions) -> list[Any]:
    """Every change of ``new`` from ``old`` (built topologies), classified as ``trident
    upgrade`` classifies a new version over a recorded layout with ``switch_at - 1`` txids
    committed; ``allow_dropped_state`` from the flag or the new file's settings."""
    from transactional.engine import layout
    from transactional.engine.changes import classify
    from transactional.ops.settings import Layer, env_layer, make_config

    config = make_config([Layer(f"CONFIG of {new_file}", dict(getattr(new_module, "CONFIG", None) or {})),
                          env_layer()])
    allow = options.allow_dropped_state or config.allow_dropped_state
    return classify(layout.layout_of(old), layout.layout_of(new), committed=options.switch_at - 1,
                    allow_dropped_state=allow)


def refusal_lines(report: VerifyReport) -> list[str]:
    """What the table says of an upgrade: each change, and for a refused one that nothing ran."""
    if report.upgrade_to is None:
        return []
    lines = [f"upgrade to {report.upgrade_to} at txid {report.switch_at}: {len(report.changes)} change(s)"]
    lines += [f"  {c}" for c in report.changes]
    if report.refused:
        lines.append(f"REFUSED: nothing was run and nothing was written; {report.upgrade_to} has unsafe change(s) "
                     "that `trident upgrade` and `trident run` refuse as well: fix them and verify again")
    return lines
