"""``TopologyTestDriver`` for Trident: run a ``TridentTopology`` in process with its input,
its processing time and its event-time watermark in the test's hands (as Kafka Streams'
``TopologyTestDriver`` and Flink's test harnesses; docs/windows.md). The core
topologies' driver is ``transactional.testing.TopologyTestDriver``.

    d = TopologyTestDriver("clicks")
    t = TridentTopology("clicks")
    clicks = t.new_stream("clicks", d.input("clicks", Fields("user", "ts")))
    sessions = clicks.group_by(Fields("user")).session_window(...)
    d.tap(sessions, "sessions")                        # record what this stream carries
    d.pipe("clicks", [("ann", 1000), ("bob", 2000)])   # txid 1, at 0 s
    d.advance_time(10).pipe("clicks", [("ann", 40_000)])   # txid 2, at 10 s
    d.advance_watermark(90_000)                         # txid 3: every session ends
    d.run(t)                                            # in process: no server, no sleeping
    d.emitted("sessions")                               # what it carried, txid by txid

Each *step* is one txid: every record piped in it is in that txid's batch (of each
spout, of each partition), and the txid's time (processing-time windows, a state's TTL,
everything ``CoordinatorStore.commit_time`` gives) is the step's time. ``pipe`` adds to the
current step; ``advance_time`` and ``advance_watermark`` begin a new one, as does
``next_batch``. Event time moves with the records' timestamps, and a hand-set watermark
(``advance_watermark``) is the least watermark of every event-time stage (windows,
sessions, interval joins) from its step on. A step with no records is an empty batch of
its txid. When the steps are used up the spouts have nothing more and the run ends.

What the run leaves is read back: ``emitted(label)`` (what a tapped stream carried in the
committed attempt of each txid), ``map_state(name)`` (every key and value of a map --
``persistent_aggregate``'s, a window store's), ``window_store(name)``, and the
``RunResult`` (``result``). A failed attempt's tuples are not in ``emitted``: a txid's
rows are those of its last attempt, the one that committed.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from spouts.base import PartitionedCoordinator, PartitionedEmitter, PartitionedTransactionalSpout
from transactional.config import TopologyConfig
from transactional.exceptions import ConfigError
from transactional.result import RunResult
from transactional.tuples import Fields, TransactionAttempt
from trident.operation import BaseAggregator
from trident.runtime.window_proc import HAND_WATERMARKS
from trident.stream import Stream
from trident.topology import TridentTopology

__all__ = ["TopologyTestDriver"]


@dataclass
class _Step:
    time: float
    watermark: int | None = None
    records: dict[tuple[str, int], list[tuple[Any, ...]]] = field(default_factory=dict)


@dataclass
class _Script:
    """What one driver's spouts, taps and clock share (in the driver's process)."""

    steps: list[_Step]
    partitions: dict[str, int] = field(default_factory=dict)
    #: label -> txid -> (attempt, rows of that attempt, in arrival order)
    taps: dict[str, dict[int, tuple[int, list[tuple[Any, ...]]]]] = field(default_factory=dict)
    clock_calls: int = 0

    def clock(self) -> float:
        """The engine's clock: called once per txid, in txid order, when the txid's first
        commit begins (``CoordinatorStore.commit_time``): txid ``k`` gets step ``k``'s time."""
        self.clock_calls += 1
        return self.steps[min(self.clock_calls, len(self.steps)) - 1].time

    def tapped(self, label: str, tx: TransactionAttempt, rows: list[tuple[Any, ...]]) -> None:
        by_txid = self.taps.setdefault(label, {})
        old = by_txid.get(tx.txid)
        if old is None or old[0] < tx.attempt_id:
            by_txid[tx.txid] = (tx.attempt_id, list(rows))
        elif old[0] == tx.attempt_id:
            old[1].extend(rows)                 # another task of the same attempt


_SCRIPTS: dict[str, _Script] = {}


class _Coordinator(PartitionedCoordinator):
    def __init__(self, driver: str, spout_id: str) -> None:
        self.script, self.spout_id = _SCRIPTS[driver], spout_id

    def num_partitions(self) -> int:
        return self.script.partitions[self.spout_id]

    def plan_partition(self, partition: int, last_meta: Any) -> Any:
        step = 0 if last_meta is None else last_meta["step"] + 1
        return {"step": step} if step < len(self.script.steps) else None


class _Emitter(PartitionedEmitter):
    def __init__(self, driver: str, spout_id: str) -> None:
        self.script, self.spout_id = _SCRIPTS[driver], spout_id

    def emit_partition_batch(self, tx: TransactionAttempt, collector: Any, partition: int, meta: Any) -> Any:
        for values in self.script.steps[meta["step"]].records.get((self.spout_id, partition), []):
            collector.emit((tx, *values))
        return meta


class _DriverSpout(PartitionedTransactionalSpout):
    """A transactional spout fed by ``TopologyTestDriver.pipe``: the batch of txid ``k``
    (of each partition) is what step ``k`` holds; a replay emits the same."""

    def __init__(self, driver: str, spout_id: str, fields: Fields) -> None:
        self.driver, self.spout_id, self.fields = driver, spout_id, fields

    def get_coordinator(self, conf: dict[str, Any], context: Any) -> PartitionedCoordinator:
        """Plans step after step, one a txid, each partition alike."""
        return _Coordinator(self.driver, self.spout_id)

    def get_emitter(self, conf: dict[str, Any], context: Any) -> PartitionedEmitter:
        """Emits a step's records of a partition."""
        return _Emitter(self.driver, self.spout_id)

    def declare_output_fields(self, declarer: Any) -> None:
        """The TransactionAttempt field, then ``fields``."""
        declarer.declare(Fields("tx", *self.fields))


class _Tap(BaseAggregator):
    """Records a task's rows of a batch under its driver's ``taps[label]``; emits nothing."""

    def __init__(self, driver: str, label: str) -> None:
        self.driver, self.label = driver, label

    def init(self, batch_id: Any, collector: Any) -> Any:
        return (batch_id, [])

    def aggregate(self, acc: Any, t: Any, collector: Any) -> None:
        acc[1].append(tuple(t))

    def complete(self, acc: Any, collector: Any) -> None:
        _SCRIPTS[self.driver].tapped(self.label, acc[0], acc[1])


class TopologyTestDriver:
    """Runs a Trident topology in process, its input and clocks scripted (module docstring).
    ``input`` gives its spouts, ``tap`` marks the streams to record; then ``pipe``,
    ``advance_time``, ``advance_watermark``, ``next_batch``; ``run``; read ``emitted``,
    ``map_state``, ``window_store`` and ``result``."""

    def __init__(self, name: str = "test", start: float = 0.0) -> None:
        self.name = f"{name}-{uuid.uuid4().hex[:8]}"
        self.script = _SCRIPTS[self.name] = _Script([_Step(float(start))])
        self.now = float(start)
        self.labels: set[str] = set()
        self.result: RunResult | None = None

    # -- the topology's ends ------------------------------------------------------------------------
    def input(self, spout_id: str, fields: Fields | Any, partitions: int = 1) -> _DriverSpout:
        """The spout to give ``new_stream(spout_id, ...)``: it emits what ``pipe`` feeds,
        in ``partitions`` partitions (give the stream as many tasks with
        ``parallelism_hint`` to have several sources of event time)."""
        if not isinstance(partitions, int) or partitions < 1:
            msg = f"input({spout_id!r}): partitions is an int >= 1; got {partitions!r}"
            raise ConfigError(msg)
        self.script.partitions[spout_id] = partitions
        return _DriverSpout(self.name, spout_id, fields if isinstance(fields, Fields) else Fields(*fields))

    def tap(self, stream: Stream, label: str) -> Stream:
        """Record what ``stream`` carries under ``label`` (``emitted(label)``); returns the
        stream, to go on from it. A branch of the stream: what flows on is unchanged."""
        if label in self.labels:
            msg = f"tap(..., {label!r}): that label is taken; give each tapped stream its own"
            raise ConfigError(msg)
        self.labels.add(label)
        stream.partition_aggregate(stream.fields, _Tap(self.name, label), Fields(f"__tap_{len(self.labels)}"))
        return stream

    # -- the script -----------------------------------------------------------------------------------
    def pipe(self, spout_id: str, records: list[Any], partition: int | None = None) -> TopologyTestDriver:
        """Records for ``spout_id`` in the current step (tuples of values; a non-tuple is
        one value): all in ``partition``, or record ``j`` in partition ``j % partitions``."""
        n = self.script.partitions.get(spout_id)
        if n is None:
            msg = f"pipe({spout_id!r}): no input of that name; make its spout with input({spout_id!r}, fields)"
            raise ConfigError(msg)
        if partition is not None and not 0 <= partition < n:
            msg = f"pipe({spout_id!r}, partition={partition!r}): the input has partitions 0..{n - 1}"
            raise ConfigError(msg)
        step = self.script.steps[-1]
        for j, r in enumerate(records):
            p = partition if partition is not None else j % n
            step.records.setdefault((spout_id, p), []).append(r if isinstance(r, tuple) else (r,))
        return self

    def next_batch(self) -> TopologyTestDriver:
        """Begin a new step (the next txid) at the same time."""
        self.script.steps.append(_Step(self.now))
        return self

    def advance_time(self, seconds: float) -> TopologyTestDriver:
        """Processing time moves ``seconds`` on: a new step (txid) at that time begins."""
        if seconds <= 0:
            msg = f"advance_time takes seconds > 0; got {seconds!r}"
            raise ConfigError(msg)
        self.now += seconds
        return self.next_batch()

    def advance_watermark(self, ms: int) -> TopologyTestDriver:
        """Event time: a new step (txid) begins whose watermark, in every event-time stage,
        is at least ``ms``, whatever its records made it (windows and sessions ending by
        then fire; rows of an interval join no later row can match leave)."""
        if not isinstance(ms, int) or isinstance(ms, bool):
            msg = f"advance_watermark takes milliseconds (an int); got {ms!r}"
            raise ConfigError(msg)
        self.script.steps.append(_Step(self.now, ms))
        return self

    # -- the run ----------------------------------------------------------------------------------------
    def run(self, topology: TridentTopology, config: TopologyConfig | None = None) -> RunResult:
        """Run ``topology`` in process until the steps are used up: one txid a step."""
        from transactional.engine.driver import run_topology

        if not isinstance(topology, TridentTopology):
            msg = (f"trident.testing.TopologyTestDriver runs a TridentTopology; got {topology!r} (core "
                   "topologies: transactional.testing.TopologyTestDriver)")
            raise ConfigError(msg)
        marks = {str(k + 1): s.watermark for k, s in enumerate(self.script.steps) if s.watermark is not None}
        if config is not None and config.executor != "in-process":
            msg = (f"the test driver runs in process (its spouts read the script in this process); got "
                   f"executor={config.executor!r}: leave it 'in-process'")
            raise ConfigError(msg)
        cfg = config if config is not None else TopologyConfig(
            executor="in-process", progress=False, idle_timeout_secs=0, poll_interval_secs=0.001,
            retry_backoff_secs=0.0, max_spout_pending=1)
        cfg = cfg.model_copy(update={"conf": {**cfg.conf, HAND_WATERMARKS: marks}})
        self.result = run_topology(topology.build(), cfg, clock=self.script.clock)
        return self.result

    # -- what it left -----------------------------------------------------------------------------------
    def emitted(self, label: str) -> list[tuple[Any, ...]]:
        """What the stream tapped as ``label`` carried, txid by txid (the committed attempt's)."""
        return [r for _, rows in sorted(self.emitted_by_txid(label).items()) for r in rows]

    def emitted_by_txid(self, label: str) -> dict[int, list[tuple[Any, ...]]]:
        """``emitted(label)`` per txid (txids whose batch carried nothing are left out)."""
        if label not in self.labels:
            msg = f"emitted({label!r}): no stream is tapped so; tap(stream, {label!r}) before run()"
            raise ConfigError(msg)
        return {t: list(rows) for t, (_, rows) in self.script.taps.get(label, {}).items() if rows}

    def map_state(self, name: str) -> dict[Any, Any]:
        """Every key and value of the map ``name`` as the run left it (a
        ``persistent_aggregate``'s, a window store's, a ``partition_persist``'s)."""
        m = self._result().map_state(name)
        keys = [k for k in getattr(m.backing, "data", {}) if not str(k).startswith("~")]
        return dict(zip(keys, m.multi_get(keys), strict=True))

    def window_store(self, name: str) -> dict[str, Any]:
        """The records of the window store ``name`` (``WindowsStoreFactory(name)``): per
        task, ``{"window:0": {"events": ..., "maxima": ..., "late": ...}}`` (an interval
        join's: ``"ijoin:0"``)."""
        return self.map_state(name)

    def txid_time(self, txid: int) -> float:
        """The processing time (seconds) of ``txid``'s step."""
        return self.script.steps[min(txid, len(self.script.steps)) - 1].time

    def _result(self) -> RunResult:
        if self.result is None:
            msg = "the driver has not run yet: call run(topology) first"
            raise ConfigError(msg)
        return self.result

    def close(self) -> None:
        """Forget the script (the spouts' and taps' shared record in this process)."""
        _SCRIPTS.pop(self.name, None)
