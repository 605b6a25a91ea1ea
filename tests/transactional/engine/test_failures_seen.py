"""What a user sees of a run (issue "see what went wrong"): figures that count tuples on
both paths, stages named by the user's operations, deterministic contract errors that stop
at once, and a log line for every failed attempt."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from transactional import Fields, TopologyConfig, run_topology
from transactional.exceptions import TopologyFailedError
from trident import BaseFunction, Count, FixedBatchSpout, TridentTopology, state

SENTENCES = ["the cow jumped over the moon", "the man went to the store",
             "four score and seven years ago"]
WORDS = [w for s in SENTENCES for w in s.split()]          # 18 words, 15 distinct
DISTINCT = len(set(WORDS))


def config(executor: str, **kw: Any) -> TopologyConfig:
    kw.setdefault("progress", False)
    kw.setdefault("retry_backoff_secs", 0.01)
    return TopologyConfig(executor=executor, **kw)



class Split(BaseFunction):
    def execute(self, tuple, collector):
        for w in tuple[0].split():
            collector.emit((w,))


def split_batch(batch):
    words = pc.list_flatten(pc.utf8_split_whitespace(batch.column("sentence")))
    return pa.RecordBatch.from_arrays([words], names=["word"])


def word_count(columnar: bool) -> TridentTopology:
    t = TridentTopology(f"seen-{uuid.uuid4().hex[:8]}")
    s = t.new_stream("sentences", FixedBatchSpout(Fields("sentence"), 3, *[(x,) for x in SENTENCES]))
    words = s.map_batches(split_batch, Fields("word")) if columnar else s.each(Fields("sentence"), Split(),
                                                                              Fields("word"))
    words.group_by(Fields("word")).persistent_aggregate(state.counters("counts"), Count(), Fields("count"))
    return t


@pytest.mark.parametrize("columnar", [False, True], ids=["rows", "columns"])
def test_executed_and_emitted_count_tuples_on_both_paths(executor: str, columnar: bool) -> None:
    t = word_count(columnar)
    r = run_topology(t.build(), config(executor))
    first = "map_batches(split_batch) -> aggregate(Count)" if columnar else "each(Split) -> aggregate(Count)"
    assert r.executed == {"sentences": 0, first: 3, "persistent_aggregate(counts)": DISTINCT}
    assert r.emitted == {"sentences": 3, first: DISTINCT, "persistent_aggregate(counts)": 0}
    assert r.map_state("counts").get("the") == 4


def test_stages_are_named_by_the_users_operations() -> None:
    t = TridentTopology("names")
    s = t.new_stream("sentences", FixedBatchSpout(Fields("sentence"), 3, ("a b",)))
    counts = s.each(Fields("sentence"), Split(), Fields("word")).group_by(Fields("word")).persistent_aggregate(
        state.transactional("word-counts"), Count(), Fields("count"))
    t.new_stream("more", FixedBatchSpout(Fields("sentence"), 3, ("c",))).each(
        Fields("sentence"), Split(), Fields("word")).name("split:more").group_by(Fields("word")).persistent_aggregate(
        state.transactional("other"), Count(), Fields("count"))
    assert counts.name == "word-counts"
    ids = [c.id for c in t.build().components]
    assert ids == ["sentences", "more", "each(Split) -> aggregate(Count)", "persistent_aggregate(word-counts)",
                   "split_more", "persistent_aggregate(other)"], ids


class WrongWidth(BaseFunction):
    def execute(self, tuple, collector):
        collector.emit((tuple[0], "extra"))


def test_a_function_emitting_the_wrong_width_stops_at_once(executor: str,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    t = TridentTopology(f"width-{uuid.uuid4().hex[:8]}")
    (t.new_stream("sentences", FixedBatchSpout(Fields("sentence"), 3, *[(x,) for x in SENTENCES]))
     .each(Fields("sentence"), WrongWidth(), Fields("word"))
     .group_by(Fields("word")).persistent_aggregate(state.transactional("w"), Count(), Fields("count")))
    with caplog.at_level(logging.INFO, logger="trident"), pytest.raises(TopologyFailedError) as e:
        run_topology(t.build(), config(executor, max_attempts=5, retry_backoff_secs=5))
    assert "each(WrongWidth) emitted 2 values" in str(e.value)
    assert "declares 1 output field" in str(e.value)
    assert e.value.component == "each(WrongWidth) -> aggregate(Count)"
    failed = [r.getMessage() for r in caplog.records if "failed" in r.getMessage() and "txid 1" in r.getMessage()]
    assert len(failed) == 1, failed                 # one attempt: not retried with backoff
    assert "stopping the run" in failed[0], failed




def test_every_failed_attempt_logs_its_cause_and_what_follows(caplog: pytest.LogCaptureFixture) -> None:
    from transactional import FailedException

    tries: list[int] = []

    class FailTwice(BaseFunction):
        def execute(self, tuple, collector):
            tries.append(1)
            if len(tries) <= 2:
                msg = "the lookup service said 503"
                raise FailedException(msg)
            collector.emit((tuple[0],))

    t = TridentTopology(f"causes-{uuid.uuid4().hex[:8]}")
    (t.new_stream("sentences", FixedBatchSpout(Fields("sentence"), 3, *[(x,) for x in SENTENCES]))
     .each(Fields("sentence"), FailTwice(), Fields("same"))
     .group_by(Fields("same")).persistent_aggregate(state.transactional("c"), Count(), Fields("count")))
    with caplog.at_level(logging.INFO, logger="trident"):
        r = run_topology(t.build(), config("in-process", max_attempts=3))
    assert r.batches_committed == 1
    lines = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.INFO and "failed:" in rec.getMessage()]
    assert lines == [
        f"{t.topology_id}: txid 1 attempt 1 failed: each(FailTwice) -> aggregate(Count) task 0: "
        "FailedException: the lookup service said 503; replaying txid 1 (attempt 2 of max_attempts=3) in 0.01 s",
        f"{t.topology_id}: txid 1 attempt 2 failed: each(FailTwice) -> aggregate(Count) task 0: "
        "FailedException: the lookup service said 503; replaying txid 1 (attempt 3 of max_attempts=3) in 0.02 s",
    ], lines


class EmitsALock(BaseFunction):
    def execute(self, tuple, collector):
        import threading

        collector.emit((threading.Lock(),))


def test_an_unpicklable_value_stops_at_once_naming_it(spark_context: Any, caplog: pytest.LogCaptureFixture) -> None:
    t = TridentTopology(f"lock-{uuid.uuid4().hex[:8]}")
    (t.new_stream("sentences", FixedBatchSpout(Fields("sentence"), 3, *[(x,) for x in SENTENCES]))
     .each(Fields("sentence"), EmitsALock(), Fields("lock")).shuffle()
     .each(Fields("lock"), Split(), Fields("word")))
    with caplog.at_level(logging.INFO, logger="trident"), pytest.raises(TopologyFailedError) as e:
        run_topology(t.build(), config("spark", max_attempts=5, retry_backoff_secs=5))
    assert "cannot be pickled" in str(e.value) and "_thread.lock" in str(e.value), str(e.value)
    failed = [r.getMessage() for r in caplog.records if "attempt" in r.getMessage() and "failed:" in r.getMessage()]
    assert len(failed) == 1 and "stopping the run" in failed[0], failed


@pytest.mark.integration
def test_waiting_for_the_lock_is_said_and_bounded(zk_url: str, caplog: pytest.LogCaptureFixture) -> None:
    from state.zookeeper import ZooKeeperTransactionalState
    from transactional.exceptions import LockHeldError

    t = word_count(columnar=False)
    holder = ZooKeeperTransactionalState.from_url(zk_url, t.topology_id)
    holder.acquire_lock("host-x:1:dead", wait=False, timeout=None)
    try:
        with caplog.at_level(logging.INFO, logger="trident"), pytest.raises(LockHeldError) as e:
            run_topology(t.build(), config("in-process", coordination=zk_url, lock_wait_secs=6))
    finally:
        holder.close()
    waits = [r.getMessage().split(": ", 1)[1] for r in caplog.records if "waiting for the topology's lock" in r.getMessage()]
    assert [w.replace("1 s so far", "0 s so far").replace("6 s so far", "5 s so far") for w in waits] == [
        f"waiting for the topology's lock, held by host-x:1:dead: {n} s so far, at most 6 s (lock_wait_secs); a "
        "driver killed with -9 lets go when its ZooKeeper session expires" for n in (0, 5)], waits
    assert f"topology '{t.topology_id}' is still locked by host-x:1:dead after waiting 6 s (lock_wait_secs)" in str(e.value)
