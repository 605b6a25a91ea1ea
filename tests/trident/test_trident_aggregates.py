"""Trident's aggregations as Storm defines them, and as exact on the columnar path as on
the per-tuple path (docs/trident.md, "Aggregations").

Every case runs on both paths: ``columnar`` feeds the stages ``pyarrow`` record batches
(a spout of Arrow tables, ``map_batches``), the other path tuples of Python values (the
same spout over lists, ``filter``). Some run on the in-process and the Spark executor.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from trident_multiset import multiset, record

from spouts import MemoryTransactionalSpout
from transactional import Fields, TopologyConfig, run_topology
from transactional.exceptions import TopologyFailedError
from trident import (
    Aggregator,
    Count,
    FirstN,
    Max,
    Min,
    ReducerAggregator,
    Sum,
    TridentTopology,
    state,
)
from trident.operation import TridentTuple

BIG = 2 ** 62


def uid(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def config(executor: str = "in-process", **kw: Any) -> TopologyConfig:
    return TopologyConfig(executor=executor, progress=False, message_timeout_secs=60,
                          retry_backoff_secs=0.02, max_spout_pending=3, **kw)



def source(t: TridentTopology, parts: dict[int, list[tuple]], fields: Fields, take: int, columnar: bool,
           keep: Any = None) -> Any:
    """A stream of ``parts`` (one spout task per partition), as record batches or as tuples;
    ``keep(n)`` filters on the first field (a batch can come out empty)."""
    if columnar:
        data = {p: pa.table({f: [r[i] for r in rows] for i, f in enumerate(fields)}) for p, rows in parts.items()}
    else:
        data = {p: list(rows) for p, rows in parts.items()}
    s = t.new_stream("src", MemoryTransactionalSpout(data, fields, take)).parallelism_hint(len(parts))
    if keep is None:
        return s
    if columnar:
        first = fields[0]
        return s.map_batches(lambda b: b.filter(pa.array([bool(keep(v)) for v in b.column(first).to_pylist()],
                                                         pa.bool_())), fields)
    return s.filter(Fields(fields[0]), lambda tt: keep(tt[0]))


# -- item: a global aggregate is one tuple per batch ------------------------------------------

class Distinct(Aggregator):
    """A general aggregator: the number of distinct values."""

    def init(self, batch_id, collector):
        return set()

    def aggregate(self, st, tuple, collector):
        st.add(tuple[0])

    def complete(self, st, collector):
        collector.emit((len(st),))


class Total(ReducerAggregator):
    def init(self):
        return 0

    def reduce(self, curr, tuple):
        return curr + tuple[0]


@pytest.mark.parametrize("columnar", [False, True])
def test_a_global_aggregate_is_one_tuple_per_batch_whatever_its_parallelism(executor: str, columnar: bool) -> None:
    """Batches 1..5 and 6..10, the second filtered out whole: every global aggregation
    with 3 tasks gives one tuple per batch, the aggregator's value of no tuples for the
    empty one (Storm: one task aggregates a batch)."""
    t = TridentTopology(uid("global"))
    s = source(t, {0: [(n,) for n in range(1, 11)]}, Fields("n"), 5, columnar, keep=lambda n: n <= 5).shuffle()
    record(s.aggregate(Fields("n"), Sum(), Fields("sum")).parallelism_hint(3), "sum")
    record(s.aggregate(Count(), Fields("count")).parallelism_hint(3), "count")
    record(s.aggregate(Fields("n"), Max(), Fields("max")).parallelism_hint(3), "max")
    record(s.aggregate(Fields("n"), Total(), Fields("total")).parallelism_hint(3), "total")
    record(s.aggregate(Fields("n"), Distinct(), Fields("distinct")).parallelism_hint(3), "distinct")
    record(s.chained_agg().aggregate(Fields("n"), Sum(), Fields("s")).aggregate(Count(), Fields("c"))
           .chain_end().parallelism_hint(3), "chained")
    r = run_topology(t.build(), config(executor))
    assert r.batches_committed == 2 and not r.failures
    assert multiset(r, "sum") == {(15,): 1, (0,): 1}
    assert multiset(r, "count") == {(5,): 1, (0,): 1}
    assert multiset(r, "max") == {(5,): 1, (None,): 1}
    assert multiset(r, "total") == {(15,): 1, (0,): 1}
    assert multiset(r, "distinct") == {(5,): 1, (0,): 1}
    assert multiset(r, "chained") == {(15, 5): 1, (0, 0): 1}


def test_partition_aggregates_stay_one_tuple_per_task() -> None:
    """Per-task aggregation is unchanged: each of the 3 tasks gives its own count."""
    t = TridentTopology(uid("partition"))
    s = source(t, {0: [(n,) for n in range(1, 7)]}, Fields("n"), 6, False).shuffle().parallelism_hint(3)
    record(s.partition_aggregate(Count(), Fields("count")), "count")
    r = run_topology(t.build(), config())
    assert multiset(r, "count") == {(2,): 3}


# -- item: FirstN keeps the least values, reverse=True the greatest ----------------------------

class _List:
    def __init__(self) -> None:
        self.out: list[tuple] = []

    def emit(self, values):
        self.out.append(tuple(values))


def first_n(agg: FirstN, rows: list[tuple], fields: Fields) -> list[tuple]:
    tt, c = TridentTuple.of(fields), _List()
    st = agg.init(None, c)
    for r in rows:
        agg.aggregate(st, tt(r), c)
    agg.complete(st, c)
    return c.out


def test_first_n_keeps_the_least_in_order_and_reverse_the_greatest() -> None:
    """Storm's FirstNSortedAgg: a priority queue on the sort field, emptied from its head:
    the n least first (reverse: the n greatest first); of equal values the earlier tuple
    is kept. Any comparable values, not only numbers."""
    f = Fields("k", "n")
    rows = [("a", 5), ("b", 1), ("c", 9), ("d", 1), ("e", 7), ("f", 9), ("g", 3)]
    assert first_n(FirstN(3, "n"), rows, f) == [("b", 1), ("d", 1), ("g", 3)]
    assert first_n(FirstN(3, "n", reverse=True), rows, f) == [("c", 9), ("f", 9), ("e", 7)]
    assert first_n(FirstN(1, "n"), rows, f) == [("b", 1)]
    assert first_n(FirstN(9, "n", reverse=True), rows, f) == [("c", 9), ("f", 9), ("e", 7), ("a", 5), ("g", 3),
                                                                 ("b", 1), ("d", 1)]
    assert first_n(FirstN(2, "k", reverse=True), rows, f) == [("g", 3), ("f", 9)]
    assert first_n(FirstN(2, "k"), rows, f) == [("a", 5), ("b", 1)]
    assert first_n(FirstN(2), rows, f) == [("a", 5), ("b", 1)]


@pytest.mark.parametrize("columnar", [False, True])
def test_first_n_in_a_topology_keeps_the_least_and_reverse_the_greatest(executor: str, columnar: bool) -> None:
    t = TridentTopology(uid("firstn"))
    rows = [(n, f"w{n}") for n in (4, 9, 1, 7, 3, 10, 2, 8, 6, 5)]
    s = source(t, {0: rows[:5], 1: rows[5:]}, Fields("n", "w"), 5, columnar)
    record(s.apply_assembly(FirstN(3, "n")), "least")
    record(s.apply_assembly(FirstN(2, "n", reverse=True)), "greatest")
    record(s.global_().partition_aggregate(Fields("n", "w"), FirstN(1, "w", reverse=True), Fields("n2", "w2")),
           "by_name")
    r = run_topology(t.build(), config(executor))
    assert r.batches_committed == 1 and not r.failures
    assert multiset(r, "least") == {(1, "w1"): 1, (2, "w2"): 1, (3, "w3"): 1}
    assert multiset(r, "greatest") == {(10, "w10"): 1, (9, "w9"): 1}
    assert multiset(r, "by_name") == {(9, "w9"): 1}


# -- item: columnar arithmetic is exact or stops -----------------------------------------------

def overflow_message(agg: str, field: str, stage: str, what: str, value: int, type: str = "int64") -> str:
    return (f"AggregateOverflowError: {agg}() of field {field!r} in stage {stage!r} (txid 1): {what} is "
            f"{value}, beyond {type}, the type Count and Sum add in on the columnar and the per-tuple path "
            "alike; the batch stops rather than commit a wrapped number. Sum smaller numbers, cast the field "
            "to float64 or a decimal first (e.g. with each_batch), or use a CombinerAggregator of your own, "
            "which adds Python ints without bound")


@pytest.mark.parametrize("columnar", [False, True])
def test_a_sum_beyond_int64_stops_the_run_naming_stage_and_field(executor: str, columnar: bool) -> None:
    """3 * 2**62 wraps to -2**62 in int64: the batch stops at its first attempt, naming the
    stage and the field, instead (the per-tuple path too: its partial crosses as Arrow)."""
    for how in ("aggregate", "grouped"):
        t = TridentTopology(uid("overflow"))
        s = source(t, {0: [(BIG, "a")] * 3}, Fields("v", "k"), 3, columnar).name("numbers")
        if how == "aggregate":
            record(s.aggregate(Fields("v"), Sum(), Fields("sum")), "out")
            what = "its partial sum"
        else:
            s.group_by(Fields("k")).persistent_aggregate(state.transactional("sums"), Fields("v"), Sum(),
                                                         Fields("sum"))
            what = "its partial sum for group 'a'"
        with pytest.raises(TopologyFailedError) as e:
            run_topology(t.build(), config(executor))
        assert e.value.txid == 1 and e.value.component == "numbers"
        assert str(e.value).startswith("stopped: txid 1 (attempt 1), component 'numbers', task 0: "
                                       + overflow_message("Sum", "v", "numbers", what, 3 * BIG))


@pytest.mark.parametrize("columnar", [False, True])
def test_partials_that_fit_but_add_up_beyond_int64(columnar: bool) -> None:
    """Two spout tasks' partials fit in int64, their total does not: a transactional or
    opaque map stores the exact total (the commit phase adds Python ints); a counters map
    (64-bit integers, as Redis's) and a global aggregate (its result travels as int64)
    stop, naming their stage."""
    half = BIG + BIG // 2                        # 1.5 * 2**62: two make 3 * 2**62
    parts = {0: [(half, "a")], 1: [(half, "a")]}
    t = TridentTopology(uid("partials"))
    s = source(t, parts, Fields("v", "k"), 1, columnar)
    s.group_by(Fields("k")).persistent_aggregate(state.transactional("tx"), Fields("v"), Sum(), Fields("sum"))
    s.persistent_aggregate(state.opaque("global"), Fields("v"), Sum(), Fields("sum"))
    r = run_topology(t.build(), config())
    assert r.batches_committed == 1 and not r.failures
    assert r.map_state("tx").get("a") == 2 * half == 3 * BIG
    assert r.map_state("global").get("$GLOBAL") == 3 * BIG

    t = TridentTopology(uid("partials"))
    s = source(t, parts, Fields("v", "k"), 1, columnar)
    s.group_by(Fields("k")).persistent_aggregate(state.counters("counters"), Fields("v"), Sum(), Fields("sum"))
    with pytest.raises(TopologyFailedError) as e:
        run_topology(t.build(), config())
    assert e.value.component == "persistent_aggregate(counters)"
    assert COUNTERS_OVERFLOW.format(stage="persistent_aggregate(counters)", value=3 * BIG) in str(e.value)

    t = TridentTopology(uid("partials"))
    s = source(t, parts, Fields("v", "k"), 1, columnar)
    record(s.aggregate(Fields("v"), Sum(), Fields("sum")).name("total"), "out")
    with pytest.raises(TopologyFailedError) as e:
        run_topology(t.build(), config())
    assert e.value.component == "total"
    assert overflow_message("Sum", "sum", "total", "the sum of its partials", 3 * BIG) in str(e.value)


COUNTERS_OVERFLOW = (
    "AggregateOverflowError: Sum() of field 'sum' in stage '{stage}' (txid 1): its total for group 'a' is "
    "{value}, beyond int64, what counters map 'counters' holds; the batch stops rather than commit a wrapped "
    "number. Store it in a transactional or opaque map (trident.state.transactional('counters')), which holds "
    "Python ints without bound, or sum smaller numbers")


@pytest.mark.parametrize("columnar", [False, True])
def test_sums_that_fit_are_exact_even_when_arrow_wraps_on_the_way(columnar: bool) -> None:
    """Arrow adds int64 modulo 2**64: totals in range are exact whatever the order, and do
    not stop the run, as near the bounds as they come."""
    rows = [(BIG, "a"), (BIG, "a"), (-BIG, "a"), (BIG, "a"), (-BIG, "a"),          # a: 2**62
            (-BIG, "b"), (-BIG, "b"), (-BIG, "b"), (BIG, "b"),                       # b: -2**63
            (2 ** 63 - 1, "c"), (1, "c"), (-1, "c")]                                   # c: 2**63 - 1
    t = TridentTopology(uid("fits"))
    s = source(t, {0: rows}, Fields("v", "k"), len(rows), columnar)
    record(s.group_by(Fields("k")).aggregate(Fields("v"), Sum(), Fields("sum")), "grouped")
    record(s.aggregate(Fields("v"), Sum(), Fields("sum")), "global")
    r = run_topology(t.build(), config())
    assert not r.failures
    assert multiset(r, "grouped") == {("a", BIG): 1, ("b", -2 ** 63): 1, ("c", 2 ** 63 - 1): 1}
    assert multiset(r, "global") == {(BIG - 2 ** 63 + 2 ** 63 - 1,): 1}


@pytest.mark.parametrize("columnar", [False, True])
def test_every_aggregator_gives_the_same_results_on_both_paths(executor: str, columnar: bool) -> None:
    """Count, Sum, Min, Max, FirstN; global, grouped, per task and persistent; values near
    the int64 bounds; two spout tasks and two batches: the results are the Python ones."""
    rows = [((2 ** 61 + i) * (1 if i < 6 else -1), "abc"[i % 3]) for i in range(12)]
    parts = {0: rows[:6], 1: rows[6:]}             # a batch's partials: about +-1.5 * 2**62, its total small
    t = TridentTopology(uid("same"))
    s = source(t, parts, Fields("v", "k"), 3, columnar)
    g = s.group_by(Fields("k"))
    for name, agg in (("count", Count()), ("sum", Sum()), ("min", Min()), ("max", Max())):
        in_f = Fields() if name == "count" else Fields("v")
        record(s.aggregate(in_f, agg, Fields(name)), f"g_{name}")
        record(g.aggregate(in_f, agg, Fields(name)), f"k_{name}")
        g.persistent_aggregate(state.transactional(f"p_{name}"), in_f, agg, Fields(name))
    record(s.apply_assembly(FirstN(2, "v")), "first")
    r = run_topology(t.build(), config(executor))
    assert r.batches_committed == 2 and not r.failures
    batches = [parts[0][:3] + parts[1][:3], parts[0][3:] + parts[1][3:]]
    py = {"count": len, "sum": lambda vs: sum(vs), "min": min, "max": max}
    for name, f in py.items():
        assert multiset(r, f"g_{name}") == Counter((f([v for v, _ in b]),) for b in batches)
        assert multiset(r, f"k_{name}") == Counter((k, f([v for v, kk in b if kk == k])) for b in batches
                                                   for k in sorted({kk for _, kk in b}))
        stored = {k: f([v for v, kk in rows if kk == k]) for k in "abc"}
        assert dict(zip("abc", r.map_state(f"p_{name}").multi_get(list("abc")), strict=True)) == stored
    assert multiset(r, "first") == Counter(tuple(x) for b in batches for x in sorted(b)[:2])


def test_a_decimal_sum_beyond_its_precision_stops() -> None:
    """Arrow's decimal sums wrap as its integers do: checked the same way."""
    import decimal

    big = decimal.Decimal(9 * 10 ** 37)
    t = TridentTopology(uid("decimal"))
    data = {0: pa.table({"v": pa.array([big] * 3, pa.decimal128(38, 0)), "k": ["a"] * 3})}
    s = t.new_stream("src", MemoryTransactionalSpout(data, Fields("v", "k"), 3))
    record(s.aggregate(Fields("v"), Sum(), Fields("sum")), "out")
    with pytest.raises(TopologyFailedError) as e:
        run_topology(t.build(), config())
    assert overflow_message("Sum", "v", "aggregate(Sum)", "its partial sum", decimal.Decimal(27 * 10 ** 37),
                            "decimal128(38, 0)") in str(e.value)
    t = TridentTopology(uid("decimal"))                 # a sum in range, near it: exact, no stop
    data = {0: pa.table({"v": pa.array([big, -big, big], pa.decimal128(38, 0))})}
    s = t.new_stream("src", MemoryTransactionalSpout(data, Fields("v"), 3))
    # stored as text: a map stores what JSON holds (a Decimal is UnstorableValueError)
    record(s.aggregate(Fields("v"), Sum(), Fields("sum")).map(lambda tt: (repr(tt[0]),)), "out")
    assert multiset(run_topology(t.build(), config()), "out") == {(repr(big),): 1}




@pytest.mark.parametrize("columnar", [False, True])
def test_the_fold_into_maps_in_redis_is_exact_or_stops(redis_url: str, columnar: bool) -> None:
    """In Redis: a transactional map stores totals beyond int64 exactly; a counters map
    (INCRBY) stops a batch whose total it cannot add, naming the stage and field, and a
    stored number the addition would overflow, naming the key -- nothing is written."""
    half = BIG + BIG // 2
    parts = {0: [(half, "a")] * 2, 1: [(half, "a")] * 2}          # two batches of 3 * 2**62 for "a"
    t = TridentTopology(uid("redis"))
    s = source(t, parts, Fields("v", "k"), 1, columnar)
    s.group_by(Fields("k")).persistent_aggregate(state.transactional("tx"), Fields("v"), Sum(), Fields("sum"))
    r = run_topology(t.build(), config(state=redis_url))
    assert r.batches_committed == 2 and r.map_state("tx").get("a") == 6 * BIG

    t = TridentTopology(uid("redis"))
    s = source(t, parts, Fields("v", "k"), 1, columnar)
    s.group_by(Fields("k")).persistent_aggregate(state.counters("counters"), Fields("v"), Sum(), Fields("sum"))
    with pytest.raises(TopologyFailedError) as e:
        run_topology(t.build(), config(state=redis_url))
    assert COUNTERS_OVERFLOW.format(stage="persistent_aggregate(counters)", value=3 * BIG) in str(e.value)

    tid = uid("redis")                          # each batch fits; the stored total would not
    for run in range(2):
        t = TridentTopology(tid)
        s = source(t, {0: [(half, "a")] * (run + 1)}, Fields("v", "k"), 1, columnar)
        s.group_by(Fields("k")).persistent_aggregate(state.counters("counters"), Fields("v"), Sum(),
                                                     Fields("sum"))
        if run == 0:
            assert run_topology(t.build(), config(state=redis_url)).map_state("counters").get("a") == half
            continue
        with pytest.raises(TopologyFailedError) as e:
            run_topology(t.build(), config(state=redis_url))
        assert (f"StateCorruptError: Redis key '{tid}:counters:a' at {redis_url} holds a number that the "
                "addition would overflow") in str(e.value)


def test_arrow_sums_are_checked_for_every_integer_type() -> None:
    """The kernel under Count/Sum: exact in range whatever Arrow wraps on the way, and
    ``SumOverflow`` (key, exact value, type) beyond, for signed, unsigned, small and
    decimal integers; booleans and floats pass."""
    from trident.runtime.arrow import SumOverflow, arrow_group_agg

    def agg(values: Any, type: Any, keys: list | None = None) -> list:
        cols = {"v": pa.array(values, type)}
        if keys is not None:
            cols = {"k": pa.array(keys), "j": pa.array([1] * len(keys)), **cols}
        b = pa.RecordBatch.from_pydict(cols)
        return arrow_group_agg(b, ["k", "j"] if keys is not None else [], "v", "sum", "s").to_pylist()

    assert agg([2 ** 31 - 1] * 4, pa.int32()) == [{"s": 4 * (2 ** 31 - 1)}]
    with pytest.raises(SumOverflow) as e:
        agg([2 ** 63, 2 ** 63], pa.uint64())
    assert (e.value.key, e.value.value, e.value.type) == ((), 2 ** 64, "uint64")
    assert agg([2 ** 63, 2 ** 63 - 1], pa.uint64()) == [{"s": 2 ** 64 - 1}]
    assert agg([-(2 ** 63), -1, 1], pa.int64()) == [{"s": -(2 ** 63)}]
    with pytest.raises(SumOverflow) as e:
        agg([BIG, BIG, 5, BIG], pa.int64(), ["x", "y", "x", "x"])
    assert (e.value.key, e.value.value, e.value.type) == (("x", 1), 2 * BIG + 5, "int64")
    assert agg([BIG, BIG, -BIG, BIG], pa.int64(), ["x", "y", "x", "x"]) == [
        {"k": "x", "j": 1, "s": BIG}, {"k": "y", "j": 1, "s": BIG}]
    assert agg([True] * 3, pa.bool_()) == [{"s": 3}]
    assert agg([1e308, 1e308], pa.float64()) == [{"s": float("inf")}]
