"""A Trident stream of sentences (append) and of per-batch word counts (added by key) into
a Delta Lake or an Iceberg table, for the driver-SIGKILL tests (``trident run`` loads it in
a child). ``TRIDENT_TEST_LAKE``: ``delta`` or ``iceberg``; ``TRIDENT_TEST_LAKE_DIR``: where
the tables live; ``TRIDENT_TEST_TOPOLOGY``; ``TRIDENT_TEST_FLAVOUR``: ``transactional`` or
``opaque`` (one row less on first attempts, so a replay is another batch)."""

import os

from spouts import MemoryTransactionalSpout, OpaqueMemoryTransactionalSpout
from transactional import Fields
from trident import Count, TridentTopology

from trident_kill_topology import DATA, TAKE, Split, expected, short_first_attempt

__all__ = ["DATA", "expected", "sentences", "build_topology", "factories", "SENTENCES", "COUNTS"]

SENTENCES = Fields("sentence", types={"sentence": "string"})
COUNTS = Fields("word", "count", types={"word": "string", "count": "int64"})


def sentences() -> list[str]:
    return sorted(s for rows in DATA.values() for (s,) in rows)


def factories(kind: str, where: str):
    """(the sentence log's factory, the word counts' factory, their updater)."""
    if kind == "delta":
        from trident.delta import DeltaStateFactory, DeltaUpdater

        return (DeltaStateFactory(f"{where}/sentences", SENTENCES, create=True),
                DeltaStateFactory(f"{where}/counts", COUNTS, mode="add", key_fields=["word"], create=True),
                DeltaUpdater())
    from trident.iceberg import IcebergStateFactory, IcebergUpdater, sql_catalog

    catalog = sql_catalog(where)
    return (IcebergStateFactory(catalog, "trident.sentences", SENTENCES, create=True),
            IcebergStateFactory(catalog, "trident.counts", COUNTS, mode="add", key_fields=["word"], create=True),
            IcebergUpdater())


def build_topology():
    flavour = os.environ.get("TRIDENT_TEST_FLAVOUR", "transactional")
    if flavour == "opaque":
        spout = OpaqueMemoryTransactionalSpout(DATA, Fields("sentence"), TAKE, deliver=short_first_attempt)
    else:
        spout = MemoryTransactionalSpout(DATA, Fields("sentence"), TAKE)
    log, counts, updater = factories(os.environ["TRIDENT_TEST_LAKE"], os.environ["TRIDENT_TEST_LAKE_DIR"])
    t = TridentTopology(os.environ.get("TRIDENT_TEST_TOPOLOGY", f"lake-kill-{flavour}"))
    s = t.new_stream("sentences", spout).parallelism_hint(2)
    s.partition_persist(log, Fields("sentence"), updater)
    (s.each(Fields("sentence"), Split(), Fields("word"))
     .group_by(Fields("word"))
     .aggregate(Fields("word"), Count(), Fields("count")).parallelism_hint(2)
     .partition_persist(counts, Fields("word", "count"), updater))
    return t.build()
