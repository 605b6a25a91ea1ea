"""Per-record costs of the Kafka emitter's steps after ``consume()``, on 12,500 reference
sentences (one partition's share of a 50,000-sentence batch), without a broker:

    python benchmarks/kafka_record_costs.py

The messages are confluent-kafka ``Message`` objects built in memory; each line is the
best of 15 runs, in ms and ns per record (docs/performance.md, "Kafka in, columns all
the way")."""
import time

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Message

from spouts.kafka.columns import Records, Scheme
from transactional.testing import make_corpus

corpus = make_corpus(12_500)
msgs = [Message(topic="t", partition=0, offset=i, key=None, value=s.encode()) for i, s in enumerate(corpus)]
sch, key = Scheme("utf-8", None), Scheme("bytes", None)

def best(fn, n=15):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    return min(ts) * 1e3

def take():
    got = []; keep = got.append; pos = 0
    for m in msgs:
        err = m.error()
        if err is not None: continue
        off = m.offset()
        if off is None or off < pos: continue
        keep(m); pos = off + 1
    return got

def columns():
    return Records("t", 0, 1, ("value",), sch, key, None).record_batch(msgs, ["sentence"])

out = []
def rows():
    out.clear(); Records("t", 0, 1, ("value",), sch, key, None).emit_rows(None, out.append, msgs)

b = columns()
def split():
    return pc.list_flatten(pc.utf8_split_whitespace(b.column(0)))
words = split()
def count():
    return pa.table({"w": words}).group_by(["w"], use_threads=False).aggregate([([], "count_all")])
def values_only():
    return [m.value() for m in msgs]
def arr():
    return pa.array(values_only(), pa.binary()).cast(pa.string())
for name, fn in [("take (consume loop: error/offset checks, keep)", take), ("[m.value() for m in msgs]", values_only),
                 ("values -> binary array -> string cast", arr), ("record_batch (columnar emit)", columns),
                 ("emit_rows (row path: decode + tuple + emit)", rows), ("split (utf8_split_whitespace)", split),
                 ("count (hash aggregation of 125k words)", count)]:
    ms = best(fn)
    print(f"{name:55s} {ms:7.2f} ms  {ms * 1e6 / len(msgs):6.0f} ns/record")
