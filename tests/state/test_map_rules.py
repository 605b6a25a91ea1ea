"""The exactly-once rules of the map wrappers, as properties (memory backing).

What a failed attempt of a txid may leave behind, and how the next attempt must treat
it: reads in a replay see the committed base (never a failed attempt's value), a key
updated several times in one txid keeps every update, values a failed opaque attempt
wrote are rolled back before another attempt commits (nothing to interpret later), and a
write from an older driver epoch is refused whatever its txid.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spouts import MemoryTransactionalSpout
from state.keys import check_state_name, encode_key, stored_key
from state.map import (
    WRITTEN_KEY,
    CounterMap,
    Fence,
    FenceCell,
    MapState,
    MemoryMapBacking,
    NonTransactionalMap,
    OpaqueMap,
    TransactionalMap,
    fence_refusal,
    map_kind,
    open_map,
    open_memory_backing,
    reset_memory_maps,
)
from transactional import BaseTransactionalBolt, Committer, Fields, TransactionalTopologyBuilder
from transactional.config import TopologyConfig
from transactional.engine.maps import StateRegistry
from transactional.engine.plan import ExecutorStates, compile_plan
from transactional.exceptions import (
    ConfigError,
    LeadershipLostError,
    StateAheadError,
    StateCorruptError,
    UnstorableValueError,
)

KEYS = ["a", "b", "c", "d"]
batches = st.lists(st.dictionaries(st.sampled_from(KEYS), st.integers(1, 9), min_size=1), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(batches, st.data())
def test_opaque_map_counts_committed_batches_once_whatever_failed_commits_left_behind(committed, data):
    """Before the committed attempt of some txids, failed attempts wrote *different*
    batches (their flush ran, then the driver died or a later step failed). The map
    must end with exactly the sum of the committed batches, and hold no value of a
    failed attempt once the txid is committed."""
    backing = MemoryMapBacking()
    m = OpaqueMap(backing)
    for txid, batch in enumerate(committed, start=1):
        attempt = 1
        for _ in range(data.draw(st.integers(0, 2), label=f"failed attempts of txid {txid}")):
            other = data.draw(st.dictionaries(st.sampled_from(KEYS), st.integers(1, 9), min_size=1))
            m.begin_commit(txid, attempt)
            if attempt > 1:
                m.rollback(["driver"])
            m.multi_combine(list(other), list(other.values()), "sum")
            m.flush()          # written, never recorded as committed
            m.abort()
            attempt += 1
        m.begin_commit(txid, attempt)
        if attempt > 1:
            m.rollback(["driver"])
        m.multi_combine(list(batch), list(batch.values()), "sum")
        m.commit(txid)
        stored = [v for k, v in backing.data.items() if not k.startswith(WRITTEN_KEY)]
        assert all(v["txid"] < txid or v["attempt"] in (None, attempt) for v in stored), stored
    want = {k: sum(b.get(k, 0) for b in committed) or None for k in KEYS}
    assert dict(zip(KEYS, m.multi_get(KEYS), strict=True)) == want


def test_a_leftover_of_a_failed_attempt_is_rolled_back_not_counted_twice():
    """Trident's rule alone double counts: attempt 1 of txid 1 wrote a and b and failed,
    attempt 2 emitted only b; txid 2 counts a again. Before attempt 2 commits, what
    attempt 1 wrote (its record lists a and b) is put back to the committed value."""
    backing = MemoryMapBacking()
    m = OpaqueMap(backing)
    m.begin_commit(1, 1)
    m.multi_combine(["a", "b"], [1, 1])
    m.flush()                                         # attempt 1 wrote a and b, then failed
    m.begin_commit(1, 2)
    assert m.rollback(["driver", "counts.0"]) == 2
    assert backing.data["a"] == {"txid": 1, "attempt": None, "curr": None, "prev": None}
    m.multi_combine(["b"], [1])                       # attempt 2 of txid 1 emitted only b
    m.commit(1)
    m.begin_commit(2, 1)
    m.multi_combine(["a"], [1])                       # txid 2 continues where txid 1 ended: a
    m.commit(2)
    assert m.get("a") == 1 and m.get("b") == 1


@pytest.mark.parametrize("kind", [TransactionalMap, OpaqueMap])
def test_a_replay_reads_the_committed_base_not_the_failed_attempts_value(kind):
    """A read-modify-write committer (read, add, write back with "replace") after attempt
    1 wrote its sum and failed: attempt 2 must read the committed 10, not attempt 1's 15."""
    m = kind(MemoryMapBacking())
    m.begin_commit(1, 1)
    m.multi_combine(["n"], [10], "replace")
    m.commit(1)

    def read_add_write(attempt: int, rollback: bool) -> None:
        m.begin_commit(2, attempt)
        if rollback:
            m.rollback(["driver"])
        (n,) = m.multi_get(["n"])
        m.multi_combine(["n"], [n + 5], "replace")

    read_add_write(1, False)
    m.flush()                                         # attempt 1 wrote 15 and failed
    read_add_write(2, True)                           # the replay of txid 2
    m.commit(2)
    assert m.get("n") == 15


@pytest.mark.parametrize("kind", [TransactionalMap, OpaqueMap])
def test_every_update_of_a_key_in_one_txid_counts(kind):
    """Repeated keys in one call, two calls (two committer tasks or two committers on one
    map): 24 tuples are 24, in one write per map and txid."""
    backing = MemoryMapBacking()
    m = kind(backing)
    m.begin_commit(1, 1)
    assert m.multi_combine(["w", "w", "x"], [6, 6, 1]) == [6, 12, 1]
    m.multi_combine(["w"], [6])                       # task 1 of the committer
    m.multi_update(["w"], lambda v: v + 6)            # another committer on the same map
    before = backing.round_trips
    m.commit(1)
    assert backing.round_trips - before == 1
    assert m.get("w") == 24 and m.get("x") == 1


def test_a_transactional_replay_after_a_full_write_applies_nothing_again():
    m = TransactionalMap(MemoryMapBacking())
    for attempt in (1, 2):
        m.begin_commit(1, attempt)
        m.multi_combine(["w", "w"], [3, 4])
        m.multi_combine(["w"], [5])
        m.commit(1)
    assert m.get("w") == 12


@settings(max_examples=100, deadline=None)
@given(batches)
def test_transactional_map_replaying_any_committed_batch_changes_nothing(committed):
    m = TransactionalMap(MemoryMapBacking())
    for txid, batch in enumerate(committed, start=1):
        for attempt in (1, 2):   # a replay of the identical batch after a crash mid-commit
            m.begin_commit(txid, attempt)
            m.multi_combine(list(batch), list(batch.values()), "sum")
            m.flush()
        m.commit(txid)
    assert dict(zip(KEYS, m.multi_get(KEYS), strict=True)) == {
        k: sum(b.get(k, 0) for b in committed) or None for k in KEYS}


def test_nothing_is_written_before_the_commit():
    backing = MemoryMapBacking()
    m = OpaqueMap(backing)
    m.begin_commit(1, 1)
    m.multi_combine(["a"], [1])
    m.abort()                                         # a later commit-phase bolt failed
    assert backing.data == {}


# -- fencing ----------------------------------------------------------------------------------

@given(st.integers(0, 5), st.integers(0, 9), st.integers(0, 5), st.integers(0, 9))
def test_fence_refuses_an_older_epoch_whatever_its_txid_and_an_older_txid(se, st_, e, t):
    verdict = fence_refusal(se, st_, Fence(e, t))
    assert verdict == ("epoch" if se > e else "txid" if st_ > t else None)


def test_a_stale_driver_cannot_write_the_txid_a_newer_driver_committed():
    """Driver 1 (epoch 1) is paused before writing txid 4; driver 2 (epoch 2) raised the
    fence and committed txid 4. Driver 1's same-txid write is refused and writes nothing."""
    cell = FenceCell()
    backing = MemoryMapBacking(cell)
    stale, new = OpaqueMap(backing), OpaqueMap(backing)
    stale.begin_commit(4, 1, epoch=1)
    stale.multi_combine(["a"], [100])
    backing.multi_put([], [], Fence(2, None))          # driver 2 starts
    new.begin_commit(4, 2, epoch=2)
    new.multi_combine(["a"], [1])
    new.commit(4)
    with pytest.raises(LeadershipLostError, match=r"newer epoch \(2\).*epoch is 1"):
        stale.commit(4)
    assert new.get("a") == 1 and backing.data[encode_key("a")]["attempt"] == 2
    with pytest.raises(StateAheadError, match="txid 4.*txid 3"):
        backing.multi_put(["a"], [{}], Fence(2, 3))


# -- a read in txid t sees the state as of t-1 --------------------------------------------------

def _map(kind: str, backing: MemoryMapBacking, writer: str = "driver") -> MapState:
    return {"transactional": TransactionalMap, "opaque": OpaqueMap, "counters": CounterMap}[kind](backing,
                                                                                                writer=writer)


@pytest.mark.parametrize("kind", ["transactional", "opaque", "counters"])
def test_a_replay_reads_what_its_first_attempt_read(kind):
    """Txid 1 committed a=2. Attempt 1 of txid 2 queries, reads, adds (a+3, b+4), writes,
    and the driver dies before recording txid 2. Its replay must see exactly what attempt
    1 saw -- the query (``multi_get_committed``), an updater's old value (``multi_get``
    before the update), the new values -- whatever attempt 1 already wrote."""
    backing = MemoryMapBacking()
    m = _map(kind, backing)
    m.begin_commit(1, 1, epoch=1)
    m.multi_combine(["a"], [2], "sum")
    m.commit(1)

    def attempt(a: int) -> tuple:
        m.last_committed = 1
        m.begin_commit(2, a, epoch=1)
        if a > 1:
            m.rollback(["driver"])
        query = m.multi_get_committed(["a", "b"])
        old = m.multi_get(["a", "b"])
        new = m.multi_combine(["a", "b"], [3, 4], "sum")
        after = m.multi_get_committed(["a", "b"])
        m.flush()                       # the write of txid 2 (then, for attempt 1, the crash)
        m.abort()
        return query, old, new, after, m.multi_get(["a", "b"])    # the last: as of txid 1

    first = attempt(1)
    assert first == ([2, None], [2, None], [5, 4], [2, None], [2, None])
    assert attempt(2) == first
    m.last_committed = 2                # txid 2 recorded: reads outside a commit show it
    assert m.multi_get(["a", "b"]) == [5, 4]


@pytest.mark.parametrize("kind", ["transactional", "opaque"])
def test_a_query_on_executors_never_sees_its_own_txid(kind):
    """Commits on executors: the committer task of the map writes its share of txid 2
    when it ends; the query task of a later stage of the same txid (another map object,
    another writer) still reads the state as of txid 1."""
    backing = MemoryMapBacking()
    tasks = [_map(kind, backing, writer=w) for w in ("counts.0", "query.0")]
    for t in tasks:
        t.shared_writes = True
    counts, query = tasks
    for txid, n in ((1, 2), (2, 3)):
        counts.begin_commit(txid, 1, epoch=1)
        counts.multi_combine(["a"], [n], "sum")
        counts.commit(txid)             # the task ended: its share is written
        query.begin_commit(txid, 1, epoch=1)
        assert query.multi_get_committed(["a", "z"]) == [None if txid == 1 else 2, None]
        query.commit(txid)


def test_a_counter_read_raises_when_the_map_is_ahead_of_the_batch():
    m = CounterMap(MemoryMapBacking())
    for txid in (1, 2):
        m.begin_commit(txid, epoch=1)
        m.add(["a"], [1])
        m.commit(txid)
    m.begin_commit(1, epoch=1)
    with pytest.raises(StateAheadError, match="written by txid 2, newer than the batch being committed "
                                              r"\(txid 1\)"):
        m.multi_get_committed(["a"])


# -- one txid is visible in all of its maps or in none -------------------------------------------

def _registry(tid: str) -> StateRegistry:
    """The driver's maps of topology ``tid`` on ``memory://``, with epoch 1."""
    reset_memory_maps(f"{tid}:")
    reg = StateRegistry(TopologyConfig(state="memory://"), tid)
    reg.raise_epoch(1)
    return reg


def _commit(reg: StateRegistry, txid: int, first: int, second_kind: str, second: Any) -> None:
    """txid adds ``first`` to map "first" key "a" and puts ``second`` in map "second" key "k"."""
    reg.begin(txid, 1)
    try:
        reg.map_state("first").multi_combine(["a"], [first], "sum")
        m = reg.map_state("second", second_kind)
        if second_kind == "counter":
            m.add(["k"], [second])
        else:
            m.multi_combine(["k"], [second], "replace")
        reg.commit(txid)
    except BaseException:
        reg.abort()
        raise
    reg.committed(txid)


@pytest.mark.parametrize(("kind", "bad", "shown", "why"), [
    ("transactional", {1, 2}, "the value {1, 2} (set) of key 'k'", "TypeError: Object of type set is not JSON"),
    ("counter", "x", "the value 'x' (str) of key 'k'", "a counter map adds finite numbers"),
    ("counter", math.nan, "the value nan (float) of key 'k'", "a counter map adds finite numbers"),
])
def test_a_value_the_second_map_cannot_store_leaves_the_txid_in_no_map(kind, bad, shown, why):
    """Txid 2 adds to map "first", then hands map "second" a value it cannot store: the
    commit stops naming the map and the value, and "first" shows no trace of txid 2."""
    reg = _registry(f"unstorable-{kind}")
    _commit(reg, 1, 5, kind, 1)
    with pytest.raises(UnstorableValueError) as e:
        _commit(reg, 2, 7, kind, bad)
    assert str(e.value).startswith(f"map 'second', txid 2: {shown} cannot be stored ({why}")
    assert "none of the maps committed with it was written" in str(e.value)
    assert e.value.trident_map == "second"                        # the engine's report names the map
    stored = reg.maps["first"].backing.data
    assert list(stored) == ["a"] and stored["a"]["txid"] == 1    # no trace of txid 2
    assert reg.existing("first").get("a") == 5 and reg.existing("second").get("k") == 1


def test_a_refused_write_of_the_second_map_leaves_the_first_unwritten():
    """The second map's part is refused when written (a key that is not a counter's number):
    the memory maps of a topology are written as one step, so the first keeps txid 1."""
    reg = _registry("refused")
    _commit(reg, 1, 5, "counter", 1)
    reg.map_state("second", "counter").backing.data["k"] = "junk"   # not a number
    with pytest.raises(StateCorruptError, match="memory map 'refused:second' key 'k' holds 'junk'"):
        _commit(reg, 2, 7, "counter", 1)
    assert reg.maps["first"].backing.data["a"]["txid"] == 1
    assert reg.existing("first").get("a") == 5


def test_a_stale_driver_writes_none_of_the_txids_maps():
    """Epoch fencing holds for the maps written together: driver 1 (epoch 1) commits txid
    2 of two maps after driver 2 (epoch 2) started: refused, nothing written."""
    reg = _registry("stale-pair")
    _commit(reg, 1, 5, "transactional", 1)
    StateRegistry(TopologyConfig(state="memory://"), "stale-pair").raise_epoch(2)
    with pytest.raises(LeadershipLostError, match=r"newer epoch \(2\).*epoch is 1"):
        _commit(reg, 2, 7, "transactional", 2)
    assert reg.existing("first").get("a") == 5 and reg.existing("second").get("k") == 1


# -- key identity: map names never share keys ------------------------------------------------------

names = st.one_of(st.sampled_from(["a", "a:b", "b", "b:x", "a%3Ab", "a%b", "x:", ":x", "~epoch", "e", "~a%3Ab"]),
                  st.text(st.sampled_from("ab:%~"), min_size=1, max_size=5))
map_keys = st.one_of(st.sampled_from(["x", "b:x", "~x", ":", "a:b:x"]), st.text(st.sampled_from("bx:~%"), max_size=4),
                     st.integers(0, 3))


@settings(max_examples=500, deadline=None)
@given(names, map_keys, names, map_keys)
def test_two_different_map_keys_never_share_a_stored_key(n1, k1, n2, k2):
    """``stored_key`` (what the Redis backing stores under) is one string per (map, key):
    map "a:b" key "x" and map "a" key "b:x" differ, and no map key is the scope's own."""
    s1, s2 = stored_key(f"t:{n1}", encode_key(k1)), stored_key(f"t:{n2}", encode_key(k2))
    assert (s1 == s2) == ((n1, encode_key(k1)) == (n2, encode_key(k2)))
    assert s1 not in ("t:~fence", "t:~kvfence") and not s1.startswith("t:~claims:")


def test_old_names_keep_their_layout_and_names_with_the_separator_get_their_own():
    assert stored_key("wc:counts", "apple") == "wc:counts:apple"          # unchanged for every old name
    assert stored_key("wc:a:b", "x") == "wc:~a%3Ab:x" != stored_key("wc:a", "b:x") == "wc:a:b:x"


@pytest.mark.parametrize(("name", "error"), [
    ("", "must be a non-empty str"),
    (7, "must be a non-empty str such as 'counts'; got 7"),
    ("~counts", "starts with '~', which marks the framework's own keys; use e.g. 'counts'"),
    ("caf\udce9", "map state name 'caf\\udce9' cannot be stored: surrogates not allowed at position 3"),
])
def test_a_name_that_cannot_be_stored_is_refused_naming_it(name, error):
    with pytest.raises(ConfigError, match=re.escape(error)):
        check_state_name(name)
    reg = StateRegistry(TopologyConfig(state="memory://"), "names")
    with pytest.raises(ConfigError, match=re.escape(error)):
        reg.map_state(name)


def test_a_memory_map_named_with_the_separator_is_its_own_map():
    reg = _registry("sep")
    reg.begin(1, 1)
    reg.map_state("a:b").multi_combine(["x"], [1])
    reg.map_state("a").multi_combine(["b:x"], [2])
    reg.commit(1)
    assert reg.existing("a:b").get("x") == 1 and reg.existing("a").get("b:x") == 2
    with pytest.raises(ConfigError, match="map namespace must be '<scope>:<name>'"):
        open_memory_backing("memory://", "counts", fence_scope="counts")


@pytest.mark.parametrize("key", [{1: 2}, {"1": 2}, ("a", {"b": 1})])
def test_a_key_holding_a_dict_is_refused(key):
    """``{1: 2}`` and ``{"1": 2}`` were one stored key (JSON object keys are strings)."""
    with pytest.raises(TypeError, match=re.escape(f"map key {key!r} of type {type(key).__name__} cannot be stored")):
        encode_key(key)


# -- opening a map: one policy, one name one kind --------------------------------------------------

ONE_KIND = "one name, one kind: use a new state name for the other kind"


def test_the_driver_opens_a_name_as_one_kind_whether_opened_or_only_known():
    reg = _registry("one-kind")
    reg.begin(1, 1)
    assert type(reg.map_state("m", "opaque")) is OpaqueMap and reg.map_state("m", True) is reg.map_state("m", "opaque")
    with pytest.raises(ConfigError, match=re.escape(
            "map state 'm' is an opaque map of this topology, and is asked for as a transactional map "
            f"(TransactionalMap); {ONE_KIND}")):
        reg.map_state("m")
    reg.abort()
    again = StateRegistry(TopologyConfig(state="memory://"), "one-kind")   # a new driver, which knows the map
    again.known = {"m": "opaque"}
    with pytest.raises(ConfigError, match=re.escape(
            f"map state 'm' is an opaque map of this topology, and is asked for as a counter map (CounterMap); {ONE_KIND}")):
        again.map_state("m", "counter")
    assert again.maps == {}


class _OpensTwoKinds(BaseTransactionalBolt, Committer):
    def prepare(self, conf, context, collector, attempt):
        context.map_state("m")
        context.map_state("m", "non-transactional")

    def execute(self, tuple):
        pass

    def finish_batch(self):
        pass

    def declare_output_fields(self, declarer):
        pass


def test_a_committer_declaring_a_name_as_two_kinds_is_refused_before_the_first_commit():
    b = TransactionalTopologyBuilder("two-kinds", "spout", MemoryTransactionalSpout({0: ["a"]}, Fields("w"), 1), 1)
    b.set_bolt("both", _OpensTwoKinds()).global_grouping("spout")
    reg = StateRegistry(TopologyConfig(state="memory://"), "two-kinds")
    with pytest.raises(ConfigError, match=re.escape(
            "map state 'm' is a transactional map of this topology, and is asked for by 'both' as a "
            f"non-transactional map (NonTransactionalMap); {ONE_KIND}")):
        reg.declare(compile_plan(b.build()), {})
    assert reg.known == {"m": "transactional"}


def test_a_committer_task_on_an_executor_opens_a_declared_name_as_its_kind_only():
    reset_memory_maps("exec-kind:")
    states = ExecutorStates("memory://", {}, "exec-kind", 1, 1, 1, {"m": "transactional"}).for_task("c", 3)
    with pytest.raises(ConfigError, match=re.escape(
            "map state 'm' is a transactional map of this topology, and is asked for by 'c' task 3 as an "
            f"opaque map (OpaqueMap); {ONE_KIND}")):
        states.map_state("m", True)
    m = states.map_state("m")
    assert type(m) is TransactionalMap and m.writer == "c.3" and m.shared_writes and m.scope.txid == 1
    with pytest.raises(ConfigError, match=r"map state 'n' is opened by 'c' task 3 on an executor, but the topology"):
        states.map_state("n")


def test_open_map_is_the_one_policy():
    reset_memory_maps("policy:")
    m = open_map("m", "counter", url="memory://", scope="policy", known={"m": "counter"}, writer="w", shared_writes=True)
    assert type(m) is CounterMap and m.backing.namespace == "policy:m" and m.writer == "w" and m.shared_writes
    assert m.backing.fence is open_map("k", False, url="memory://", scope="policy", known={}).backing.fence
    with pytest.raises(ConfigError, match=re.escape(f"is asked for as a transactional map (TransactionalMap); {ONE_KIND}")):
        open_map("m", False, url="memory://", scope="policy", known={"m": "counter"})
    with pytest.raises(ValueError, match="unknown map kind 'other'"):
        map_kind("m", "other", {})


# -- the columnar combine: what Trident's persistent aggregation writes through ---------------------

@pytest.mark.parametrize("kind", [TransactionalMap, OpaqueMap, NonTransactionalMap, CounterMap])
@pytest.mark.parametrize("columns", ["arrow", "lists"])
def test_combine_folds_a_batchs_groups_as_multi_combine_does(kind, columns):
    import pyarrow as pa

    def col(xs):
        return pa.array(xs) if columns == "arrow" else xs

    by_combine, by_multi = kind(MemoryMapBacking()), kind(MemoryMapBacking())
    for txid, (keys, values) in enumerate([(["a", "b"], [2, 3]), (["b", "c"], [4, 5])], start=1):
        for m in (by_combine, by_multi):
            m.begin_commit(txid, epoch=1)
        assert by_combine.combine(txid, col(keys), col(values)) == by_multi.multi_combine(keys, values)
        assert by_combine.combine(txid, col(["c"]), col([1]), new_values=False) is None
        by_multi.multi_combine(["c"], [1])
        for m in (by_combine, by_multi):
            m.commit(txid)
    assert by_combine.multi_get(["a", "b", "c"]) == by_multi.multi_get(["a", "b", "c"]) == [2, 7, 7]


def test_combine_of_a_sum_into_a_counter_map_reads_nothing_unless_new_values_are_wanted():
    import pyarrow as pa

    b = MemoryMapBacking()
    m = CounterMap(b)
    m.begin_commit(1, epoch=1)
    m.combine(1, pa.array(["a", "b"]), pa.array([2, 3]), new_values=False)
    m.commit(1)
    assert b.round_trips == 1                       # the add, no read
    m.begin_commit(2, epoch=1)
    assert m.combine(2, ["a"], [1]) == [3]          # the new values: one read
    m.commit(2)
    assert b.round_trips == 3 and m.multi_get(["a", "b"]) == [3, 3]
    m.begin_commit(3, epoch=1)
    with pytest.raises(ValueError, match="a counter map adds numbers; combiner 'max' is not 'sum'"):
        m.combine(3, ["a"], [9], "max", new_values=False)


def test_combine_belongs_to_the_commit_of_its_txid():
    m = TransactionalMap(MemoryMapBacking(), "counts")
    with pytest.raises(RuntimeError, match="map 'counts' updated outside a commit"):
        m.combine(1, ["a"], [1])
    m.begin_commit(2)
    with pytest.raises(RuntimeError, match=re.escape("combine(1) of map 'counts' in the commit of txid 2")):
        m.combine(1, ["a"], [1])
