"""A process reading a Redis Stream with ``RedisStreamSpout`` until every message was
processed: each message is 'processed' (its id pushed to the list ``<stream>:processed``
and added to the set ``<stream>:seen``) and then acked.
Run by ``tests/spouts/test_redis_stream_spout.py``, which kills it with SIGKILL mid-run."""

from __future__ import annotations

import sys
from typing import Any

from spouts.redis_stream import RedisStreamSpout


class Ctx:
    """Where the spout runs: task 0 of 1 of component 'spout'."""

    def __init__(self, task: int = 0, tasks: int = 1) -> None:
        self.topology_id, self.component_id, self.task_index, self.num_tasks = "t", "spout", task, tasks


class Collector:
    """Keeps what a core spout emits: ``(values, msg_id)``."""

    def __init__(self) -> None:
        self.out: list[tuple[Any, Any]] = []

    def emit(self, values: tuple, msg_id: Any = None, stream: str = "default") -> None:
        self.out.append((values, msg_id))

    def take(self) -> list[tuple[Any, Any]]:
        out, self.out = self.out, []
        return out


def main(url: str, stream: str, total: int) -> None:
    spout, c = RedisStreamSpout(url, stream, "g", count=7, block_ms=20), Collector()
    spout.open({}, Ctx(), c)
    r = spout._client
    while True:
        spout.next_tuple()
        for values, msg_id in c.take():
            r.rpush(f"{stream}:processed", values[0])       # every processing, duplicates too
            r.sadd(f"{stream}:seen", values[0])
            spout.ack(msg_id)
        if r.scard(f"{stream}:seen") >= total and spout.pending() == 0:
            return


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
