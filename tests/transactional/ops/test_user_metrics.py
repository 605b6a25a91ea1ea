"""Metrics of the user's own (issue 39 item 4): ``context.register_counter/gauge/histogram/
meter`` in bolts, Trident operations and states, aggregated per committed txid across tasks
and executors (a replayed batch counts once), in ``RunResult.metrics`` and on ``/metrics``."""

from __future__ import annotations

import urllib.request
import uuid

import pytest

from spouts import MemoryTransactionalSpout
from transactional import (
    BaseBatchBolt,
    BaseTransactionalBolt,
    Committer,
    Fields,
    TopologyConfig,
    TransactionalTopologyBuilder,
    Values,
    run_topology,
)
from transactional.engine.driver import Engine
from transactional.metrics import Histogram, MetricsContext, TaskMetrics, collecting, merge_component, quantile
from transactional.ops.webui import attach
from transactional.testing import FaultPlan, with_faults
from trident import BaseFunction, Count, TridentTopology, state
from trident.state import BaseStateUpdater, State, StateFactory

WORDS = {p: [(f"w{(p * 7 + i) % 5}",) for i in range(12)] for p in range(3)}   # 36 words, 3 partitions
TOTAL = sum(len(v) for v in WORDS.values())


# -- the registry ---------------------------------------------------------------------------------

def test_a_task_registry_counts_merges_and_refuses_a_name_of_another_kind() -> None:
    ctx = MetricsContext()
    with collecting("split", 0) as reg:
        words = ctx.register_counter("words")
        words.inc(3)
        ctx.register_counter("words").inc()           # the same metric
        ctx.register_histogram("length").update(5)
        ctx.register_gauge("queue", lambda: 7.0)
        with pytest.raises(ValueError, match="'split': metric 'words' is a counter, not a histogram"):
            ctx.register_histogram("words")
        with pytest.raises(ValueError, match="a counter only goes up"):
            words.inc(-1)
        snap = reg.snapshot()
    assert snap["words"] == {"kind": "counter", "count": 4}
    assert snap["queue"] == {"kind": "gauge", "value": 7.0}
    with pytest.raises(RuntimeError, match="while a task runs"):
        words.inc()
    with collecting("split", 1) as other:
        ctx.register_counter("words").inc(10)
        ctx.register_histogram("length").update(100)
        ctx.register_gauge("queue").set(2)
    merged = merge_component({("split", 0): snap, ("split", 1): other.snapshot()})["split"]
    assert merged["words"] == {"kind": "counter", "count": 14}
    assert merged["queue"] == {"kind": "gauge", "tasks": {0: 7.0, 1: 2.0}}
    assert (merged["length"]["count"], merged["length"]["min"], merged["length"]["max"]) == (2, 5.0, 100.0)


def test_histogram_quantiles_are_within_a_factor_of_two_and_clamped_to_min_and_max() -> None:
    h = Histogram()
    for v in range(1, 101):
        h.update(v)
    snap = h.snapshot()
    assert quantile(snap, 0.5) == 64.0            # 50 lies in (32, 64]
    assert quantile(snap, 0.99) == 100.0          # the bucket's bound 128, clamped to the max
    assert quantile(Histogram().snapshot(), 0.5) is None
    assert TaskMetrics("c", 0).snapshot() == {}


# -- in a topology: exactly once per committed txid ---------------------------------------------------

class CountingSplit(BaseBatchBolt):
    """Counts every tuple it sees (a counter, a meter), each word's length (a histogram), and
    its batch size (a gauge), then passes the words on."""

    def prepare(self, conf, context, collector, id):
        self.collector, self.id, self.words = collector, id, []
        self.seen = context.register_counter("seen")
        self.rate = context.register_meter("rate")
        self.lengths = context.register_histogram("length")
        self.batch = context.register_gauge("batch_size")

    def execute(self, tuple):
        self.words.append(tuple["word"])
        self.seen.inc()
        self.rate.mark()
        self.lengths.update(len(tuple["word"]))

    def finish_batch(self):
        self.batch.set(len(self.words))
        for w in self.words:
            self.collector.emit(Values(self.id, w))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "word"))


class Sum(BaseTransactionalBolt, Committer):
    """A committer that counts what reached the commit phase."""

    def prepare(self, conf, context, collector, attempt):
        self.committed = context.register_counter("committed")

    def execute(self, tuple):
        self.committed.inc()

    def finish_batch(self):
        pass


def counted_topology(tid: str):
    spout = MemoryTransactionalSpout(WORDS, Fields("word"), 4)
    b = TransactionalTopologyBuilder(tid, "spout", spout, 2)
    # every task of txids 2 and 3 fails its first attempt in finish_batch, after counting
    plan = FaultPlan(seed=3, rate=1.0, max_attempt=1, txids=frozenset({2, 3}))
    b.set_bolt("split", with_faults(CountingSplit(), plan), 2).shuffle_grouping("spout")
    b.set_bolt("sum", Sum(), 2).shuffle_grouping("split")
    return b.build()


def test_metrics_count_each_committed_txid_once_whatever_was_replayed(executor: str) -> None:
    topo = counted_topology(f"metrics-{uuid.uuid4().hex[:6]}")
    result = run_topology(topo, TopologyConfig(executor=executor, progress=False, retry_backoff_secs=0.01,
                                               max_spout_pending=2))
    assert result.attempts > result.batches_committed          # txids 2 and 3 were replayed
    assert result.metric("split", "seen") == TOTAL
    assert result.metric("split", "rate") == TOTAL
    assert result.metric("sum", "committed") == TOTAL
    lengths = result.metric("split", "length")
    assert (lengths["count"], lengths["sum"], lengths["min"], lengths["max"]) == (TOTAL, 2.0 * TOTAL, 2.0, 2.0)
    assert set(result.metric("split", "batch_size")) == {0, 1}   # each task's last committed batch
    with pytest.raises(KeyError, match="no metric 'nope' of component 'split'; registered: "):
        result.metric("split", "nope")


class Split(BaseFunction):
    def prepare(self, conf, context):
        self.words = context.register_counter("words")

    def execute(self, tuple, collector):
        for w in tuple[0].split():
            self.words.inc()
            collector.emit((w,))


class RowsState(State):
    """A user state that counts the rows it is given, through the ``metrics`` of make_state."""

    def __init__(self, metrics):
        self.rows = metrics.register_counter("rows")

    def begin_commit(self, txid):
        pass

    def commit(self, txid):
        pass


class RowsFactory(StateFactory):
    def make_state(self, conf, metrics, partition_index, num_partitions):
        return RowsState(metrics)


class RowsUpdater(BaseStateUpdater):
    def update_state(self, st, tuples, collector):
        st.rows.inc(len(tuples))


def test_trident_functions_and_states_register_metrics(executor: str) -> None:
    t = TridentTopology(f"metrics-trident-{uuid.uuid4().hex[:6]}")
    spout = MemoryTransactionalSpout({0: [("a b c",), ("d e",)], 1: [("f",)]}, Fields("sentence"), 1)
    words = t.new_stream("s", spout).each(Fields("sentence"), Split(), Fields("word"))
    words.group_by(Fields("word")).persistent_aggregate(state.transactional("wc"), Count(), Fields("count"))
    words.partition_persist(RowsFactory(), Fields("word"), RowsUpdater())
    result = run_topology(t, TopologyConfig(executor=executor, progress=False))
    by_name = {name: (component, m) for component, named in result.metrics.items() for name, m in named.items()}
    assert by_name["words"][1] == {"kind": "counter", "count": 6}
    assert by_name["rows"][1] == {"kind": "counter", "count": 6}


@pytest.mark.parametrize("executor", ["in-process"])
def test_metrics_are_exported_with_topology_and_component_labels(executor: str) -> None:
    topo = counted_topology(f"metrics-export-{uuid.uuid4().hex[:6]}")
    config = TopologyConfig(executor=executor, progress=False, retry_backoff_secs=0.01, metrics_port=0)
    engine = Engine(topo, config)
    observer = attach(engine.listeners, topo, config)
    assert observer is not None
    try:
        engine.run(None)
        with urllib.request.urlopen(observer.url + "metrics", timeout=10) as r:
            text = r.read().decode()
        with urllib.request.urlopen(observer.url + "api/status", timeout=10) as r:
            import json

            rows = json.loads(r.read())["user_metrics"]
    finally:
        observer.stop()
    tid = topo.topology_id
    assert f'trident_user_seen_total{{component="split",topology="{tid}"}} {float(TOTAL)}' in text
    assert f'trident_user_committed_total{{component="sum",topology="{tid}"}} {float(TOTAL)}' in text
    assert f'trident_user_length_count{{component="split",topology="{tid}"}} {float(TOTAL)}' in text
    assert f'trident_user_batch_size{{component="split",task="0",topology="{tid}"}}' in text
    seen = next(r for r in rows if r["name"] == "seen")
    assert seen == {"component": "split", "name": "seen", "kind": "counter", "count": TOTAL}
