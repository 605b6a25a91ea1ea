"""A spout's narrow stages as fewer Spark tasks (``transactional.engine.task_groups``): which
logical tasks a Spark task runs, how many Spark tasks a job gets, and exact counts on a
real local Spark when every batch's tasks run grouped in one Spark task."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from spouts import MemoryTransactionalSpout
from transactional import (
    BaseBatchBolt,
    BaseTransactionalBolt,
    Committer,
    Fields,
    TopologyConfig,
    TransactionalTopologyBuilder,
    run_topology,
)
from transactional.engine import spark as spark_executor
from transactional.engine.routing import KEY_STRIDE
from transactional.engine.task_groups import grouped_source, grouped_stage, spark_tasks, tasks_of
from trident import BaseFunction, Count, TridentTopology, state

SENTENCES = ["the cow jumped over the moon", "the man went to the store and bought some candy",
             "four score and seven years ago", "how many apples can you eat", "to be or not to be the person"]
ROWS = SENTENCES * 6
WORDS = Counter(w for s in ROWS for w in s.split())


def test_a_job_asks_for_its_share_of_the_cores_and_never_more_tasks_than_the_stage_has() -> None:
    assert [spark_tasks(2, 2, n) for n in (1, 2, 3, 6)] == [2, 1, 1, 1]
    assert [spark_tasks(3, 8, n) for n in (1, 2, 3, 4)] == [3, 3, 3, 2]
    assert spark_tasks(1, 2, 1) == 1 and spark_tasks(4, 1, 0) == 1


@pytest.mark.parametrize("parallelism,parts", [(1, 1), (2, 1), (3, 2), (5, 2), (7, 3), (4, 4)])
def test_each_logical_task_runs_in_exactly_one_spark_task_in_order(parallelism: int, parts: int) -> None:
    ran = [t for p in range(parts) for t in tasks_of(p, parallelism, parts)]
    assert ran == list(range(parallelism))


def test_a_grouped_stage_gives_each_task_its_own_records_in_order_and_runs_tasks_without_input() -> None:
    calls: list[tuple[int, list[Any]]] = []

    def fn(task: int, records: Iterable[Any]) -> Iterator[Any]:
        got = list(records)
        calls.append((task, got))
        yield (task, len(got))

    records = [(1 * KEY_STRIDE + 3, "a"), (1 * KEY_STRIDE + 2, "b"), (1 * KEY_STRIDE + 3, "c")]
    out = list(grouped_stage(fn, 5, 2)(1, records))          # Spark task 1 of 2 runs tasks 2, 3, 4
    assert calls == [(2, [(KEY_STRIDE + 2, "b")]), (3, [(KEY_STRIDE + 3, "a"), (KEY_STRIDE + 3, "c")]), (4, [])]
    assert out == [(2, 1), (3, 2), (4, 0)]
    assert list(grouped_source(lambda t, _: iter([t * 10]), 5, 2)(0, ())) == [0, 10]


class Split(BaseFunction):
    def execute(self, tuple, collector):
        for w in tuple[0].split():
            collector.emit((w,))


class SplitCount(BaseBatchBolt):
    def prepare(self, conf, context, collector, id):
        self.collector, self.id, self.counts = collector, id, Counter()

    def execute(self, tuple):
        self.counts.update(tuple[1].split())

    def finish_batch(self):
        for w, n in self.counts.items():
            self.collector.emit((self.id, w, n))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "word", "count"))


class CommitCounts(BaseTransactionalBolt, Committer):
    def prepare(self, conf, context, collector, attempt):
        self.counts: dict[str, int] = {}
        self.map = context.map_state("counts")

    def execute(self, tuple):
        self.counts[tuple[1]] = self.counts.get(tuple[1], 0) + tuple[2]

    def finish_batch(self):
        self.map.multi_combine(list(self.counts), list(self.counts.values()), "sum")


@pytest.fixture
def one_spark_task(monkeypatch: pytest.MonkeyPatch, spark_context: Any) -> list[tuple[int, int, int]]:
    """Every job's spout stage runs as one Spark task; the (parallelism, cores, in flight)
    each job asked with."""
    asked: list[tuple[int, int, int]] = []

    def one(parallelism: int, cores: int, in_flight: int) -> int:
        asked.append((parallelism, cores, in_flight))
        return 1
    monkeypatch.setattr(spark_executor, "spark_tasks", one)
    return asked


def config() -> TopologyConfig:
    return TopologyConfig(executor="spark", progress=False, max_spout_pending=3, message_timeout_secs=60)


def test_trident_counts_exactly_when_three_emitter_tasks_share_one_spark_task(
        one_spark_task: list[tuple[int, int, int]]) -> None:
    t = TridentTopology(f"grouped-{uuid.uuid4().hex[:8]}")
    spout = MemoryTransactionalSpout({p: [(s,) for s in ROWS[p::3]] for p in range(3)}, Fields("sentence"), 2)
    (t.new_stream("sentences", spout).parallelism_hint(3).each(Fields("sentence"), Split(), Fields("word"))
     .group_by(Fields("word")).persistent_aggregate(state.counters("counts"), Count(), Fields("count")))
    r = run_topology(t.build(), config())
    assert r.batches_committed == 5 and r.tuples == 30 and not r.failures
    assert dict(zip(WORDS, r.map_state("counts").multi_get(list(WORDS)), strict=True)) == WORDS
    assert len(one_spark_task) == 5 and {a[0] for a in one_spark_task} == {3}


def test_bolts_local_to_a_grouped_spout_run_every_task_once_a_batch(one_spark_task: list[tuple[int, int, int]]) -> None:
    spout = MemoryTransactionalSpout({p: [(s,) for s in ROWS[p::3]] for p in range(3)}, Fields("sentence"), 2)
    b = TransactionalTopologyBuilder(f"grouped-bolts-{uuid.uuid4().hex[:8]}", "spout", spout, 3)
    b.set_bolt("split", SplitCount(), 3).local_or_shuffle_grouping("spout")
    b.set_bolt("commit", CommitCounts(), 2).fields_grouping("split", Fields("word"))
    r = run_topology(b, config())
    assert r.batches_committed == 5 and not r.failures
    assert r.executed["split"] == 30
    assert dict(zip(WORDS, r.map_state("counts").multi_get(list(WORDS)), strict=True)) == WORDS
    assert len(one_spark_task) == 5
