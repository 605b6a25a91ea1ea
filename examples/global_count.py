"""Storm's TransactionalGlobalCount: partial counts in parallel, one committer sums them.

    trident run examples/global_count.py            # or: python examples/global_count.py
"""

from spouts import MemoryTransactionalSpout
from transactional import BaseBatchBolt, BaseTransactionalBolt, Committer, Fields, TransactionalTopologyBuilder, Values

DATA = {
    0: ["cat", "dog", "chicken", "cat", "dog", "apple"],
    1: ["cat", "dog", "apple", "banana"],
    2: ["cat", "dog", "chicken", "cat", "dog", "apple", "zebra", "apple"],
}
PARTITION_TAKE_PER_BATCH = 3


class BatchCount(BaseBatchBolt):
    """Counts the tuples of its share of a batch."""

    def prepare(self, conf, context, collector, id):
        self.collector, self.id, self.count = collector, id, 0

    def execute(self, tuple):                  # ("tx", "word")
        self.count += 1

    def finish_batch(self):
        self.collector.emit(Values(self.id, self.count))   # ("id", "count")

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "count"))


class UpdateGlobalCount(BaseTransactionalBolt, Committer):
    """Sums the partial counts; in the commit phase adds them to the store once per txid."""

    def prepare(self, conf, context, collector, attempt):
        self.collector, self.attempt, self.sum = collector, attempt, 0
        self.counts = context.map_state("global-count")    # a TransactionalMap

    def execute(self, tuple):                  # ("id", "count")
        self.sum += tuple["count"]

    def finish_batch(self):
        total, = self.counts.multi_combine(["count"], [self.sum], "sum")   # skipped on a replay
        self.collector.emit(Values(self.attempt, total))    # ("id", "sum")

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "sum"))


def build_topology():
    spout = MemoryTransactionalSpout(DATA, Fields("word"), PARTITION_TAKE_PER_BATCH)
    builder = TransactionalTopologyBuilder("global-count", "spout", spout, 3)
    builder.set_bolt("partial-count", BatchCount(), 5).shuffle_grouping("spout")
    builder.set_bolt("sum", UpdateGlobalCount()).global_grouping("partial-count")
    return builder


def report(result):
    total = result.map_state("global-count").get("count")
    print(f"global count: {total} (expected {sum(len(v) for v in DATA.values())})")


if __name__ == "__main__":
    from transactional.ops.cli import run_example

    run_example(build_topology, report)
