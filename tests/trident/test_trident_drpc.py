"""Trident DRPC streams (docs/drpc.md): Storm's TridentWordCount query over LocalDRPC, on
the in-process and Spark executors; each call is its own batch and reads what earlier
batches committed."""

from __future__ import annotations

import threading

from examples import trident_drpc_word_count as wc
from transactional import Fields, LocalCluster, TopologyConfig
from transactional.drpc import LocalDRPC
from transactional.engine.drpc import local_queues
from trident import TridentTopology


def test_trident_word_count_query_reads_what_earlier_batches_committed(executor: str) -> None:
    drpc = LocalDRPC()
    # all sentences in txid 1; a topology id of its own (memory:// state lives on in this process)
    topology = wc.build_topology(drpc, per_batch=len(wc.SENTENCES) * 4, topology_id=f"drpc-wc-{executor}")
    first: list[str] = []
    t = threading.Thread(target=lambda: first.append(drpc.execute("words", "cat the dog jumped")))
    t.start()
    q = local_queues(drpc.source)["words"]
    with q._lock:
        assert q._lock.wait_for(lambda: q.waiting() == 1, 10)             # queued before the topology starts
    with LocalCluster() as cluster:
        cluster.submit_topology("wc", TopologyConfig(executor=executor, progress=False), topology)
        t.join(60)
        assert first == ["[[0]]"]          # txid 1: the sentences and this call; the call sees txid 0
        assert drpc.execute("words", "cat the dog jumped") == "[[24]]"   # the: 20, jumped: 4
        assert drpc.execute("words", "the man") == "[[24]]"
        assert drpc.execute("words", "nothing known here") == "[[0]]"


def test_a_drpc_stream_returns_its_tuples_as_a_json_list_of_lists() -> None:
    drpc = LocalDRPC()
    t = TridentTopology("drpc-rows")
    (t.new_drpc_stream("split", drpc)
     .flat_map(lambda tup: [(w, len(w)) for w in tup["args"].split()], Fields("word", "n")))
    with LocalCluster() as cluster:
        cluster.submit_topology("rows", TopologyConfig(executor="in-process", progress=False), t)
        assert drpc.execute("split", "a bb ccc") == '[["a", 1], ["bb", 2], ["ccc", 3]]'
        assert drpc.execute("split", "") == "[]"


def test_concurrent_calls_share_a_batch_and_each_gets_its_own_answer() -> None:
    from trident import Count

    drpc = LocalDRPC()
    t = TridentTopology("drpc-batched")
    (t.new_drpc_stream("count", drpc)
     .flat_map(lambda tup: [(w,) for w in tup["args"].split()], Fields("word"))
     .aggregate(Count(), Fields("n")))
    calls = [" ".join(["w"] * (i % 7)) for i in range(40)]          # 0..6 words each
    got: dict[int, str] = {}
    threads = [threading.Thread(target=lambda i=i: got.__setitem__(i, drpc.execute("count", calls[i])))
               for i in range(len(calls))]
    for th in threads:
        th.start()
    q = local_queues(drpc.source)["count"]
    with q._lock:
        assert q._lock.wait_for(lambda: q.waiting() == len(calls), 10)   # all queued before the topology starts
    with LocalCluster() as cluster:
        cluster.submit_topology("batched", TopologyConfig(executor="in-process", progress=False), t)
        for th in threads:
            th.join(60)
        result = cluster.kill_topology("batched")
    assert got == {i: f"[[{i % 7}]]" for i in range(len(calls))}         # a call with no word: its own zero
    assert result is not None and result.batches_committed == 1         # the 40 calls in one batch
