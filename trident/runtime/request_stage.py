"""``RequestStage``: a compiled Trident stage run once per DRPC request of a batch (docs/drpc.md).

A Trident DRPC stream carries many requests in one txid. Each tuple of its stages carries
the request id right after the attempt, ``(attempt, request_id, *values)``; a
``RequestStage`` strips the id, runs one instance of the compiled stage
(``trident.runtime.bolt.TridentBolt``) per request, and puts the id back on what each
instance emits. Every task hears every request of the batch on the DRPC ids stream and
finishes an instance for each -- also for a request none of whose tuples came to it --
so each request sees what a batch of its own would have seen: ``aggregate`` and
``group_by`` work per request, and an aggregate of no tuples answers its zero.
"""

from __future__ import annotations

import copy
from typing import Any

from transactional.bolt import BaseBatchBolt, Committer
from transactional.tuples import Fields, Tuple

__all__ = ["REQUEST_FIELD", "RequestStage", "RequestCommitterStage"]

#: the field after the attempt in every tuple of a batched DRPC stream
REQUEST_FIELD = "__drpc_id"


class _RequestEmits:
    """The collector one request's instance emits into: the request id after the attempt."""

    __slots__ = ("_router", "_rid")

    def __init__(self, router: Any, rid: str) -> None:
        self._router = router
        self._rid = rid

    def emit(self, values: Any, stream: str = "default") -> None:
        """Emit ``(attempt, *values)`` as ``(attempt, request_id, *values)``."""
        self._router.emit((values[0], self._rid, *values[1:]), stream)

    def emit_direct(self, task: int, values: Any, stream: str = "default", **kw: Any) -> None:
        """The same, to task ``task`` of a direct stream (an Arrow buffer)."""
        self._router.emit_direct(task, (values[0], self._rid, *values[1:]), stream, **kw)

    def report_error(self, error: BaseException) -> None:
        """As the router does."""
        self._router.report_error(error)


class _Declarer:
    """Declares the stage's streams with the request id after the attempt."""

    def __init__(self, outer: Any) -> None:
        self.outer = outer

    def declare(self, fields: Any, stream: str = "default", direct: bool = False) -> None:
        f = list(Fields(fields))
        self.outer.declare(Fields(f[0], REQUEST_FIELD, *f[1:]), stream, direct)

    def declare_stream(self, stream: str, fields: Any, direct: bool = False) -> None:
        self.declare(fields, stream, direct)


class RequestStage(BaseBatchBolt):
    """``stage`` (a ``TridentBolt``) once per request of the batch; ``ids_stream``: the
    spout's stream naming every request of the batch (``transactional.engine.drpc.IDS_STREAM``)."""

    accepts_columns = False

    def __init__(self, stage: Any, ids_stream: str) -> None:
        self.stage = stage
        self.ids_stream = ids_stream

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any, id: Any) -> None:
        """One batch of this task: no request seen yet."""
        self.conf, self.context, self.router, self.attempt = conf, context, collector, id
        self.requests: dict[str, None] = {}          # the batch's requests, in order
        self.instances: dict[str, Any] = {}

    def _instance(self, rid: str) -> Any:
        inst = self.instances.get(rid)
        if inst is None:
            inst = self.instances[rid] = copy.copy(self.stage)    # prepare() sets all its per-batch state
            inst.prepare(self.conf, self.context, _RequestEmits(self.router, rid), self.attempt)
        return inst

    def execute(self, tuple: Tuple) -> None:
        """One tuple (``execute_values`` takes whole payloads)."""
        self.execute_values([tuple.values], tuple.source_component, tuple.source_stream, tuple.source_task)

    def execute_values(self, values_list: list[Any], source: str, stream: str, source_task: int = 0) -> int:
        """A payload: the ids stream's requests noted; other values, without their request
        id, to the instance of their request. Returns how many rows the instances took."""
        if stream == self.ids_stream:
            for v in values_list:
                self.requests[v[1]] = None
            return len(values_list)
        by_request: dict[str, list[Any]] = {}
        for v in values_list:
            by_request.setdefault(v[1], []).append((v[0], *v[2:]))
        n = 0
        for rid, rows in by_request.items():
            took = self._instance(rid).execute_values(rows, source, stream, source_task)
            n += len(rows) if took is None else took
        return n

    def finish_batch(self) -> None:
        """Finish every request of the batch, in order (those that sent this task nothing too)."""
        for rid in [*self.requests, *(r for r in self.instances if r not in self.requests)]:
            self._instance(rid).finish_batch()

    def declare_output_fields(self, declarer: Any) -> None:
        """The stage's streams, each with the request id after the attempt."""
        self.stage.declare_output_fields(_Declarer(declarer))

    @property
    def writes_states(self) -> tuple[str, ...]:
        """The stage's (none: a batched DRPC stream writes no state)."""
        return tuple(self.stage.writes_states)

    @property
    def layout_info(self) -> dict[str, Any]:
        """The stage's."""
        info: dict[str, Any] = self.stage.layout_info
        return info

    @property
    def describe_as(self) -> str:
        """The stage's (its layout's class stays what it was)."""
        shown: str = self.stage.describe_as
        return shown

    def __repr__(self) -> str:
        return f"RequestStage({self.stage!r})"


class RequestCommitterStage(RequestStage, Committer):
    """A ``RequestStage`` of a stage that runs in the commit phase (a ``state_query``)."""
