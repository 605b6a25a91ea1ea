"""A Trident word count into PostgreSQL for the driver-SIGKILL tests (``trident run`` loads
it in a child). ``TRIDENT_TEST_PG``: the DSN; ``TRIDENT_TEST_TOPOLOGY``: the topology id;
``TRIDENT_TEST_FLAVOUR``: ``transactional`` or ``opaque`` (an opaque spout delivering one row
less on each first attempt, so a replay is another batch)."""

import os

from spouts import MemoryTransactionalSpout, OpaqueMemoryTransactionalSpout
from transactional import Fields
from trident import Count, TridentTopology
from trident.postgres import PostgresStateFactory, PostgresUpdater

from trident_kill_topology import DATA, TAKE, Split, expected, short_first_attempt

__all__ = ["DATA", "expected", "build_topology", "counts_factory", "log_factory"]


def counts_factory(dsn: str) -> PostgresStateFactory:
    return PostgresStateFactory(dsn, "word_counts", {"word": "text", "count": "bigint"}, key_columns=["word"],
                                add_columns=["count"], create_table=True)


def log_factory(dsn: str) -> PostgresStateFactory:
    return PostgresStateFactory(dsn, "sentences", {"sentence": "text"}, mode="append", create_table=True)


def build_topology():
    dsn = os.environ["TRIDENT_TEST_PG"]
    flavour = os.environ.get("TRIDENT_TEST_FLAVOUR", "transactional")
    if flavour == "opaque":
        spout = OpaqueMemoryTransactionalSpout(DATA, Fields("sentence"), TAKE, deliver=short_first_attempt)
    else:
        spout = MemoryTransactionalSpout(DATA, Fields("sentence"), TAKE)
    t = TridentTopology(os.environ.get("TRIDENT_TEST_TOPOLOGY", f"pg-kill-{flavour}"))
    s = t.new_stream("sentences", spout).parallelism_hint(2)
    s.partition_persist(log_factory(dsn), Fields("sentence"), PostgresUpdater())
    (s.each(Fields("sentence"), Split(), Fields("word"))
     .group_by(Fields("word"))
     .aggregate(Fields("word"), Count(), Fields("count")).parallelism_hint(2)
     .partition_persist(counts_factory(dsn), Fields("word", "count"), PostgresUpdater()))
    return t.build()
