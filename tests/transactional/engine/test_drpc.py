"""Distributed RPC (docs/drpc.md): Linear DRPC through LocalDRPC and LocalCluster, on the
in-process and Spark executors; requests in batches, CoordinatedBolt's per-request
finish, failures, timeouts and bad input."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from examples import basic_drpc, reach
from transactional import BaseBasicBolt, BaseBatchBolt, Fields, LocalCluster, TopologyConfig, Values
from transactional.drpc import DRPCExecutionException, FinishedCallback, LinearDRPCTopologyBuilder, LocalDRPC
from transactional.engine.drpc import local_queues
from transactional.exceptions import ConfigError, TopologyError


def config(executor: str, **kw) -> TopologyConfig:
    """The executor's config. On Spark, DRPC-only batches run as Spark jobs here (setting 0),
    so these tests keep covering the executors' path; the default, which runs small DRPC
    batches in the driver's process on local masters, is tested in test_placement.py."""
    if executor == "spark":
        kw.setdefault("drpc_on_driver_max_calls", 0)
    return TopologyConfig(executor=executor, progress=False, **kw)


def call_all(drpc: LocalDRPC, function: str, args: list[str]) -> dict[str, str | BaseException]:
    """Call ``function`` with each of ``args`` from its own thread; what each got."""
    out: dict[str, str | BaseException] = {}

    def one(a: str) -> None:
        try:
            out[a] = drpc.execute(function, a)
        except BaseException as e:  # noqa: BLE001 - the test looks at it
            out[a] = e
    threads = [threading.Thread(target=one, args=(a,)) for a in args]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def queued(drpc: LocalDRPC, function: str, n: int) -> None:
    """Wait until ``n`` requests of ``function`` wait for a batch."""
    q = local_queues(drpc.source)[function]
    cond = q._lock
    with cond:
        assert cond.wait_for(lambda: q.waiting() == n, 10), q.waiting()


def test_reach_answers_storm_starters_figures(executor: str) -> None:
    drpc = LocalDRPC()
    with LocalCluster() as cluster:
        cluster.submit_topology("reach", config(executor), reach.construct().create_local_topology(drpc))
        assert drpc.execute("reach", "foo.com/blog/1") == "16"
        assert drpc.execute("reach", "engineering.twitter.com/blog/5") == "14"
        assert drpc.execute("reach", "notaurl.com") == "0"
        assert drpc.execute("reach", "tech.backtype.com/blog/123") == "7"


def test_basic_drpc_exclaims(executor: str) -> None:
    drpc = LocalDRPC()
    with LocalCluster() as cluster:
        cluster.submit_topology("exclamation", config(executor), basic_drpc.build(drpc))
        assert drpc.execute("exclamation", "hello") == "hello!"


def test_many_requests_share_a_batch_and_each_gets_its_own_answer() -> None:
    drpc = LocalDRPC()
    topology = reach.construct().create_local_topology(drpc)
    urls = [*reach.TWEETERS_DB, "notaurl.com"] * 5            # 20 calls, 4 distinct answers
    want = {"foo.com/blog/1": "16", "engineering.twitter.com/blog/5": "14", "tech.backtype.com/blog/123": "7",
            "notaurl.com": "0"}
    got: list[tuple[str, str]] = []
    lock = threading.Lock()

    def one(u: str) -> None:
        r = drpc.execute("reach", u)
        with lock:
            got.append((u, r))
    threads = [threading.Thread(target=one, args=(u,)) for u in urls]
    for t in threads:
        t.start()
    queued(drpc, "reach", 20)                     # all wait before the topology starts
    cluster = LocalCluster()
    cluster.submit_topology("reach", config("in-process", drpc_batch_size=8, max_spout_pending=1), topology)
    for t in threads:
        t.join(30)
    result = cluster.kill_topology("reach")
    assert sorted(got) == sorted((u, want[u]) for u in urls)
    assert result is not None and result.batches_committed == 3          # 8 + 8 + 4 requests


class TasksThatFinished(BaseBatchBolt):
    """A middle bolt of 4 tasks: each says, in finish_batch, that it finished the request."""

    def prepare(self, conf, context, collector, id):
        self.collector, self.id, self.task, self.seen = collector, id, context.task_index, 0

    def execute(self, tuple):
        self.seen += 1

    def finish_batch(self):
        self.collector.emit(Values(self.id, self.task, self.seen))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "task", "seen"))


class Collect(BaseBatchBolt, FinishedCallback):
    """The last bolt: answers with the (task, tuples seen) pairs of the request, from finished_id."""

    def prepare(self, conf, context, collector, id):
        self.collector, self.id, self.rows = collector, id, []

    def execute(self, tuple):
        self.rows.append((tuple["task"], tuple["seen"]))

    def finished_id(self, id):
        self.collector.emit(Values(id, sorted(self.rows)))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "rows"))


class Words(BaseBasicBolt):
    def execute(self, tuple, collector):
        for w in tuple[1].split():
            collector.emit(Values(tuple[0], w))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "word"))


def test_finish_batch_runs_once_per_request_on_every_task_even_with_no_tuple(executor: str) -> None:
    drpc = LocalDRPC()
    b = LinearDRPCTopologyBuilder("finish")
    b.add_bolt(Words(), 2)
    b.add_bolt(TasksThatFinished(), 4).fields_grouping(Fields("word"))
    b.add_bolt(Collect(), 3).global_grouping()
    with LocalCluster() as cluster:
        cluster.submit_topology("finish", config(executor), b.create_local_topology(drpc))
        got = call_all(drpc, "finish", ["", "a a a a a a", "x y z w v u t s"])
    assert got[""] == "[(0, 0), (1, 0), (2, 0), (3, 0)]"          # no tuple at all: every task finished
    tasks = eval(got["a a a a a a"])                             # noqa: S307 - our own repr of ints
    assert [t for t, _ in tasks] == [0, 1, 2, 3] and sorted(n for _, n in tasks) == [0, 0, 0, 6]
    assert sum(n for _, n in eval(got["x y z w v u t s"])) == 8   # noqa: S307


class FailsAtFirst(BaseBasicBolt):
    """Raises for args "flaky" while fewer than ``fails`` attempts are written in ``marks``;
    always for "broken"."""

    def __init__(self, marks: str, fails: int) -> None:
        self.marks, self.fails = marks, fails

    def execute(self, tuple, collector):
        if tuple[1] == "broken":
            msg = "broken input"
            raise ValueError(msg)
        if tuple[1] == "flaky":
            p = Path(self.marks)
            n = len(p.read_text()) if p.exists() else 0
            if n < self.fails:
                p.write_text("x" * (n + 1))
                msg = f"flaky failure {n + 1}"
                raise RuntimeError(msg)
        collector.emit(Values(tuple[0], tuple[1].upper()))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "result"))


def test_a_failed_request_is_retried_alone_then_answered_with_its_error(executor: str, tmp_path: Path) -> None:
    drpc = LocalDRPC()
    b = LinearDRPCTopologyBuilder("upper")
    b.add_bolt(FailsAtFirst(str(tmp_path / "marks"), 2), 2)
    with LocalCluster() as cluster:
        cluster.submit_topology("upper", config(executor, max_attempts=3), b.create_local_topology(drpc))
        got = call_all(drpc, "upper", ["flaky", "broken", "fine"])
    assert got["flaky"] == "FLAKY"                    # failed twice, answered on its third attempt
    assert got["fine"] == "FINE"
    err = got["broken"]
    assert isinstance(err, DRPCExecutionException)
    assert str(err) == "upper: bolt0 task 0: ValueError: broken input (failed 3 times: max_attempts=3)" or \
        str(err) == "upper: bolt0 task 1: ValueError: broken input (failed 3 times: max_attempts=3)"
    assert (tmp_path / "marks").read_text() == "xx"


class Gated(BaseBasicBolt):
    """Holds "slow" until the file ``gate`` exists."""

    def __init__(self, gate: str) -> None:
        self.gate = gate

    def execute(self, tuple, collector):
        if tuple[1] == "slow":
            import time

            deadline = time.monotonic() + 30
            while not Path(self.gate).exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        collector.emit(Values(tuple[0], tuple[1] + "!"))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "result"))


def test_a_request_not_answered_in_time_gets_timed_out_and_its_late_result_goes_nowhere(tmp_path: Path) -> None:
    drpc = LocalDRPC()
    b = LinearDRPCTopologyBuilder("gated")
    b.add_bolt(Gated(str(tmp_path / "gate")))
    with LocalCluster() as cluster:
        cluster.submit_topology("gated", config("in-process", drpc_request_timeout_secs=0.5,
                                                message_timeout_secs=60), b.create_local_topology(drpc))
        with pytest.raises(DRPCExecutionException, match="^timed out$"):
            drpc.execute("gated", "slow")
        (tmp_path / "gate").touch()                  # the late result of "slow" is dropped
        assert drpc.execute("gated", "next") == "next!"
        assert drpc.execute("gated", "slow") == "slow!"


class NoId(BaseBasicBolt):
    def execute(self, tuple, collector):
        collector.emit(Values(tuple[1]))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("result"))


class Silent(BaseBasicBolt):
    def execute(self, tuple, collector):
        pass

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "result"))


def test_bad_input_gets_a_clear_error() -> None:
    drpc = LocalDRPC()
    b = LinearDRPCTopologyBuilder("noid")
    b.add_bolt(NoId())
    s = LinearDRPCTopologyBuilder("silent")
    s.add_bolt(Silent())
    with LocalCluster() as cluster:
        cluster.submit_topology("noid", config("in-process"), b.create_local_topology(drpc))
        cluster.submit_topology("silent", config("in-process"), s.create_local_topology(drpc))
        with pytest.raises(DRPCExecutionException) as e:
            drpc.execute("noid", "x")
        assert str(e.value) == ("noid: bolt0 task 0: InvalidTupleError: DRPC bolt 'bolt0' emitted ('x',) for request "
                                f"{str(e.value).split('for request ')[1].split(' ')[0]} without the request id as its "
                                "first value: emit Values(id, ...) with the id prepare() was given (a basic bolt: "
                                "tuple[0])")
        with pytest.raises(DRPCExecutionException, match=r"^silent: the last bolt 'bolt0' emitted no result for the "
                                                         r"request; emit Values\(id, result\) from it$"):
            drpc.execute("silent", "x")
        with pytest.raises(DRPCExecutionException, match=r"^unknown DRPC function 'nosuch': no topology serves it "
                                                         r"on this LocalDRPC \(served: \['noid', 'silent'\]\)"):
            drpc.execute("nosuch", "x")
        with pytest.raises(DRPCExecutionException, match=r"^DRPC args of 'noid' must be text \(str\); got int 5$"):
            drpc.execute("noid", 5)   # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="DRPC topology 'empty' has no bolt: add_bolt"):
        LinearDRPCTopologyBuilder("empty").create_local_topology(drpc)
    remote = LinearDRPCTopologyBuilder("remote")
    remote.add_bolt(Silent())
    with LocalCluster() as cluster, pytest.raises(ConfigError, match="TopologyConfig.drpc_servers is empty"):
        cluster.submit_topology("remote", config("in-process"), remote.create_remote_topology())
    first = LinearDRPCTopologyBuilder("first")
    with pytest.raises(TopologyError, match="is the first bolt"):
        first.add_bolt(Silent()).global_grouping()


def test_local_cluster_runs_any_topology_until_killed() -> None:
    from spouts import MemoryTransactionalSpout
    from transactional import TransactionalTopologyBuilder

    spout = MemoryTransactionalSpout({0: [("a",), ("b",), ("c",)]}, Fields("word"), 1)
    b = TransactionalTopologyBuilder("lc-words", "spout", spout)
    b.set_bolt("count", TasksThatFinished(), 2).shuffle_grouping("spout")
    with LocalCluster() as cluster:
        cluster.submit_topology("w", config("in-process"), b)
        with pytest.raises(TopologyError, match="running on this LocalCluster already"):
            cluster.submit_topology("w", config("in-process"), b)
        result = cluster.kill_topology("w")
    assert result is not None and result.stopped_because.startswith("killed by LocalCluster.kill_topology('w')")


class SlowOnce(BaseBasicBolt):
    """Its first attempt at "slow" outlasts message_timeout_secs (a stuck task), later ones do not."""

    def __init__(self, marks: str) -> None:
        self.marks = marks

    def execute(self, tuple, collector):
        p = Path(self.marks)
        if tuple[1] == "slow" and not p.exists():
            p.touch()
            import time

            time.sleep(1.5)
        collector.emit(Values(tuple[0], tuple[1] + "!"))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "result"))


def test_a_failed_batch_re_runs_its_requests_and_answers_each_once(tmp_path: Path) -> None:
    drpc = LocalDRPC()
    b = LinearDRPCTopologyBuilder("slow")
    b.add_bolt(SlowOnce(str(tmp_path / "marks")), 2)
    threads_got = {}
    cluster = LocalCluster()
    topology = b.create_local_topology(drpc)
    t = threading.Thread(target=lambda: threads_got.update(call_all(drpc, "slow", ["slow", "other"])))
    t.start()
    queued(drpc, "slow", 2)                          # both in the first batch
    cluster.submit_topology("slow", config("in-process", message_timeout_secs=0.5, retry_backoff_secs=0,
                                           max_spout_pending=1), topology)
    t.join(30)
    result = cluster.kill_topology("slow")
    assert threads_got == {"slow": "slow!", "other": "other!"}
    assert result is not None and result.batches_committed == 1 and result.attempts == len(result.failures) + 1
    assert result.failures[0].startswith("txid 1 (attempt 1)") and "message_timeout_secs" in result.failures[0]


def test_only_small_batches_of_drpc_calls_run_on_the_driver() -> None:
    from examples import trident_drpc_word_count as wc
    from transactional.engine.drpc import on_driver

    topology = reach.construct().create_local_topology(LocalDRPC())
    assert on_driver(topology, {}) is None                                  # 0 (the default): never
    small = on_driver(topology, {"drpc.on.driver.max.calls": 2})
    assert small is not None
    calls = [["id-1", "a", 0, ""], ["id-2", "b", 0, ""], ["id-3", "c", 0, ""]]
    assert [small({"prepare-request": {"requests": calls[:n]}}) for n in (1, 2, 3)] == [True, True, False]
    trident = on_driver(wc.build_topology(LocalDRPC(), topology_id="on-driver-wc").build(),
                        {"drpc.on.driver.max.calls": 8})                        # the word count's own spout too
    assert trident is not None
    assert trident({"spout1": None, "drpc-words": {"requests": calls}}) is True
    assert trident({"spout1": {"0": [0, 3]}, "drpc-words": {"requests": calls}}) is False
    from trident import FixedBatchSpout, TridentTopology

    plain = TridentTopology("no-drpc")
    plain.new_stream("s", FixedBatchSpout(Fields("w"), 2, ("a",))).each(Fields("w"), wc.FilterNull())
    assert on_driver(plain.build(), {"drpc.on.driver.max.calls": 8}) is None   # no DRPC spout: none
