"""A mistake ``trident verify`` catches: a committer that appends the batch's counts to a
file on every attempt, so a replayed commit appends them again. ``verify_outputs`` shows
verify what the file holds."""

import os
import tempfile
from pathlib import Path

from _words import spout

from transactional import BaseTransactionalBolt, Committer, Fields, TransactionalTopologyBuilder

OUT = Path(os.environ.get("TRIDENT_VERIFY_CASE_DIR", tempfile.gettempdir()))


class AppendCounts(BaseTransactionalBolt, Committer):
    def prepare(self, conf, context, collector, attempt):
        self.batch, self.path = {}, OUT / f"{conf['topology.id']}.counts"

    def execute(self, tuple):
        self.batch[tuple[1]] = self.batch.get(tuple[1], 0) + 1

    def finish_batch(self):
        with open(self.path, "a") as f:                    # the mistake: no record of the txid
            f.writelines(f"{w} {n}\n" for w, n in sorted(self.batch.items()))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id"))


def build_topology():
    b = TransactionalTopologyBuilder("append-file", "spout", spout(), 2)
    b.set_bolt("append", AppendCounts(), 1).global_grouping("spout")
    return b


def verify_outputs(topology_id):
    """What the file says: word -> count."""
    counts: dict[str, int] = {}
    path = OUT / f"{topology_id}.counts"
    for line in path.read_text().splitlines() if path.exists() else []:
        word, n = line.split()
        counts[word] = counts.get(word, 0) + int(n)
    return {"counts file": counts}
