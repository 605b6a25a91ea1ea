"""Storm's Trident State API (trident.state): State, StateFactory, StateUpdater, QueryFunction,
new_static_state, partition_persist and state_query with any factory, map states over a
user's backing, the registry of state URL schemes, and context.state() in transactional
committers. In-process runs: no server."""

from __future__ import annotations

import threading
import uuid

import pytest

from spouts import MemoryTransactionalSpout, OpaqueMemoryTransactionalSpout
from state.map import reset_memory_maps
from state.user_backing import register_map_backing, unregister_map_backing
from transactional import (
    BaseTransactionalBolt,
    Committer,
    Fields,
    TopologyConfig,
    TransactionalTopologyBuilder,
    run_topology,
)
from transactional.exceptions import ConfigError
from trident import Count, TridentTopology
from trident.state import (
    EPOCH,
    BaseQueryFunction,
    BaseStateUpdater,
    NonTransactionalMapFactory,
    OpaqueMapFactory,
    State,
    StateFactory,
    TransactionalMapFactory,
    forget_states,
)

CALLS: dict[str, list] = {}       # state id -> [(event, txid, partition)]
TABLES: dict[str, dict] = {}      # a "database" per test: name -> {key: value}
_lock = threading.Lock()


def config(**kw) -> TopologyConfig:
    return TopologyConfig(executor="in-process", progress=False, max_spout_pending=3, **kw)


def data(n: int = 12, parts: int = 2) -> dict[int, list[tuple[str]]]:
    words = ["a", "b", "c", "d"]
    return {p: [(words[(i + p) % 4],) for i in range(n)] for p in range(parts)}


class RecordingState(State):
    """Records every call; applies a batch's rows at commit, skipping a txid it applied."""

    def __init__(self, sid: str, partition: int, epoch: int | None) -> None:
        self.sid, self.partition, self.epoch = sid, partition, epoch
        self.last = 0
        self.pending: list = []

    def log(self, what: str, txid: int) -> None:
        with _lock:
            CALLS.setdefault(self.sid, []).append((what, txid, self.partition))

    def begin_commit(self, txid: int) -> None:
        self.log("begin", txid)
        self.txid, self.pending = txid, []

    def commit(self, txid: int) -> None:
        self.log("commit", txid)
        if txid > self.last:
            table = TABLES.setdefault(self.sid, {})
            for k in self.pending:
                table[k] = table.get(k, 0) + 1
            self.last = txid

    def lookup(self, keys: list) -> list:
        return [TABLES.get(self.sid, {}).get(k) for k in keys]


class RecordingFactory(StateFactory):
    def __init__(self, sid: str) -> None:
        self.sid = sid

    def make_state(self, conf, metrics, partition_index, num_partitions):
        with _lock:
            CALLS.setdefault(self.sid, []).append(("make", conf[EPOCH], partition_index, num_partitions))
        return RecordingState(self.sid, partition_index, conf[EPOCH])


class CountWords(BaseStateUpdater):
    def update_state(self, state, tuples, collector):
        state.pending += [t["word"] for t in tuples]
        for t in tuples:
            collector.emit((t["word"] + "!",))


class Lookup(BaseQueryFunction):
    def batch_retrieve(self, state, tuples):
        return state.lookup([t["word"] for t in tuples])

    def execute(self, tuple, result, collector):
        collector.emit((result,))


def expected_counts(d: dict) -> dict:
    out: dict = {}
    for rows in d.values():
        for (w,) in rows:
            out[w] = out.get(w, 0) + 1
    return out


def test_partition_persist_any_factory_begin_commit_in_txid_order() -> None:
    sid = uuid.uuid4().hex
    d = data()
    t = TridentTopology(f"states-{sid[:6]}")
    got: list = []
    st = (t.new_stream("s", MemoryTransactionalSpout(d, Fields("word"), 3)).parallelism_hint(2)
          .partition_persist(RecordingFactory(sid), Fields("word"), CountWords(), Fields("out")))
    st.new_values_stream().filter(Fields("out"), lambda tp: got.append(tp[0]) or True)
    run_topology(t.build(), config())
    assert TABLES[sid] == expected_counts(d)
    assert sorted(got) == sorted(w + "!" for rows in d.values() for (w,) in rows)
    calls = CALLS[sid]
    makes = [c for c in calls if c[0] == "make"]
    assert sorted(m[2] for m in makes) == [0, 1] and all(m[3] == 2 and m[1] is not None for m in makes)
    for p in (0, 1):
        seq = [(w, tx) for w, tx, part in (c for c in calls if c[0] != "make") if part == p]
        # begin(t), commit(t), begin(t+1) ... strictly increasing
        assert [w for w, _ in seq] == ["begin", "commit"] * (len(seq) // 2)
        txids = [tx for _, tx in seq[::2]]
        assert txids == sorted(txids) and len(set(txids)) == len(txids) == 4
        assert [tx for _, tx in seq[1::2]] == txids
    forget_states(t.topology_id)


def test_new_static_state_and_state_query() -> None:
    sid = uuid.uuid4().hex
    TABLES[sid] = {"a": 10, "b": 20}
    t = TridentTopology(f"static-{sid[:6]}")
    table = t.new_static_state(RecordingFactory(sid))
    seen: list = []
    (t.new_stream("s", MemoryTransactionalSpout({0: [("a",), ("b",), ("z",)]}, Fields("word"), 2))
     .state_query(table, Fields("word"), Lookup(), Fields("found"))
     .filter(Fields("word", "found"), lambda tp: seen.append(tuple(tp)) or True))
    run_topology(t.build(), config())
    assert sorted(seen, key=str) == [("a", 10), ("b", 20), ("z", None)]
    with pytest.raises(ConfigError, match="static state"):
        table.new_values_stream()
    forget_states(t.topology_id)


class DictBacking:
    """A user's IBackingMap: a dict per map in TABLES."""

    def __init__(self, name: str) -> None:
        self.d = TABLES.setdefault(name, {})
        self.puts = 0

    def multi_get(self, keys):
        return [self.d.get(k) for k in keys]

    def multi_put(self, keys, values):
        self.puts += 1
        self.d.update(zip(keys, values, strict=True))


@pytest.mark.parametrize("kind", ["transactional", "opaque", "non-transactional"])
def test_map_state_over_a_users_backing(kind: str) -> None:
    name = f"m-{uuid.uuid4().hex[:8]}"
    factory = {"transactional": TransactionalMapFactory, "opaque": OpaqueMapFactory,
               "non-transactional": NonTransactionalMapFactory}[kind](lambda conf, p, n: DictBacking(name), name)
    d = data(10)
    t = TridentTopology(f"umap-{name}")
    counts = (t.new_stream("s", MemoryTransactionalSpout(d, Fields("word"), 3))
              .group_by(Fields("word")).persistent_aggregate(factory, Count(), Fields("count")))
    assert counts.name == name
    run_topology(t.build(), config())
    stored = TABLES[name]
    want = expected_counts(d)
    field = {"transactional": "val", "opaque": "curr"}.get(kind)
    got = {k: (v[field] if field else v) for k, v in stored.items() if not k.startswith("~")}
    assert got == want
    forget_states(t.topology_id)


def test_opaque_map_over_a_users_backing_with_an_opaque_spout_short_first_attempts() -> None:
    name = f"m-{uuid.uuid4().hex[:8]}"
    d = data(9)

    def short(tx, partition, start, end):
        return end - 1 if tx.attempt_id == 1 and end - start > 1 else end

    t = TridentTopology(f"umap-{name}")
    (t.new_stream("s", OpaqueMemoryTransactionalSpout(d, Fields("word"), 3, deliver=short))
     .group_by(Fields("word")).persistent_aggregate(OpaqueMapFactory(lambda c, p, n: DictBacking(name), name),
                                                     Count(), Fields("count")))
    run_topology(t.build(), config())
    got = {k: v["curr"] for k, v in TABLES[name].items() if not k.startswith("~")}
    assert got == expected_counts(d)
    forget_states(t.topology_id)


class TxOnlyFactory(RecordingFactory):
    opaque_safe = False


def test_a_state_that_only_skips_replays_is_refused_with_an_opaque_spout() -> None:
    t = TridentTopology("refuse-opaque")
    (t.new_stream("s", OpaqueMemoryTransactionalSpout(data(), Fields("word"), 3))
     .partition_persist(TxOnlyFactory("x"), Fields("word"), CountWords()))
    with pytest.raises(ConfigError, match=r"state 'TxOnlyFactory' skips a replayed txid.*opaque spout\(s\) \['s'\]"):
        t.build()


def test_partition_persist_refuses_what_is_not_a_factory() -> None:
    t = TridentTopology("not-a-factory")
    s = t.new_stream("s", MemoryTransactionalSpout(data(), Fields("word"), 3))
    with pytest.raises(ConfigError, match=r"trident.state.StateFactory \(make_state"):
        s.partition_persist(object(), Fields("word"), CountWords())


# -- the registry of state URL schemes ------------------------------------------------------------

def open_dict_backing(url: str, namespace: str, **options):
    return DictBacking(f"registered:{namespace}")


@pytest.fixture
def dictdb():
    register_map_backing("dictdb", open_dict_backing, "dictdb://anything")
    yield
    unregister_map_backing("dictdb")


def test_a_registered_scheme_opens_every_map_over_the_users_backing(dictdb) -> None:
    tid = f"reg-{uuid.uuid4().hex[:6]}"
    d = data(8)
    t = TridentTopology(tid)
    (t.new_stream("s", MemoryTransactionalSpout(d, Fields("word"), 3))
     .group_by(Fields("word")).persistent_aggregate(__import__("trident").state.opaque("counts"), Count(),
                                                     Fields("count")))
    run_topology(t.build(), config(state="dictdb://here"))
    stored = TABLES[f"registered:{tid}:counts"]
    assert {k: v["curr"] for k, v in stored.items() if not k.startswith("~")} == expected_counts(d)


def test_an_unknown_scheme_names_the_known_ones(dictdb) -> None:
    with pytest.raises(Exception, match=r"state URL 'nosuch://x' is not supported; use 'memory://' or "
                                        r"'redis://.*'dictdb://anything'"):
        config(state="nosuch://x")


def test_a_builtin_scheme_cannot_be_replaced() -> None:
    with pytest.raises(ConfigError, match="'redis' is built in"):
        register_map_backing("redis", open_dict_backing)


# -- transactional committers reach the same states ---------------------------------------------------

class CommitterUsingState(BaseTransactionalBolt, Committer):
    def __init__(self, factory: StateFactory) -> None:
        self.factory = factory

    def prepare(self, conf, context, collector, attempt):
        self.state = context.state(self.factory)
        self.epoch = context.epoch
        self.words: list = []

    def execute(self, tuple):
        self.words.append(tuple["word"])

    def finish_batch(self):
        assert self.epoch is not None and self.state.epoch == self.epoch
        self.state.pending += self.words

    def declare_output_fields(self, declarer):
        pass


def test_a_transactional_committer_reaches_states_through_its_context() -> None:
    sid = uuid.uuid4().hex
    d = data(10)
    tid = f"txc-{sid[:6]}"
    b = TransactionalTopologyBuilder(tid, "spout", MemoryTransactionalSpout(d, Fields("word"), 3), 2)
    b.set_bolt("sink", CommitterUsingState(RecordingFactory(sid)), 2).fields_grouping("spout", Fields("word"))
    run_topology(b.build(), config())
    assert TABLES[sid] == expected_counts(d)
    for p in (0, 1):
        seq = [(c[0], c[1]) for c in CALLS[sid] if c[0] != "make" and c[2] == p]
        txids = [tx for w, tx in seq if w == "begin"]
        assert txids == sorted(txids) and [w for w, _ in seq] == ["begin", "commit"] * len(txids)
    forget_states(tid)
    reset_memory_maps(tid)


class PlainFactory(StateFactory):
    def make_state(self, conf, metrics, partition_index, num_partitions):
        return State()


def test_context_state_refuses_the_processing_phase() -> None:
    class NotCommitter(BaseTransactionalBolt):
        def prepare(self, conf, context, collector, attempt):
            context.state(PlainFactory())

        def execute(self, tuple):
            pass

        def finish_batch(self):
            pass

        def declare_output_fields(self, declarer):
            pass

    b = TransactionalTopologyBuilder("proc-state", "spout", MemoryTransactionalSpout(data(2), Fields("word"), 3), 1)
    b.set_bolt("x", NotCommitter()).shuffle_grouping("spout")
    with pytest.raises(Exception, match="user states are written in the commit phase: mark the bolt a Committer"):
        run_topology(b.build(), config())


def test_a_task_keeps_its_state_across_batches_even_with_a_lambda_in_the_factory() -> None:
    name = f"m-{uuid.uuid4().hex[:8]}"
    made: list = []

    def backing(conf, p, n):
        made.append(p)
        return DictBacking(name)

    t = TridentTopology(f"keep-{name}")
    (t.new_stream("s", MemoryTransactionalSpout(data(12), Fields("word"), 3))
     .group_by(Fields("word")).persistent_aggregate(OpaqueMapFactory(lambda c, p, n: backing(c, p, n), name),
                                                     Count(), Fields("count")))
    run_topology(t.build(), config())
    assert made == [0]                 # one task, four batches: one state
