"""The exactly-once rules of the map wrappers, as properties (memory backing)."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from state.map import MemoryMapBacking, OpaqueMap, TransactionalMap, opaque_apply

KEYS = ["a", "b", "c", "d"]
batches = st.lists(st.dictionaries(st.sampled_from(KEYS), st.integers(1, 9), min_size=1), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(batches, st.data())
def test_opaque_map_counts_committed_batches_once_whatever_failed_commits_left_behind(committed, data):
    """Before the committed attempt of some txids, a failed attempt wrote a *different*
    batch to some keys (a partial commit, then the driver died or the commit failed).
    The map must end with exactly the sum of the committed batches."""
    m = OpaqueMap(MemoryMapBacking())
    for txid, batch in enumerate(committed, start=1):
        attempt = 1
        if data.draw(st.booleans(), label=f"txid {txid} has a failed partial commit first"):
            other = data.draw(st.dictionaries(st.sampled_from(KEYS), st.integers(1, 9), min_size=1))
            written = data.draw(st.lists(st.sampled_from(sorted(other)), unique=True), label="keys written")
            m.begin_commit(txid, attempt)
            if written:
                m.multi_combine(written, [other[k] for k in written], "sum")
            m.superseded.setdefault(txid, set()).add(attempt)   # the coordinator's record
            attempt += 1
        m.begin_commit(txid, attempt)
        m.multi_combine(list(batch), list(batch.values()), "sum")
        m.commit(txid)
    want = {k: sum(b.get(k, 0) for b in committed) or None for k in KEYS}
    assert dict(zip(KEYS, m.multi_get(KEYS))) == want


def test_without_the_superseded_record_the_leftover_is_counted_twice():
    """Trident's rule alone: txid 1's failed attempt counted "a", its replay did not
    touch "a", txid 2 counts "a" again -> 2. With the record, "a" reads as prev."""
    for record, want in ((False, 2), (True, 1)):
        m = OpaqueMap(MemoryMapBacking())
        m.begin_commit(1, 1)
        m.multi_combine(["a", "b"], [1, 1])          # attempt 1 of txid 1 wrote a and b, then failed
        if record:
            m.superseded[1] = {1}
        m.begin_commit(1, 2)
        m.multi_combine(["b"], [1])                  # attempt 2 of txid 1 emitted only b
        m.commit(1)
        m.begin_commit(2, 1)
        m.multi_combine(["a"], [1])                  # txid 2 continues where txid 1 ended: a
        m.commit(2)
        assert m.get("a") == want and m.get("b") == 1


def test_a_value_left_by_a_superseded_attempt_reads_as_prev_and_builds_on_it():
    stored = {"txid": 1, "attempt": 1, "curr": 5, "prev": 2}
    assert opaque_apply("k", stored, 2, lambda old, d: old + d, 3, 1, {1: {1}})[1] == 5
    assert opaque_apply("k", stored, 2, lambda old, d: old + d, 3, 1, {})[1] == 8


@settings(max_examples=100, deadline=None)
@given(batches)
def test_transactional_map_replaying_any_committed_batch_changes_nothing(committed):
    m = TransactionalMap(MemoryMapBacking())
    for txid, batch in enumerate(committed, start=1):
        for _ in range(2):   # a replay of the identical batch after a crash mid-commit
            m.begin_commit(txid, 1)
            m.multi_combine(list(batch), list(batch.values()), "sum")
        m.commit(txid)
    assert dict(zip(KEYS, m.multi_get(KEYS))) == {k: sum(b.get(k, 0) for b in committed) or None for k in KEYS}
