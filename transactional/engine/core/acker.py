"""Storm's acker: tracking tuple trees in a fixed space per spout tuple (docs/design.md §7).

The first piece of core Storm topologies (guaranteed message processing, at-least-once).
Every tuple gets a random 64-bit id. A tuple *anchored* to others carries, for every root
(spout tuple) of its anchors, its own new id; the anchor, when it is acked, reports to
the root's acker the XOR of its own id and of every id created anchored to it. The
acker keeps, per root, one 64-bit *ack val*: the XOR of all the ids reported so far. The
spout's ``init`` puts the root's id in; every tuple's id enters twice (when it is created,
inside its anchor's ack, and when it is acked itself) and so cancels out; the val comes
back to 0 exactly when every tuple of the tree is acked, whatever the order of the
reports and however large the tree. Then the spout task that emitted the root gets
``ack(msg_id)``; an explicit ``fail`` of any tuple of the tree, or the tree not
completing within the message timeout, gets it ``fail(msg_id)``.

``Acker`` is the acker task's table: pure, the clock passed in, no I/O. Pending roots
live in three typed arrays (ack val, spout task, deadline: 20 bytes a root, as Storm's
"about 20 bytes") indexed through a dict from the root id to its slot; with the dict the
cost is measured at about 100 bytes a pending root in CPython
(``tests/transactional/engine/test_acker.py::test_memory_per_pending_root_is_fixed_whatever_the_tree_size``).
``acker_for`` picks a root's acker task by mod hashing, as Storm does.
``TupleIds`` is the bolt side: the ids a task's emitted tuples carry and the XOR it
owes each root when it acks an input.
"""

from __future__ import annotations

import math
import os
import random
from array import array
from collections.abc import Iterable, Mapping

#: Tuple ids are random numbers of this many bits (0 is never used: it is XOR's identity).
ID_BITS = 64

_rng = random.Random(os.urandom(16))


def new_id(rng: random.Random = _rng) -> int:
    """A random, non-zero 64-bit tuple id."""
    while True:
        i = rng.getrandbits(ID_BITS)
        if i:
            return i


def acker_for(root: int, ackers: int) -> int:
    """The acker task tracking ``root``: Storm's mod hashing of the spout tuple id."""
    return root % ackers


class Acker:
    """One acker task's pending roots.

    ``init(root, task, now)`` when a spout task emits a tracked tuple (its id is the root);
    ``ack(root, val, now)`` with each acked tuple's XOR report; ``fail(root)`` on an
    explicit fail; ``expire(now)`` at timeouts. Each returns the roots it decided, with
    the spout task to tell: ``("ack" | "fail", root, task)``. Reports for a root that
    was decided already (late acks of a failed tree) are dropped; a report arriving
    before its ``init`` (another path through the network, in Storm) is kept until the
    init comes or it times out.

    >>> a = Acker(timeout_secs=30)
    >>> a.init(root=7, task=1, now=0.0)       # the spout tuple, id 7
    []
    >>> a.ack(7, 7 ^ 12, now=1.0)             # the spout tuple acked, anchoring tuple 12
    []
    >>> a.ack(7, 12, now=2.0)                 # tuple 12 acked, anchoring nothing
    [('ack', 7, 1)]
    """

    __slots__ = ("timeout", "_slot", "_val", "_task", "_deadline", "_free", "_earliest", "acked", "failed",
                 "timed_out")

    def __init__(self, timeout_secs: float) -> None:
        if timeout_secs <= 0:
            msg = f"timeout_secs must be > 0; got {timeout_secs!r}"
            raise ValueError(msg)
        self.timeout = float(timeout_secs)
        self._slot: dict[int, int] = {}     # root id -> index in the arrays
        self._val = array("Q")              # the ack val
        self._task = array("i")             # the spout task (-1: no init seen yet)
        self._deadline = array("d")         # when the root times out
        self._free: list[int] = []
        # no pending root's deadline is before this (a lower bound: roots decided since the
        # last scan may have held it): expire scans only once it has passed
        self._earliest = math.inf
        self.acked = self.failed = self.timed_out = 0

    def pending(self) -> int:
        """Roots being tracked."""
        return len(self._slot)

    def _entry(self, root: int, now: float) -> int:
        s = self._slot.get(root)
        if s is None:
            d = now + self.timeout
            if self._free:
                s = self._free.pop()
                self._val[s], self._task[s], self._deadline[s] = 0, -1, d
            else:
                s = len(self._val)
                self._val.append(0)
                self._task.append(-1)
                self._deadline.append(d)
            self._slot[root] = s
            if d < self._earliest:
                self._earliest = d
        return s

    def _drop(self, root: int) -> int:
        s = self._slot.pop(root)
        self._free.append(s)
        return s

    def init(self, root: int, task: int, now: float, val: int | None = None) -> list[tuple[str, int, int]]:
        """Spout task ``task`` emitted tracked tuple ``root``. ``val``: the XOR of the ids
        of the copies it sent (one per receiving task); default ``root``, one copy whose
        id is the root."""
        s = self._entry(root, now)
        self._task[s] = task
        d = self._deadline[s] = now + self.timeout
        if d < self._earliest:
            self._earliest = d
        self._val[s] ^= root if val is None else val
        return self._settle(root, s)

    def ack(self, root: int, val: int, now: float) -> list[tuple[str, int, int]]:
        """A tuple of ``root``'s tree was acked; ``val`` is its report (its id XOR the ids
        anchored to it)."""
        s = self._entry(root, now)
        self._val[s] ^= val
        return self._settle(root, s)

    def fail(self, root: int) -> list[tuple[str, int, int]]:
        """A tuple of ``root``'s tree was failed explicitly: the root fails now."""
        s = self._slot.get(root)
        if s is None:
            return []
        task = self._task[s]
        self._drop(root)
        if task < 0:             # no init yet: nobody to tell (the init will find nothing)
            return []
        self.failed += 1
        return [("fail", root, task)]

    def expire(self, now: float) -> list[tuple[str, int, int]]:
        """Fail every root whose tree did not complete within the timeout. Costs nothing
        until the earliest deadline passed; then one scan of the pending roots."""
        if now < self._earliest:
            return []
        out = []
        deadline, task = self._deadline, self._task
        earliest = math.inf
        for root, s in list(self._slot.items()):
            d = deadline[s]
            if d <= now:
                t = task[s]
                self._drop(root)
                if t >= 0:
                    self.timed_out += 1
                    out.append(("fail", root, t))
            elif d < earliest:
                earliest = d
        self._earliest = earliest
        return out

    def next_deadline(self) -> float | None:
        """When ``expire`` may next have something to do (None: nothing pending); never
        later than the earliest pending deadline."""
        return self._earliest if self._slot else None

    def _settle(self, root: int, s: int) -> list[tuple[str, int, int]]:
        if self._val[s] != 0 or self._task[s] < 0:
            return []
        task = self._task[s]
        self._drop(root)
        self.acked += 1
        return [("ack", root, task)]


class TupleIds:
    """What a bolt task's collector keeps for anchoring: for each input tuple, the XOR of
    the ids created anchored to it, per root.

    A tuple's *message id* maps each root of its trees to its id there (Storm's
    ``MessageId.anchorsToIds``). ``anchored(anchors)`` gives the message id of a new
    tuple emitted with those anchors: each anchor gets its own new edge id, recorded as
    owed by that anchor, and the new tuple's id in a root is the XOR of the edge ids of
    its anchors in that root (so a tuple anchored twice into one tree, e.g. a join of two
    tuples of the same spout tuple, still cancels out). ``report(t)`` is what acking input
    ``t`` sends to the ackers: ``{root: t's id there ^ the edges anchored to t}``.

    >>> ids = TupleIds(random.Random(1))
    >>> parent = {5: 5}                                   # a spout tuple, root 5
    >>> child = ids.anchored([(1, parent)])               # emitted anchored to it
    >>> (edge,) = child.values(); ids.report(1, parent) == {5: 5 ^ edge}
    True
    """

    __slots__ = ("_rng", "_owed")

    def __init__(self, rng: random.Random = _rng) -> None:
        self._rng = rng
        self._owed: dict[int, int] = {}       # input key -> XOR of the ids anchored to it

    def anchored(self, anchors: Iterable[tuple[int, Mapping[int, int]]]) -> dict[int, int]:
        """The message id ``{root: new id}`` of a tuple emitted anchored to ``anchors``
        (pairs of an input's key, unique within the task, and its message id); {} when
        none of them is tracked (an unanchored emit)."""
        roots: dict[int, int] = {}
        for key, msg in anchors:
            if not msg:
                continue
            edge = new_id(self._rng)
            self._owed[key] = self._owed.get(key, 0) ^ edge
            for root in msg:
                roots[root] = roots.get(root, 0) ^ edge
        return roots

    def report(self, key: int, msg: Mapping[int, int]) -> dict[int, int]:
        """What acking the input ``key`` (message id ``msg``) sends, per root; forgets it."""
        owed = self._owed.pop(key, 0)
        return {root: tid ^ owed for root, tid in msg.items()}

    def forget(self, key: int) -> None:
        """Drop what was recorded for input ``key`` (it was failed)."""
        self._owed.pop(key, None)
