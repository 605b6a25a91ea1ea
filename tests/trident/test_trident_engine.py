"""Trident on the engine: Storm's Trident semantics checked end to end, on the in-process
executor and on a real local Spark, with real Redis and ZooKeeper where state matters.

Every test asserts exact outputs: counts equal to a ``Counter`` of the input, the exact
error messages of bad pipelines, what a state query saw at each txid.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spouts import MemoryTransactionalSpout, OpaqueMemoryTransactionalSpout
from state.keys import decode_key, hashable_key
from state.map import OpaqueMap, TransactionalMap, open_map_backing
from transactional import FailedException, Fields, TopologyConfig, run_topology
from transactional.exceptions import ConfigError
from trident import (
    Aggregator,
    BaseFilter,
    BaseFunction,
    BaseStateUpdater,
    CombinerAggregator,
    Count,
    FirstN,
    FixedBatchSpout,
    MapGet,
    Max,
    ReducerAggregator,
    Sum,
    TridentTopology,
    state,
)

import trident_kill_topology as kill_topology

REPO = Path(__file__).resolve().parents[2]
SENTENCES = ["the cow jumped over the moon", "the man went to the store and bought some candy",
             "four score and seven years ago", "how many apples can you eat",
             "to be or not to be the person"]
WORDS = Counter(w for s in SENTENCES * 6 for w in s.split())


def uid(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def config(executor: str = "in-process", **kw: Any) -> TopologyConfig:
    kw.setdefault("progress", False)
    kw.setdefault("message_timeout_secs", 60)
    kw.setdefault("retry_backoff_secs", 0.02)
    kw.setdefault("max_spout_pending", 3)
    return TopologyConfig(executor=executor, **kw)



class Split(BaseFunction):
    """Storm's Split: one tuple per word."""

    def execute(self, tuple, collector):
        for w in tuple[0].split():
            collector.emit((w,))


def split_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pc.list_flatten(pc.utf8_split_whitespace(batch.column(0)))], names=["word"])


def sentences_spout(take: int = 4) -> FixedBatchSpout:
    return FixedBatchSpout(Fields("sentence"), take, *[(s,) for s in SENTENCES * 6])


def multiset(result: Any, name: str) -> dict[Any, int]:
    """Every key of a memory map and its value (the recorder below writes counts)."""
    m = result.map_state(name)
    return {hashable_key(decode_key(k)): m._committed_value(k, v) for k, v in m.backing.data.items()
            if not k.startswith("~") or k[1:2] in ("s", "b", "j")}      # not the map's own records


class Record(BaseStateUpdater):
    """Counts each tuple it is given (as a tuple key) in a non-transactional map: the
    multiset of a stream's tuples, to compare with what is expected."""

    def update_state(self, st, tuples, collector):
        st.multi_combine([tuple(t) for t in tuples], [1] * len(tuples), "sum")


def record(stream: Any, name: str = "out") -> None:
    stream.partition_persist(state.non_transactional(name), stream.fields, Record())


# -- word count: every flavour, both paths, both executors ----------------------------------

FLAVOURS = ["transactional", "opaque", "counters", "non_transactional"]
# every flavour on both paths in-process; on Spark one flavour per path
WORD_COUNT_CASES = [("in-process", f, c) for f in FLAVOURS for c in (False, True)] + [
    ("spark", "transactional", False), ("spark", "counters", True)]


@pytest.mark.parametrize("executor,flavour,columnar", WORD_COUNT_CASES, indirect=["executor"])
def test_word_count_is_exact_for_every_state_flavour_and_both_paths(executor: str, flavour: str,
                                                                     columnar: bool) -> None:
    t = TridentTopology(uid("wc"))
    s = t.new_stream("sentences", sentences_spout()).parallelism_hint(2)
    s = s.map_batches(split_batch, Fields("word")) if columnar else s.each(Fields("sentence"), Split(),
                                                                            Fields("word"))
    s.group_by(Fields("word")).persistent_aggregate(getattr(state, flavour)("counts"), Count(),
                                                    Fields("count")).parallelism_hint(2)
    r = run_topology(t.build(), config(executor))
    assert r.batches_committed == 8 and not r.failures
    assert dict(zip(WORDS, r.map_state("counts").multi_get(list(WORDS)), strict=True)) == WORDS


def test_partial_aggregation_sends_one_tuple_per_task_and_word_not_one_per_word() -> None:
    """A combiner is pre-aggregated in the split's stage: what crosses to the committer
    is one partial count per (task, batch, distinct word); a reducer sends every word."""

    class RowCount(CombinerAggregator):       # no Arrow path: partials travel as tuples
        def init(self, tuple):
            return 1

        def combine(self, a, b):
            return a + b

        def zero(self):
            return 0

    class ReducerCount(ReducerAggregator):
        def init(self):
            return 0

        def reduce(self, curr, tuple):
            return curr + 1

    runs = {}
    batch = SENTENCES          # 4 batches of these 5 sentences
    for agg in (RowCount(), ReducerCount()):
        t = TridentTopology(uid("partial"))
        (t.new_stream("sentences", FixedBatchSpout(Fields("sentence"), 5, *[(s,) for s in batch * 4]))
         .each(Fields("sentence"), Split(), Fields("word")).name("split")
         .group_by(Fields("word"))
         .persistent_aggregate(state.transactional("counts"), agg, Fields("count")))
        r = run_topology(t.build(), config())
        assert dict(zip(WORDS, r.map_state("counts").multi_get(list(WORDS)), strict=True)) == {
            w: n * 4 // 6 for w, n in WORDS.items()}
        runs[type(agg).__name__] = r.emitted["split"]
    words = 4 * sum(len(s.split()) for s in batch)
    distinct = 4 * len({w for s in batch for w in s.split()})
    assert runs["ReducerCount"] == words == 144
    assert runs["RowCount"] == distinct == 112


# -- a spout of Arrow tables: batches handed over as columns ------------------------------------

def arrow_spout(take: int = 3) -> MemoryTransactionalSpout:
    rows = SENTENCES * 6
    return MemoryTransactionalSpout({0: pa.table({"s": rows[:15]}), 1: pa.table({"s": rows[15:]})},
                                    Fields("sentence"), take)


@pytest.mark.parametrize("columnar", [True, False])
def test_a_spout_of_arrow_tables_counts_exactly_on_both_paths(executor: str, columnar: bool) -> None:
    t = TridentTopology(uid("arrow"))
    s = t.new_stream("sentences", arrow_spout()).parallelism_hint(2)
    s = s.map_batches(split_batch, Fields("word")) if columnar else s.each(Fields("sentence"), Split(),
                                                                            Fields("word"))
    s.group_by(Fields("word")).persistent_aggregate(state.counters("counts"), Count(), Fields("count"))
    r = run_topology(t.build(), config(executor))
    assert r.batches_committed == 5 and r.tuples == 30 and not r.failures
    assert dict(zip(WORDS, r.map_state("counts").multi_get(list(WORDS)), strict=True)) == WORDS


def test_arrow_batches_go_as_columns_to_trident_stages_and_as_rows_to_bolts() -> None:
    from transactional import BaseBasicBolt, TransactionalTopologyBuilder
    from transactional.columns import ColumnBatch
    from transactional.engine.task import Router
    from transactional.exceptions import InvalidTupleError
    from transactional.tuples import TransactionAttempt

    class Words(BaseBasicBolt):
        def execute(self, tuple, collector):
            pass

        def declare_output_fields(self, declarer):
            declarer.declare(Fields("tx", "w"))

    tx = TransactionAttempt(1, 1)
    t = TridentTopology(uid("cols"))
    t.new_stream("sentences", arrow_spout()).parallelism_hint(2).map_batches(split_batch, Fields("word"))
    trident = t.build()
    b = TransactionalTopologyBuilder(uid("rows"), "sentences", arrow_spout(), 2)
    b.set_bolt("words", Words(), 2).local_or_shuffle_grouping("sentences")
    bolts = b.build()
    batch = pa.record_batch({"sentence": ["a b", "c"]})
    for topology, columnar in ((trident, True), (bolts, False)):
        router = Router(topology, topology.spout, 1, tx)
        assert router.columnar() is columnar
        router.emit_columns(batch)
        [(key, (_, _, task, values))] = router.records()
        assert task == 1 and router.emitted == 2
        if columnar:
            assert [type(v) for v in values] == [ColumnBatch] and values[0].batch is batch
        else:
            assert values == [(tx, "a b"), (tx, "c")]
    with pytest.raises(InvalidTupleError, match=r"batch of columns \['a', 'b'\] on stream 'default', "
                                                "which has 1 fields"):
        Router(trident, trident.spout, 0, tx).emit_columns(pa.record_batch({"a": [1], "b": [2]}))


# -- failures -------------------------------------------------------------------------------

class FlakySplit(BaseFunction):
    """Split raising FailedException on attempts ``1..upto`` of the txids in ``fail``."""

    def __init__(self, fail: set[int], upto: int = 1) -> None:
        self.fail, self.upto = fail, upto

    def prepare(self, conf: dict, context: Any) -> None:
        self.context = context

    def execute(self, tuple, collector):
        att = self.context.attempt
        if att.txid in self.fail and att.attempt_id <= self.upto:
            raise FailedException(f"injected in txid {att.txid}")
        for w in tuple[0].split():
            collector.emit((w,))


class CommitFails(BaseFilter):
    """In the commit phase (after the update, in the new values stream): fails the first
    commit of the txids in ``fail``, so the whole commit is replayed."""

    def __init__(self, fail: set[int]) -> None:
        self.fail = fail

    def prepare(self, conf: dict, context: Any) -> None:
        self.context = context

    def is_keep(self, tuple):
        txid = self.context.attempt.txid
        if txid in self.fail and (self.context.topology_id, txid) not in FAILED_COMMITS:
            FAILED_COMMITS.add((self.context.topology_id, txid))     # commits run in this process
            raise FailedException(f"injected in the commit of txid {txid}")
        return True


FAILED_COMMITS: set[tuple[str, int]] = set()


@pytest.mark.parametrize("executor,flavour", [("in-process", "transactional"), ("in-process", "opaque"),
                                              ("in-process", "non_transactional"), ("spark", "transactional")],
                         indirect=["executor"])
def test_exact_counts_through_failed_batches_and_failed_commits(executor: str, flavour: str,
                                                                redis_url: str) -> None:
    """Processing failures replay the batch; commit failures abort the commit (nothing
    written) and replay it. Transactional/opaque maps with their spouts stay exact; the
    non-transactional map too, since no commit here fails after writing."""
    data = {p: [(s,) for s in SENTENCES * 3] for p in range(2)}
    if flavour == "opaque":
        spout = OpaqueMemoryTransactionalSpout(data, Fields("sentence"), 3,
                                               deliver=kill_topology.short_first_attempt)
    else:
        spout = MemoryTransactionalSpout(data, Fields("sentence"), 3)
    t = TridentTopology(uid("faults"))
    counts = (t.new_stream("sentences", spout).parallelism_hint(2)
              # (an opaque txid 2 is planned again once txid 1 delivered short: its first
              # attempt may never run, its second does)
              .each(Fields("sentence"), FlakySplit({2}, upto=2 if flavour == "opaque" else 1), Fields("word"))
              .group_by(Fields("word"))
              .persistent_aggregate(getattr(state, flavour)("counts"), Count(), Fields("count")))
    counts.new_values_stream().filter(CommitFails({4})).name("check")
    r = run_topology(t.build(), config(executor, state=redis_url, max_attempts=5))
    want = Counter(w for rows in data.values() for (s,) in rows for w in s.split())
    assert dict(zip(want, r.map_state("counts").multi_get(list(want)), strict=True)) == want
    messages = r.failures          # "txid t (attempt a), component ..., task ...: FailedException: ..."
    assert any("FailedException: injected in txid 2" in m for m in messages), messages
    assert any("FailedException: injected in the commit of txid 4" in m for m in messages), messages


# -- a driver killed mid-commit --------------------------------------------------------------

def run_child(tmp_path: Path, name: str, flavour: str, zk_url: str, redis_url: str,
              crash_at: str | None = None, topology: str = "trident_kill_topology.py",
              args: tuple[str, ...] = (), env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRIDENT_TEST_FLAVOUR": flavour, **(env or {}),
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "support"), str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("TRIDENT_CRASH_AT", None)
    if crash_at:
        env["TRIDENT_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, "-m", "transactional.ops.cli", "run", str(REPO / "tests" / "support" / topology),
         # the driver's commit protocol is what a kill tests: its tasks run in-process (no JVM
         # to start for each of the three drivers; Trident on Spark is tested above)
         "--set", "executor=in-process", "--coordination", zk_url + "?session_timeout=1", "--state", redis_url,
         "--max-spout-pending", "3", "--lock-wait", "30", "-q", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, start_new_session=True)


@pytest.mark.parametrize("flavour", ["transactional", "opaque"])
def test_a_driver_killed_after_writing_before_recording_resumes_exactly(tmp_path: Path, flavour: str,
                                                                       zk_url: str, redis_url: str) -> None:
    """SIGKILL between the write of the maps and the record of the txid (the replay finds
    its own writes), then again between recording and dropping; the restarted driver ends
    with exact counts."""
    for i, crash in enumerate(["commit.before_record:txid=3", "commit.after_record:txid=6"]):
        p = run_child(tmp_path, f"kill{i}", flavour, zk_url, redis_url, crash)
        assert p.returncode == -signal.SIGKILL, (p.returncode, p.stderr[-2000:])
        assert f"crash point {crash.split(':')[0]}" in p.stderr
    p = run_child(tmp_path, "final", flavour, zk_url, redis_url)
    assert p.returncode == 0, p.stderr[-3000:]
    want = kill_topology.expected()
    backing = open_map_backing(redis_url, f"trident-kill-{flavour}:counts")
    m = (OpaqueMap if flavour == "opaque" else TransactionalMap)(backing, "counts")
    assert dict(zip(want, m.multi_get(list(want)), strict=True)) == want


# counter maps need commit_placement='driver' (one writer per txid): no executors case
@pytest.mark.parametrize("flavour,placement", [("transactional", "driver"), ("transactional", "executors"),
                                               ("opaque", "driver"), ("opaque", "executors"),
                                               ("counters", "driver")])
def test_a_replay_after_a_driver_kill_reads_what_its_first_attempt_read(tmp_path: Path, flavour: str,
                                                                        placement: str, zk_url: str,
                                                                        redis_url: str) -> None:
    """A query and a new-values stream feed other maps (tests/support/trident_query_kill_topology.py).
    SIGKILL after txid 3 wrote every map, before it was recorded: the replay of txid 3
    must read the state as of txid 2, as its first attempt did, so every derived
    ``(word, count)`` and ``(query, seen)`` is stored once, with the first attempt's value."""
    import trident_query_kill_topology as q

    tid = uid(f"query-kill-{flavour}")
    env = {"TRIDENT_TEST_TOPOLOGY_ID": tid}
    args = ("--set", f'commit_placement="{placement}"')
    crash = "commit.before_record:txid=3"
    p = run_child(tmp_path, "kill", flavour, zk_url, redis_url, crash, "trident_query_kill_topology.py", args, env)
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stderr[-2000:])
    assert "crash point commit.before_record" in p.stderr
    p = run_child(tmp_path, "final", flavour, zk_url, redis_url, None, "trident_query_kill_topology.py", args, env)
    assert p.returncode == 0, p.stderr[-3000:]

    def stored(name: str, kind: str) -> dict:
        field = {"transactional": "val", "opaque": "curr"}.get(kind)
        return {k: v if field is None else v[field]
                for k, v in open_map_backing(redis_url, f"{tid}:{name}").scan().items()}  # type: ignore[attr-defined]

    derived = "opaque" if flavour == "opaque" else "transactional"
    assert (stored("counts", flavour), stored("counted", derived), stored("answers", derived)) == q.expected()


# -- merge, join, state queries ----------------------------------------------------------------

def test_merge_of_two_spouts_counts_both_streams_exactly_once() -> None:
    t = TridentTopology(uid("merge"))
    a = t.new_stream("a", FixedBatchSpout(Fields("w"), 2, "x", "y", "x", "z"))
    b = t.new_stream("b", FixedBatchSpout(Fields("word"), 3, "x", "q", "q"))
    t.merge(a, b).group_by(Fields("w")).persistent_aggregate(state.transactional("c"), Count(), Fields("n"))
    r = run_topology(t.build(), config())
    assert r.map_state("c").multi_get(["x", "y", "z", "q"]) == [3, 1, 1, 2]


def test_join_matches_tuples_of_the_same_batch_only() -> None:
    """Txid 1 joins (1, a)/(1, A) and (2, b)/(2, B); txid 2's (1, c) has no partner in txid
    2 (its partner came in txid 1), so it joins nothing."""
    t = TridentTopology(uid("join"))
    left = t.new_stream("left", FixedBatchSpout(Fields("id", "low"), 2, (1, "a"), (2, "b"), (1, "c")))
    right = t.new_stream("right", FixedBatchSpout(Fields("key", "up"), 2, (1, "A"), (2, "B"), (3, "C")))
    record(t.join(left, Fields("id"), right, Fields("key"), Fields("id", "low", "up")))
    r = run_topology(t.build(), config())
    assert multiset(r, "out") == {(1, "a", "A"): 1, (2, "b", "B"): 1}


# every flavour with commits on the driver; on executors (counter maps need the driver)
# in this process and on Spark
QUERY_CASES = [("in-process", "driver", f) for f in ("transactional", "opaque", "counters")] + [
    ("in-process", "executors", "transactional"), ("in-process", "executors", "opaque"),
    ("spark", "executors", "transactional")]


@pytest.mark.parametrize("executor,placement,flavour", QUERY_CASES, indirect=["executor"])
def test_state_query_sees_exactly_the_state_committed_before_its_batch(executor: str, placement: str,
                                                                       flavour: str, redis_url: str) -> None:
    """Words arrive two per txid; each txid also queries the count of "a". The query of
    txid t must see the counts of txids 1..t-1: none, 1, 2, 2, 4 -- never txid t's own
    update, wherever the commit runs (on executors the task that updates the map has
    written its share before the query's task of the same txid reads)."""
    words = ["a", "b", "a", "c", "b", "b", "a", "a", "x", "y"]
    tid = uid("query")
    t = TridentTopology(tid)
    counts = (t.new_stream("words", FixedBatchSpout(Fields("word"), 2, *words))
              .group_by(Fields("word")).persistent_aggregate(getattr(state, flavour)("counts"), Count(), Fields("n")))
    queries = t.new_stream("queries", FixedBatchSpout(Fields("q", "word"), 1, *[(i, "a") for i in range(1, 6)]))
    seen = queries.state_query(counts, Fields("word"), MapGet(), Fields("seen"))
    record(seen.project(Fields("q", "seen")))
    r = run_topology(t.build(), config(executor, state=redis_url, commit_placement=placement))
    out = open_map_backing(redis_url, f"{tid}:out").scan()      # type: ignore[attr-defined]
    assert out == {(1, None): 1, (2, 1): 1, (3, 2): 1, (4, 2): 1, (5, 4): 1}
    assert r.map_state("counts").get("a") == 4


def test_an_opaque_stream_may_query_a_transactional_map_and_write_its_answers_to_an_opaque_map() -> None:
    """The pairing rule concerns the spouts that update a map: an opaque spout's stream
    that only reads ``counts`` (a transactional map fed by a transactional spout) and
    persists what it saw in an opaque map is valid, and each query sees the counts of the
    txids before its own. Writing those answers to a transactional map is still refused."""
    words = ["a", "b", "a", "c", "b", "b", "a", "a", "x", "y"]

    def build(answers: state.MapStateFactory) -> TridentTopology:
        t = TridentTopology(uid("opaque-reads"))
        counts = (t.new_stream("words", FixedBatchSpout(Fields("word"), 2, *words))
                  .group_by(Fields("word")).persistent_aggregate(state.transactional("counts"), Count(), Fields("n")))
        queries = t.new_stream("queries", OpaqueMemoryTransactionalSpout({0: [(i, "a") for i in range(1, 6)]},
                                                                          Fields("q", "word"), 1))
        (queries.state_query(counts, Fields("word"), MapGet(), Fields("seen"))
         .project(Fields("q", "seen")).map(lambda tt: (tt[0], tt[1] or 0))
         .group_by(Fields("q")).persistent_aggregate(answers, Fields("seen"), Sum(), Fields("total")))
        return t

    r = run_topology(build(state.opaque("answers")).build(), config())
    assert r.map_state("answers").multi_get([1, 2, 3, 4, 5]) == [0, 1, 2, 2, 4]
    assert r.map_state("counts").multi_get(["a", "b", "c", "x", "y"]) == [4, 3, 1, 1, 1]
    msg = bad(build(state.transactional("answers")).build)
    assert "state 'answers' is transactional, but it is fed by the opaque spout(s) ['queries']" in msg
    assert "'counts'" not in msg


# -- the rest of the API ------------------------------------------------------------------------

def test_each_filter_project_map_flat_map_and_each_batch() -> None:
    class Length(BaseFunction):
        def execute(self, tuple, collector):
            collector.emit((len(tuple["w"]),))

    t = TridentTopology(uid("ops"))
    s = (t.new_stream("s", FixedBatchSpout(Fields("w"), 3, "aa", "b", "cccc", "dd"))
         .each(Fields("w"), Length(), Fields("len"))
         .filter(Fields("len"), lambda tt: tt[0] > 1)
         .map(lambda tt: (tt["w"].upper(), tt["len"]))
         .flat_map(lambda tt: [(tt[0], tt[1])] * 2)
         .each_batch(Fields("len"), lambda b: pa.RecordBatch.from_arrays([pc.multiply(b.column(0), 10)],
                                                                         names=["x"]), Fields("x"))
         .project(Fields("x", "w")))
    record(s)
    r = run_topology(t.build(), config())
    assert multiset(r, "out") == {(20, "AA"): 2, (40, "CCCC"): 2, (20, "DD"): 2}


def test_global_aggregate_partition_aggregate_chained_and_first_n(executor: str) -> None:
    nums = list(range(1, 11))
    t = TridentTopology(uid("aggs"))
    s = t.new_stream("s", FixedBatchSpout(Fields("n"), 5, *nums)).parallelism_hint(2).shuffle()
    record(s.aggregate(Fields("n"), Sum(), Fields("sum")), "sum")
    record(s.aggregate(Count(), Fields("count")), "count")
    record(s.chained_agg().aggregate(Fields("n"), Sum(), Fields("s")).aggregate(Count(), Fields("c"))
           .chain_end(), "chained")
    record(s.global_().partition_aggregate(Fields("n"), FirstN(2, "n"), Fields("top")), "top")
    record(s.apply_assembly(FirstN(1, "n", reverse=True)), "greatest")
    r = run_topology(t.build(), config(executor))
    assert multiset(r, "sum") == {(15,): 1, (40,): 1}
    assert multiset(r, "count") == {(5,): 2}
    assert multiset(r, "chained") == {(15, 5): 1, (40, 5): 1}
    assert multiset(r, "top") == {(1,): 1, (2,): 1, (6,): 1, (7,): 1}       # FirstN: the least, as Storm's
    assert multiset(r, "greatest") == {(5,): 1, (10,): 1}


def test_repartitioning_and_a_grouped_aggregator() -> None:
    class Distinct(Aggregator):
        def init(self, batch_id, collector):
            return set()

        def aggregate(self, st, tuple, collector):
            st.add(tuple[0])

        def complete(self, st, collector):
            collector.emit((len(st),))

    rows = [("a", 1), ("b", 2), ("a", 3), ("a", 1), ("b", 2), ("c", 9)]
    t = TridentTopology(uid("groups"))
    s = t.new_stream("s", FixedBatchSpout(Fields("k", "v"), 6, *rows)).parallelism_hint(2)
    record(s.partition_by(Fields("k")).parallelism_hint(3).group_by(Fields("k"))
           .aggregate(Fields("v"), Distinct(), Fields("distinct")), "distinct")
    record(s.broadcast().parallelism_hint(3).project(Fields("k")).global_().aggregate(Count(), Fields("n")), "bc")
    r = run_topology(t.build(), config())
    assert multiset(r, "distinct") == {("a", 2): 1, ("b", 1): 1, ("c", 1): 1}
    assert multiset(r, "bc") == {(18,): 1}        # every tuple to each of 3 tasks


# -- bad pipelines: clear errors before any batch runs ----------------------------------------

def bad(fn) -> str:
    with pytest.raises(ConfigError) as e:
        fn()
    return str(e.value)


def test_bad_pipelines_are_refused_when_built_with_the_fix_in_the_message() -> None:
    t = TridentTopology(uid("bad"))
    s = t.new_stream("s", sentences_spout())
    assert "reads field(s) ['sentense'], but the stream has fields ['sentence']" in bad(
        lambda: s.each(Fields("sentense"), Split(), Fields("word")))
    assert "group_by reads field(s) ['word']" in bad(lambda: s.group_by(Fields("word")))
    assert "each() takes a trident.Function" in bad(lambda: s.each(Fields("sentence"), len, Fields("n")))
    assert "persistent_aggregate takes a CombinerAggregator or ReducerAggregator" in bad(
        lambda: s.group_by(Fields("sentence")).persistent_aggregate(state.transactional("x"), FirstN(2), Fields("n")))
    assert "counter map: it adds numbers, so it takes Count() or Sum()" in bad(
        lambda: s.group_by(Fields("sentence")).persistent_aggregate(state.counters("y"), Max(), Fields("n")))
    other = t.new_stream("o", FixedBatchSpout(Fields("k", "v"), 1, (1, 2)))
    assert "join(): the output has 2 fields (['sentence', 'v'])" in bad(
        lambda: t.join(s, Fields("sentence"), other, Fields("k"), Fields("a", "b", "c")))

    t2 = TridentTopology(uid("pairing"))
    o = t2.new_stream("o", OpaqueMemoryTransactionalSpout({0: ["a"]}, Fields("w"), 1))
    o.group_by(Fields("w")).persistent_aggregate(state.transactional("counts"), Count(), Fields("n"))
    msg = bad(t2.build)
    assert "state 'counts' is transactional, but it is fed by the opaque spout(s) ['o']" in msg
    assert "Use trident.state.opaque('counts')" in msg
    assert "opaque          REFUSED         exactly-once   at-least-once" in msg


# -- the examples -----------------------------------------------------------------------------------

def test_the_trident_examples_count_and_answer_their_queries_exactly(capsys: pytest.CaptureFixture) -> None:
    import importlib.util

    for name in ("trident_word_count", "trident_columnar_word_count"):
        spec = importlib.util.spec_from_file_location(f"example_{name}", REPO / "examples" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        topology = dataclasses.replace(module.build_topology().build(), topology_id=uid(name))
        module.report(run_topology(topology, config()))
        assert "exact: True" in capsys.readouterr().out, name
