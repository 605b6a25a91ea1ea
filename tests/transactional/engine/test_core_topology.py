"""Core Storm topologies (docs/design.md §7): guaranteed message processing with the XOR
acker and stateful bolts, on the engine's coordinator and plan. The semantic tests run
twice, on a real local Spark context and on the in-process executor; the spouts'
``MEMORY_SPOUT_LOGS`` say exactly what each spout task emitted, and was told."""

from __future__ import annotations

import collections
import time
import uuid
from typing import Any

import pytest

from spouts import MEMORY_SPOUT_LOGS, BaseRichSpout, MemorySpout
from state.base import MemoryTransactionalState
from state.keyvalue import open_key_value_state
from transactional import (
    BaseBasicBolt,
    BaseRichBolt,
    BaseStatefulBolt,
    ConfigError,
    FailedException,
    Fields,
    TopologyBuilder,
    TopologyConfig,
    TopologyError,
    TopologyFailedError,
    run_topology,
)
from transactional.engine.core.checkpoint import Checkpointer
from transactional.engine.task import stable_hash
from transactional.exceptions import StateLossError

SENTENCES = ["the cow jumped over the moon", "an apple a day keeps the doctor away",
             "four score and seven years ago", "snow white and the seven dwarfs", "i am at two with nature"]
EXECUTOR = "spark"


def uid(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "executor" in metafunc.fixturenames:
        both = metafunc.definition.get_closest_marker("spark_only") is None
        metafunc.parametrize("executor", ["spark", "in-process"] if both else ["spark"], indirect=True)


@pytest.fixture
def executor(request: pytest.FixtureRequest):
    global EXECUTOR
    EXECUTOR = request.param
    if request.param == "spark":
        request.getfixturevalue("spark_context")
    yield request.param
    EXECUTOR = "spark"


def config(**kw: Any) -> TopologyConfig:
    kw.setdefault("progress", False)
    kw.setdefault("executor", EXECUTOR)
    kw.setdefault("message_timeout_secs", 30)
    kw.setdefault("retry_backoff_secs", 0.05)
    kw.setdefault("poll_interval_secs", 0.05)
    return TopologyConfig(**kw)


def events(name: str, kind: str) -> list[int]:
    return [m for e, m, _, _ in MEMORY_SPOUT_LOGS.get(name, []) if e == kind]


# -- bolts ------------------------------------------------------------------------------------------

class SplitSentence(BaseRichBolt):
    """The seed's SplitSentence: each word anchored to the sentence, then the sentence acked."""

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tuple):
        for word in tuple[0].split():
            self.collector.emit((word,), anchors=tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))


class AckAll(BaseRichBolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tuple):
        self.collector.ack(tuple)


class Fan(BaseRichBolt):
    """Each input fans out to ``n`` tuples anchored to it."""

    def __init__(self, n: int) -> None:
        self.n = n

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tuple):
        for i in range(self.n):
            self.collector.emit((i,), anchors=tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("i"))


class AckOnReplay(BaseRichBolt):
    """Never acks (nor fails) the first delivery of an item; acks the replays."""

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tuple):
        if tuple["delivery"] > 1:
            self.collector.ack(tuple)


class FailFirst(BaseRichBolt):
    """Fails the first delivery of an item explicitly, acks the replays."""

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tuple):
        (self.collector.fail if tuple["delivery"] == 1 else self.collector.ack)(tuple)


class FailAll(BaseRichBolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tuple):
        self.collector.fail(tuple)


class PassOn(BaseRichBolt):
    """Emits each input (``anchored`` or not) and acks it."""

    def __init__(self, anchored: bool = True) -> None:
        self.anchored = anchored

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tuple):
        self.collector.emit(tuple.values, anchors=tuple if self.anchored else None)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("item", "delivery"))


class Pair(BaseRichBolt):
    """A join: every two inputs become one tuple anchored to both (multi-anchoring)."""

    def prepare(self, conf, context, collector):
        self.collector, self.held = collector, []

    def execute(self, tuple):
        self.held.append(tuple)
        if len(self.held) == 2:
            self._emit()

    def _emit(self):
        a = self.held
        self.collector.emit((sum(t["item"] for t in a), min(t["delivery"] for t in a)), anchors=a)
        for t in a:
            self.collector.ack(t)
        self.held = []

    def cleanup(self):
        if self.held:
            self._emit()

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("total", "delivery"))


class BasicFailFirst(BaseBasicBolt):
    """A basic bolt: emits anchored automatically; FailedException on a first delivery."""

    def execute(self, tuple, collector):
        if tuple["delivery"] == 1:
            raise FailedException("try again")
        collector.emit((tuple["item"],))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("item"))


HOOKS: list[tuple] = []


class WordCount(BaseStatefulBolt):
    """The seed's WordCountBolt on KeyValueState."""

    def prepare(self, conf, context, collector):
        self.collector = collector

    def init_state(self, state):
        self.counts = state

    def execute(self, tuple):
        word = tuple["word"]
        n = self.counts.get(word, 0) + 1
        self.counts.put(word, n)
        self.collector.emit((word, n), anchors=tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word", "count"))

    def pre_prepare(self, txid):
        HOOKS.append(("pre_prepare", txid))

    def pre_commit(self, txid):
        HOOKS.append(("pre_commit", txid))

    def pre_rollback(self):
        HOOKS.append(("pre_rollback",))


class WordCountFailingOnce(WordCount):
    """Raises (not a FailedException: a bug) at the first delivery of sentence 2's words."""

    def execute(self, tuple):
        if tuple["word"] == "apple" and tuple["delivery"] == 1:
            raise RuntimeError("database is down")
        super().execute(tuple)


class SplitWithDelivery(BaseRichBolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tuple):
        for word in tuple["sentence"].split():
            self.collector.emit((word, tuple["delivery"]), anchors=tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word", "delivery"))


def word_truth(sentences: list[str]) -> dict[str, int]:
    return dict(collections.Counter(w for s in sentences for w in s.split()))


def items(n: int) -> list[tuple[int]]:
    return [(i,) for i in range(n)]


# -- guaranteed message processing ----------------------------------------------------------------

def test_every_sentence_is_acked_once_through_a_fan_out_to_several_tasks(executor: str) -> None:
    name = uid("wc")
    b = TopologyBuilder(name)
    b.set_spout("sentences", MemorySpout(SENTENCES * 4, Fields("sentence"), name=name, per_call=3), 2)
    b.set_bolt("split", SplitSentence(), 3).shuffle_grouping("sentences")
    b.set_bolt("count", AckAll(), 2).fields_grouping("split", Fields("word"))
    b.set_bolt("audit", AckAll(), 3).all_grouping("split")            # every word to every audit task
    r = run_topology(b, config(micro_batch_size=5))
    n = len(SENTENCES) * 4
    assert sorted(events(name, "ack")) == list(range(n))
    assert events(name, "fail") == [] and sorted(events(name, "emit")) == list(range(n))
    words = sum(len(s.split()) for s in SENTENCES) * 4
    assert r.acked == {"sentences": n} and r.failed == {"sentences": 0} and r.pending == {"sentences": 0}
    assert r.executed == {"split": n, "count": words, "audit": 3 * words}
    assert r.emitted["sentences"] == n and r.tuples == n


class AckOnTaskZeroOrReplay(BaseRichBolt):
    """Task 0 acks everything; other tasks ack only replays (first deliveries hang)."""

    def prepare(self, conf, context, collector):
        self.collector, self.task = collector, context.task_index

    def execute(self, tuple):
        if self.task == 0 or tuple["delivery"] > 1:
            self.collector.ack(tuple)


def test_every_copy_of_a_tuple_is_tracked_on_its_own(executor: str) -> None:
    """A spout tuple sent to two bolts, and a bolt's tuple sent to both tasks of an
    all-grouped bolt: each copy has an id of its own, so the tree waits for every copy --
    one copy failed fails the root, one copy never acked times it out."""
    name = uid("copies")
    b = TopologyBuilder(name)
    b.set_spout("s", MemorySpout(items(4), Fields("item"), name=name, deliveries=True), 1)
    b.set_bolt("ok", AckAll(), 1).shuffle_grouping("s")
    b.set_bolt("picky", FailFirst(), 1).shuffle_grouping("s")      # the second copy of each spout tuple
    r = run_topology(b, config())
    assert sorted(events(name, "fail")) == [0, 1, 2, 3] and sorted(events(name, "ack")) == [0, 1, 2, 3]
    assert r.executed == {"ok": 8, "picky": 8}

    name = uid("copies-all")
    b = TopologyBuilder(name)
    b.set_spout("s", MemorySpout(items(3), Fields("item"), name=name, deliveries=True), 1)
    b.set_bolt("pass", PassOn(), 1).shuffle_grouping("s")
    b.set_bolt("both", AckOnTaskZeroOrReplay(), 2).all_grouping("pass")
    r = run_topology(b, config(message_timeout_secs=1.5))
    assert r.timed_out == {"s": 3} and sorted(events(name, "ack")) == [0, 1, 2]


def test_a_tree_of_ten_thousand_tuples_per_spout_tuple_is_acked_once(executor: str) -> None:
    name = uid("tree")
    b = TopologyBuilder(name)
    b.set_spout("s", MemorySpout(items(3), Fields("item"), name=name), 1)
    b.set_bolt("fan", Fan(10_001), 2).shuffle_grouping("s")
    b.set_bolt("leaf", AckAll(), 3).shuffle_grouping("fan")
    r = run_topology(b, config())
    assert sorted(events(name, "ack")) == [0, 1, 2] and events(name, "fail") == []
    assert r.executed == {"fan": 3, "leaf": 30_003}


def test_a_tuple_never_acked_fails_after_the_timeout_and_is_replayed(executor: str) -> None:
    name = uid("timeout")
    b = TopologyBuilder(name)
    b.set_spout("s", MemorySpout(items(4), Fields("item"), name=name, deliveries=True), 1)
    b.set_bolt("lazy", AckOnReplay(), 2).shuffle_grouping("s")
    r = run_topology(b, config(message_timeout_secs=1.5))
    log = MEMORY_SPOUT_LOGS[name]
    for j in range(4):
        mine = [(e, d, t) for e, m, d, t in log if m == j]
        assert [(e, d) for e, d, _ in mine] == [("emit", 1), ("fail", 1), ("emit", 2), ("ack", 2)]
        assert mine[1][2] - mine[0][2] >= 1.5          # failed by the timeout, not before
    assert r.timed_out == {"s": 4} and r.failed == {"s": 4} and r.acked == {"s": 4}


def test_an_explicit_fail_replays_sooner_than_the_timeout(executor: str) -> None:
    name = uid("explicit")
    b = TopologyBuilder(name)
    b.set_spout("s", MemorySpout(items(6), Fields("item"), name=name, deliveries=True), 2)
    b.set_bolt("picky", FailFirst(), 2).shuffle_grouping("s")
    r = run_topology(b, config(message_timeout_secs=60))
    log = MEMORY_SPOUT_LOGS[name]
    for j in range(6):
        assert [(e, d) for e, m, d, _ in log if m == j] == [("emit", 1), ("fail", 1), ("emit", 2), ("ack", 2)]
    assert r.timed_out == {"s": 0} and r.failed == {"s": 6}
    assert r.wall_secs < 30                               # far from the 60 s timeout


def test_a_failed_multi_anchored_tuple_replays_every_root_it_is_anchored_to(executor: str) -> None:
    name = uid("multi")
    b = TopologyBuilder(name)
    b.set_spout("s", MemorySpout(items(4), Fields("item"), name=name, deliveries=True, per_call=4), 1)
    b.set_bolt("pass", PassOn(), 2).shuffle_grouping("s")
    b.set_bolt("pair", Pair(), 1).global_grouping("pass")
    b.set_bolt("check", FailFirst(), 1).shuffle_grouping("pair")
    run_topology(b, config(micro_batch_size=4))
    assert sorted(events(name, "fail")) == [0, 1, 2, 3]   # each pair's failure failed both its roots
    assert sorted(events(name, "ack")) == [0, 1, 2, 3]
    assert sorted(events(name, "emit")) == [0, 0, 1, 1, 2, 2, 3, 3]


def test_with_ackers_0_the_spout_gets_ack_right_after_emit_and_nothing_fails(executor: str) -> None:
    name = uid("noack")
    b = TopologyBuilder(name)
    b.set_spout("s", MemorySpout(items(5), Fields("item"), name=name, per_call=1), 1)
    b.set_bolt("fail", FailAll(), 2).shuffle_grouping("s")
    r = run_topology(b, config(ackers=0))
    log = [(e, m) for e, m, _, _ in MEMORY_SPOUT_LOGS[name]]
    assert log == [x for j in range(5) for x in (("emit", j), ("ack", j))]   # each ack right after its emit
    assert r.acked == {"s": 5} and r.failed == {"s": 0} and r.executed == {"fail": 5}


def test_unanchored_downstream_failures_fail_nothing(executor: str) -> None:
    name = uid("unanchored")
    b = TopologyBuilder(name)
    b.set_spout("s", MemorySpout(items(6), Fields("item"), name=name, deliveries=True), 1)
    b.set_bolt("pass", PassOn(anchored=False), 2).shuffle_grouping("s")
    b.set_bolt("fail", FailAll(), 2).shuffle_grouping("pass")
    r = run_topology(b, config())
    assert sorted(events(name, "ack")) == list(range(6)) and events(name, "fail") == []
    assert r.executed == {"pass": 6, "fail": 6}


def test_a_basic_bolt_anchors_and_acks_itself_and_failed_exception_fails_the_input(executor: str) -> None:
    name = uid("basic")
    b = TopologyBuilder(name)
    b.set_spout("s", MemorySpout(items(5), Fields("item"), name=name, deliveries=True), 1)
    b.set_bolt("basic", BasicFailFirst(), 2).shuffle_grouping("s")
    b.set_bolt("sink", AckAll(), 1).shuffle_grouping("basic")
    r = run_topology(b, config())
    for j in range(5):
        assert [(e, d) for e, m, d, _ in MEMORY_SPOUT_LOGS[name] if m == j] == [
            ("emit", 1), ("fail", 1), ("emit", 2), ("ack", 2)]
    assert r.executed == {"basic": 10, "sink": 5}


def test_max_spout_pending_bounds_the_tuples_in_flight_per_spout_task() -> None:
    global EXECUTOR
    EXECUTOR = "in-process"
    name = uid("pending")
    b = TopologyBuilder(name)
    b.set_spout("s", MemorySpout(items(12), Fields("item"), name=name, deliveries=True, per_call=1), 1)
    b.set_bolt("lazy", AckOnReplay(), 1).shuffle_grouping("s")
    run_topology(b, config(max_spout_pending=3, message_timeout_secs=0.3))
    outstanding, most = set(), 0
    for e, m, _, _ in MEMORY_SPOUT_LOGS[name]:
        if e == "emit":
            outstanding.add(m)
        else:
            outstanding.discard(m)
        most = max(most, len(outstanding))
    assert most == 3 and sorted(events(name, "ack")) == list(range(12))
    EXECUTOR = "spark"


def test_emit_returns_the_task_ids_and_emit_direct_reaches_one_task() -> None:
    seen: list[tuple[int, int]] = []

    class Router(BaseRichBolt):
        def prepare(self, conf, context, collector):
            self.collector, self.targets = collector, context.get_component_tasks("sink")

        def execute(self, tuple):
            tasks = self.collector.emit((tuple[0],), anchors=tuple)
            assert len(tasks) == 1 and tasks[0] in self.targets
            self.collector.emit_direct(self.targets[tuple[0] % 3], (tuple[0],), anchors=tuple, stream="direct")
            self.collector.ack(tuple)

        def declare_output_fields(self, declarer):
            declarer.declare(Fields("item"))
            declarer.declare(Fields("item"), "direct", direct=True)

    class Sink(BaseRichBolt):
        def prepare(self, conf, context, collector):
            self.collector, self.task = collector, context.task_index

        def execute(self, tuple):
            if tuple.source_stream == "direct":
                seen.append((tuple[0], self.task))
            self.collector.ack(tuple)

    name = uid("direct")
    b = TopologyBuilder(name)
    b.set_spout("s", MemorySpout(items(9), Fields("item"), name=name), 1)
    b.set_bolt("router", Router(), 1).shuffle_grouping("s")
    b.set_bolt("sink", Sink(), 3).shuffle_grouping("router").direct_grouping("router", "direct")
    run_topology(b, config(executor="in-process"))
    assert sorted(seen) == [(i, i % 3) for i in range(9)]
    assert sorted(events(name, "ack")) == list(range(9))


# -- stateful bolts ------------------------------------------------------------------------------

def stateful_topology(name: str, bolt: BaseStatefulBolt, sentences: list[str], tasks: int = 3,
                      grouping: str = "fields") -> TopologyBuilder:
    b = TopologyBuilder(name)
    b.set_spout("sentences", MemorySpout(sentences, Fields("sentence"), name=name, deliveries=True, per_call=2), 2)
    b.set_bolt("split", SplitWithDelivery(), 2).shuffle_grouping("sentences")
    count = b.set_bolt("count", bolt, tasks)
    if grouping == "fields":
        count.fields_grouping("split", Fields("word"))
    else:
        count.shuffle_grouping("split")
    b.set_bolt("after", AckAll(), 1).shuffle_grouping("count")
    return b


def test_stateful_word_count_is_exact_with_checkpoints_and_hooks(executor: str) -> None:
    name = uid("stateful")
    HOOKS.clear()
    sentences = SENTENCES * 3
    r = run_topology(stateful_topology(name, WordCount(), sentences), config(checkpoint_interval_ms=0,
                                                                             micro_batch_size=4))
    assert r.key_value_state("count") == word_truth(sentences)
    assert sorted(events(name, "ack")) == list(range(len(sentences))) and events(name, "fail") == []
    assert r.checkpoints >= 2 and r.pending == {"sentences": 0}
    prepares = [h[1] for h in HOOKS if h[0] == "pre_prepare"]
    commits = [h[1] for h in HOOKS if h[0] == "pre_commit"]
    assert prepares and sorted(set(prepares)) == sorted(set(commits))   # every prepared checkpoint committed
    for c in set(prepares):                                             # each prepared before committed
        assert HOOKS.index(("pre_prepare", c)) < HOOKS.index(("pre_commit", c))
    for t in range(3):
        kv = open_key_value_state("memory://", f"{name}:count:{t}")
        assert kv.prepared_txid() is None and kv.committed_txid() == max(prepares)


def test_a_stateful_bolt_error_rolls_back_and_replays_and_the_counts_come_out_exact(executor: str) -> None:
    name = uid("rollback")
    HOOKS.clear()
    sentences = SENTENCES * 2
    r = run_topology(stateful_topology(name, WordCountFailingOnce(), sentences),
                     config(checkpoint_interval_ms=200, micro_batch_size=3))
    assert r.key_value_state("count") == word_truth(sentences)           # nothing counted twice
    assert ("pre_rollback",) in HOOKS
    assert events(name, "fail") and sorted(set(events(name, "ack"))) == list(range(len(sentences)))
    assert any("database is down" in f for f in r.failures)
    for t in range(3):                                                   # no prepared state left behind
        assert open_key_value_state("memory://", f"{name}:count:{t}").prepared_txid() is None


def test_with_ackers_0_stateful_bolts_still_checkpoint(executor: str) -> None:
    """No tuple is tracked, so no ack is held, yet the states' changes are checkpointed
    (on the interval and at the end of the run): a new reader finds them committed."""
    name = uid("noack-state")
    r = run_topology(stateful_topology(name, WordCount(), SENTENCES), config(ackers=0, checkpoint_interval_ms=0))
    assert r.checkpoints >= 1 and r.acked == {"sentences": len(SENTENCES)}
    merged: dict = {}
    for t in range(3):
        kv = open_key_value_state("memory://", f"{name}:count:{t}")
        assert kv.prepared_txid() is None and kv.committed_txid() is not None
        merged.update(kv.items())
    assert merged == word_truth(SENTENCES)


def test_recovery_commits_a_prepared_checkpoint_and_discards_an_unprepared_one() -> None:
    tid = uid("recover")
    b = stateful_topology(tid, WordCount(), SENTENCES).build()
    store = MemoryTransactionalState(tid)
    ns = [f"{tid}:count:{t}" for t in range(3)]
    a, c = open_key_value_state("memory://", ns[0]), open_key_value_state("memory://", ns[2])
    a.put("cow", 7); a.prepare_commit(4)
    c.put("cow", 9); c.prepare_commit(4)
    a.commit(4)                                            # the crash came between the two commits
    store.set("checkpoint", {"txid": 4, "phase": "prepared", "states": ns})
    cp = Checkpointer(b, "memory://", {}, store, 1000, time.monotonic)
    cp.recover()
    assert open_key_value_state("memory://", ns[2]).get("cow") == 9 and cp.next_id == 5
    assert store.get("checkpoint")["phase"] == "committed"
    c2 = open_key_value_state("memory://", ns[2])
    c2.put("cow", 99); c2.prepare_commit(5)               # prepared by some, not recorded as prepared
    store.set("checkpoint", {"txid": 5, "phase": "preparing", "states": ns})
    Checkpointer(b, "memory://", {}, store, 1000, time.monotonic).recover()
    after = open_key_value_state("memory://", ns[2])
    assert after.get("cow") == 9 and after.prepared_txid() is None
    assert store.get("checkpoint")["phase"] == "rolled back"


def test_a_stateful_run_resumes_from_its_last_checkpoint() -> None:
    name = uid("resume")
    global EXECUTOR
    EXECUTOR = "in-process"
    first = run_topology(stateful_topology(name, WordCount(), SENTENCES), config(checkpoint_interval_ms=0))
    again = run_topology(stateful_topology(name, WordCount(), SENTENCES), config(checkpoint_interval_ms=0))
    assert again.key_value_state("count") == word_truth(SENTENCES * 2)
    assert again.first_txid == first.last_txid + 1
    EXECUTOR = "spark"


def task_states(name: str, tasks: int) -> list[dict]:
    return [dict(open_key_value_state("memory://", f"{name}:count:{t}").items()) for t in range(tasks)]


def test_a_changed_parallelism_moves_every_count_to_the_task_its_word_now_goes_to() -> None:
    """Storm's rebalance: the stateful word count with 2 count tasks, then 3, then 1 -- each
    start moves the counts to the tasks the fields grouping now sends their words to, so
    the counts go on exactly (before: a word whose task changed started again from 0)."""
    name = uid("rebalance")
    cfg = config(checkpoint_interval_ms=0, executor="in-process")
    run_topology(stateful_topology(name, WordCount(), SENTENCES, tasks=2), cfg)
    store = MemoryTransactionalState(name)
    assert store.get("stateful") == {"count": {"parallelism": 2, "tasks": 2}}
    for n, runs in ((3, 2), (1, 3)):
        r = run_topology(stateful_topology(name, WordCount(), SENTENCES, tasks=n), cfg)
        assert r.key_value_state("count") == word_truth(SENTENCES * runs)
        assert store.get("stateful") == {"count": {"parallelism": n, "tasks": n}}
        states = task_states(name, 3)
        for t, counts in enumerate(states):
            assert all(stable_hash(w) % n == t for w in counts), (n, t, counts)
        merged = [w for counts in states for w in counts]
        assert len(merged) == len(set(merged)) == len(word_truth(SENTENCES))   # each word in one task
        assert store.get("checkpoint")["phase"] == "committed"


@pytest.mark.parametrize("point", ["rebalance.preparing", "rebalance.before_prepared", "checkpoint.prepared",
                                   "checkpoint.after_commit", "rebalance.before_record"])
def test_a_rebalance_that_fails_midway_is_finished_by_the_next_start(point: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The state move stops at ``point`` (a failure where a SIGKILL would be, in memory; the
    SIGKILL itself: tests/transactional/engine/test_core_servers.py); the next start loses and doubles nothing."""
    import transactional.engine.core.checkpoint as checkpoint

    name = uid("rebalance-fail")
    cfg = config(checkpoint_interval_ms=0, executor="in-process")
    run_topology(stateful_topology(name, WordCount(), SENTENCES, tasks=2), cfg)

    def fail_at(where: str, **labels: object) -> None:
        if where == point:
            raise RuntimeError(f"stopped at {where}")
    monkeypatch.setattr(checkpoint, "crash_point", fail_at)
    with pytest.raises(Exception, match=f"stopped at {point}"):
        run_topology(stateful_topology(name, WordCount(), SENTENCES, tasks=3), cfg)
    monkeypatch.undo()
    r = run_topology(stateful_topology(name, WordCount(), SENTENCES, tasks=3), cfg)
    assert r.key_value_state("count") == word_truth(SENTENCES * 2)
    for t, counts in enumerate(task_states(name, 3)):
        assert all(stable_hash(w) % 3 == t for w in counts), (t, counts)
    assert MemoryTransactionalState(name).get("stateful") == {"count": {"parallelism": 3, "tasks": 3}}


def test_state_that_cannot_be_moved_by_its_grouping_is_refused_naming_bolt_and_both_parallelisms() -> None:
    """A shuffle-grouped stateful bolt: its tasks may grow (nothing is left behind), but not
    shrink while a dropped task holds state -- refused before anything is written."""
    name = uid("rebalance-shuffle")
    cfg = config(checkpoint_interval_ms=0, executor="in-process")
    run_topology(stateful_topology(name, WordCount(), SENTENCES, tasks=2, grouping="shuffle"), cfg)
    before = task_states(name, 2)
    assert before[1]
    with pytest.raises(StateLossError) as e:
        run_topology(stateful_topology(name, WordCount(), SENTENCES, tasks=1, grouping="shuffle"), cfg)
    assert str(e.value) == (
        f"stateful bolt 'count' of topology {name!r} ran with parallelism 2 and is now given 1, but its state "
        f"cannot be moved to the new tasks: its inputs are shuffle groupings, which do not say which task a key "
        f"belongs to, and tasks 1..1 hold {len(before[1])} key(s). Nothing was changed; run it with parallelism 2 "
        "again (set_bolt('count', ..., 2))")
    assert task_states(name, 2) == before
    assert MemoryTransactionalState(name).get("stateful") == {"count": {"parallelism": 2, "tasks": 2}}
    run_topology(stateful_topology(name, WordCount(), SENTENCES, tasks=3, grouping="shuffle"), cfg)
    assert MemoryTransactionalState(name).get("stateful") == {"count": {"parallelism": 3, "tasks": 3}}


def test_a_key_in_a_task_its_grouping_does_not_send_it_to_is_refused() -> None:
    """Keys that are not the grouped values cannot be moved by the grouping: refused."""
    name = uid("rebalance-keys")
    cfg = config(checkpoint_interval_ms=0, executor="in-process")
    run_topology(stateful_topology(name, WordCount(), SENTENCES, tasks=2), cfg)
    store = MemoryTransactionalState(name)
    word = next(w for w in word_truth(SENTENCES) if stable_hash(w) % 2 == 0 and stable_hash(w) % 3 != 1)
    kv = open_key_value_state("memory://", f"{name}:count:1")
    kv.put(word, 1); kv.prepare_commit(99); kv.commit(99)
    with pytest.raises(StateLossError, match=(
            rf"ran with parallelism 2 and is now given 3, but its state cannot be moved to the new tasks: key "
            rf"'{word}' is in the state of tasks 0 and 1\. Nothing was changed")):
        run_topology(stateful_topology(name, WordCount(), SENTENCES, tasks=3), cfg)
    assert store.get("stateful") == {"count": {"parallelism": 2, "tasks": 2}}


# -- bad input: clear errors, early ------------------------------------------------------------------

class Silent(BaseRichSpout):
    def next_tuple(self):
        pass

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("x"))


def test_builder_errors_name_the_component_and_the_fix() -> None:
    b = TopologyBuilder(uid("bad"))
    with pytest.raises(TopologyError, match="'s' .*is not a core spout; subclass spouts.BaseRichSpout"):
        b.set_spout("s", object())
    b.set_spout("s", Silent())
    b.set_bolt("x", AckAll()).shuffle_grouping("nope")
    with pytest.raises(TopologyError, match="bolt 'x' subscribes to unknown component 'nope'"):
        b.build()
    with pytest.raises(TopologyError, match="subclass BaseRichBolt, BaseStatefulBolt"):
        TopologyBuilder("y").set_bolt("b", object())


def test_a_bad_emit_stops_the_run_naming_component_task_and_fields() -> None:
    class TooMany(BaseRichBolt):
        def prepare(self, conf, context, collector):
            self.collector = collector

        def execute(self, tuple):
            self.collector.emit((1, 2), anchors=tuple)

        def declare_output_fields(self, declarer):
            declarer.declare(Fields("one"))

    b = TopologyBuilder(uid("emit"))
    b.set_spout("s", MemorySpout(items(2), Fields("item"), name=uid("e")), 1)
    b.set_bolt("too-many", TooMany()).shuffle_grouping("s")
    with pytest.raises(TopologyFailedError, match=r"'too-many' task 0 emitted 2 values on stream 'default', "
                                                  r"which declares 1 fields"):
        run_topology(b, config(executor="in-process"))


def test_anchoring_to_an_acked_input_is_refused() -> None:
    class Late(BaseRichBolt):
        def prepare(self, conf, context, collector):
            self.collector = collector

        def execute(self, tuple):
            self.collector.ack(tuple)
            self.collector.emit((1,), anchors=tuple)

        def declare_output_fields(self, declarer):
            declarer.declare(Fields("one"))

    b = TopologyBuilder(uid("late"))
    b.set_spout("s", MemorySpout(items(1), Fields("item"), name=uid("l")), 1)
    b.set_bolt("late", Late()).shuffle_grouping("s")
    with pytest.raises(TopologyFailedError, match="anchored to an input it had already acked"):
        run_topology(b, config(executor="in-process"))


def test_a_checkpoint_interval_not_below_the_timeout_is_refused() -> None:
    b = stateful_topology(uid("interval"), WordCount(), SENTENCES)
    with pytest.raises(ConfigError, match="checkpoint_interval_ms=5000 must be below message_timeout_secs=5"):
        run_topology(b, config(executor="in-process", checkpoint_interval_ms=5000, message_timeout_secs=5))


def test_a_spout_that_raises_stops_the_run_naming_it() -> None:
    class Broken(Silent):
        def next_tuple(self):
            raise ConnectionError("queue unreachable")

    b = TopologyBuilder(uid("broken"))
    b.set_spout("queue", Broken(), 2)
    b.set_bolt("sink", AckAll()).shuffle_grouping("queue")
    with pytest.raises(TopologyFailedError, match=r"spout 'queue' task 0 raised in next_tuple: "
                                                  r"ConnectionError: queue unreachable"):
        run_topology(b, config(executor="in-process"))


def test_trident_status_shows_spout_tuples_counts_and_the_last_error_per_component() -> None:
    from transactional.ops.status import format_status, topology_status

    name = uid("status")
    run_topology(stateful_topology(name, WordCountFailingOnce(), SENTENCES), config(executor="in-process"))
    st = topology_status("memory://", name)
    run = st["run"]
    assert run["kind"] == "core" and run["running"] is False and run["stopped_because"] == "spout has nothing more"
    assert run["acked"] == {"sentences": 5} and run["pending"] == {"sentences": 0} and run["failed"]["sentences"] >= 1
    assert run["errors"]["count"]["error"] == "RuntimeError: database is down"
    assert "raise RuntimeError" in run["errors"]["count"]["traceback"]
    text = format_status(st)
    assert "spout sentences: acked 5, failed" in text and "pending 0" in text
    assert "last error in count (task" in text and "RuntimeError: database is down" in text
