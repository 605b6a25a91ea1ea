"""``TridentBolt``: one compiled Trident stage, its input dispatch and its processor chain."""

from __future__ import annotations

from typing import Any

from transactional.bolt import BaseBatchBolt, Committer
from transactional.columns import ColumnBatch, rows_of
from transactional.metrics import MetricsContext
from transactional.tuples import Fields
from trident.runtime.aggregation import AggregateProc, FinalProc, PartialProc
from trident.runtime.arrow import from_ipc
from trident.runtime.combine_partials import combine_partials, combines
from trident.runtime.interval_join import IntervalJoinProc
from trident.runtime.map_updaters import aggregates
from trident.runtime.op import Op
from trident.runtime.persistence import PartitionPersistProc, PersistProc, QueryProc
from trident.runtime.processors import (
    ArrowOut,
    BatchProc,
    EachProc,
    EmitProc,
    FilterProc,
    JoinProc,
    MapProc,
    MultiReduceProc,
    Proc,
    ProjectProc,
)
from trident.runtime.window_join import WindowJoinProc
from trident.runtime.window_proc import WindowProc
from trident.state import state_name

ARROW_FIELD = "_arrow"
TX_FIELD = "_tx"


class OperationContext(MetricsContext):
    """The ``context`` an operation's ``prepare(conf, context)`` gets (Storm's
    ``TridentOperationContext``): ``topology_id``, ``component_id`` (the stage),
    ``task_index``, ``num_tasks``, ``phase``, and ``attempt`` (the batch's
    ``TransactionAttempt``); ``register_counter/gauge/histogram/meter`` are the user's
    metrics (``transactional.metrics``), counted under the stage's name."""

    def __init__(self, context: Any, attempt: Any) -> None:
        self.topology_id = context.topology_id
        self.component_id = context.component_id
        self.task_index = context.task_index
        self.num_tasks = context.num_tasks
        self.phase = context.phase
        self.attempt = attempt

    def __repr__(self) -> str:
        return f"OperationContext({self.component_id!r} task {self.task_index}/{self.num_tasks}, {self.attempt})"


PROCS: dict[str, type[Proc]] = {
    "each": EachProc, "filter": FilterProc, "map": MapProc, "flat_map": MapProc,
    "project": ProjectProc, "each_batch": BatchProc, "map_batches": BatchProc,
    "aggregate": AggregateProc, "partial": PartialProc, "final": FinalProc,
    "partition_persist": PartitionPersistProc, "query": QueryProc,
    "join": JoinProc, "window": WindowProc, "peek": FilterProc, "multi_reduce": MultiReduceProc,
    "ijoin": IntervalJoinProc, "wjoin": WindowJoinProc,
}


class TridentBolt(BaseBatchBolt):
    """One compiled Trident stage: the input dispatch, the processor chain, the outputs.

    ``sides`` maps an input ``(component, stream)`` to its side (the stream's position in
    a join, else 0); inputs on streams in ``arrow_in`` carry Arrow IPC buffers."""

    accepts_columns = True    # a spout in the same tasks may hand over ColumnBatch values

    def __init__(self, ops: list[Op], out_fields: Fields, rows_out: bool, arrow_outs: list[ArrowOut],
                 sides: dict[tuple[str, str], int], arrow_in: set[tuple[str, str]], description: str,
                 named: bool = False, side_outs: tuple[tuple[str, Fields], ...] = ()) -> None:
        self.ops = ops
        #: side streams (stream id, fields) a processor emits on: a window's late tuples
        self.side_outs = side_outs
        self.out_fields = out_fields
        self.rows_out = rows_out
        self.arrow_outs = arrow_outs
        self.sides = sides
        self.arrow_in = arrow_in
        self.description = description
        self.named = named

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any, id: Any) -> None:
        """Build the processor chain for this task and batch."""
        self.conf, self.context, self.collector, self.attempt = conf, context, collector, id
        self.task, self.num_tasks = context.task_index, context.num_tasks
        self.partition = ""          # the source task of the payload flowing (execute_values)
        self.staged: list[Any] = []  # (map, StagedRef) of the counts it staged (staged_counters)
        self.op_context = OperationContext(context, id)
        chain: Proc = EmitProc(self.out_fields, self.rows_out, self.arrow_outs)
        procs = [chain]
        for op in reversed(self.ops):
            chain = (PersistProc if aggregates(op) else PROCS[op.kind])(op, chain)
            procs.append(chain)
        for p in procs:               # the last first: each captures its successor's row()
            p.open(self)
        self.head = chain
        self.join = chain if isinstance(chain, JoinProc) else None

    def execute(self, tuple: Any) -> None:
        """One input tuple: a row (its values after the attempt), or an Arrow buffer."""
        self.execute_values([tuple.values], tuple.source_component, tuple.source_stream, tuple.source_task)

    def execute_values(self, values_list: list[Any], source: str, stream: str, source_task: int = 0) -> int:
        """A whole payload of one source's task at once (``run_task`` calls this instead of
        ``execute`` for each tuple): rows go down the chain without ``Tuple`` objects, and
        a spout's ``ColumnBatch`` (``transactional.columns``) as the batch it is. Returns
        how many rows it took. ``partition`` names the payload's source task while it flows
        (a window stage keeps its watermark per upstream partition)."""
        self.partition = f"{source}/{stream}/{source_task}"
        src = (source, stream)
        if ColumnBatch in set(map(type, values_list)):
            return self._take_column_batches(values_list, source, stream, source_task)
        if src in self.arrow_in:
            return self._take_buffers(values_list, src)
        elif self.join is not None:
            side, side_row = self.sides[src], self.join.side_row
            for v in values_list:
                side_row(side, v[1:])
        else:
            self.head.rows([v[1:] for v in values_list])
        return len(values_list)

    def _take_column_batches(self, values_list: list[Any], source: str, stream: str, source_task: int) -> int:
        """A payload holding a spout's ``ColumnBatch``-es: each as the batch it is, the
        other values as rows. Returns how many rows it took."""
        n = 0
        for v in values_list:
            if type(v) is ColumnBatch:
                n += len(v)
                self._take_batch((source, stream), v.batch)
            else:
                n += 1
                self.execute_values([v], source, stream, source_task)
        return n

    def _take_buffers(self, values_list: list[Any], src: tuple[str, str]) -> int:
        """A payload of Arrow IPC buffers. Returns how many rows (tuples, not buffers: a
        buffer holds many) it took."""
        rows = 0
        for v in values_list:
            for b in from_ipc(v[1]).to_batches():
                rows += b.num_rows
                self._take_batch(src, b)
        return rows

    def _take_batch(self, src: tuple[str, str], b: Any) -> None:
        """A record batch down the chain; a join takes rows, by side."""
        if self.join is not None:
            side = self.sides[src]
            for r in rows_of(b):
                self.join.side_row(side, r)
        else:
            self.head.batch(b)

    @property
    def combines_outputs(self) -> bool:
        """Whether the stage ends in a combiner's partial aggregation, whose outputs of
        several tasks merge (``transactional.engine.combine``)."""
        return combines(self.ops)

    def combine_outputs(self, records: list[Any]) -> list[Any]:
        """The partials several tasks of this stage emitted, one per key and consumer task."""
        return combine_partials(self.ops[-1], records)

    @property
    def staged_maps(self) -> list[str]:
        """The counter maps whose partial counts this stage can stage (``staged_counters``)."""
        return [op.stages_to for op in self.ops if op.kind == "partial" and op.stages_to]

    def finish_batch(self) -> None:
        """The end of the task's share: flows down the chain."""
        self.head.finish()

    def declare_output_fields(self, declarer: Any) -> None:
        """The stream's fields after the attempt, and a direct stream per Arrow consumer."""
        declarer.declare(Fields(TX_FIELD, *self.out_fields))
        for stream, fields in self.side_outs:
            declarer.declare_stream(stream, Fields(TX_FIELD, *fields))
        for out in self.arrow_outs:
            declarer.declare_stream(out.stream, Fields(TX_FIELD, ARROW_FIELD), direct=True)

    @property
    def writes_states(self) -> tuple[str, ...]:
        """The names of the states this stage updates (``persistent_aggregate``,
        ``partition_persist``), shown on the status page."""
        return tuple(dict.fromkeys(state_name(op.state) for op in self.ops
                                   if op.kind == "partition_persist" and op.state is not None))

    @property
    def layout_info(self) -> dict[str, Any]:
        """The states this stage updates or queries, for the recorded layout
        (``transactional.engine.layout``): per state id (its ``uid``, else its name; a
        window's store by its name) the kind, the key fields, the declared value
        ``version``, whether it has a ``migrate`` function, and how the stage uses it
        (``persist``, ``partition_persist``, ``query``, ``window``); whether it keeps
        windows; the grouping and keys of each consumer it sends Arrow batches to."""
        states = {state_id(op.state): state_spec(op) for op in self.ops if op.state is not None}
        states.update({op.fn.store.name: {"kind": "window", "name": op.fn.store.name, "keys": None, "use": "window",
                                          "version": 1, "migrate": False}
                       for op in self.ops if op.kind == "window"})
        return {"states": states, "windows": any(op.kind == "window" for op in self.ops),
                "arrow_outs": {o.stream: [o.grouping, list(o.keys)] for o in self.arrow_outs}}

    @property
    def describe_as(self) -> str:
        """What ``Topology.describe`` shows as the class: the stage's operations where its
        component id does not already say them (a stage the user named)."""
        return f"{type(self).__name__}: {self.description}" if self.named else type(self).__name__

    def __repr__(self) -> str:
        return f"TridentBolt({self.description})"


def state_id(factory: Any) -> str:
    """A state's stable id: the ``uid`` its factory was given (a rename keeps it), else its name."""
    return str(getattr(factory, "uid", None) or getattr(factory, "name", None) or type(factory).__name__)


def state_spec(op: Op) -> dict[str, Any]:
    """What the recorded layout keeps of a state an operation uses (``layout_info``)."""
    f = op.state
    kind = getattr(getattr(f, "state_type", None), "value", None) or f"user:{type(f).__name__}"
    agg = aggregates(op)          # persistent_aggregate: recorded as "persist", as it always was
    keys = [op.fields[i] for i in op.group_idx] if agg else list(op.in_fields)
    return {"kind": kind, "name": str(getattr(f, "name", type(f).__name__)), "keys": keys,
            "use": "persist" if agg else op.kind,
            "version": int(getattr(f, "version", 1) or 1), "migrate": getattr(f, "migrate", None) is not None}


class TridentCommitterBolt(TridentBolt, Committer):
    """A stage that updates or queries state: in the commit phase, in txid order."""
