"""Which batches run their processing in the driver's process (transactional/engine/placement.py,
docs/performance.md "Latency: DRPC"): the "auto" default on a local master, the rules and the
work budget; and the gathering of DRPC calls for the next batch while one is processing."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from transactional import BaseBasicBolt, Fields, LocalCluster, TopologyConfig, Values
from transactional.drpc import LinearDRPCTopologyBuilder, LocalDRPC
from transactional.engine.drpc import local_queues
from transactional.engine.placement import SmallBatches, auto_on, max_calls


def calls(n: int) -> dict[str, list[list[object]]]:
    return {"requests": [[f"id-{i}", "x", 0, ""] for i in range(n)]}


def test_a_batch_runs_here_only_when_every_spout_in_it_has_a_rule_that_says_small() -> None:
    small = SmallBatches({"drpc": lambda m: len(m["requests"]) if len(m["requests"]) <= 4 else None})
    assert [small({"drpc": calls(n)}) for n in (1, 4, 5)] == [True, True, False]
    assert small({"drpc": calls(1), "sentences": None}) is True       # a spout with nothing in the batch
    assert small({"drpc": calls(1), "sentences": {"0": [0, 3]}}) is False   # a spout without a rule
    assert small({"sentences": {"0": [0, 3]}}) is False


def test_the_work_budget_follows_the_measured_batches() -> None:
    small = SmallBatches({"drpc": lambda m: len(m["requests"])}, budget_secs=1.0)
    assert small.expected(200) == 0.0 and small({"drpc": calls(200)}) is True   # nothing measured yet
    small.ran({"drpc": calls(1)}, 0.1)             # a heavy call: 0.1 s, all of it counted per call
    assert small({"drpc": calls(8)}) is True and small({"drpc": calls(10)}) is False
    for _ in range(20):
        small.ran({"drpc": calls(100)}, 0.1)       # the batches of 100 took what one took: a fixed cost
    assert small.floor == 0.1 and small.per_item is not None and small.per_item < 0.0001
    assert small({"drpc": calls(256)}) is True
    no_budget = SmallBatches({"drpc": lambda m: len(m["requests"])})
    no_budget.ran({"drpc": calls(1)}, 100.0)
    assert no_budget({"drpc": calls(256)}) is True             # an explicit N: no budget


def test_auto_is_on_for_local_masters_whose_workers_run_this_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    config = TopologyConfig()
    assert [auto_on(config, m) for m in ("local", "local[2]", "local[*]", "local[2, 3]")] == [True] * 4
    assert [auto_on(config, m) for m in ("local-cluster[2, 1, 1024]", "spark://h:7077", "yarn",
                                         "k8s://https://h:443")] == [False] * 4
    assert auto_on(TopologyConfig(archives=["venv.tar.gz#environment"]), "local[2]") is False
    other = TopologyConfig(spark_conf={"spark.pyspark.python": "./environment/bin/python"})
    assert auto_on(other, "local[2]") is False
    assert auto_on(TopologyConfig(spark_conf={"spark.pyspark.python": sys.executable}), "local[2]") is True
    monkeypatch.setenv("PYSPARK_PYTHON", "/nonexistent/python3")
    assert auto_on(config, "local[2]") is False


def test_the_setting_none_is_auto_and_0_or_n_is_what_it_says() -> None:
    assert max_calls(TopologyConfig(drpc_batch_size=64), "spark://h:7077") == (0, True)
    assert max_calls(TopologyConfig(drpc_on_driver_max_calls=0), "local[2]") == (0, False)
    assert max_calls(TopologyConfig(drpc_on_driver_max_calls=8), "spark://h:7077") == (8, False)


class Pid(BaseBasicBolt):
    """(id, args) -> (id, the pid of the process the bolt ran in)."""

    def execute(self, tuple, collector):
        collector.emit(Values(tuple[0], str(os.getpid())))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "result"))


@pytest.mark.usefixtures("spark_context")
def test_on_local_spark_drpc_batches_run_in_the_driver_by_default_and_as_spark_jobs_with_0() -> None:
    pids = {}
    for setting in (None, 0):
        drpc = LocalDRPC()
        b = LinearDRPCTopologyBuilder("pid")
        b.add_bolt(Pid(), 2)
        with LocalCluster() as cluster:
            cluster.submit_topology("pid", TopologyConfig(progress=False, drpc_on_driver_max_calls=setting),
                                    b.create_local_topology(drpc))
            pids[setting] = {drpc.execute("pid", a) for a in ("a", "b")}
    assert pids[None] == {str(os.getpid())}
    assert str(os.getpid()) not in pids[0] and len(pids[0]) >= 1


class Held(BaseBasicBolt):
    """Holds "first" until the file ``gate`` exists; (id, args) -> (id, args + "!")."""

    def __init__(self, gate: str) -> None:
        self.gate = gate

    def execute(self, tuple, collector):
        if tuple[1] == "first":
            import time

            deadline = time.monotonic() + 30
            while not Path(self.gate).exists() and time.monotonic() < deadline:
                time.sleep(0.005)
        collector.emit(Values(tuple[0], tuple[1] + "!"))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "result"))


def test_calls_that_arrive_while_a_batch_processes_gather_into_the_next_batch(tmp_path: Path) -> None:
    drpc = LocalDRPC()
    b = LinearDRPCTopologyBuilder("held")
    b.add_bolt(Held(str(tmp_path / "gate")))
    q_sizes: list[int] = []
    got: dict[str, str] = {}
    with LocalCluster() as cluster:
        cluster.submit_topology("held", TopologyConfig(executor="in-process", progress=False),
                                b.create_local_topology(drpc))
        q = local_queues(drpc.source)["held"]
        take = q.take
        taken = threading.Event()

        def counted(n: int, wait_secs: float = 0.0, *more: object) -> object:
            out = take(n, wait_secs, *more)
            if out:
                q_sizes.append(len(out))
                taken.set()
            return out
        q.take = counted  # type: ignore[method-assign]
        first = threading.Thread(target=lambda: got.update(first=drpc.execute("held", "first")))
        first.start()
        assert taken.wait(10) and q_sizes == [1]      # "first" is in a batch, held in its bolt
        later = [threading.Thread(target=lambda a=a: got.update({a: drpc.execute("held", a)}))
                 for a in ("b", "c", "d", "e")]
        for t in later:
            t.start()
        with q._lock:
            assert q._lock.wait_for(lambda: q.waiting() == 4, 10), q.waiting()
        (tmp_path / "gate").touch()                 # the batch in flight ends: the four go in one batch
        for t in [first, *later]:
            t.join(30)
        result = cluster.kill_topology("held")
    assert got == {"first": "first!", "b": "b!", "c": "c!", "d": "d!", "e": "e!"}
    assert q_sizes == [1, 4]
    assert result is not None and result.batches_committed == 2
