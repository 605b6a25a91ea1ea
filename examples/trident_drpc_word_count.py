"""Storm's TridentWordCount with its DRPC query: an exact word count, and calls that sum
the counts of a query's words as every committed batch left them.

    python examples/trident_drpc_word_count.py     # "cat the dog jumped" -> [[24]] once all is counted

A call sees the batches committed before its own: one made while the sentences are still
being counted gets a smaller sum (the first call, in the first batch, sees nothing: [[0]]).

The query stream is Storm's, as the Trident tutorial writes it:
new_drpc_stream("words") -> each(args, Split) -> group_by(word) -> state_query(MapGet)
-> each(count, FilterNull) -> aggregate(Sum). Each call is its own batch (txid), beside
the sentences; the answer is the stream's last tuples as a JSON list of lists.
"""

from transactional import Fields, LocalCluster, TopologyConfig
from transactional.drpc import LocalDRPC
from trident import BaseFilter, BaseFunction, Count, FixedBatchSpout, MapGet, Sum, TridentTopology, state

SENTENCES = ["the cow jumped over the moon", "the man went to the store and bought some candy",
             "four score and seven years ago", "how many apples can you eat",
             "to be or not to be the person"]


class Split(BaseFunction):
    def execute(self, tuple, collector):
        for word in tuple[0].split(" "):
            collector.emit((word,))


class FilterNull(BaseFilter):
    """Keeps the tuples whose fields are all set (Storm's FilterNull)."""

    def is_keep(self, tuple):
        return all(v is not None for v in tuple)


def build_topology(drpc=None, per_batch=3, topology_id="trident-drpc-word-count"):
    """The word count and its "words" DRPC stream, for ``drpc`` (a LocalDRPC) or servers (None)."""
    t = TridentTopology(topology_id)
    spout = FixedBatchSpout(Fields("sentence"), per_batch, *[(s,) for s in SENTENCES * 4])
    word_counts = (t.new_stream("spout1", spout).parallelism_hint(2)
                   .each(Fields("sentence"), Split(), Fields("word"))
                   .group_by(Fields("word"))
                   .persistent_aggregate(state.transactional("word-counts"), Count(), Fields("count"))
                   .parallelism_hint(2))
    (t.new_drpc_stream("words", drpc)
     .each(Fields("args"), Split(), Fields("word"))
     .group_by(Fields("word"))
     .state_query(word_counts, Fields("word"), MapGet(), Fields("count"))
     .each(Fields("count"), FilterNull())
     .aggregate(Fields("count"), Sum(), Fields("sum")))
    return t


def main(config=None):
    drpc = LocalDRPC()
    with LocalCluster() as cluster:
        cluster.submit_topology("word-count", config or TopologyConfig(progress=False), build_topology(drpc))
        for query in ("cat the dog jumped", "the man", "apples and candy"):
            print(f"DRPC RESULT {query!r}: {drpc.execute('words', query)}")


if __name__ == "__main__":
    main()
