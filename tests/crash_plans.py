"""The crash plan of the state kill tests: every commit crash point once (txids 2, 4, 6 ...),
then up to ``TRIDENT_TEST_KILLS`` more at random points of the next txids (seed ``TRIDENT_TEST_SEED``,
printed), each a driver SIGKILLed there before the one that runs to the end."""

from __future__ import annotations

import os
import random

CRASH_POINTS = ["commit.before", "commit.after_task", "commit.before_write", "commit.before_record",
                "commit.after_record"]
LAST_TXID = 14     # tests/trident_kill_topology.py's DATA: 60 sentences a partition, 4 a batch


def crash_plan() -> list[str]:
    """``point:txid=N`` specs, in order."""
    plan = [f"{p}:txid={2 * i + 2}" for i, p in enumerate(CRASH_POINTS)]
    kills = int(os.environ.get("TRIDENT_TEST_KILLS", "0"))
    if kills:
        seed = int(os.environ.get("TRIDENT_TEST_SEED", random.randrange(1 << 30)))
        print(f"TRIDENT_TEST_SEED={seed}")
        rng = random.Random(seed)
        txid = 2 * len(CRASH_POINTS)
        for _ in range(kills):
            txid += 1                 # a recorded txid never comes again: each kill a later one
            if txid > LAST_TXID:
                break
            plan.append(f"{rng.choice(CRASH_POINTS)}:txid={txid}")
    return plan
