"""Trident's interval join (TridentTopology.interval_join): orders joined with the payments
made within 10 s after them, by order id -- each pair once, late rows of either side on a
stream, rows kept only as long as the bounds need, and a replayed txid joins the same pairs."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from spouts import MemoryTransactionalSpout
from transactional import ConfigError, FailedException, Fields, TopologyConfig, run_topology
from trident import BaseFilter, Count, TridentTopology, state
from trident.windowing import Duration, WindowsStoreFactory

ORDERS = [("o1", "ann", 1000, 30), ("o2", "bob", 2000, 15), ("o3", "ann", 5000, 7), ("o4", "cid", 40_000, 9)]
PAYMENTS = [("p1", "o1", 3000), ("p2", "o2", 15_000),      # p2: 13 s after o2, too late to match
            ("p3", "o3", 4000), ("p4", "o3", 9000),        # p3: before o3
            ("p5", "o1", 60_000), ("p6", "o2", 5000)]      # p6: below the watermark (9000): late
OUT = Fields("order_id", "user", "ts", "amount", "pay_id", "pay_order", "pay_ts")
SEEN: dict[str, list[Any]] = {}
FAILED: set[str] = set()


class Keep(BaseFilter):
    def __init__(self, name: str, fail_on: str | None = None) -> None:
        self.name, self.fail_on = name, fail_on

    def is_keep(self, t):
        if self.fail_on is not None and self.fail_on in t and self.name not in FAILED:
            FAILED.add(self.name)
            raise FailedException("once")
        SEEN.setdefault(self.name, []).append(tuple(t))
        return True


def build(name: str, fail_on: str | None = None) -> Any:
    t = TridentTopology(name)
    orders = t.new_stream("orders", MemoryTransactionalSpout(ORDERS, Fields("order_id", "user", "ts", "amount"), 2))
    payments = t.new_stream("payments", MemoryTransactionalSpout(PAYMENTS, Fields("pay_id", "order_id", "ts"), 2))
    joined = t.interval_join(orders, Fields("order_id"), "ts", payments, Fields("order_id"), "ts",
                             Duration(10, "s"), Duration(0), WindowsStoreFactory("paid"), OUT, late_stream="late")
    joined.each(OUT, Keep(name, fail_on)).group_by(Fields("pay_id")) \
        .persistent_aggregate(state.transactional("pairs"), Count(), Fields("n"))
    t.late_stream("late").each(Fields("side", "values"), Keep(name + "/late"))
    return t.build()


def test_orders_join_the_payments_within_the_bounds_once() -> None:
    name = f"ijoin-{uuid.uuid4().hex[:8]}"
    r = run_topology(build(name), TopologyConfig(executor="in-process", progress=False))
    assert sorted(SEEN[name]) == [("o1", "ann", 1000, 30, "p1", "o1", 3000), ("o3", "ann", 5000, 7, "p4", "o3", 9000)]
    assert SEEN[name + "/late"] == [("b", ["p6", "o2", 5000])]
    rec = r.map_state("paid").multi_get(["ijoin:0"])[0]
    # the watermark ended at 40 000: only o4 (40 000 + 10 s) and p5 (60 000) can still match
    assert sorted((x[0], x[3][0]) for x in rec["rows"]) == [(0, "o4"), (1, "p5")] and rec["late"] == 1


def test_a_replayed_txid_joins_the_same_pairs() -> None:
    name = f"ijoin-{uuid.uuid4().hex[:8]}"
    clean = run_topology(build(name + "c"), TopologyConfig(executor="in-process", progress=False))
    failed = run_topology(build(name, fail_on="p4"), TopologyConfig(executor="in-process", progress=False,
                                                                    retry_backoff_secs=0.02))
    keys = ["p1", "p2", "p3", "p4", "p5", "p6"]
    assert name in FAILED and failed.attempts > clean.attempts
    got = [failed.map_state("pairs").multi_get(keys), clean.map_state("pairs").multi_get(keys)]
    assert got[0] == got[1] == [1, None, None, 1, None, None]


def test_bad_interval_joins_are_refused() -> None:
    t = TridentTopology("bad")
    a = t.new_stream("a", MemoryTransactionalSpout([("x", 1)], Fields("k", "ts"), 2))
    b = t.new_stream("b", MemoryTransactionalSpout([("x", 1)], Fields("k", "ts"), 2))
    with pytest.raises(ConfigError, match=r"out_fields name a's fields then b's \(4 in all"):
        t.interval_join(a, Fields("k"), "ts", b, Fields("k"), "ts", 0, 0, WindowsStoreFactory("j"), Fields("k"))
    with pytest.raises(ConfigError, match=r"lower, upper and lag are >= 0 ms"):
        t.interval_join(a, Fields("k"), "ts", b, Fields("k"), "ts", -1, 0, WindowsStoreFactory("j"),
                        Fields("k", "t", "k2", "t2"))
