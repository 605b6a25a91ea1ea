"""Which task a tuple goes to: the one place that decides it (Storm's ``GrouperFactory``).

One function per grouping -- ``shuffle``, ``fields``, ``global_``, ``all_``, ``none``,
``direct``, ``local_or_shuffle`` -- and ``grouper`` to pick one by name. A grouping
function takes the consumer's tasks as *sinks*, one callable per task (the ``append`` of
that task's output list, or anything else), and returns the *send* function of one
subscription: ``send(values)`` hands ``values`` to the chosen task's sink and returns what
that sink returned (``all_``: to every sink, returning None). Every topology kind routes
through these:

- transactional topologies and Trident's row stages: ``transactional.engine.task.Router``, with
  the sinks appending to the consumer tasks' outputs (the per-tuple hot path is the one
  call to ``send``);
- core topologies: ``choose_tasks``, Storm's ``chooseTasks`` form (the indexes of the tasks
  a tuple goes to), made of the same functions;
- Trident's Arrow batches: ``split_batch``, whose fields grouping places each row by the
  same ``stable_hash`` as a tuple with those values.

Every choice is a function of the task's input and of a start fixed by the task and the txid
(``shuffle_start``): a task Spark runs again (a lost executor) sends each tuple where the
first run did, so the consumers that read the first run's output and those reading the
second see one batch (docs/cluster.md).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from typing import Any

from transactional.exceptions import TopologyError

__all__ = ["SHUFFLE", "FIELDS", "GLOBAL", "ALL", "NONE", "DIRECT", "LOCAL_OR_SHUFFLE", "GOLDEN", "SHUFFLE_SPREAD",
           "KEY_STRIDE", "stable_hash", "shuffle_start", "shuffle", "none", "fields", "global_", "all_", "direct",
           "local_or_shuffle", "grouper", "choose_tasks", "split_batch", "partition_by_keys"]

SHUFFLE, FIELDS, GLOBAL, ALL, NONE, DIRECT, LOCAL_OR_SHUFFLE = (
    "shuffle", "fields", "global", "all", "none", "direct", "local_or_shuffle")

#: 2**32 divided by the golden ratio: multiplying by it (Fibonacci hashing) spreads the bits of
#: a CRC-32 over the residues (CRC-32 alone maps "w0" .. "w4" to one residue mod 3)
GOLDEN = 0x9E3779B1
#: 2**16 divided by the golden ratio (Knuth's multiplicative-hashing constant for 16 bits):
#: task ``t`` of a component starts its round robin at ``t * SHUFFLE_SPREAD + txid``, so
#: the tasks of one component begin at consumer tasks far apart, not all at the same one.
#: 40503 = 3 * 23 * 587: for 3 consumer tasks (or 23, 69, ...) every task starts at the same
#: one (the txid still moves it). Changing it would move tuples: routing stays as it was.
SHUFFLE_SPREAD = 40503
#: a record's key is ``consumer_index * KEY_STRIDE + consumer_task`` (the consumer's position
#: in ``Topology.components`` and its task): the key Spark's ``partitionBy`` routes on
KEY_STRIDE = 1 << 20

Sink = Callable[[tuple[Any, ...]], Any]
Send = Callable[[tuple[Any, ...]], Any]
Chooser = Callable[[tuple[Any, ...]], Sequence[int]]


def stable_hash(value: Any) -> int:
    """A hash equal in every process and run (unlike ``hash`` of a str).

    CRC-32 of the value's bytes, spread by Fibonacci hashing (``GOLDEN``)."""
    if isinstance(value, str):
        h = zlib.crc32(value.encode())
    elif isinstance(value, bool) or not isinstance(value, (int, bytes, tuple)):
        h = zlib.crc32(repr(value).encode())
    elif isinstance(value, int):
        h = value & 0xFFFFFFFF
    elif isinstance(value, bytes):
        h = zlib.crc32(value)
    else:
        h = 17
        for v in value:
            h = (h * 31 + stable_hash(v)) & 0xFFFFFFFF
    return ((h * GOLDEN) & 0xFFFFFFFF) >> 7


def shuffle_start(task: int, salt: int) -> int:
    """Where task ``task``'s round robin starts (before the first step), for ``salt`` (the
    txid; a core topology's task seed): the same whenever the task runs again."""
    return task * SHUFFLE_SPREAD + salt


def shuffle(sinks: Sequence[Sink], start: int) -> Send:
    """Shuffle grouping: round robin from ``start`` (``shuffle_start``), one step per tuple --
    an even spread that is the same when the task runs again (its input order is fixed)."""
    n = len(sinks)
    if n == 1:
        return sinks[0]
    state = [start % n]

    def round_robin(v: tuple[Any, ...]) -> Any:
        i = state[0] = (state[0] + 1) % n
        return sinks[i](v)
    return round_robin


def none(sinks: Sequence[Sink], start: int) -> Send:
    """None grouping: the caller does not care where a tuple goes; as in Storm, a shuffle."""
    return shuffle(sinks, start)


def fields(sinks: Sequence[Sink], field_idx: Sequence[int]) -> Send:
    """Fields grouping: the task is ``stable_hash`` of the grouped value (of the tuple of the
    grouped values, for several fields) modulo the task count."""
    n = len(sinks)
    if n == 1:
        return sinks[0]
    if len(field_idx) == 1:
        fi = field_idx[0]

        # the per-tuple hot path: ``stable_hash`` of a str inlined
        def by_field(v: tuple[Any, ...], h: Callable[[Any], int] = stable_hash, crc: Callable[[bytes], int] = zlib.crc32,
                     g: int = GOLDEN) -> Any:
            x = v[fi]
            return sinks[((((crc(x.encode()) * g) & 0xFFFFFFFF) >> 7) if type(x) is str else h(x)) % n](v)
        return by_field

    def by_fields(v: tuple[Any, ...]) -> Any:
        return sinks[stable_hash(tuple(v[i] for i in field_idx)) % n](v)
    return by_fields


def global_(sinks: Sequence[Sink]) -> Send:
    """Global grouping: every tuple to task 0."""
    return sinks[0]


def all_(sinks: Sequence[Sink]) -> Send:
    """All grouping: every tuple to every task."""
    if len(sinks) == 1:
        return sinks[0]

    def to_all(v: tuple[Any, ...]) -> None:
        for s in sinks:
            s(v)
    return to_all


def direct(sinks: Sequence[Sink]) -> Callable[[int, tuple[Any, ...]], Any]:
    """Direct grouping: the emitter names the task (``emit_direct``); ``send(task, values)``.
    The caller checks ``task`` (its message names the component and its tasks)."""
    def to_task(task: int, v: tuple[Any, ...]) -> Any:
        return sinks[task](v)
    return to_task


def local_or_shuffle(sinks: Sequence[Sink], task: int, local: bool, start: int) -> Send:
    """Local-or-shuffle grouping: where the consumer is local to the emitter (equal
    parallelism, the same phase: ``Topology.is_local``) task i sends to task i, with no
    shuffle; otherwise a shuffle."""
    return sinks[task] if local else shuffle(sinks, start)


def grouper(grouping: str, sinks: Sequence[Sink], field_idx: Sequence[int] = (), *, task: int = 0,
            start: int = 0, local: bool = False) -> Send:
    """The send function of ``grouping`` (any but ``direct``, which ``direct`` serves) over
    ``sinks``: ``field_idx`` are the grouped fields' positions in a tuple, ``task`` the
    emitting task, ``start`` its ``shuffle_start``, ``local`` whether a local-or-shuffle
    consumer is local to it."""
    if grouping == FIELDS:
        return fields(sinks, field_idx)
    if grouping == GLOBAL:
        return global_(sinks)
    if grouping == ALL:
        return all_(sinks)
    if grouping == LOCAL_OR_SHUFFLE:
        return local_or_shuffle(sinks, task, local, start)
    if grouping == NONE:
        return none(sinks, start)
    if grouping == SHUFFLE:
        return shuffle(sinks, start)
    msg = (f"no grouper for grouping {grouping!r}; expected one of {SHUFFLE, FIELDS, GLOBAL, ALL, NONE, LOCAL_OR_SHUFFLE} "
           "(a direct subscription is served by routing.direct)")
    raise TopologyError(msg)


def choose_tasks(grouping: str, n: int, field_idx: Sequence[int] = (), *, task: int = 0, start: int = 0,
                 local: bool = False) -> Chooser:
    """Storm's ``chooseTasks``: the indexes of the tasks (of ``n``) a tuple goes to under
    ``grouping``, chosen by ``grouper`` itself (each task's sink answers its own index)."""
    if grouping == ALL and n > 1:
        every = tuple(range(n))
        return lambda v: every
    return grouper(grouping, [_answer((t,)) for t in range(n)], field_idx, task=task, start=start, local=local)


def _answer(tasks: tuple[int, ...]) -> Sink:
    return lambda v: tasks


def split_batch(grouping: str, batch: Any, n: int, keys: Sequence[str], *, task: int,
                local: bool) -> list[tuple[int, Any]]:
    """An Arrow ``RecordBatch`` of one task's rows, placed on the ``n`` consumer tasks:
    ``[(task, rows), ...]`` with no empty part. Fields grouping places each row by
    ``stable_hash`` of its ``keys`` columns, as ``fields`` places a tuple of those values
    (``partition_by_keys``); global, all and a local consumer as ``grouper`` does; shuffle
    (and none, and local-or-shuffle to a consumer that is not local) in ``n`` contiguous
    slices, the first to this task's own index, so the tasks of a stage start apart."""
    if grouping == GLOBAL or n == 1:
        return [(0, batch)]
    if grouping == ALL:
        return [(t, batch) for t in range(n)]
    if grouping == LOCAL_OR_SHUFFLE and local:
        return [(task, batch)]
    if grouping == FIELDS:
        return [(t, part) for t, part in enumerate(partition_by_keys(batch, list(keys), n)) if part.num_rows]
    step = -(-batch.num_rows // n)
    slices = [((task + i) % n, batch.slice(i * step, step)) for i in range(n)]
    return [(t, part) for t, part in slices if part.num_rows]


def partition_by_keys(b: Any, keys: list[str], n: int) -> list[Any]:
    """``b`` split into ``n`` batches by the stable hash of its key columns (the same
    placement as a fields grouping of rows: ``stable_hash``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cols = [b.column(k).to_pylist() for k in keys]
    if len(cols) == 1:
        target = [stable_hash(v) % n for v in cols[0]]
    else:
        target = [stable_hash(v) % n for v in zip(*cols, strict=True)]
    t = pa.array(target, type=pa.int32())
    return [b.filter(pc.equal(t, i)) for i in range(n)]
