"""The cluster tests' topology file: word counts into Redis, the bolts in ``helpers``
(a sibling module) calling ``wordlib`` (a local package). Settings from the environment:
``CLUSTER_TOPOLOGY_ID``, ``CLUSTER_SENTENCES`` (a partition), ``CLUSTER_PER_BATCH``,
``CLUSTER_OPAQUE`` ("1": an opaque spout)."""

import helpers

from spouts import MemoryTransactionalSpout, OpaqueMemoryTransactionalSpout
from transactional import Fields, TransactionalTopologyBuilder

WORDS = ["Alpha", "beta", "Gamma", "delta", "EPSILON", "zeta", "eta"]


def sentences(n: int, partitions: int = 4) -> dict:
    """``n`` sentences a partition; word i of sentence j is WORDS[(i + j) % 7]."""
    return {p: [" ".join(WORDS[(i + j + p) % 7] for i in range(5)) for j in range(n)] for p in range(partitions)}


def build_topology():
    import os

    n = int(os.environ.get("CLUSTER_SENTENCES", "40"))
    per_batch = int(os.environ.get("CLUSTER_PER_BATCH", "4"))
    opaque = os.environ.get("CLUSTER_OPAQUE", "0") == "1"
    tid = os.environ.get("CLUSTER_TOPOLOGY_ID", "cluster-words")
    kind = OpaqueMemoryTransactionalSpout if opaque else MemoryTransactionalSpout
    b = TransactionalTopologyBuilder(tid, "spout", kind(sentences(n), Fields("sentence"), per_batch), 2)
    b.set_bolt("split", helpers.Split(), 2).shuffle_grouping("spout")
    b.set_bolt("count", helpers.Count(), 2).fields_grouping("split", Fields("word"))
    return b
