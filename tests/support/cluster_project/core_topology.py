"""The cluster tests' core topology: sentences from a ``MemorySpout`` (on the driver) split
on the executors by ``helpers.CoreSplit`` (which calls ``wordlib``), counted by
``helpers.CoreCount``, a stateful bolt on Redis ``KeyValueState``. Settings from the
environment: ``CLUSTER_TOPOLOGY_ID``, ``CLUSTER_SENTENCES`` (in all)."""

import helpers

from spouts import MemorySpout
from transactional import Fields, TopologyBuilder


def sentences(n: int) -> list[str]:
    """``n`` sentences; word i of sentence j is WORDS[(i + j) % 7]."""
    words = ["Alpha", "beta", "Gamma", "delta", "EPSILON", "zeta", "eta"]
    return [" ".join(words[(i + j) % 7] for i in range(5)) for j in range(n)]


def build_topology():
    import os

    n = int(os.environ.get("CLUSTER_SENTENCES", "400"))
    b = TopologyBuilder(os.environ.get("CLUSTER_TOPOLOGY_ID", "cluster-core"))
    b.set_spout("sentences", MemorySpout(sentences(n), Fields("sentence"), per_call=20), 2)
    b.set_bolt("split", helpers.CoreSplit(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", helpers.CoreCount(), 2).fields_grouping("split", Fields("word"))
    return b


def report(result):
    print("acked", result.acked["sentences"], "failed", result.failed["sentences"], "pending",
          result.pending["sentences"], flush=True)
