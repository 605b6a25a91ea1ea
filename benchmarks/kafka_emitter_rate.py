"""The Kafka emitter's read rate alone: one partition of 250,000 reference sentences
read in 12,500-record ranges by ``KafkaTransactionalSpout``'s emitter, handing batches to a
columnar collector or tuples to a row collector that only counts them (no Spark):

    python benchmarks/kafka_emitter_rate.py      # starts its own Tansu broker

Prints one JSON line per round (docs/performance.md, "Kafka in, columns all the way")."""
import json
import time

from spouts.kafka import KafkaTransactionalSpout
from transactional.testing import make_corpus
from transactional.testing.kafka import ManagedKafka, create_topic, produce
from transactional.tuples import TransactionAttempt


class Cols:
    def __init__(self): self.n = 0
    def columnar(self, stream="default"): return True
    def emit_columns(self, b, stream="default"): self.n += b.num_rows
    def emit(self, v, stream="default"): self.n += 1

N = 250_000
k = ManagedKafka().start()
try:
    create_topic(k.bootstrap, "p", 1)
    produce(k.bootstrap, "p", {0: make_corpus(N)})
    out = {}
    for _round in range(2):
        spout = KafkaTransactionalSpout(k.bootstrap, "p", max_records_per_partition=12_500)
        for columnar in (True, False):
            e = spout.get_emitter({}, None); col = Cols()
            if not columnar: col.columnar = lambda stream="default": False
            t0 = time.perf_counter()
            for s in range(0, N, 12_500):
                e.emit_partition_batch(TransactionAttempt(1, 1), col, 0, {"start": s, "end": s + 12_500})
            out[f"emitter {'columnar' if columnar else 'rows'}, 12,500-record reads, records/s"] = round(N / (time.perf_counter() - t0))
            e.close()
        print(json.dumps(out))
finally:
    k.destroy()
