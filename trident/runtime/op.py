"""The operation specs a compiled Trident stage runs: compiled once by
``trident.compiler``, shipped with the bolt."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from transactional.tuples import Fields
from trident.runtime import Row
from trident.runtime.aggregators import _Chained, _CombinerAsAggregator, _ReducerAsAggregator
from trident.state import state_name


def key_of(row: Row, idx: Sequence[int]) -> Any:
    """A map key of group fields: the value of one field, a tuple of several, ``"$GLOBAL"``
    for none (the one key of an ungrouped persistent aggregation)."""
    if len(idx) == 1:
        return row[idx[0]]
    if not idx:
        return GLOBAL_KEY
    return tuple(row[i] for i in idx)


GLOBAL_KEY = "$GLOBAL"


# -- operation specs (compiled once, shipped with the bolt) ----------------------------------

@dataclass
class Op:
    """One operation of a stage: its kind, the user's object, and the field positions it
    reads (``in_idx``, in the stream's fields at that point ``fields``)."""

    kind: str
    fields: Fields                    # the stream's fields before the operation
    out_fields: Fields                # the stream's fields after it
    fn: Any = None
    in_idx: tuple[int, ...] = ()
    in_fields: Fields = field(default_factory=Fields)
    group_idx: tuple[int, ...] = ()
    state: Any = None                 # MapStateFactory of persist / query ops
    emit_values: bool = True          # persist: its new values have a consumer
    columnar: bool = False            # its output is a record batch when its input is
    single: bool = False              # a global aggregation: one result per batch, from task 0
    verb: str = ""                    # the call that made it, when not its kind (persistent_aggregate)
    stages_to: str | None = None      # partial: the counter map its counts may be staged for (staged_counters)
    spec: Any = None                  # multi_reduce: (per stream (group_idx, in_idx, in_fields), group fields)


_VERB = {"query": "state_query", "partial": "aggregate", "final": "aggregate"}


def _fn_name(fn: Any) -> str:
    """A user's operation as its class (``Split``), or a plain function's name."""
    if isinstance(fn, (list, tuple)):
        return ""
    if isinstance(fn, _Chained):                  # chained aggregators: Sum+Count
        return "+".join(_fn_name(a) for a, _, _ in fn.parts)
    if isinstance(fn, _CombinerAsAggregator):     # adapters of the user's aggregators
        fn = fn.c
    elif isinstance(fn, _ReducerAsAggregator):
        fn = fn.r
    name = getattr(fn, "__name__", None) if not isinstance(fn, type) else fn.__name__
    return name if isinstance(name, str) else type(fn).__name__


def op_label(op: Op) -> str:
    """An operation as the user wrote it: ``each(Split)``, ``persistent_aggregate(word-counts)``,
    ``state_query(word-counts)``, ``project(word, count)`` (errors, metrics, the status page)."""
    verb = op.verb or _VERB.get(op.kind, op.kind)
    if op.state is not None:
        what = state_name(op.state)
    elif op.kind == "project":
        what = ", ".join(op.out_fields)
    else:
        what = _fn_name(op.fn) if op.fn is not None else ""
    return f"{verb}({what})"
