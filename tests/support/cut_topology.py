"""A Trident word count writing every txid to three sinks, for the one-cut test: an opaque
map in the run's state (Redis), a PostgreSQL table and a Delta table (per-batch counts
added by key). ``TRIDENT_TEST_PG``: the DSN; ``TRIDENT_TEST_LAKE_DIR``: where the Delta
table lives; ``TRIDENT_TEST_TOPOLOGY``."""

import os

from lake_kill_topology import COUNTS

from spouts import MemoryTransactionalSpout
from transactional import Fields
from trident import Count, TridentTopology, state
from trident.delta import DeltaStateFactory, DeltaUpdater
from trident.postgres import PostgresStateFactory, PostgresUpdater

from trident_kill_topology import DATA, TAKE, Split

__all__ = ["expected_as_of", "pg_counts", "delta_counts", "build_topology"]


def expected_as_of(txid: int) -> dict[str, int]:
    """Every word's count over the batches of txids 1..txid (each takes TAKE sentences of
    each partition, in order)."""
    out: dict[str, int] = {}
    for rows in DATA.values():
        for (s,) in rows[:txid * TAKE]:
            for w in s.split():
                out[w] = out.get(w, 0) + 1
    return out


def pg_counts(dsn: str) -> PostgresStateFactory:
    return PostgresStateFactory(dsn, "cut_counts", {"word": "text", "count": "bigint"}, key_columns=["word"],
                                add_columns=["count"], create_table=True)


def delta_counts(where: str) -> DeltaStateFactory:
    return DeltaStateFactory(f"{where}/counts", COUNTS, mode="add", key_fields=["word"], create=True)


def build_topology():
    t = TridentTopology(os.environ["TRIDENT_TEST_TOPOLOGY"])
    words = (t.new_stream("sentences", MemoryTransactionalSpout(DATA, Fields("sentence"), TAKE)).parallelism_hint(2)
             .each(Fields("sentence"), Split(), Fields("word"))
             .group_by(Fields("word")))
    words.persistent_aggregate(state.opaque("counts"), Count(), Fields("count")).parallelism_hint(2)
    batch = words.aggregate(Fields("word"), Count(), Fields("count")).parallelism_hint(2)
    batch.partition_persist(pg_counts(os.environ["TRIDENT_TEST_PG"]), Fields("word", "count"), PostgresUpdater())
    batch.partition_persist(delta_counts(os.environ["TRIDENT_TEST_LAKE_DIR"]), Fields("word", "count"), DeltaUpdater())
    return t.build()
