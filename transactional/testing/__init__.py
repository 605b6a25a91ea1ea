"""Test harness, shipped as public API (as ``bytewax.testing`` and ``kazoo.testing``).

* ``FaultPlan`` + ``with_faults(bolt, plan)``: FailedException at seeded-random tasks and
  txids, deterministic across processes, never beyond ``max_attempt`` so runs finish.
* ``EventLog``: a file that tasks in executors and the driver append JSON events to,
  to observe order and overlap across processes.
* ``ListSink``: a committer that records what reached the commit phase, per txid.
* ``TopologyTestDriver``: a core topology run in process, its input and clock scripted
  (``transactional.testing.driver``).
* Managed servers for integration tests: ``transactional.testing.zookeeper``,
  ``.redis``, ``.kafka``, ``.redis_cluster`` (``ManagedRedisCluster``), ``.zookeeper_ensemble``
  (``ManagedZooKeeperEnsemble``); crash points: ``TRIDENT_CRASH_AT`` (``transactional.engine.faults``).
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from transactional.bolt import BaseBasicBolt, BaseBatchBolt, Committer
from transactional.engine.faults import fails
from transactional.exceptions import FailedException

__all__ = ["make_corpus", "FaultPlan", "with_faults", "EventLog", "ListSink", "SINKS", "TopologyTestDriver",
           "ManagedZooKeeper", "TcpProxy", "ManagedRedis", "ManagedKafka", "ManagedPostgres", "free_port",
           "ManagedRedisCluster", "ManagedZooKeeperEnsemble"]

_SERVERS = {"TopologyTestDriver": "driver", "ManagedZooKeeper": "zookeeper", "TcpProxy": "zookeeper",
            "ManagedRedis": "redis", "ManagedKafka": "kafka", "ManagedPostgres": "postgres", "free_port": "_process",
            "ManagedRedisCluster": "redis_cluster", "ManagedZooKeeperEnsemble": "zookeeper_ensemble"}


def __getattr__(name: str) -> Any:
    """The managed servers, imported on use (each pulls in its client library)."""
    if name in _SERVERS:
        import importlib

        return getattr(importlib.import_module(f"transactional.testing.{_SERVERS[name]}"), name)
    raise AttributeError(name)


def make_corpus(n_sentences: int, vocab: int = 50_000, words_per_sentence: int = 10,
                seed: int = 42) -> list[str]:
    """The reference corpus of the benchmarks: sentences of Zipf-distributed words
    ``w0``, ``w1``, ... (deterministic for a seed).

    >>> make_corpus(2, vocab=5, words_per_sentence=3, seed=1)
    ['w0 w3 w2', 'w0 w1 w0']
    """
    import itertools
    import random

    rng = random.Random(seed)
    words = [f"w{i}" for i in range(vocab)]
    cum = list(itertools.accumulate(1.0 / (i + 1) ** 1.1 for i in range(vocab)))
    return [" ".join(rng.choices(words, cum_weights=cum, k=words_per_sentence)) for _ in range(n_sentences)]


@dataclass(frozen=True)
class FaultPlan:
    """Which (component, task, txid, attempt) raise ``FailedException``.

    Each combination fails with probability ``rate`` (seeded, the same in every process),
    only for ``attempt_id <= max_attempt`` (so a run with ``max_attempts > max_attempt``
    always finishes), at ``where`` = "prepare", "execute" or "finish_batch".
    ``txids``: only these txids (None: any).
    """

    seed: int
    rate: float = 0.2
    max_attempt: int = 2
    where: str = "finish_batch"
    txids: frozenset[int] | None = None

    def should_fail(self, component: str, task: int, txid: int, attempt_id: int) -> bool:
        """Whether this attempt of ``component``'s ``task`` fails: a seeded hash of the five values,
        so every process decides the same."""
        if attempt_id > self.max_attempt or (self.txids is not None and txid not in self.txids):
            return False
        return fails(self.seed, self.rate, component, task, txid, attempt_id)


class _Faulty(BaseBatchBolt):
    def __init__(self, inner: Any, plan: FaultPlan, basic: bool) -> None:
        self.inner, self.plan, self.basic = inner, plan, basic

    def _maybe_fail(self, where: str) -> None:
        if where == self.plan.where and self.plan.should_fail(
                self.context.component_id, self.context.task_index, self.attempt.txid, self.attempt.attempt_id):
            msg = (
                f"injected failure in {where} of {self.context.component_id} "
                f"task {self.context.task_index}, txid {self.attempt.txid} "
                f"attempt {self.attempt.attempt_id}"
            )
            raise FailedException(msg)

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any, id: Any) -> None:
        self.context, self.attempt, self.collector = context, id, collector
        self._maybe_fail("prepare")
        if self.basic:
            self.inner.prepare(conf, context)
        else:
            self.inner.prepare(conf, context, collector, id)
        self._fired = False

    def execute(self, tuple: Any) -> None:
        if not self._fired:
            self._fired = True
            self._maybe_fail("execute")
        if self.basic:
            self.inner.execute(tuple, self.collector)
        else:
            self.inner.execute(tuple)

    def finish_batch(self) -> None:
        self._maybe_fail("finish_batch")
        if not self.basic:
            self.inner.finish_batch()

    def declare_output_fields(self, declarer: Any) -> None:
        self.inner.declare_output_fields(declarer)


class _FaultyCommitter(_Faulty, Committer):
    pass


def with_faults(bolt: Any, plan: FaultPlan) -> BaseBatchBolt:
    """Wrap ``bolt`` so that it raises ``FailedException`` where ``plan`` says; a
    committer stays a committer."""
    cls = _FaultyCommitter if isinstance(bolt, Committer) else _Faulty
    return cls(bolt, plan, isinstance(bolt, BaseBasicBolt))


class EventLog:
    """Append-only JSON-lines file shared by the driver and executor processes.

    >>> import tempfile; log = EventLog(tempfile.mktemp())
    >>> log.record("commit", txid=1); [e["txid"] for e in log.events("commit")]
    [1]
    """

    def __init__(self, path: str) -> None:
        self.path = str(path)

    def record(self, event: str, **fields: Any) -> None:
        """Append one event (``event``, wall time, pid and ``fields``) as a JSON line, under an
        exclusive ``flock`` so concurrent writers do not interleave."""
        line = json.dumps({"event": event, "t": time.time(), "pid": os.getpid(), **fields}) + "\n"
        with open(self.path, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.write(line)

    def events(self, event: str | None = None) -> list[dict[str, Any]]:
        """Every event recorded so far, in file order (only those named ``event`` if given); []
        when nothing was recorded."""
        try:
            with open(self.path) as f:
                rows = [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []
        return [r for r in rows if event is None or r["event"] == event]


SINKS: dict[str, list[tuple[int, tuple[Any, ...]]]] = {}
_sinks_guard = threading.Lock()


class ListSink(BaseBatchBolt, Committer):
    """A committer that appends ``(txid, values[1:])`` of every tuple it receives to
    ``SINKS[name]`` in the commit phase (on the driver), then emits nothing."""

    rows: list[tuple[Any, ...]]

    def __init__(self, name: str) -> None:
        self.name = name

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any, id: Any) -> None:
        """Start the batch: keep its attempt, no rows yet."""
        self.attempt, self.rows = id, []

    def execute(self, tuple: Any) -> None:
        """Keep the tuple's values without its TransactionAttempt."""
        self.rows.append(tuple.values[1:])

    def finish_batch(self) -> None:
        """Append the batch's rows, each with its txid, to ``SINKS[name]`` (commit phase)."""
        with _sinks_guard:
            SINKS.setdefault(self.name, []).extend((self.attempt.txid, r) for r in self.rows)
