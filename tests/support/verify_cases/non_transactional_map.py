"""A mistake ``trident verify`` catches: a Trident count into a non-transactional map, so a
batch replayed after a crash is counted again."""

from _words import DATA

from transactional import Fields
from trident import Count, FixedBatchSpout, TridentTopology, state


def build_topology():
    words = [(w,) for p in sorted(DATA) for w in DATA[p]]
    t = TridentTopology("non-transactional-map")
    (t.new_stream("words", FixedBatchSpout(Fields("word"), 4, *words))
     .group_by(Fields("word"))
     .persistent_aggregate(state.non_transactional("counts"), Count(), Fields("count")))
    return t.build()
