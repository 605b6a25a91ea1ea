"""Trident's DRPC streams (docs/drpc.md): ``TridentTopology.new_drpc_stream(function,
drpc)`` starts a stream of requests, each a tuple with the one field ``args``.

As in Storm, each request is its own little batch: a txid carries one request of the
stream (beside whatever the topology's other spouts emit in it), so ``aggregate`` and
``group_by`` work per request, and a ``state_query`` reads the state as every earlier txid
committed it. The tuples that reach the end of the stream are the answer, returned to the
caller as a JSON list of lists (Storm's ReturnResults): ``[[5]]`` for TridentWordCount's
``aggregate(Sum)``.

The compiler (``trident.compiler``) calls ``plan_returns`` before it makes the bolts (a
stream's last stage must emit rows) and ``add_returns`` after, which adds one
``ReturnResults`` committer per DRPC stream.
"""

from __future__ import annotations

import json
from typing import Any

from transactional.engine.drpc import IDS_STREAM, DRPCSpout, ReturnResults
from transactional.exceptions import ConfigError
from transactional.tuples import Fields
from trident.runtime.op import Op

__all__ = ["TridentDRPCSpout", "drpc_spout", "plan_returns", "add_returns"]


class TridentDRPCSpout(DRPCSpout):
    """A DRPC spout for Trident: one request per batch; tuples ``(attempt, args)``."""

    def get_coordinator(self, conf: dict[str, Any], context: Any) -> Any:
        """The DRPC coordinator, one request per batch."""
        return super().get_coordinator({**conf, "drpc.batch.size": 1}, context)

    def get_emitter(self, conf: dict[str, Any], context: Any) -> Any:
        """Emits the batch's request as ``(attempt, args)``."""
        return _Emitter()

    def declare_output_fields(self, declarer: Any) -> None:
        """``args`` (after the attempt) and the ids stream."""
        declarer.declare(Fields("__attempt", "args"))
        declarer.declare(Fields("__attempt", "id", "args", "attempts", "origin"), IDS_STREAM)


class _Emitter:
    def emit_batch(self, tx: Any, meta: Any, collector: Any) -> None:
        """The batch's request (one)."""
        for rid, args, attempts, origin in (meta or {}).get("requests", ()):
            collector.emit((tx, args))
            collector.emit((tx, rid, args, attempts, origin), IDS_STREAM)

    def cleanup_before(self, txid: int) -> None:
        """Nothing is kept."""

    def close(self) -> None:
        """Nothing to close."""


def spout_id(function: str) -> str:
    """The stream's spout id (its coordinator state lives under it)."""
    return f"drpc-{function}"


def drpc_spout(function: str, drpc: Any = None) -> TridentDRPCSpout:
    """The spout of ``function``'s requests: from ``drpc`` (a ``LocalDRPC``), or from the
    servers of ``TopologyConfig.drpc_servers`` when None."""
    if not isinstance(function, str) or not function or "/" in function or ":" in function:
        msg = f"new_drpc_stream: the function name must be a non-empty string without '/' or ':'; got {function!r}"
        raise ConfigError(msg)
    if drpc is None:
        return TridentDRPCSpout(function, "remote")
    serve = getattr(drpc, "_serve", None)
    if serve is None:
        msg = f"new_drpc_stream({function!r}, drpc) takes a transactional.drpc.LocalDRPC or None; got {drpc!r}"
        raise ConfigError(msg)
    serve(function)
    return TridentDRPCSpout(function, drpc.source)


def _render(rows: list[Any]) -> str:
    return json.dumps([list(r) for r in rows], default=str)


def plan_returns(segments: list[Any], placeholder: Any) -> list[tuple[Any, list[Any]]]:
    """For each DRPC stream: its spout's segment and the last stages fed by it (segments no
    one reads). Each last stage gets ``placeholder(segment)`` as a reader, so it emits rows
    for the return bolt."""
    out = []
    for s in segments:
        if s.spout is None or not isinstance(s.spout.spout, TridentDRPCSpout):
            continue
        reach, todo = [], [s]
        while todo:
            seg = todo.pop()
            if seg in reach:
                continue
            reach.append(seg)
            todo += [c for c, _ in seg.consumers]
        tails = [seg for seg in reach if not seg.consumers]
        for t in tails:
            if t.columnar_out:       # the answer is rows: the stage's Arrow output turned into rows
                t.ops.append(Op("project", t.fields, t.fields, in_idx=tuple(range(len(t.fields))),
                                in_fields=t.fields))
            placeholder(t)
        out.append((s, tails))
    return out


def add_returns(builder: Any, plan: list[tuple[Any, list[Any]]]) -> None:
    """Add each DRPC stream's ``ReturnResults`` committer, reading its last stages."""
    for spout_seg, tails in plan:
        spout = spout_seg.spout.spout
        d = builder.set_committer_bolt(f"return-{spout.function}",
                                       ReturnResults(spout.function, spout.source, tails[0].cid, render=_render))
        d.global_grouping(spout_seg.spout.spout_id, IDS_STREAM)
        for t in tails:
            d.global_grouping(t.cid)
