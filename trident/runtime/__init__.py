"""What a compiled Trident stage runs: one ``TridentBolt`` per stage, a chain of processors
inside it (docs/trident.md, "Compilation").

A processor takes rows (plain tuples of the stream's fields at that point) or whole
``pyarrow.RecordBatch``-es, and passes its output to the next one; ``finish`` (the end
of the task's share of the batch) flows down the chain once. Every processor accepts
both forms: a per-tuple processor iterates a batch's rows, a columnar one collects rows
into a batch. The last processor emits: rows as tuples ``(attempt, *values)``, or a
batch as Arrow IPC buffers sent with ``emit_direct`` to the consumer's tasks (the
producer partitions the batch itself: by key hash for a fields grouping, in contiguous
slices for a shuffle), so no row is pickled on the columnar path.

The modules, in the order a stage's data meets them:

* ``op``: the operation specs the compiler ships with the bolt (``Op``, ``op_label``);
* ``bolt``: ``TridentBolt``, the input dispatch and the processor chain of a stage;
* ``processors``: the processor base, the per-tuple and columnar functions, joins and
  the emitting end of the chain;
* ``aggregation``: the aggregation processors (per task, partial before a shuffle, final);
* ``aggregators``: Trident's aggregator kinds as one ``Aggregator``;
* ``persistence``: the processors that update or query a map in the commit phase;
* ``arrow``: the Arrow helpers (IPC buffers, grouped counts and sums, overflow checks).
"""

from typing import Any, TypeAlias

#: a row: the values of the stream's fields at a point of the chain
Row: TypeAlias = tuple[Any, ...]
