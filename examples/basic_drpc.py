"""Storm-starter's BasicDRPCTopology: a DRPC function that appends "!" to its argument.

    python examples/basic_drpc.py                 # hello -> hello!, goodbye -> goodbye!

One bolt, three tasks; LocalCluster runs the topology in the background and LocalDRPC
answers the calls in this process (docs/drpc.md).
"""

from transactional import BaseBasicBolt, Fields, LocalCluster, TopologyConfig, Values
from transactional.drpc import LinearDRPCTopologyBuilder, LocalDRPC


class ExclaimBolt(BaseBasicBolt):
    """(id, args) -> (id, args + "!")."""

    def execute(self, tuple, collector):
        collector.emit(Values(tuple[0], tuple[1] + "!"))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "result"))


def build(drpc=None):
    """The exclamation topology: for ``drpc`` (a LocalDRPC), or for DRPC servers (None)."""
    builder = LinearDRPCTopologyBuilder("exclamation")
    builder.add_bolt(ExclaimBolt(), 3)
    return builder.create_local_topology(drpc) if drpc is not None else builder.create_remote_topology()


def main(config=None):
    drpc = LocalDRPC()
    with LocalCluster() as cluster:
        cluster.submit_topology("exclamation-drpc", config or TopologyConfig(progress=False), build(drpc))
        for word in ("hello", "goodbye"):
            print(f"Result for {word!r}: {drpc.execute('exclamation', word)!r}")


if __name__ == "__main__":
    main()
