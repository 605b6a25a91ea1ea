"""The Kafka spout's planning step on the driver, alone: per plan (the partition count,
then every partition's next range, as the engine's planner asks), milliseconds p50/p99
for 4 and 16 partitions, idle and with records flowing, on one Tansu broker started here.

    python benchmarks/kafka_planning.py [--plans 100] [--rate 10000] [--gap-ms 30]

Prints one JSON line. Planning follows each plan's ranges (as committed batches would),
``--gap-ms`` apart (about a batch's cycle). Uses ``plan_partitions`` when the coordinator
has it, else one ``plan_partition`` per partition (to time older trees the same way).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
if "PYTHONPATH" not in os.environ:
    sys.path.insert(0, os.path.dirname(HERE))

PRODUCER = """
import sys, time
from confluent_kafka import Producer
bootstrap, topic, rate, parts, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
t0, sent = time.monotonic(), 0
print("started", flush=True)
while time.monotonic() - t0 < secs:
    due = int((time.monotonic() - t0) * rate) + 1
    while sent < due:
        p.produce(topic, b"the quick brown fox jumps over the lazy dog %d" % sent, partition=sent % parts)
        sent += 1
    p.poll(0)
    time.sleep(0.0005)
p.flush(30)
"""


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q / 100 * len(xs)))] * 1000, 2)


def one_case(broker: Any, partitions: int, rate: int, plans: int, gap: float) -> dict[str, float]:
    from spouts.kafka import KafkaTransactionalSpout

    topic = f"plan-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions)
    broker.produce(topic, {p: [f"r{i}" for i in range(10)] for p in range(partitions)})
    proc = None
    if rate:
        secs = plans * (gap + 0.2) + 5
        proc = subprocess.Popen([sys.executable, "-c", PRODUCER, broker.bootstrap, topic, str(rate), str(partitions),
                                 str(secs)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        proc.stdout.readline()
        time.sleep(0.5)
    c: Any = KafkaTransactionalSpout(broker.bootstrap, topic).get_coordinator({}, None)
    try:
        lasts: dict[int, Any] = {p: {"start": 0, "end": 0} for p in range(partitions)}
        times = []
        for _ in range(plans + 3):
            time.sleep(gap)
            t0 = time.perf_counter()
            n = c.num_partitions()
            ask = {p: lasts.get(p) for p in range(n)}
            if hasattr(c, "plan_partitions"):
                got = c.plan_partitions(ask)
            else:
                got = {p: c.plan_partition(p, m) for p, m in ask.items()}
            times.append(time.perf_counter() - t0)
            lasts.update({p: m for p, m in got.items() if m is not None})
        times = times[3:]                     # the first plans open the clients
        return {"p50_ms": pct(times, 50), "p99_ms": pct(times, 99)}
    finally:
        c.close()
        if proc is not None:
            proc.kill()
            proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plans", type=int, default=100)
    ap.add_argument("--rate", type=int, default=10_000, help="records/s while 'flowing'")
    ap.add_argument("--gap-ms", type=float, default=30.0)
    args = ap.parse_args()
    from transactional.testing.kafka import ManagedKafka

    broker = ManagedKafka().start()
    try:
        cases = {}
        for partitions in (4, 16):
            for name, rate in (("idle", 0), ("flowing", args.rate)):
                cases[f"{partitions}p_{name}"] = one_case(broker, partitions, rate, args.plans, args.gap_ms / 1000)
    finally:
        broker.destroy()
    print(json.dumps({"benchmark": "kafka-planning", "plans": args.plans, "rate_flowing": args.rate,
                      "gap_ms": args.gap_ms, "load_average": os.getloadavg()[0], "per_plan_ms": cases}))


if __name__ == "__main__":
    main()
