"""A state ``trident verify`` must refuse before anything runs: a ``StateFactory`` that
cannot be redirected to a scratch copy (no ``scratch``). ``setup()`` leaves a mark, which
must not appear."""

import os
from pathlib import Path

from _words import spout

from transactional import BaseTransactionalBolt, Committer, Fields, TransactionalTopologyBuilder
from trident.state import State, StateFactory


class Nowhere(StateFactory):
    def make_state(self, conf, metrics, partition_index, num_partitions):
        return State()


class Into(BaseTransactionalBolt, Committer):
    def __init__(self, sinks):
        self.sinks = sinks                      # held a level down: verify finds it there too

    def prepare(self, conf, context, collector, attempt):
        context.state(self.sinks["main"])

    def execute(self, tuple):
        pass

    def finish_batch(self):
        pass

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id"))


def setup():
    Path(os.environ["TRIDENT_VERIFY_CASE_DIR"], "setup-ran").write_text("yes")


def build_topology():
    b = TransactionalTopologyBuilder("no-scratch", "spout", spout(), 2)
    b.set_bolt("into-nowhere", Into({"main": Nowhere()}), 1).global_grouping("spout")
    return b
