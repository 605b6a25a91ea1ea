"""Reads feeding other state, for the driver-SIGKILL tests (``trident run`` loads it in a child).

Under each txid: sentences are counted into the map ``counts``; the new counts go on
(``new_values_stream``) into ``counted`` as ``(word, count) -> 1``; one query per txid
looks up a word in ``counts`` (``state_query``) and goes into ``answers`` as ``(query,
count seen) -> 1``. A replay of a txid that reads anything but the state as of the txid
before -- its own earlier write -- derives other keys than its first attempt did, and
``counted`` / ``answers`` hold them besides the first attempt's.

``TRIDENT_TEST_FLAVOUR``: the flavour of ``counts``, ``transactional``, ``opaque`` (the
sentences from an opaque spout) or ``counters``; ``counted`` and ``answers`` are opaque
maps behind the opaque flavour, else transactional (not counters: a counter map skips a
whole txid it added before, which would hide what the replay derived).
``TRIDENT_TEST_TOPOLOGY_ID``: the topology id.
"""

import os
from collections import Counter

from spouts import MemoryTransactionalSpout, OpaqueMemoryTransactionalSpout
from transactional import Fields
from trident import BaseFunction, Count, MapGet, TridentTopology, state

WORDS = ["cat", "dog", "cow", "moon"]
PARTITIONS, PER_PARTITION, TAKE = 2, 12, 2
TXIDS = PER_PARTITION // TAKE
DATA = {p: [(" ".join(WORDS[(p + 3 * i + j) % len(WORDS)] for j in range(3)),) for i in range(PER_PARTITION)]
        for p in range(PARTITIONS)}
QUERIES = [(f"q{t}", WORDS[t % len(WORDS)]) for t in range(1, TXIDS + 1)]


def expected() -> tuple[dict, dict, dict]:
    """``(counts, counted, answers)`` as exactly-once processing leaves them."""
    counts: Counter = Counter()
    counted: Counter = Counter()
    answers: Counter = Counter()
    for t in range(1, TXIDS + 1):
        q, w = QUERIES[t - 1]
        answers[(q, counts.get(w))] += 1          # the state as of txid t-1
        batch = Counter(x for rows in DATA.values() for (s,) in rows[(t - 1) * TAKE:t * TAKE] for x in s.split())
        counts.update(batch)
        counted.update((x, counts[x]) for x in batch)
    return dict(counts), dict(counted), dict(answers)


class Split(BaseFunction):
    def execute(self, tuple, collector):
        for w in tuple[0].split():
            collector.emit((w,))


def build_topology():
    flavour = os.environ.get("TRIDENT_TEST_FLAVOUR", "transactional")
    factory = {"transactional": state.transactional, "opaque": state.opaque, "counters": state.counters}[flavour]
    derived = state.opaque if flavour == "opaque" else state.transactional
    spout_class = OpaqueMemoryTransactionalSpout if flavour == "opaque" else MemoryTransactionalSpout
    t = TridentTopology(os.environ.get("TRIDENT_TEST_TOPOLOGY_ID", f"trident-query-kill-{flavour}"))
    counts = (t.new_stream("sentences", spout_class(DATA, Fields("sentence"), TAKE)).parallelism_hint(2)
              .each(Fields("sentence"), Split(), Fields("word"))
              .group_by(Fields("word"))
              .persistent_aggregate(factory("counts"), Count(), Fields("count")).parallelism_hint(2))
    (counts.new_values_stream()
     .group_by(Fields("word", "count"))
     .persistent_aggregate(derived("counted"), Count(), Fields("n")))
    (t.new_stream("queries", MemoryTransactionalSpout({0: QUERIES}, Fields("query", "word"), 1))
     .state_query(counts, Fields("word"), MapGet(), Fields("seen"))
     .group_by(Fields("query", "seen"))
     .persistent_aggregate(derived("answers"), Count(), Fields("n")))
    return t.build()
