"""TridentWordCount over a Kafka topic into Redis, exactly once.

    trident run examples/trident_kafka_word_count.py --state redis://127.0.0.1:6379/0
    KAFKA_OPAQUE=1 trident run examples/trident_kafka_word_count.py --state redis://127.0.0.1:6379/0

The topic settings are those of examples/kafka_word_count.py (``KAFKA_BOOTSTRAP`` unset:
a local Kafka-protocol broker is started for the run; ``KAFKA_PRODUCE`` sentences are
produced first). With ``KAFKA_OPAQUE=1`` the opaque Kafka spout feeds an opaque map, as
Trident's table requires (a transactional map behind an opaque spout is refused when the
topology is built).

Kafka spout (2 tasks) -> each(Split) -> group_by(word) -> persistent_aggregate(Count)
into "counts" (partial counts before the shuffle; 2 committer tasks).
"""

from transactional import Fields
from trident import BaseFunction, Count, TridentTopology, state

from kafka_word_count import PRODUCED, SETTINGS, VOCAB, setup  # noqa: F401 - setup(): trident run calls it


class Split(BaseFunction):
    """One tuple per word of the sentence."""

    def execute(self, tuple, collector):
        for word in tuple[0].split():
            collector.emit((word,))


def build_topology():
    from spouts import KafkaTransactionalSpout, OpaqueKafkaTransactionalSpout

    s = SETTINGS
    opaque = s["opaque"]
    cls = OpaqueKafkaTransactionalSpout if opaque else KafkaTransactionalSpout
    bootstrap = s["bootstrap"] or "127.0.0.1:9092"   # setup() sets it to the broker it starts
    spout = cls(bootstrap, s["topic"], max_records_per_partition=2_500, field_names=("sentence",),
                group_id=s["group"] or None)
    t = TridentTopology("trident-kafka-word-count")
    (t.new_stream("sentences", spout).parallelism_hint(2)
     .each(Fields("sentence"), Split(), Fields("word"))
     .group_by(Fields("word"))
     .persistent_aggregate((state.opaque if opaque else state.transactional)("counts"), Count(), Fields("count"))
     .parallelism_hint(2))
    return t


def report(result):
    got = {w: n for w, n in zip(VOCAB, result.map_state("counts").multi_get(VOCAB), strict=True) if n is not None}
    top = sorted(got.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    print("top words:", ", ".join(f"{w} {n}" for w, n in top))
    if PRODUCED:
        print("exact:", got == dict(PRODUCED))
