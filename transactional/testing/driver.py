"""``TopologyTestDriver``: run a core topology in process with its input and its clock in
the test's hands (as Kafka Streams' ``TopologyTestDriver``; docs/windows.md).

    d = TopologyTestDriver("clicks")
    b = TopologyBuilder("clicks")
    b.set_spout("s", d.input("s", Fields("user", "ts")))
    b.set_bolt("w", SessionCount().with_session_window(Duration(30, "s"))
                                  .with_timestamp_field("ts")).fields_grouping("s", Fields("user"))
    d.pipe("s", [("ann", 1000), ("bob", 2000)])      # the first micro-batch
    d.advance_time(10)                                # processing time: 10 s later
    d.pipe("s", [("ann", 40_000)])                    # the second
    result = d.run(b)                                 # in process: no servers, no sleeping
    d.emitted("w")                                    # every tuple "w" emitted on "default"

Each ``pipe`` after an ``advance_time`` (or the first) starts a *step*; a step is one
micro-batch: every record piped in it is emitted in that micro-batch, and the run's clock
(processing time: ticks, processing-time windows, a txid's time) reads the step's time
while it runs. Event time moves with the records' timestamps. Failed tuples are emitted
again in the next micro-batch, as ``MemorySpout`` does. When the steps are used up the
input has ended: pending windows fire (docs/windows.md) and the run returns its
``RunResult`` (``key_value_state``, ``map_state``, ``acked``...). ``emitted(component,
stream)`` lists, in order, the values every task of ``component`` emitted on ``stream``
(recorded by a tap bolt the driver subscribes to every stream of the topology).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from transactional.bolt import OutputFieldsDeclarer
from transactional.config import TopologyConfig
from transactional.core import BaseRichBolt, OutputCollector, TopologyBuilder
from transactional.exceptions import ConfigError
from transactional.result import RunResult
from transactional.spout import BaseRichSpout, OutputDeclarer, SpoutContext, SpoutOutputCollector
from transactional.tuples import Fields, Tuple

__all__ = ["TopologyTestDriver"]

TAP = "__tap__"


@dataclass
class _Step:
    time: float
    records: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)


@dataclass
class _Script:
    """What one driver's spouts and clock share (in the driver's process)."""

    steps: list[_Step]
    tasks: dict[str, int] = field(default_factory=dict)   # spout id -> task count
    at: int = 0                                           # the step being emitted
    complete: bool = False                                # every task has emitted its share of it
    done: set[tuple[str, int]] = field(default_factory=set)
    emitted: dict[tuple[str, str], list[tuple[Any, ...]]] = field(default_factory=dict)
    acked: dict[str, list[Any]] = field(default_factory=dict)
    failed: dict[str, list[Any]] = field(default_factory=dict)

    def time(self) -> float:
        return self.steps[min(self.at, len(self.steps) - 1)].time

    def finished(self, spout: str, task: int) -> None:
        """Task ``task`` of ``spout`` has emitted its share of the step: when every task
        has, the step's micro-batch is complete, and the next ``next_tuple`` (in the next
        micro-batch, after this one committed) begins the next step."""
        self.done.add((spout, task))
        if len(self.done) >= sum(self.tasks.values()):
            self.complete = True

    def advance(self) -> None:
        """Begin the next step, when the last one is complete."""
        if self.complete:
            self.complete, self.done = False, set()
            self.at += 1
            # a step of no records before others: its time passes in the next one's batch
            while self.at < len(self.steps) - 1 and not any(self.steps[self.at].records.values()):
                self.at += 1


_SCRIPTS: dict[str, _Script] = {}


class _DriverSpout(BaseRichSpout):
    """A spout fed by ``TopologyTestDriver.pipe``: each step's records in one micro-batch
    (task ``i`` of ``n`` takes the records at positions ``j % n == i``)."""

    def __init__(self, driver: str, spout_id: str, fields: Fields) -> None:
        self.driver, self.spout_id, self.fields = driver, spout_id, fields

    def open(self, conf: dict[str, Any], context: SpoutContext, collector: SpoutOutputCollector) -> None:
        self.script = _SCRIPTS[self.driver]
        self.collector, self.task, self.tasks = collector, context.task_index, context.num_tasks
        self.script.tasks[self.spout_id] = context.num_tasks
        self.replay: list[tuple[Any, tuple[Any, ...]]] = []
        self.pending: dict[Any, tuple[Any, ...]] = {}
        self.emitted_step = -1

    def next_tuple(self) -> None:
        s = self.script
        s.advance()
        if self.replay:
            for msg_id, values in self.replay:
                self.collector.emit(values, msg_id=msg_id)
            self.replay = []
            return
        if s.at >= len(s.steps) or self.emitted_step == s.at:
            if s.at < len(s.steps):
                s.finished(self.spout_id, self.task)
            return
        self.emitted_step = s.at
        records = s.steps[s.at].records.get(self.spout_id, [])
        for j, values in enumerate(records):
            if j % self.tasks == self.task:
                msg_id = (s.at, j)
                self.pending[msg_id] = values
                self.collector.emit(values, msg_id=msg_id)
        if not records:
            s.finished(self.spout_id, self.task)

    def ack(self, msg_id: Any) -> None:
        self.script.acked.setdefault(self.spout_id, []).append(msg_id)
        self.pending.pop(msg_id, None)

    def fail(self, msg_id: Any) -> None:
        self.script.failed.setdefault(self.spout_id, []).append(msg_id)
        values = self.pending.get(msg_id)
        if values is not None:
            self.replay.append((msg_id, values))

    def declare_output_fields(self, declarer: OutputDeclarer) -> None:
        declarer.declare(self.fields)


class _Tap(BaseRichBolt):
    """Records what it receives under its driver's ``emitted`` and acks it."""

    def __init__(self, driver: str) -> None:
        self.driver = driver

    def prepare(self, conf: dict[str, Any], context: Any, collector: OutputCollector) -> None:
        self.collector, self.emitted = collector, _SCRIPTS[self.driver].emitted

    def execute(self, tuple: Tuple) -> None:
        self.emitted.setdefault((tuple.source_component, tuple.source_stream), []).append(tuple.values)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        pass


class TopologyTestDriver:
    """Runs a core topology in process, its input and clock scripted (module docstring).
    Use ``input`` for its spouts, then ``pipe`` / ``advance_time``, ``run``, and read
    ``emitted``, ``acked``, ``failed`` and the returned ``RunResult``."""

    def __init__(self, name: str = "test", start: float = 0.0) -> None:
        self.name = f"{name}-{uuid.uuid4().hex[:8]}"
        self.script = _SCRIPTS[self.name] = _Script([_Step(float(start))])
        self.next_time = float(start)

    def input(self, spout_id: str, fields: Fields) -> BaseRichSpout:
        """The spout to give ``set_spout(spout_id, ...)``: it emits what ``pipe`` feeds."""
        return _DriverSpout(self.name, spout_id, fields if isinstance(fields, Fields) else Fields(*fields))

    def pipe(self, spout_id: str, records: list[Any]) -> TopologyTestDriver:
        """Records for ``spout_id`` in the current step (tuples of values; a non-tuple is one
        value)."""
        steps = self.script.steps
        if steps[-1].time != self.next_time:
            steps.append(_Step(self.next_time))
        steps[-1].records.setdefault(spout_id, []).extend(r if isinstance(r, tuple) else (r,) for r in records)
        return self

    def advance_time(self, seconds: float) -> TopologyTestDriver:
        """Processing time moves ``seconds`` on: the next ``pipe`` starts a step at that time
        (a step of no records: a micro-batch of none, where processing-time windows fire)."""
        if seconds <= 0:
            msg = f"advance_time takes seconds > 0; got {seconds!r}"
            raise ConfigError(msg)
        self.next_time += seconds
        return self

    def run(self, builder: TopologyBuilder, config: TopologyConfig | None = None) -> RunResult:
        """Run the topology ``builder`` builds until the steps are used up, in process."""
        from transactional.engine.driver import run_topology

        if self.script.steps[-1].time != self.next_time:
            self.script.steps.append(_Step(self.next_time))       # the last advance_time
        first = builder.build()
        for c in (*first.spouts, *first.bolts):
            for stream in c.streams:
                builder.set_bolt(f"{TAP}{c.id}:{stream}".replace(":", "_"), _Tap(self.name)).shuffle_grouping(
                    c.id, stream)
        cfg = config if config is not None else TopologyConfig(
            executor="in-process", progress=False, idle_timeout_secs=0, poll_interval_secs=0.001,
            retry_backoff_secs=0.0, message_timeout_secs=600, micro_batches_in_flight=1)
        return run_topology(builder.build(), cfg, clock=self.script.time)

    def emitted(self, component: str, stream: str = "default") -> list[tuple[Any, ...]]:
        """Every values tuple ``component`` emitted on ``stream``, in the order received."""
        return list(self.script.emitted.get((component, stream), []))

    def acked(self, spout_id: str) -> list[Any]:
        """The message ids (``(step, position)``) the spout heard acked, in order."""
        return list(self.script.acked.get(spout_id, []))

    def failed(self, spout_id: str) -> list[Any]:
        """The message ids the spout heard failed, in order."""
        return list(self.script.failed.get(spout_id, []))
