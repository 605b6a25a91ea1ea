"""Batches counted by one Spark job each and committed by reference (``state.staged``):
the commit of txid t adds what t's processing tasks staged, with no second Spark job and no
partial counts through the driver (docs/redis.md, "Staged commits").

``StagedCommitRun.run`` takes the steps of ``CommitProtocol`` (``engine/commit.py``) that
a counter commit needs, for one counter map and a transactional batch source (a list of
batches: txid t is ``batches[t-1]``, the same data on every attempt):

1. take the topology's lock and a new epoch; raise the map's fence (every slot) to it;
   resume after the coordinator's ``committed`` record;
2. processing (up to ``max_in_flight`` txids at once, driver threads): one Spark job per
   attempt whose tasks count their share and stage it (``StagedCounters.stage``), each
   returning a ``StagedRef``;
3. commits strictly in txid order: check the lock, apply t's refs on every node at once
   (``StagedCounters.apply``), then record t (``CoordinatorStore.record_commit``).

A failed apply (a staged part lost in a failover, a node that stayed unreachable past the
backing's ``retry_timeout``) processes t again as a new attempt and applies that; slots
that took t already skip it (their marker), so t counts once. ``TRIDENT_CRASH_AT`` points:
``staged.after_node`` (txid, node) and ``staged.before_record`` (txid).
"""

from __future__ import annotations

import os
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from state.base import open_transactional_state
from state.errors import StateUnavailableError
from state.map import Fence
from state.staged import StagedCounters, StagedRef
from transactional.engine.faults import crash_point
from transactional.engine.store import CoordinatorStore

__all__ = ["StagedCommitRun", "StagedRunResult", "count_words"]


def count_words(lines: Iterable[str]) -> tuple[list[str], list[int]]:
    """The word count of ``lines`` as (keys, counts): the default partial count."""
    c: Counter[str] = Counter()
    for line in lines:
        c.update(line.split())
    return list(c), list(c.values())


@dataclass
class StagedRunResult:
    """What a run did: the txids it committed, each commit's seconds (apply + record) and
    each processing job's, and the failures it replayed."""

    committed: list[int] = field(default_factory=list)
    commit_secs: list[float] = field(default_factory=list)
    processing_secs: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    epoch: int = 0
    seconds: float = 0.0


def _stage_task(staged: StagedCounters, txid: int, attempt: int, epoch: int,
                count: Callable[[Iterable[Any]], tuple[list[Any], list[int]]]) -> Callable[[int, Iterator[Any]],
                                                                                         Iterator[StagedRef]]:
    def run(task: int, rows: Iterator[Any]) -> Iterator[StagedRef]:
        keys, deltas = count(rows)
        if keys:
            yield staged.stage(txid, attempt, task, epoch, keys, deltas)
    return run


class StagedCommitRun:
    """One counter map ``name`` of topology ``topology_id`` counted from batches on Spark
    context ``sc`` and committed by reference (module docstring). ``coordination_url``
    keeps the lock, the epoch and the ``committed`` record (ZooKeeper for a run that must
    survive its driver); ``state_url`` is ``redis://`` or ``redis+cluster://``."""

    def __init__(self, sc: Any, coordination_url: str, state_url: str, topology_id: str, name: str, *,
                 parallelism: int = 2, max_in_flight: int = 3, max_attempts: int = 5,
                 state_options: dict[str, Any] | None = None, lock_timeout: float = 60.0) -> None:
        self.sc, self.topology_id = sc, topology_id
        self.parallelism, self.max_in_flight, self.max_attempts = parallelism, max_in_flight, max_attempts
        self.coordination_url, self.lock_timeout = coordination_url, lock_timeout
        self.staged = StagedCounters(state_url, topology_id, name, **(state_options or {}))

    def run(self, batches: Sequence[Sequence[Any]],
            count: Callable[[Iterable[Any]], tuple[list[Any], list[int]]] = count_words,
            on_commit: Callable[[int], None] | None = None) -> StagedRunResult:
        """Count and commit every batch not committed yet; returns when the last is recorded."""
        t0 = time.monotonic()
        state = open_transactional_state(self.coordination_url, self.topology_id)
        try:
            # Step 1. the lock, a new epoch, the fence raised; resume after the record.
            state.acquire_lock(f"{socket.gethostname()}:{os.getpid()}", wait=True, timeout=self.lock_timeout)
            store = CoordinatorStore(state)
            last = store.recover().last_committed
            res = StagedRunResult(epoch=store.take_epoch())
            self.staged.backing.multi_put([], [], Fence(res.epoch, None))
            todo = list(range(last + 1, len(batches) + 1))
            with ThreadPoolExecutor(max_workers=self.max_in_flight) as pool:
                def launch(txid: int, attempt: int) -> Future[tuple[list[StagedRef], float]]:
                    return pool.submit(self._process, batches[txid - 1], txid, attempt, res.epoch, count)

                inflight = {t: (1, launch(t, 1)) for t in todo[:self.max_in_flight]}
                for i, txid in enumerate(todo):
                    # Step 2. processing of txid (and the next ones) staged its counts.
                    self._commit(txid, inflight, launch, state, store, res)
                    if on_commit is not None:
                        on_commit(txid)
                    nxt = i + self.max_in_flight
                    if nxt < len(todo):
                        inflight[todo[nxt]] = (1, launch(todo[nxt], 1))
            state.release_lock()
            res.seconds = time.monotonic() - t0
            return res
        finally:
            state.close()

    def _process(self, batch: Sequence[Any], txid: int, attempt: int, epoch: int,
                 count: Callable[[Iterable[Any]], tuple[list[Any], list[int]]]) -> tuple[list[StagedRef], float]:
        t0 = time.monotonic()
        n = max(1, min(self.parallelism, len(batch)))
        self.sc.setJobGroup(f"staged-{self.topology_id}-{txid}-{attempt}",
                            f"trident {self.topology_id} txid {txid} attempt {attempt} (processing, staged)")
        refs = self.sc.parallelize(list(batch), n).mapPartitionsWithIndex(
            _stage_task(self.staged, txid, attempt, epoch, count)).collect()
        return refs, time.monotonic() - t0

    def _commit(self, txid: int, inflight: dict[int, tuple[int, Future[Any]]], launch: Any, state: Any,
                store: CoordinatorStore, res: StagedRunResult) -> None:
        """Step 3 for ``txid``: apply its refs, record it; a failed apply replays it."""
        attempt, fut = inflight.pop(txid)
        while True:
            refs, secs = fut.result()
            t0 = time.monotonic()
            state.check_lock()
            try:
                self.staged.apply(txid, res.epoch, refs, after_node=(
                    (lambda node: crash_point("staged.after_node", txid=txid, node=node))
                    if "staged.after_node" in os.environ.get("TRIDENT_CRASH_AT", "") else None))
            except StateUnavailableError as e:
                res.failures.append(f"txid {txid} attempt {attempt}: {e}")
                if attempt >= self.max_attempts:
                    raise
                attempt += 1
                fut = launch(txid, attempt)
                continue
            crash_point("staged.before_record", txid=txid)
            store.record_commit(txid, None, None)
            res.committed.append(txid)
            res.commit_secs.append(time.monotonic() - t0)
            res.processing_secs.append(secs)
            return
