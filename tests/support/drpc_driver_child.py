"""A driver process for the DRPC fault tests: serves the remote "gated" function of the DRPC
server at argv[1] until killed. "slow" waits for the file argv[2]/gate, after touching
argv[2]/started (so the test knows the request is in flight here)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from transactional import BaseBasicBolt, Fields, LocalCluster, TopologyConfig, Values
from transactional.drpc import LinearDRPCTopologyBuilder

DIR = Path(sys.argv[2])


class Gated(BaseBasicBolt):
    def execute(self, tuple, collector):
        if tuple[1] == "slow":
            (DIR / "started").touch()
            deadline = time.monotonic() + 60
            while not (DIR / "gate").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        collector.emit(Values(tuple[0], tuple[1] + "!"))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "result"))


if __name__ == "__main__":
    b = LinearDRPCTopologyBuilder("gated")
    b.add_bolt(Gated(), 2)
    cluster = LocalCluster()
    cluster.submit_topology("gated", TopologyConfig(executor="in-process", progress=False, drpc_servers=[sys.argv[1]],
                                                    message_timeout_secs=120), b.create_remote_topology())
    print("serving", flush=True)
    threading_event = __import__("threading").Event()
    threading_event.wait()
