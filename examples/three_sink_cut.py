"""One cut across three sinks: a word count written to a map (Redis with ``--state``),
a PostgreSQL table and a Delta table, read by a reader polling all three as of the
coordinator's recorded txid while the topology runs.

    trident run examples/three_sink_cut.py                          # memory map, a local PostgreSQL
    trident run examples/three_sink_cut.py --state redis://127.0.0.1:6379/0 \\
        --coordination zk://127.0.0.1:2181/trident                  # PG_DSN=... for your database

Every txid writes the three sinks, each exactly once and each at its own moment; the
reader (``trident.cut.read_cut``) reads them as of the same recorded txid and finds the
same counts in all three at every poll (docs/states.md, "One cut across sinks").

sentences (2 tasks) -> each(Split) -> group_by(word) -> persistent_aggregate(Count) -> map "counts"
                                                   \\-> aggregate(Count) -> PostgreSQL word_counts, Delta counts (add)
"""

import atexit
import os
import tempfile
import threading

from spouts import MemoryTransactionalSpout
from transactional import Fields
from trident import BaseFunction, Count, TridentTopology, state
from trident.cut import committed_txid, read_cut, read_map_as_of, read_postgres_as_of
from trident.delta import DeltaStateFactory, DeltaUpdater
from trident.postgres import PostgresStateFactory, PostgresUpdater

TOPOLOGY = "three-sink-cut"
WORDS = ["cat", "dog", "cow", "moon", "apple", "the", "a", "man"]
DATA = {p: [(" ".join(WORDS[(p + 3 * i + j) % 8] for j in range(3)),) for i in range(200)] for p in range(2)}
SETTINGS = {"dsn": os.environ.get("PG_DSN", ""), "delta": os.environ.get("DELTA_TABLE", ""),
            "state": "memory://", "coordination": "memory://"}
POLLS: list = []


class Split(BaseFunction):
    """One tuple per word of the sentence."""

    def execute(self, tuple, collector):
        for w in tuple[0].split():
            collector.emit((w,))                         # ("word",)


def setup():
    if not SETTINGS["dsn"]:
        from transactional.testing import ManagedPostgres

        pg = ManagedPostgres().start()
        atexit.register(pg.destroy)
        SETTINGS["dsn"] = pg.create_database("cut")
    if not SETTINGS["delta"]:
        SETTINGS["delta"] = os.path.join(tempfile.mkdtemp(prefix="cut-"), "counts")


def sinks():
    pg = PostgresStateFactory(SETTINGS["dsn"], "word_counts", {"word": "text", "count": "bigint"},
                              key_columns=["word"], add_columns=["count"], create_table=True)
    delta = DeltaStateFactory(SETTINGS["delta"], Fields("word", "count", types={"word": "string", "count": "int64"}),
                              mode="add", key_fields=["word"], create=True)
    return pg, delta


def build_topology():
    pg, delta = sinks()
    t = TridentTopology(TOPOLOGY)
    words = (t.new_stream("sentences", MemoryTransactionalSpout(DATA, Fields("sentence"), 10)).parallelism_hint(2)
             .each(Fields("sentence"), Split(), Fields("word"))
             .group_by(Fields("word")))
    words.persistent_aggregate(state.opaque("counts"), Count(), Fields("count")).parallelism_hint(2)
    batch = words.aggregate(Fields("word"), Count(), Fields("count")).parallelism_hint(2)   # ("word", "count")
    batch.partition_persist(pg, Fields("word", "count"), PostgresUpdater())
    batch.partition_persist(delta, Fields("word", "count"), DeltaUpdater())
    start_reader()
    return t


def readers():
    pg, delta = sinks()
    return {
        "map": lambda c: {k[0] if isinstance(k, tuple) else k: v
                          for k, v in read_map_as_of(SETTINGS["state"], f"{TOPOLOGY}:counts", c).items()},
        "postgres": lambda c: dict(read_postgres_as_of(pg, c, f"{TOPOLOGY}:word_counts")),
        "delta": lambda c: {r["word"]: r["count"] for r in delta.read_as_of(c, ["word", "count"]).to_pylist()},
    }


def start_reader():
    stop = threading.Event()

    def poll():
        while not stop.wait(0.02):
            if committed_txid(SETTINGS["coordination"], TOPOLOGY) >= 1:     # every sink exists from txid 1 on
                POLLS.append(read_cut(SETTINGS["coordination"], TOPOLOGY, readers()))
    threading.Thread(target=poll, daemon=True).start()
    atexit.register(stop.set)


def report(result):
    c, seen = read_cut(SETTINGS["coordination"], TOPOLOGY, readers())
    POLLS.append((c, seen))
    agree = sum(1 for _, s in POLLS if s["map"] == s["postgres"] == s["delta"])
    print(f"{len(POLLS)} reads of the cut (txids {POLLS[0][0]}..{POLLS[-1][0]}); the three sinks agreed in {agree}")
    print("as of txid", c, ":", dict(sorted(seen["delta"].items())))


if __name__ == "__main__":
    from transactional.ops.cli import run_example

    run_example(build_topology, report, setup=setup)
