"""Orders joined with their payments made within 10 minutes, exactly once, in Trident.

    trident run examples/orders_payments_join.py [--state redis://127.0.0.1:6379/0]

orders (order_id, amount, ts)      payments (payment_id, order_id, paid, ts)
  -> interval_join on order_id, order.ts between payment.ts - 10 min and payment.ts
  -> (order_id, amount, ts, payment_id, pay_order, paid, pay_ts)
  -> group_by(order_id) -> persistent_aggregate(Sum of paid) into "paid-per-order"

Each order is kept until the watermark passes it by 10 minutes, each payment until the
watermark passes it: the join's state is only as large as the bound needs. A payment
below the watermark is late and flows on the stream "late-payments" instead.
"""

import random

from spouts import MemoryTransactionalSpout
from transactional import Fields
from trident import Sum, TridentTopology, state
from trident.windowing import Duration, WindowsStoreFactory

MINUTE = 60_000
OUT = Fields("order_id", "amount", "ts", "payment_id", "pay_order", "paid", "pay_ts")


def make_data(n=200, seed=3):
    rng = random.Random(seed)
    orders = [(f"o{i}", rng.randint(5, 50), i * 20_000) for i in range(n)]
    payments = []
    for order_id, amount, ts in orders:
        if rng.random() < 0.8:                                  # most orders are paid, some too late
            payments.append((f"p{order_id[1:]}", order_id, amount, ts + rng.choice([30_000, 4 * MINUTE, 15 * MINUTE])))
    payments.sort(key=lambda p: p[3])
    return orders, payments


def build_topology(topology_id="orders-payments-join"):
    orders, payments = make_data()
    t = TridentTopology(topology_id)
    o = t.new_stream("orders", MemoryTransactionalSpout(orders, Fields("order_id", "amount", "ts"), 10))
    p = t.new_stream("payments", MemoryTransactionalSpout(payments, Fields("payment_id", "order_id", "paid", "ts"), 8))
    (t.interval_join(o, Fields("order_id"), "ts", p, Fields("order_id"), "ts", Duration(10, "minutes"), Duration(0),
                     WindowsStoreFactory("order-payments"), OUT, lag=Duration(1, "minutes"), late_stream="late-payments")
     # (order_id, amount, ts, payment_id, pay_order, paid, pay_ts)
     .group_by(Fields("order_id"))
     .persistent_aggregate(state.transactional("paid-per-order"), Fields("paid"), Sum(), Fields("paid")))
    return t.build()


def report(result):
    orders, _ = make_data()
    ids = [o[0] for o in orders]
    paid = [v for v in result.map_state("paid-per-order").multi_get(ids) if v is not None]
    rec = result.map_state("order-payments").multi_get(["ijoin:0"])[0]
    print(f"orders paid within 10 minutes: {len(paid)} of {len(ids)}, {sum(paid)} in all; "
          f"rows still kept: {len(rec['rows'])}; late rows: {rec['late']}")


if __name__ == "__main__":
    from transactional.ops.cli import run_example

    run_example(build_topology, report)
