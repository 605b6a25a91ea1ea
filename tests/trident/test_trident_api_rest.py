"""The rest of Storm's Trident API (issue 25): TridentTuple's ITuple methods,
``each`` without input fields, ``peek``, ``GroupedStream.name`` and ``state_query``, the
repartitionings ``local_or_shuffle``, ``batch_global`` and ``identity_partition``,
``min_by``/``max_by``/``min``/``max``, and ``SnapshotGet``. In-process; some on Spark too."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from trident_multiset import multiset, record

from spouts import MemoryTransactionalSpout
from transactional import Fields, TopologyConfig, run_topology
from transactional.exceptions import ConfigError
from trident import BaseFunction, Count, MapGet, TridentTopology, state
from trident.builtin import SnapshotGet
from trident.operation import GroupedMultiReducer, MultiReducer, TridentTuple


def uid(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def config(executor: str = "in-process") -> TopologyConfig:
    return TopologyConfig(executor=executor, progress=False, message_timeout_secs=60,
                          retry_backoff_secs=0.02, max_spout_pending=3)


def test_trident_tuple_of_and_the_ituple_methods() -> None:
    t = TridentTuple.make(Fields("word", "count"), ["cow", 2])
    assert t.get_fields() == Fields("word", "count")
    assert t.get_values() == ["cow", 2]
    assert t.get_value(1) == 2 and t.get_value_by_field("word") == "cow" and t["count"] == 2
    assert t.contains("word") and not t.contains("nope")
    assert t.field_index("count") == 1
    assert t.select(Fields("count", "word")) == [2, "cow"]
    assert t.size() == 2
    assert TridentTuple.of(["a"])((1,)).get_values() == [1]
    with pytest.raises(KeyError, match=r"no field 'nope' in this tuple; fields: \['word', 'count'\]"):
        t.field_index("nope")
    with pytest.raises(ValueError, match=r"1 values \('x',\) for 2 fields \['word', 'count'\]"):
        TridentTuple.make(Fields("word", "count"), ["x"])


class Width(BaseFunction):
    """Emits how many fields it sees and their names."""

    def execute(self, tuple: Any, collector: Any) -> None:
        collector.emit((len(tuple), ",".join(tuple.get_fields())))


def test_each_without_input_fields_reads_the_whole_tuple() -> None:
    t = TridentTopology(uid("each-all"))
    s = t.new_stream("src", MemoryTransactionalSpout([("a", 1), ("b", 2)], Fields("w", "n"), 5))
    record(s.each(Width(), Fields("width", "names")).project(Fields("w", "width", "names")), "out")
    r = run_topology(t.build(), config())
    assert multiset(r, "out") == {("a", 2, "w,n"): 1, ("b", 2, "w,n"): 1}


def test_peek_sees_every_tuple_and_passes_it_on() -> None:
    seen: list[tuple[Any, ...]] = []
    t = TridentTopology(uid("peek"))
    s = t.new_stream("src", MemoryTransactionalSpout(["a", "b", "a"], Fields("w"), 2))
    record(s.project(Fields("w")).peek(lambda tt: seen.append((tt["w"], tt.get_fields()))), "out")
    r = run_topology(t.build(), config())
    assert sorted(seen) == [("a", Fields("w")), ("a", Fields("w")), ("b", Fields("w"))]
    assert multiset(r, "out") == {("a",): 2, ("b",): 1}
    with pytest.raises(ConfigError, match="peek\\(\\) takes a callable"):
        s.peek(3)  # type: ignore[arg-type]


def test_grouped_stream_name_and_state_query(executor: str) -> None:
    t = TridentTopology(uid("grouped"))
    words = t.new_stream("words", MemoryTransactionalSpout(["a", "b", "a"], Fields("w"), 5))
    counts = words.group_by(Fields("w")).persistent_aggregate(state.transactional("c"), Count(), Fields("n"))
    asks = t.new_stream("asks", MemoryTransactionalSpout({0: ["a", "b"], 1: ["b", "a"]}, Fields("q"), 1)).parallelism_hint(2)
    got = asks.project(Fields("q")).group_by(Fields("q")).name("by-q").state_query(counts, Fields("q"), MapGet(), Fields("n"))
    record(got.project(Fields("q", "n")), "got")
    topo = t.build()
    named = [c for c in topo.components if c.id == "by-q"]
    assert len(named) == 1
    query = next(c for c in topo.components if any(s.grouping == "fields" and s.fields == ("q",)
                                                   for s in c.inputs))
    assert query.inputs[0].source == "by-q"
    r = run_topology(topo, config(executor))
    # txid 1 sees nothing committed; txid 2 the counts txid 1 committed (a: 2, b: 1)
    assert multiset(r, "got") == {("a", None): 1, ("b", None): 1, ("b", 1): 1, ("a", 2): 1}


def _groupings(topo: Any) -> set[str]:
    return {s.grouping for c in topo.components for s in c.inputs}


def test_local_or_shuffle_batch_global_and_identity_partition() -> None:
    t = TridentTopology(uid("parts"))
    s = t.new_stream("src", MemoryTransactionalSpout({0: ["a", "b"], 1: ["c"]}, Fields("w"), 5)).parallelism_hint(2)
    a = s.project(Fields("w")).shuffle().each(Fields("w"), Width(), Fields("k", "f")).parallelism_hint(2)
    record(a.local_or_shuffle().project(Fields("w")).name("los"), "los")
    record(a.identity_partition().project(Fields("w")).name("ident").parallelism_hint(2), "ident")
    record(a.batch_global().project(Fields("w")).name("bg").parallelism_hint(2), "bg")
    topo = t.build()
    by_id = {c.id: c for c in topo.components}
    assert by_id["los"].inputs[0].grouping == "local_or_shuffle" and by_id["los"].parallelism == 2
    assert by_id["ident"].inputs[0].grouping == "local_or_shuffle"
    assert by_id["bg"].inputs[0].grouping == "global"
    r = run_topology(topo, config())
    for name in ("los", "ident", "bg"):
        assert multiset(r, name) == {("a",): 1, ("b",): 1, ("c",): 1}
    bad = TridentTopology(uid("bad"))
    b = bad.new_stream("src", MemoryTransactionalSpout(["a"], Fields("w"), 5)).parallelism_hint(2)
    record(b.identity_partition().project(Fields("w")).parallelism_hint(3), "x")
    with pytest.raises(ConfigError, match=r"identity_partition\(\) after a stage of 2 task\(s\) feeds one of 3"):
        bad.build()


def test_min_by_max_by_min_max_per_partition(executor: str) -> None:
    rows = [("a", 3), ("b", 1), ("c", 1), ("d", 5), ("e", 5), ("f", 2)]
    t = TridentTopology(uid("minmax"))
    s = t.new_stream("src", MemoryTransactionalSpout(rows, Fields("w", "n"), 3)).project(Fields("w", "n"))
    record(s.min_by("n"), "min_by")
    record(s.max_by("n"), "max_by")
    by_word = lambda x, y: (x["w"] > y["w"]) - (x["w"] < y["w"])  # noqa: E731
    record(s.min(by_word), "min")
    record(s.max(by_word), "max")
    r = run_topology(t.build(), config(executor))
    # two batches of three: (a 3, b 1, c 1) and (d 5, e 5, f 2); of equals the first stays
    assert multiset(r, "min_by") == {("b", 1): 1, ("f", 2): 1}
    assert multiset(r, "max_by") == {("a", 3): 1, ("d", 5): 1}
    assert multiset(r, "min") == {("a", 3): 1, ("d", 5): 1}
    assert multiset(r, "max") == {("c", 1): 1, ("f", 2): 1}
    with pytest.raises(ConfigError, match=r"min_by reads field\(s\) \['x'\]"):
        s.min_by("x")


def test_snapshot_get_reads_a_global_persistent_aggregate() -> None:
    t = TridentTopology(uid("snap"))
    s = t.new_stream("src", MemoryTransactionalSpout(["a", "b", "c", "d", "e"], Fields("w"), 2))
    total = s.persistent_aggregate(state.transactional("total"), Count(), Fields("count"))
    asks = t.new_stream("asks", MemoryTransactionalSpout(["q1", "q2", "q3"], Fields("q"), 1))
    record(asks.state_query(total, Fields(), SnapshotGet(), Fields("total")).project(Fields("q", "total")), "got")
    r = run_topology(t.build(), config())
    assert r.map_state("total").multi_get(["$GLOBAL"]) == [5]
    # txid 1, 2, 3 see the counts committed by the txids before them: none, 2, 4
    assert multiset(r, "got") == {("q1", None): 1, ("q2", 2): 1, ("q3", 4): 1}


def _join_topology(join_type: Any) -> tuple[TridentTopology, Any]:
    t = TridentTopology(uid("join"))
    left = t.new_stream("left", MemoryTransactionalSpout([("a", 1), ("b", 2), ("b", 3)], Fields("k", "x"), 5))
    right = t.new_stream("right", MemoryTransactionalSpout([("b", 10), ("c", 20)], Fields("k", "y"), 5))
    left, right = left.project(Fields("k", "x")), right.project(Fields("k", "y"))
    return t, t.join(left, Fields("k"), right, Fields("k"), Fields("k", "x", "y"), join_type=join_type)


@pytest.mark.parametrize(("join_type", "expected"), [
    ("inner", {("b", 2, 10): 1, ("b", 3, 10): 1}),
    ("outer", {("a", 1, None): 1, ("b", 2, 10): 1, ("b", 3, 10): 1, ("c", None, 20): 1}),
    (["inner", "outer"], {("a", 1, None): 1, ("b", 2, 10): 1, ("b", 3, 10): 1}),
    (["outer", "inner"], {("b", 2, 10): 1, ("b", 3, 10): 1, ("c", None, 20): 1}),
])
def test_outer_and_mixed_joins(join_type: Any, expected: dict[Any, int]) -> None:
    t, joined = _join_topology(join_type)
    record(joined, "out")
    assert multiset(run_topology(t.build(), config()), "out") == expected


def test_outer_join_on_spark(executor: str) -> None:
    t, joined = _join_topology("outer")
    record(joined, "out")
    assert multiset(run_topology(t.build(), config(executor)), "out") == {
        ("a", 1, None): 1, ("b", 2, 10): 1, ("b", 3, 10): 1, ("c", None, 20): 1}


def test_join_type_is_checked() -> None:
    with pytest.raises(ConfigError, match=r"join\(\): join_type is \"inner\", \"outer\" or one of those per "
                                          r"stream \(2 streams\); got \['outer'\]"):
        _join_topology(["outer"])


class SumBoth(MultiReducer):
    """The sum of stream 0's x minus the sum of stream 1's y, and the tuples seen."""

    def init(self, collector: Any) -> list[int]:
        return [0, 0]

    def execute(self, state: list[int], stream_index: int, tuple: Any, collector: Any) -> None:
        state[0] += tuple[0] if stream_index == 0 else -tuple[0]
        state[1] += 1

    def complete(self, state: list[int], collector: Any) -> None:
        collector.emit((state[0], state[1]))


class PerKey(GroupedMultiReducer):
    """Per key: the values of each stream, as sorted lists."""

    def init(self, collector: Any, group: Any) -> list[list[int]]:
        return [[], []]

    def execute(self, state: list[list[int]], stream_index: int, group: Any, tuple: Any, collector: Any) -> None:
        state[stream_index].append(tuple[0])

    def complete(self, state: list[list[int]], group: Any, collector: Any) -> None:
        collector.emit((tuple(sorted(state[0])), tuple(sorted(state[1]))))


def test_multi_reduce_over_streams_and_grouped_streams(executor: str) -> None:
    t = TridentTopology(uid("multi"))
    left = t.new_stream("left", MemoryTransactionalSpout([("a", 1), ("b", 2), ("b", 3)], Fields("k", "x"), 5))
    right = t.new_stream("right", MemoryTransactionalSpout([("b", 10), ("c", 20)], Fields("k", "y"), 5))
    left, right = left.project(Fields("k", "x")), right.project(Fields("k", "y"))
    record(t.multi_reduce([Fields("x"), Fields("y")], [left, right], SumBoth(), Fields("diff", "n")), "plain")
    record(t.multi_reduce([Fields("x"), Fields("y")], [left.group_by(Fields("k")), right.group_by(Fields("k"))],
                          PerKey(), Fields("xs", "ys")), "grouped")
    r = run_topology(t.build(), config(executor))
    assert multiset(r, "plain") == {(6 - 30, 5): 1}
    assert multiset(r, "grouped") == {("a", (1,), ()): 1, ("b", (2, 3), (10,)): 1, ("c", (), (20,)): 1}
    with pytest.raises(ConfigError, match=r"multi_reduce\(\) over streams takes a trident.MultiReducer; got"):
        t.multi_reduce([Fields("x"), Fields("y")], [left, right], PerKey(), Fields("z"))


def test_the_columnar_path_feeds_peek_min_by_joins_and_multi_reduce() -> None:
    import pyarrow as pa

    seen: list[Any] = []
    t = TridentTopology(uid("columnar"))
    left = t.new_stream("left", MemoryTransactionalSpout(
        {0: pa.table({"k": ["a", "b", "b"], "x": [1, 2, 3]})}, Fields("k", "x"), 5)).map_batches(lambda b: b,
                                                                                                 Fields("k", "x"))
    right = t.new_stream("right", MemoryTransactionalSpout(
        {0: pa.table({"k": ["b", "c"], "y": [10, 20]})}, Fields("k", "y"), 5)).map_batches(lambda b: b,
                                                                                          Fields("k", "y"))
    record(left.peek(lambda tt: seen.append(tt.get_values())).min_by("x"), "min_by")
    record(t.join(left, Fields("k"), right, Fields("k"), Fields("k", "x", "y"), join_type="outer"), "outer")
    record(t.multi_reduce([Fields("x"), Fields("y")], [left, right], SumBoth(), Fields("diff", "n")), "plain")
    r = run_topology(t.build(), config())
    assert sorted(seen) == [["a", 1], ["b", 2], ["b", 3]]
    assert multiset(r, "min_by") == {("a", 1): 1}
    assert multiset(r, "outer") == {("a", 1, None): 1, ("b", 2, 10): 1, ("b", 3, 10): 1, ("c", None, 20): 1}
    assert multiset(r, "plain") == {(6 - 30, 5): 1}


def test_tuple_collection_get_lists_every_key_of_a_map() -> None:
    _tuple_collection_get(config())


def test_tuple_collection_get_on_redis(redis_url: str) -> None:
    cfg = config()
    _tuple_collection_get(TopologyConfig(executor=cfg.executor, progress=False, message_timeout_secs=60,
                                         retry_backoff_secs=0.02, max_spout_pending=3, state=redis_url))


def _tuple_collection_get(cfg: TopologyConfig) -> None:
    from trident.builtin import TupleCollectionGet

    t = TridentTopology(uid("collection"))
    words = t.new_stream("words", MemoryTransactionalSpout(["a", "b", "a", "c"], Fields("w"), 4))
    counts = words.group_by(Fields("w")).persistent_aggregate(state.transactional("c"), Count(), Fields("n"))
    asks = t.new_stream("asks", MemoryTransactionalSpout(["q1", "q2"], Fields("q"), 1))
    got = asks.broadcast().state_query(counts, Fields(), TupleCollectionGet(), Fields("key", "value"))
    record(got.project(Fields("q", "key", "value")), "got")
    r = run_topology(t.build(), cfg)
    # txid 1 sees an empty map; txid 2 what txid 1 committed
    assert _entries(r, "got", cfg.state.startswith("memory:")) == {("q2", "a", 2): 1, ("q2", "b", 1): 1, ("q2", "c", 1): 1}


def _entries(result: Any, name: str, memory: bool) -> dict[Any, int]:
    """The multiset recorded in map ``name`` (Redis: read back by the keys SCAN lists)."""
    if memory:
        return multiset(result, name)
    m = result.map_state(name)
    keys = list(m.backing.scan())
    return dict(zip(keys, m.multi_get(keys), strict=True))


def test_debug_prints_each_tuple_and_keeps_it(capsys: pytest.CaptureFixture[str]) -> None:
    from trident.builtin import Debug

    t = TridentTopology(uid("debug"))
    s = t.new_stream("src", MemoryTransactionalSpout(["a", "b"], Fields("w"), 5)).project(Fields("w"))
    record(s.each(Debug("seen")), "out")
    r = run_topology(t.build(), config())
    assert multiset(r, "out") == {("a",): 1, ("b",): 1}
    lines = sorted(line for line in capsys.readouterr().out.splitlines() if line.startswith("seen: "))
    assert lines == ["seen: TridentTuple(w='a')", "seen: TridentTuple(w='b')"]
