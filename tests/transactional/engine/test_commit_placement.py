"""Commits on executors (``commit_placement="executors"``) against real Redis and Spark:
each committer task writes its own share of a txid with the driver's epoch; the same
exactness as commits on the driver (random failures: tests/transactional/engine/test_redis_engine.py; a
driver SIGKILL: below); a key two tasks update in one txid is refused, never lost."""

from __future__ import annotations

import pytest

from spouts import MemoryTransactionalSpout
from transactional import (
    BaseTransactionalBolt,
    Committer,
    Fields,
    TopologyConfig,
    TopologyFailedError,
    TransactionalTopologyBuilder,
    run_topology,
)
from transactional.exceptions import ConfigError

import test_exactly_once as eo
import test_redis_engine as words

pytestmark = pytest.mark.integration


def config(state: str, **kw) -> TopologyConfig:
    kw.setdefault("max_spout_pending", 3)
    kw.setdefault("progress", False)
    return TopologyConfig(spark_master="local[2]", state=state, commit_placement="executors", **kw)


def test_committer_tasks_on_executors_write_their_own_share(spark_context, redis_server, redis_url):
    data = words.make_data(2)
    tid = words.new_id("on-exec")
    r = run_topology(words.build_topology(tid, data), config(redis_url), spark_context=spark_context)
    assert r.batches_committed == 5
    t, o = words.stored_counts(redis_url, tid)
    assert t == words.exact(data) and o == words.exact(data)
    client = redis_server.client()
    records = sorted(k.decode().rsplit(":", 1)[1] for k in client.keys(f"{tid}:ocounts:~written:*"))
    assert records == ["counts.0", "counts.1"]          # each committer task wrote, not the driver


def test_memory_state_with_commits_on_executors_is_refused():
    with pytest.raises(ConfigError, match=r"commit_placement='executors' needs user state.*redis://"):
        TopologyConfig(commit_placement="executors")


def test_two_tasks_updating_one_key_stop_the_run_naming_map_key_txid_and_the_fix(spark_context, redis_url):
    """24 tuples a batch reach 2 committer tasks behind a shuffle grouping; both update
    key "w". On executors each task writes its own share: the second write is refused."""
    tid = words.new_id("conflict")
    spout = MemoryTransactionalSpout({0: ["x"] * 48}, Fields("word"), 24)
    b = TransactionalTopologyBuilder(tid, "spout", spout, 1)
    b.set_bolt("c1", eo.CountInto(False), 2).shuffle_grouping("spout")
    with pytest.raises(TopologyFailedError) as e:
        run_topology(b, config(redis_url), spark_context=spark_context)
    msg = str(e.value)
    assert "ConflictingWriteError" in msg and "'shared'" in msg and "key 'w'" in msg, msg
    assert "txid 1" in msg and "fields_grouping" in msg, msg
    assert e.value.component == "c1" and e.value.txid == 1


class OpensLate(BaseTransactionalBolt, Committer):
    def prepare(self, conf, context, collector, attempt):
        self.context = context

    def execute(self, tuple):
        pass

    def finish_batch(self):
        self.context.map_state("late").multi_combine(["k"], [1])

    def declare_output_fields(self, declarer):
        pass


def test_a_map_not_opened_in_prepare_is_a_clear_error_on_executors(spark_context, redis_url):
    tid = words.new_id("late")
    b = TransactionalTopologyBuilder(tid, "spout", MemoryTransactionalSpout({0: ["a"]}, Fields("w"), 1), 1)
    b.set_bolt("late", OpensLate()).global_grouping("spout")
    with pytest.raises(TopologyFailedError, match=r"map state 'late' is opened by 'late' task 0 on an executor.*prepare"):
        run_topology(b, config(redis_url), spark_context=spark_context)


@pytest.mark.slow
def test_driver_sigkill_after_the_executors_wrote_then_restart_is_exact(tmp_path, redis_url, zk_url):
    """The driver dies after the commit job of txid 3 wrote (on executors), before it
    recorded txid 3; the restarted driver replays it. Both maps exact."""
    tid = words.new_id("exec-kill")
    zk_url += "?session_timeout=1"
    args = ("--set", 'commit_placement="executors"')
    d = eo.Driver(tmp_path, "crash", tid, redis_url, zk_url, args=args,
                  env={"TRIDENT_CRASH_AT": "commit.before_record:txid=3"})
    assert d.wait() == -9, d.stderr[-3000:]
    assert eo.committed_txid(zk_url, tid) == 2
    d = eo.Driver(tmp_path, "resume", tid, redis_url, zk_url, args=args)
    assert d.wait() == 0, d.stderr[-3000:]
    t, o = words.stored_counts(redis_url, tid)
    assert t == words.exact(words.make_data(1)) and o == words.exact(words.make_data(1))


def test_two_spouts_with_commits_on_executors_count_exactly(spark_context, redis_url, tmp_path):
    """A transactional and an opaque spout under each txid, txid 2 failing once, the
    committer tasks writing an OpaqueMap in Redis from the executors."""
    from test_engine import two_spouts, uid

    r = run_topology(two_spouts(uid("spouts-exec"), str(tmp_path / "events")), config(redis_url),
                     spark_context=spark_context)
    assert r.map_state("per-value").multi_get([*range(30), *range(100, 125)]) == [1] * 55
    assert len(r.failures) == 1 and "txid 2 (attempt 1), component 'audit'" in r.failures[0]
    assert r.last_txid == 7
