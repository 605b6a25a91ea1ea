"""Trident's DRPC streams (docs/drpc.md): ``TridentTopology.new_drpc_stream(function,
drpc)`` starts a stream of requests, each a tuple with the one field ``args``.

Each request is its own little batch, as in Storm -- ``aggregate`` and ``group_by`` work
per request, and a ``state_query`` reads the state as every earlier txid committed it --
but many requests share one txid, as in Linear DRPC: every stage the stream reaches runs
as a ``RequestStage``, one instance of the compiled stage per request of the batch (each
tuple carries its request id after the attempt, as ``transactional.engine.drpc``'s
``RequestBolt`` does for Linear DRPC), and every task finishes every request of the batch
(so an aggregate of a request with no tuples answers its zero, as before). A stream whose
stages also read another stream, or write state or windows, carries one request per
txid. The tuples that reach the end of the stream are the request's answer, returned to
the caller as a JSON list of lists (Storm's ReturnResults): ``[[5]]`` for
TridentWordCount's ``aggregate(Sum)``.

The compiler (``trident.compiler``) calls ``plan_returns`` before it makes the bolts (a
stream's last stage must emit rows), ``per_request`` for each stage it makes, and
``add_returns`` after, which adds one ``ReturnResults`` committer per DRPC stream.
"""

from __future__ import annotations

import json
from typing import Any

from transactional.bolt import Committer
from transactional.engine.drpc import IDS_STREAM, DRPCSpout, ReturnResults
from transactional.exceptions import ConfigError
from transactional.tuples import Fields
from trident.runtime.op import Op
from trident.runtime.request_stage import REQUEST_FIELD, RequestCommitterStage, RequestStage

__all__ = ["TridentDRPCSpout", "drpc_spout", "plan_returns", "per_request", "add_returns"]


class TridentDRPCSpout(DRPCSpout):
    """A DRPC spout for Trident. ``batched`` (set by the compiler, ``plan_returns``): up to
    ``drpc_batch_size`` requests per batch, tuples ``(attempt, request_id, args)``; else
    one request per batch, tuples ``(attempt, args)``."""

    batched = False

    def get_coordinator(self, conf: dict[str, Any], context: Any) -> Any:
        """The DRPC coordinator: ``drpc_batch_size`` requests a batch when batched, else one."""
        return super().get_coordinator(conf if self.batched else {**conf, "drpc.batch.size": 1}, context)

    def get_emitter(self, conf: dict[str, Any], context: Any) -> Any:
        """Emits each request of the batch."""
        return _Emitter(self.batched)

    def declare_output_fields(self, declarer: Any) -> None:
        """``args`` (after the attempt, and the request id when batched) and the ids stream."""
        declarer.declare(Fields("__attempt", REQUEST_FIELD, "args") if self.batched else Fields("__attempt", "args"))
        declarer.declare(Fields("__attempt", "id", "args", "attempts", "origin"), IDS_STREAM)


class _Emitter:
    def __init__(self, batched: bool = False) -> None:
        self.batched = batched

    def emit_batch(self, tx: Any, meta: Any, collector: Any) -> None:
        """The batch's requests."""
        for rid, args, attempts, origin in (meta or {}).get("requests", ()):
            collector.emit((tx, rid, args) if self.batched else (tx, args))
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


#: the operations a stage of a batched DRPC stream may hold: per request, each sees only its
#: request's tuples (state writes, windows and joins keep to one request per batch)
PER_REQUEST_OPS = frozenset({"each", "filter", "map", "flat_map", "project", "each_batch", "map_batches",
                             "aggregate", "partial", "final", "query", "peek"})


def _reached(s: Any) -> list[Any]:
    """The segments fed, directly or not, by segment ``s`` (``s`` first)."""
    reach, todo = [], [s]
    while todo:
        seg = todo.pop()
        if seg in reach:
            continue
        reach.append(seg)
        todo += [c for c, _ in seg.consumers]
    return reach


def _batchable(reach: list[Any]) -> bool:
    """True when the stages of a DRPC stream read nothing but that stream and hold only
    ``PER_REQUEST_OPS``: its requests can share a batch, one stage instance per request."""
    return all(all(i.segment in reach for i in seg.inputs) and (seg is reach[0] or seg.spout is None)
               and all(op.kind in PER_REQUEST_OPS for op in seg.ops) for seg in reach)


def plan_returns(segments: list[Any], placeholder: Any) -> list[tuple[Any, list[Any], list[Any]]]:
    """For each DRPC stream: its spout's segment, the last stages fed by it (segments no
    one reads), and the stages that run once per request (all it reaches, when its
    requests can share a batch, ``_batchable``; else none: one request per batch). Each
    last stage gets ``placeholder(segment)`` as a reader, so it emits rows for the return bolt."""
    out = []
    for s in segments:
        if s.spout is None or not isinstance(s.spout.spout, TridentDRPCSpout):
            continue
        reach = _reached(s)
        s.spout.spout.batched = _batchable(reach)
        tails = [seg for seg in reach if not seg.consumers]
        for t in tails:
            if t.columnar_out:       # the answer is rows: the stage's Arrow output turned into rows
                t.ops.append(Op("project", t.fields, t.fields, in_idx=tuple(range(len(t.fields))),
                                in_fields=t.fields))
            placeholder(t)
        out.append((s, tails, reach if s.spout.spout.batched else []))
    return out


def per_request(plan: list[tuple[Any, list[Any], list[Any]]], segment: Any, bolt: Any) -> tuple[Any, str | None]:
    """``bolt`` (``segment``'s compiled stage) as it runs: a ``RequestStage`` when the
    segment belongs to a batched DRPC stream, with the spout id whose ids stream it must
    also read (every task, ``all_grouping``); else ``(bolt, None)``."""
    for spout_seg, _, batched in plan:
        if any(segment is seg for seg in batched):
            wrapper = RequestCommitterStage if isinstance(bolt, Committer) else RequestStage
            return wrapper(bolt, IDS_STREAM), spout_seg.spout.spout_id
    return bolt, None


def add_returns(builder: Any, plan: list[tuple[Any, list[Any], list[Any]]]) -> None:
    """Add each DRPC stream's ``ReturnResults`` committer, reading its last stages."""
    for spout_seg, tails, batched in plan:
        spout = spout_seg.spout.spout
        d = builder.set_committer_bolt(f"return-{spout.function}",
                                       ReturnResults(spout.function, spout.source, tails[0].cid, render=_render,
                                                     per_request=bool(batched)))
        d.global_grouping(spout_seg.spout.spout_id, IDS_STREAM)
        for t in tails:
            d.global_grouping(t.cid)
