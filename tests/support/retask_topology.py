"""One Trident stream into every kind of user state, each written by ``TRIDENT_TEST_TASKS``
tasks, for the tests of a task count changed across a driver SIGKILL
(tests/transactional/engine/test_layout_change.py): PostgreSQL upsert adding counts, upsert replacing rows and
append; Parquet; Kafka; and a user's own ``StateFactory`` (``FilesFactory``: one file per
txid and task, overwritten by a replay, as a user writes one).

``TRIDENT_TEST_PG``, ``TRIDENT_TEST_PARQUET``, ``TRIDENT_TEST_FILES``, ``TRIDENT_TEST_KAFKA``
(bootstrap), ``TRIDENT_TEST_OUT`` (topic), ``TRIDENT_TEST_TOPOLOGY``."""

import json
import os
from pathlib import Path

from spouts import MemoryTransactionalSpout
from transactional import Fields
from trident import Count, TridentTopology
from trident.kafka import TridentKafkaStateFactory, TridentKafkaUpdater
from trident.parquet import ParquetStateFactory, ParquetUpdater
from trident.postgres import PostgresStateFactory, PostgresUpdater
from trident.state import BaseStateUpdater, State, StateFactory

from trident_kill_topology import DATA, TAKE, Split

__all__ = ["DATA", "build_topology", "FilesFactory", "read_files"]


class FilesState(State):
    """Task ``part``'s rows of each txid in ``<dir>/<txid>-<part>.json``, written at commit
    (a replay overwrites its own file: exactly once while the task count stays)."""

    def __init__(self, root: Path, part: int) -> None:
        self.root, self.part, self.rows = root, part, []

    def begin_commit(self, txid: int) -> None:
        self.rows = []

    def commit(self, txid: int) -> None:
        tmp = self.root / f".{txid}-{self.part}.tmp"
        tmp.write_text(json.dumps(self.rows))
        tmp.replace(self.root / f"{txid}-{self.part}.json")


class FilesFactory(StateFactory):
    """A user's own state: JSON files under ``root``."""

    def __init__(self, root: str) -> None:
        self.root = root

    def make_state(self, conf, metrics, partition_index, num_partitions):
        Path(self.root).mkdir(parents=True, exist_ok=True)
        return FilesState(Path(self.root), partition_index)


class AddRows(BaseStateUpdater):
    def update_state(self, state, tuples, collector):
        state.rows += [list(t) for t in tuples]


def read_files(root: str) -> list[list]:
    """Every row the files hold, sorted."""
    return sorted(r for p in Path(root).glob("*.json") for r in json.loads(p.read_text()))


def build_topology():
    n = int(os.environ.get("TRIDENT_TEST_TASKS", "2"))
    dsn = os.environ["TRIDENT_TEST_PG"]
    t = TridentTopology(os.environ["TRIDENT_TEST_TOPOLOGY"])
    s = t.new_stream("sentences", MemoryTransactionalSpout(DATA, Fields("sentence"), TAKE)).parallelism_hint(2)
    s.shuffle().parallelism_hint(n).partition_persist(
        PostgresStateFactory(dsn, "sentences", {"sentence": "text"}, mode="append", create_table=True),
        Fields("sentence"), PostgresUpdater())
    s.shuffle().parallelism_hint(n).partition_persist(ParquetStateFactory(os.environ["TRIDENT_TEST_PARQUET"], ["sentence"]),
                                  Fields("sentence"), ParquetUpdater())
    s.shuffle().parallelism_hint(n).partition_persist(FilesFactory(os.environ["TRIDENT_TEST_FILES"]), Fields("sentence"),
                                  AddRows())
    words = s.each(Fields("sentence"), Split(), Fields("word"))
    words.shuffle().parallelism_hint(n).partition_persist(
        TridentKafkaStateFactory(os.environ["TRIDENT_TEST_KAFKA"], os.environ["TRIDENT_TEST_OUT"],
                                 key_field="word", value_field="sentence"),
        Fields("word", "sentence"), TridentKafkaUpdater())
    counts = words.group_by(Fields("word")).aggregate(Fields("word"), Count(), Fields("count")).parallelism_hint(n)
    counts.partition_persist(
        PostgresStateFactory(dsn, "word_counts", {"word": "text", "count": "bigint"}, key_columns=["word"],
                             add_columns=["count"], create_table=True),
        Fields("word", "count"), PostgresUpdater())
    words.shuffle().parallelism_hint(n).partition_persist(
        PostgresStateFactory(dsn, "word_seen", {"word": "text", "sentence": "text"}, key_columns=["word"],
                             create_table=True),
        Fields("word", "sentence"), PostgresUpdater())
    return t.build()
