"""A mistake ``trident verify`` catches in the user's own state: a ``StateFactory`` that adds
each batch's counts to a PostgreSQL table (``count = count + n``) without storing the txid
with them, so a replayed commit adds them again. The factory implements ``scratch`` (a
table of its own per verify run), ``read_scratch`` and ``drop_scratch``.
``TRIDENT_VERIFY_PG_DSN`` is the database."""

import os

import psycopg
from _words import spout

from transactional import BaseTransactionalBolt, Committer, Fields, TransactionalTopologyBuilder
from trident.state import State, StateFactory


class NaiveCounts(State):
    def __init__(self, dsn, table):
        self.dsn, self.table, self.batch = dsn, table, {}

    def begin_commit(self, txid):
        self.batch = {}

    def commit(self, txid):                      # the mistake: no txid stored, a replay adds again
        with psycopg.connect(self.dsn, autocommit=True) as c:
            c.execute(f"CREATE TABLE IF NOT EXISTS {self.table} (word text PRIMARY KEY, n bigint)")
            for w, n in sorted(self.batch.items()):
                c.execute(f"INSERT INTO {self.table} VALUES (%s, %s) ON CONFLICT (word) DO UPDATE "
                          f"SET n = {self.table}.n + EXCLUDED.n", (w, n))


class NaiveCountsFactory(StateFactory):
    def __init__(self, dsn, table="naive_counts"):
        self.dsn, self.table = dsn, table

    @property
    def name(self):
        return f"naive:{self.table}"

    def make_state(self, conf, metrics, partition_index, num_partitions):
        return NaiveCounts(self.dsn, self.table)

    def scratch(self, namespace):
        return NaiveCountsFactory(self.dsn, f"{self.table}_{namespace.replace('-', '_')}")

    def read_scratch(self):
        with psycopg.connect(self.dsn, autocommit=True) as c:
            if c.execute("SELECT to_regclass(%s)", (self.table,)).fetchone()[0] is None:
                return {}
            return dict(c.execute(f"SELECT word, n FROM {self.table}").fetchall())

    def drop_scratch(self):
        with psycopg.connect(self.dsn, autocommit=True) as c:
            c.execute(f"DROP TABLE IF EXISTS {self.table}")


class CountInto(BaseTransactionalBolt, Committer):
    def __init__(self, factory):
        self.factory = factory

    def prepare(self, conf, context, collector, attempt):
        self.state = context.state(self.factory)

    def execute(self, tuple):
        self.state.batch[tuple[1]] = self.state.batch.get(tuple[1], 0) + 1

    def finish_batch(self):
        pass

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id"))


def build_topology():
    b = TransactionalTopologyBuilder("naive-postgres", "spout", spout(), 2)
    b.set_bolt("count-into-postgres", CountInto(NaiveCountsFactory(os.environ["TRIDENT_VERIFY_PG_DSN"])),
               1).global_grouping("spout")
    return b
