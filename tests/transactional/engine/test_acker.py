"""Storm's XOR acker (``transactional/engine/core/acker.py``): tuple trees complete exactly when every
tuple is acked, in any order and at any size; fails and timeouts decide once; memory per
pending spout tuple is fixed. Pure: no Spark, no servers."""

from __future__ import annotations

import random
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transactional.engine.core.acker import Acker, TupleIds, acker_for, new_id


class Tree:
    """A simulated topology run: spout tuples (roots), tuples emitted anchored to live
    tuples, acks and fails in a chosen order; the ackers are ``ackers`` Acker tables
    reached by mod hashing. Records every decision."""

    def __init__(self, ackers: int = 3, timeout: float = 30.0, seed: int = 0) -> None:
        self.ackers = [Acker(timeout) for _ in range(ackers)]
        self.ids = TupleIds(random.Random(seed))
        self.live: dict[int, dict[int, int]] = {}      # tuple key -> message id
        self.members: dict[int, set[int]] = {}         # root -> live tuple keys in its tree
        self.decided: list[tuple[str, int, int]] = []
        self.next_key = 0

    def _acker(self, root: int) -> Acker:
        return self.ackers[acker_for(root, len(self.ackers))]

    def _key(self, msg: dict[int, int]) -> int:
        self.next_key += 1
        self.live[self.next_key] = msg
        for root in msg:
            self.members.setdefault(root, set()).add(self.next_key)
        return self.next_key

    def spout(self, task: int, now: float = 0.0) -> int:
        root = new_id()
        self.decided += self._acker(root).init(root, task, now)
        self._key({root: root})
        return root

    def emit(self, anchors: list[int]) -> int:
        msg = self.ids.anchored([(k, self.live[k]) for k in anchors])
        return self._key(msg)

    def ack(self, key: int, now: float = 1.0) -> None:
        msg = self.live.pop(key)
        for root, val in self.ids.report(key, msg).items():
            self.members[root].discard(key)
            self.decided += self._acker(root).ack(root, val, now)

    def fail(self, key: int) -> None:
        msg = self.live.pop(key)
        self.ids.forget(key)
        for root in msg:
            self.members[root].discard(key)
            self.decided += self._acker(root).fail(root)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_tree_completes_exactly_when_its_last_tuple_is_acked(data: st.DataObject) -> None:
    t = Tree(ackers=data.draw(st.integers(1, 4)), seed=data.draw(st.integers(0, 2**32)))
    roots = [t.spout(task=i % 3) for i in range(data.draw(st.integers(1, 4)))]
    for _ in range(data.draw(st.integers(0, 60))):
        if not t.live:
            break
        keys = sorted(t.live)
        if data.draw(st.booleans()):                 # emit, anchored to one or two live tuples
            anchors = data.draw(st.lists(st.sampled_from(keys), min_size=1, max_size=2, unique=True))
            t.emit(anchors)
        else:
            t.ack(data.draw(st.sampled_from(keys)))
        for root in roots:                           # acked exactly when nothing of it is left
            done = [d for d in t.decided if d[1] == root]
            assert (done == [("ack", root, roots.index(root) % 3)]) == (not t.members[root]), (root, done)
    for key in sorted(t.live):                       # ack the rest: every root acked, once
        t.ack(key)
    assert sorted(t.decided) == sorted(("ack", r, i % 3) for i, r in enumerate(roots))
    assert all(a.pending() == 0 for a in t.ackers)


def test_a_tree_of_ten_thousand_tuples_is_acked_once_at_its_last_ack() -> None:
    t = Tree(ackers=2)
    root = t.spout(task=4)
    frontier = [max(t.live)]
    rng = random.Random(7)
    while len(t.live) < 10_001:                      # each tuple fans out to 1-3 children
        parent = frontier.pop(0)
        frontier += [t.emit([parent]) for _ in range(rng.randint(1, 3))]
    order = sorted(t.live, key=lambda _: rng.random())
    for key in order[:-1]:
        t.ack(key)
    assert t.decided == [] and len(t.members[root]) == 1
    t.ack(order[-1])
    assert t.decided == [("ack", root, 4)]


def test_failing_a_multi_anchored_tuple_fails_every_root_it_is_anchored_to() -> None:
    t = Tree(ackers=3)
    r1, r2, r3 = (t.spout(task=i) for i in range(3))
    k1, k2, k3 = sorted(t.live)
    joined = t.emit([k1, k2])                        # one tuple in the trees of r1 and r2
    t.ack(k1), t.ack(k2), t.ack(k3)
    assert t.decided == [("ack", r3, 2)]
    t.fail(joined)
    assert sorted(t.decided[1:]) == sorted([("fail", r1, 0), ("fail", r2, 1)])


def test_a_tuple_anchored_twice_into_one_tree_still_completes() -> None:
    t = Tree(ackers=1)
    root = t.spout(task=0)
    (k,) = t.live
    a, b = t.emit([k]), t.emit([k])
    both = t.emit([a, b])                            # a join of two tuples of one spout tuple
    for key in (k, a, b):
        t.ack(key)
    assert t.decided == []
    t.ack(both)
    assert t.decided == [("ack", root, 0)]


def test_timeouts_fail_the_trees_that_did_not_complete_and_late_acks_change_nothing() -> None:
    a = Acker(timeout_secs=10)
    a.init(1, task=0, now=0.0)
    a.init(2, task=1, now=5.0)
    assert a.next_deadline() == 10.0 and a.expire(9.9) == []
    assert a.expire(10.0) == [("fail", 1, 0)] and a.pending() == 1
    assert a.ack(1, 1, now=11.0) == []               # a late ack: held, never decided
    assert a.ack(2, 2, now=11.0) == [("ack", 2, 1)]
    assert a.expire(100.0) == []                     # the held late ack times out silently
    assert (a.acked, a.failed, a.timed_out, a.pending()) == (1, 0, 1, 0)


def test_an_explicit_fail_decides_at_once_and_only_once() -> None:
    a = Acker(timeout_secs=30)
    a.init(9, task=3, now=0.0)
    assert a.fail(9) == [("fail", 9, 3)]
    assert a.fail(9) == [] and a.ack(9, 9, now=1.0) == [] and a.expire(1000.0) == []


def test_an_ack_before_the_init_waits_for_it() -> None:
    a = Acker(timeout_secs=30)
    assert a.ack(5, 5 ^ 8, now=0.0) == []            # the spout tuple's ack overtook the init
    assert a.ack(5, 8, now=0.0) == []
    assert a.init(5, task=2, now=0.1) == [("ack", 5, 2)]


def test_a_spout_tuple_sent_to_several_tasks_completes_when_every_copy_is_done() -> None:
    a = Acker(timeout_secs=30)
    c1, c2 = new_id(), new_id()                      # the copies' ids
    assert a.init(77, task=0, now=0.0, val=c1 ^ c2) == []
    assert a.ack(77, c1, now=1.0) == []
    assert a.ack(77, c2, now=1.0) == [("ack", 77, 0)]


def test_roots_spread_over_the_ackers_by_mod_hashing() -> None:
    counts = [0] * 4
    for _ in range(4000):
        counts[acker_for(new_id(), 4)] += 1
    assert all(850 < c < 1150 for c in counts), counts
    with pytest.raises(ValueError, match="timeout_secs must be > 0"):
        Acker(0)


def test_memory_per_pending_root_is_fixed_whatever_the_tree_size() -> None:
    """100,000 pending spout tuples cost a fixed number of bytes each (documented in
    docs/design.md §7: about 100 in CPython, 20 of them the three arrays), and trees
    growing by 1,000 tuples each add nothing."""
    a = Acker(timeout_secs=30)
    roots = [new_id() for _ in range(100_000)]
    created = [new_id() for _ in range(1_000)]
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        for i, r in enumerate(roots):
            a.init(r, task=i % 8, now=0.0)
        pending = tracemalloc.get_traced_memory()[0]
        for r in roots[:200]:                        # 200 trees grow by 1,000 tuples each
            for tid in created:
                a.ack(r, tid, now=0.0)
        grown = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    per_root = (pending - start) / len(roots)
    assert a.pending() == 100_000 and 20 <= per_root < 140, per_root
    assert grown - pending < 1_000, grown - pending
