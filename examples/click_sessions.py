"""Sessions of clicks per user, exactly once, in Trident.

    trident run examples/click_sessions.py [--state redis://127.0.0.1:6379/0]

clicks (user, page, ts in ms; users pause now and then, a few clicks arrive late)
  -> group_by(user) -> session_window(gap 30 s, event time on ts, lag 5 s):
     (user, clicks, pages, start, end) per session
  -> group_by(user) -> persistent_aggregate(Count) into "sessions-per-user"

A session is a run of a user's clicks each less than 30 s after the one before; it
fires once the watermark passes its last click plus 30 s, and a late click that falls
between two sessions of its user merges them. Open sessions live in the map
"click-sessions" (in the txid's atomic write: a replay fires the same sessions).
"""

import random

from spouts import MemoryTransactionalSpout
from transactional import Fields
from trident import BaseAggregator, Count, TridentTopology, state
from trident.windowing import Duration, WindowsStoreFactory

USERS = ["ann", "bob", "cid"]


def make_clicks(n=300, seed=7):
    rng = random.Random(seed)
    t, clicks = 0, []
    for _ in range(n):
        t += rng.choice([2_000, 5_000, 9_000, 45_000])           # now and then a pause longer than the gap
        clicks.append((rng.choice(USERS), rng.choice(["/", "/docs", "/cart"]), t + rng.randint(-3_000, 3_000)))
    return clicks


class Session(BaseAggregator):
    """Per session: how many clicks, which pages, and the session's bounds."""

    def init(self, batch_id, collector):
        return []

    def aggregate(self, acc, tuple, collector):
        acc.append(tuple["page"])

    def complete(self, acc, collector):
        w = collector.window                                      # the session: start, end, key
        collector.emit((len(acc), " ".join(sorted(set(acc))), w.get_start_timestamp(), w.get_end_timestamp()))


def build_topology(topology_id="click-sessions"):
    t = TridentTopology(topology_id)
    (t.new_stream("clicks", MemoryTransactionalSpout(make_clicks(), Fields("user", "page", "ts"), 20))
     .group_by(Fields("user"))
     .session_window(Duration(30, "seconds"), WindowsStoreFactory("click-sessions"), Fields("page"), Session(),
                     Fields("clicks", "pages", "start", "end"), timestamp_field="ts", lag=Duration(5, "seconds"))
     # (user, clicks, pages, start, end)
     .group_by(Fields("user"))
     .persistent_aggregate(state.transactional("sessions-per-user"), Count(), Fields("sessions")))
    return t.build()


def report(result):
    got = dict(zip(USERS, result.map_state("sessions-per-user").multi_get(USERS), strict=True))
    print(f"sessions closed per user: {got}")
    rec = result.map_state("click-sessions").multi_get(["window:0"])[0]
    print(f"late clicks: {rec['late']}; still in open sessions: {len(rec['events'])} clicks")


if __name__ == "__main__":
    from transactional.ops.cli import run_example

    run_example(build_topology, report)
