"""Partial aggregates merged across tasks before they go on (``transactional.engine.combine``,
``trident.runtime.combine_partials``): the commit reads one partial per key, the counts
are the same as without the merge, and a Spark task carrying several logical tasks ships
one partial per key and consumer task."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spouts import MemoryTransactionalSpout
from transactional import Fields, TopologyConfig, run_topology
from transactional.engine import combine as engine_combine
from transactional.engine.combine import combine_records
from transactional.engine.task_groups import grouped_stage
from trident import BaseFunction, CombinerAggregator, Count, Sum, TridentTopology, state
from trident.runtime.arrow import from_ipc, to_ipc

SENTENCES = ["the cow jumped over the moon", "the man went to the store", "four score and seven years ago",
             "the moon and the cow", "a man a plan a canal", "seven cows over the store"]
WORDS = Counter(w for s in SENTENCES for w in s.split())
TASKS = 3


class Split(BaseFunction):
    def execute(self, tuple: Any, collector: Any) -> None:
        for w in tuple[0].split():
            collector.emit((w,))


def split_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    words = pc.list_flatten(pc.utf8_split_whitespace(batch.column("sentence")))
    return pa.RecordBatch.from_arrays([words], names=["word"])


class Longest(CombinerAggregator):
    """A user's combiner (no Arrow kernel): the longest word's length, per key."""

    def init(self, tuple: Any) -> int:
        return len(tuple[0])

    def combine(self, a: int, b: int) -> int:
        return max(a, b)

    def zero(self) -> int:
        return 0


def spout() -> MemoryTransactionalSpout:
    # every task's share holds "the": the same key in each task's partials
    return MemoryTransactionalSpout({p: [(s,) for s in SENTENCES[p::TASKS]] for p in range(TASKS)},
                                    Fields("sentence"), 10)


def word_count(how: str) -> TridentTopology:
    t = TridentTopology(f"combine-{uuid.uuid4().hex[:8]}")
    s = t.new_stream("sentences", spout()).parallelism_hint(TASKS)
    if how == "columns":
        words = s.map_batches(split_batch, Fields("word"))
    else:
        words = s.each(Fields("sentence"), Split(), Fields("word"))
    if how == "combiner":
        words.group_by(Fields("word")).persistent_aggregate(state.transactional("counts"), Fields("word"),
                                                             Longest(), Fields("longest"))
    else:
        words.group_by(Fields("word")).persistent_aggregate(state.counters("counts"), Count(), Fields("count"))
    return t


def config(executor: str) -> TopologyConfig:
    return TopologyConfig(executor=executor, progress=False, message_timeout_secs=60, retry_backoff_secs=0.01)


def per_task_keys() -> int:
    """How many partials the commit would read without the merge: each task's distinct words."""
    return sum(len({w for s in SENTENCES[p::TASKS] for w in s.split()}) for p in range(TASKS))


@pytest.mark.parametrize("how", ["rows", "columns", "combiner"])
def test_the_commit_reads_one_partial_per_key_and_the_counts_are_exact(how: str) -> None:
    r = run_topology(word_count(how).build(), config("in-process"))
    assert r.batches_committed == 1 and not r.failures
    assert per_task_keys() == 24 and len(WORDS) == 19          # "the", "a", ... in several tasks' shares
    assert r.executed["persistent_aggregate(counts)"] == len(WORDS)     # not 24: merged before the commit
    got = r.map_state("counts").multi_get(list(WORDS))
    want = [len(w) for w in WORDS] if how == "combiner" else list(WORDS.values())
    assert got == want


def test_without_the_merge_the_commit_reads_each_tasks_partials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_combine, "combine_records", lambda topology, component, records: records)
    r = run_topology(word_count("columns").build(), config("in-process"))
    assert r.executed["persistent_aggregate(counts)"] == per_task_keys() == 24
    assert r.map_state("counts").multi_get(list(WORDS)) == list(WORDS.values())


def partial_records(topology: Any, component: str) -> list[tuple[int, Any]]:
    """What each of the stage's TASKS tasks emits: its words' counts as one Arrow buffer to
    the one commit task (key: the commit's index times the stride)."""
    spec = topology.component(component)
    out = []
    for p in range(TASKS):
        counts = Counter(w for s in SENTENCES[p::TASKS] for w in s.split())
        b = pa.RecordBatch.from_arrays([pa.array(list(counts)), pa.array(list(counts.values()))],
                                       names=["word", "count"])
        stream = next(s for s in spec.streams if s.startswith("arrow-"))
        out.append((1 << 20, (component, stream, p, [("attempt", to_ipc(b))])))
    return out


def shipped(records: list[tuple[int, Any]]) -> Counter[str]:
    rows: Counter[str] = Counter()
    for _, (_, _, _, vals) in records:
        for _, buf in vals:
            t = from_ipc(buf)
            for w, c in zip(t.column("word").to_pylist(), t.column("count").to_pylist(), strict=True):
                rows[w] += c
            rows["<rows>"] += t.num_rows
    return rows


def test_a_spark_task_carrying_several_tasks_ships_one_partial_per_key() -> None:
    topology = word_count("columns").build()
    component = next(c.id for c in topology.components if c.combines)
    records = partial_records(topology, component)
    before = shipped(records)
    assert before["<rows>"] == per_task_keys() == 24

    def task(t: int, _: Any) -> Any:
        return iter([records[t]])
    combined = list(grouped_stage(task, TASKS, 1, lambda rs: combine_records(topology, component, rs))(0, []))
    after = shipped(combined)
    assert len(combined) == 1 and after["<rows>"] == len(WORDS) == 19   # keys x 1 Spark task
    assert after - Counter({"<rows>": after["<rows>"]}) == WORDS
    two = list(grouped_stage(task, TASKS, 2, lambda rs: combine_records(topology, component, rs))(1, []))
    assert len(two) == 1 and shipped(two)["<rows>"] <= len(WORDS)      # tasks 1 and 2 of 3, merged


def test_a_sum_beyond_int64_is_not_merged_and_the_consumer_names_it() -> None:
    t = TridentTopology(f"combine-big-{uuid.uuid4().hex[:8]}")
    big = MemoryTransactionalSpout({p: [("k", 2 ** 62) for _ in range(3)] for p in range(2)}, Fields("k", "v"), 10)
    t.new_stream("big", big).parallelism_hint(2).group_by(Fields("k")).persistent_aggregate(
        state.transactional("sums"), Fields("v"), Sum(), Fields("sum"))
    topology = t.build()
    component = next(c.id for c in topology.components if c.combines)
    b = pa.RecordBatch.from_arrays([pa.array(["k"]), pa.array([2 ** 62], pa.int64())], names=["k", "sum"])
    stream = next(s for s in topology.component(component).streams if s.startswith("arrow-"))
    records = [(1 << 20, (component, stream, p, [("a", to_ipc(b)), ("a", to_ipc(b))])) for p in range(2)]
    assert combine_records(topology, component, records) == records    # 2**64: left to the consumer
