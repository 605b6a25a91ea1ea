"""A windows store's TTL (``WindowsStoreFactory(..., ttl_secs=)``,
trident/runtime/window_proc.py): a key no tuple reached for the TTL, by the txids' recorded
times (a fake driver clock), loses its open sessions unfired; a key that comes back starts
a new session; bad values are refused naming the store."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from spouts import MemoryTransactionalSpout
from transactional import FailedException, Fields, TopologyConfig, run_topology
from transactional.exceptions import ConfigError
from transactional.windowing import Duration
from trident import BaseFilter, TridentTopology
from trident.operation import BaseAggregator
from trident.windowing import WindowsStoreFactory

S = 1000


class Ts(BaseAggregator):
    def init(self, batch_id: Any, collector: Any) -> list[int]:
        return []

    def aggregate(self, acc: list[int], tuple: Any, collector: Any) -> None:
        acc.append(tuple[0])

    def complete(self, acc: list[int], collector: Any) -> None:
        collector.emit((" ".join(map(str, acc)),))


class FailOnce(BaseFilter):
    """FailedException the first time it sees ``ts`` (its txid is replayed)."""

    def __init__(self, key: str, ts: int) -> None:
        self.key, self.ts = key, ts

    def is_keep(self, tuple: Any) -> bool:
        if tuple[0] == self.ts and self.key not in FAILED_ONCE:
            FAILED_ONCE.add(self.key)
            raise FailedException("once")
        return True


FAILED_ONCE: set[str] = set()


def sessions(ttl: float | None, fail_at: int | None = None) -> dict[str, Any]:
    """One click a txid, the driver's clock at 0, 10, 20, 40, 50 s (asked once per txid: a
    replay reuses its txid's recorded time); a lag no session's end reaches, so only the
    TTL takes sessions away. ``fail_at``: the txid of that click fails once and is
    replayed. The store's record after the run."""
    clicks = [("ann", 1000), ("bob", 2000), ("ann", 3000), ("bob", 4000), ("cid", 5000)]
    times = iter([0, 10, 20, 40, 50])
    t = TridentTopology(f"wttl-{uuid.uuid4().hex[:8]}")
    s = t.new_stream("clicks", MemoryTransactionalSpout(clicks, Fields("user", "ts"), 1))
    if fail_at is not None:
        s = s.each(Fields("ts"), FailOnce(uuid.uuid4().hex, fail_at))
    (s.group_by(Fields("user"))
     .session_window(Duration(5, "s"), WindowsStoreFactory("sessions", ttl_secs=ttl), Fields("ts"), Ts(),
                     Fields("clicks"), timestamp_field="ts", lag=Duration(1000, "s")))
    r = run_topology(t.build(), TopologyConfig(executor="in-process", progress=False, max_spout_pending=1),
                     clock=lambda: next(times))
    assert r.batches_committed == 5
    rec: dict[str, Any] = r.map_state("sessions").multi_get(["window:0"])[0]
    return rec


def test_an_idle_keys_open_sessions_expire_by_the_txids_recorded_times() -> None:
    rec = sessions(15)
    # ann: seen at 0 s, gone at 20 s (0 + 15 <= 20) before its 3000 is added; that one, seen
    # at 20 s, gone at 40 s. bob: seen at 10 s, gone at 40 s, then 4000 starts anew at 40 s.
    assert [(e[3], e[1]) for e in rec["events"]] == [(["bob"], 4000), (["cid"], 5000)]
    assert rec["seen"] == {'["bob"]': 40 * S, '["cid"]': 50 * S}
    assert rec["fired"] == 0
    replayed = sessions(15, fail_at=4000)           # txid 4 (at 40 s) fails once: its replay decides the same
    assert len(FAILED_ONCE) == 1
    assert (replayed["events"], replayed["seen"]) == (rec["events"], rec["seen"])
    plain = sessions(None)
    assert [e[1] for e in plain["events"]] == [1000, 2000, 3000, 4000, 5000] and "seen" not in plain


@pytest.mark.parametrize("bad", [0, -1, "10", True])
def test_a_bad_window_store_ttl_is_refused_naming_the_store(bad: Any) -> None:
    with pytest.raises(ConfigError, match=r"windows store 'sessions': ttl_secs=.*; give a number of seconds > 0"):
        WindowsStoreFactory("sessions", ttl_secs=bad)
