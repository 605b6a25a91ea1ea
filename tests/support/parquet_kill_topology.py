"""A Trident stream of sentences and of per-batch word counts into Parquet files, for the
driver-SIGKILL tests. ``TRIDENT_TEST_PARQUET``: the directory; ``TRIDENT_TEST_TOPOLOGY``;
``TRIDENT_TEST_FLAVOUR``: ``transactional`` or ``opaque`` (one row less on first attempts)."""

import os

from spouts import MemoryTransactionalSpout, OpaqueMemoryTransactionalSpout
from transactional import Fields
from trident import TridentTopology
from trident.parquet import ParquetStateFactory, ParquetUpdater

from trident_kill_topology import DATA, TAKE, short_first_attempt

__all__ = ["DATA", "build_topology", "sentences"]


def sentences() -> list[str]:
    return sorted(s for rows in DATA.values() for (s,) in rows)


def build_topology():
    out = os.environ["TRIDENT_TEST_PARQUET"]
    flavour = os.environ.get("TRIDENT_TEST_FLAVOUR", "transactional")
    if flavour == "opaque":
        spout = OpaqueMemoryTransactionalSpout(DATA, Fields("sentence"), TAKE, deliver=short_first_attempt)
    else:
        spout = MemoryTransactionalSpout(DATA, Fields("sentence"), TAKE)
    t = TridentTopology(os.environ.get("TRIDENT_TEST_TOPOLOGY", f"parquet-kill-{flavour}"))
    (t.new_stream("sentences", spout).parallelism_hint(2)
     .partition_persist(ParquetStateFactory(out, ["sentence"]), Fields("sentence"), ParquetUpdater()))
    return t.build()
