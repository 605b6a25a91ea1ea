"""The Trident compiler: ``TridentTopology.build()`` turns the graph of stream operations
into a ``transactional.Topology``. Operations between two repartitionings fuse into one
stage (a ``_Segment``); each stage becomes one ``TridentBolt`` (a ``TridentCommitterBolt``
when it updates or queries state), wired with the grouping of its boundary."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from transactional.exceptions import ConfigError
from transactional.topology import Topology, TransactionalTopologyBuilder
from transactional.tuples import Fields
from trident.runtime.bolt import TridentBolt, TridentCommitterBolt
from trident.runtime.map_updaters import aggregates
from trident.runtime.op import Op, op_label
from trident.runtime.processors import ArrowOut
from trident.state import check_pairing, is_state_factory
from trident.stream import Node

if TYPE_CHECKING:
    from trident.topology import TridentTopology

COLUMNAR = {"each_batch", "map_batches"}


@dataclass(eq=False)
class _Input:
    segment: _Segment
    grouping: str                    # local, shuffle, fields, global, all
    keys: Fields = field(default_factory=Fields)
    side: int = 0
    stream: str = "default"          # a side stream of the segment (a window's late tuples)


@dataclass(eq=False)
class _Segment:
    inputs: list[_Input] = field(default_factory=list)
    spout: Node | None = None
    ops: list[Op] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    committer: bool = False
    tail: Node | None = None
    fields: Fields = field(default_factory=Fields)
    hint: int | None = None
    consumers: list[tuple[_Segment, _Input]] = field(default_factory=list)
    cid: str = ""                    # the component producing this segment's output
    parallelism: int = 1

    @property
    def columnar_out(self) -> bool:
        """Whether the stage ends in record batches: a columnar function, an operation that
        keeps batches it is given, or the partial counts/sums of Count and Sum (numbers:
        always one Arrow batch)."""
        if not self.ops:
            return False
        last = self.ops[-1]
        if last.kind == "partial" and getattr(last.fn, "arrow_agg", None) is not None:
            return True
        return last.columnar and (last.kind in COLUMNAR or _columnar_before(self, len(self.ops) - 1))


def _columnar_before(seg: _Segment, i: int) -> bool:
    """Whether op ``i`` of ``seg`` gets record batches: an earlier columnar function in the
    stage, or Arrow input."""
    for op in reversed(seg.ops[:i]):
        if op.kind in COLUMNAR:
            return True
        if not op.columnar:
            return False
    return any(inp.segment.columnar_out for inp in seg.inputs)


FUSED = ("op",)


class _Compiler:
    def __init__(self, topology: TridentTopology) -> None:
        self.t = topology
        self.consumers: dict[int, int] = {}
        for n in topology.nodes:
            for p in n.parents:
                self.consumers[id(p)] = self.consumers.get(id(p), 0) + 1
        self.seg_of: dict[int, _Segment] = {}
        self.segments: list[_Segment] = []
        self._drpc: list[Any] = []          # trident.drpc.plan_returns: the DRPC streams' returns

    def _new(self, inputs: list[_Input], committer: bool = False) -> _Segment:
        s = _Segment(inputs=inputs, committer=committer)
        self.segments.append(s)
        for i in inputs:
            i.segment.consumers.append((s, i))
        return s

    def _open(self, parent: Node, committer: bool = False) -> _Segment:
        """The segment an operation on ``parent`` joins: the parent's, if the parent ends it
        and has no other consumer (fusion), else a new one reading it locally."""
        ps = self.seg_of[id(parent)]
        if ps.tail is parent and self.consumers.get(id(parent), 0) == 1 and ps.committer == committer \
                and not ps.consumers:
            return ps
        return self._new([_Input(ps, "local")], committer)

    def compile(self) -> Topology:
        if not any(n.kind == "spout" for n in self.t.nodes):
            msg = "the Trident topology has no stream: start one with new_stream(name, spout)"
            raise ConfigError(msg)
        for n in self.t.nodes:
            seg = self._segment_of(n)
            if n.op is not None:
                seg.ops.append(n.op)
            seg.nodes.append(n)
            if n.hint is not None:
                seg.hint = n.hint
            seg.tail = n
            seg.fields = n.fields
            self.seg_of[id(n)] = seg
        self._check_pairings()
        return self._emit()

    def _segment_of(self, n: Node) -> _Segment:
        """The segment node ``n`` runs in: its parent's (fused) or a new one, by its kind."""
        k = n.kind
        if k == "spout":
            seg = self._new([])
            seg.spout = n
        elif k == "op":
            p = n.parents[0]
            ps = self.seg_of[id(p)]
            seg = self._open(p, committer=ps.committer)
        elif k == "repartition":
            seg = self._new([_Input(self.seg_of[id(n.parents[0])], n.grouping, n.keys)],
                            self.seg_of[id(n.parents[0])].committer)
        elif k == "persist" and self._bare_repartition(n):
            seg = self.seg_of[id(n.parents[0])]     # partition_by(...).partition_persist(...): one stage
            seg.committer = True
        elif k in ("boundary", "persist", "window"):
            ps = self.seg_of[id(n.parents[0])]
            committer = k in ("persist", "window") or ps.committer
            seg = self._new([_Input(ps, n.grouping, n.keys)], committer)
        elif k == "late":                # a window's late tuples: its stage's side stream
            ps = self.seg_of[id(n.parents[0])]
            seg = self._new([_Input(ps, "local", stream=n.extra)], ps.committer)
        elif k == "query":
            seg = self._open(n.parents[0], committer=True)
        elif k in ("ijoin", "wjoin", "merge", "join"):
            seg = self._joined(n)
        else:   # pragma: no cover - every kind is above
            raise AssertionError(k)
        return seg

    def _joined(self, n: Node) -> _Segment:
        """The new segment of a node of several parents: an interval or window join (both
        sides to one task, in the commit phase), a merge (shuffled) or a join (by its fields)."""
        segs = [self.seg_of[id(p)] for p in n.parents]
        if n.kind in ("ijoin", "wjoin"):
            return self._new([_Input(s, "global", side=i) for i, s in enumerate(segs)], True)
        if n.kind == "merge":
            return self._new([_Input(s, "shuffle") for s in segs], any(s.committer for s in segs))
        return self._new([_Input(s, "fields" if len(jf) else "global", jf, side=i) for i, (s, jf) in enumerate(
            zip(segs, n.extra, strict=True))], any(s.committer for s in segs))

    def _bare_repartition(self, n: Node) -> bool:
        """Whether ``n`` (a state's update reading its parent's tasks as they are) follows a
        repartitioning that nothing else reads and no operation follows: the state's stage
        then takes the repartitioning itself, so a key's tuples reach one task of the state
        (Storm's ``partitionBy(...).partitionPersist(...)``), whatever the phases."""
        p = n.parents[0]
        ps = self.seg_of[id(p)]
        return (n.grouping == "local" and p.kind == "repartition" and p.extra != "identity" and ps.nodes == [p]
                and not ps.ops and ps.spout is None and self.consumers.get(id(p), 0) == 1)

    def _spouts_of(self, seg: _Segment, seen: set[int] | None = None) -> list[tuple[str, Any]]:
        seen = set() if seen is None else seen
        if id(seg) in seen:
            return []
        seen.add(id(seg))
        out = [(seg.spout.spout_id or "", seg.spout.spout)] if seg.spout is not None else []
        for i in seg.inputs:
            out += self._spouts_of(i.segment, seen)
        return out

    def _check_pairings(self) -> None:
        """Trident's pairing rule for every map a stream writes (``persistent_aggregate``,
        ``partition_persist``), against the spouts that feed those updates. A
        ``state_query`` only reads the map: the spouts of the querying stream do not count."""
        for seg in self.segments:
            for op in seg.ops:
                if op.state is not None and op.kind != "query":
                    check_pairing(op.state, self._spouts_of(seg))

    def _emit(self) -> Topology:
        segs = self.segments
        self._set_parallelism()
        self._check_identity()
        # a DRPC stream's last stages feed its return bolt (trident.drpc)
        from trident.drpc import add_returns, plan_returns

        drpc_returns = self._drpc = plan_returns(segs, lambda t: t.consumers.append((_Segment(), _Input(t, "global"))))
        # persist ops emit their new values only when something reads them
        for s in segs:
            if s.ops and aggregates(s.ops[-1]):
                s.ops[-1].emit_values = bool(s.consumers) or any(o is not s.ops[-1] for o in s.ops)
        spouts = [s for s in segs if s.spout is not None]
        b = self._builder(spouts)
        self._name_stages(spouts)
        for s in segs:
            if not s.cid or (s.spout is not None and not s.ops):
                continue
            self._bolt(b, s)
        add_returns(b, drpc_returns)
        return dataclasses.replace(b.build(), api="trident", user_states=self._user_states())

    def _user_states(self) -> tuple[Any, ...]:
        """The State API factories (not map states) the operations write or query, once each."""
        found: list[Any] = []
        for n in self.t.nodes:
            f = getattr(n.op, "state", None)
            if f is not None and is_state_factory(f) and not any(f is g for g in found):
                found.append(f)
        return tuple(found)

    def _share_hints(self) -> None:
        """Storm's node groups: a state's stage (``partition_persist``, a ``state_query``)
        that reads, without a repartitioning, a stage feeding nothing else is one group
        with it, so a ``parallelism_hint`` on the state sets both (the larger, when both
        have one), and task i hands its tuples to task i. A spout keeps its own."""
        for s in reversed(self.segments):
            if s.hint is None or len(s.inputs) != 1 or s.inputs[0].grouping != "local":
                continue
            p = s.inputs[0].segment
            if p.spout is None and len(p.consumers) == 1 and p.hint != s.hint:
                p.hint = s.hint = max(p.hint or 0, s.hint)

    def _set_parallelism(self) -> None:
        """Each segment's parallelism: the hint, else the local parent's, else 1."""
        self._share_hints()
        for s in self.segments:
            if s.hint is not None:
                s.parallelism = s.hint
            elif len(s.inputs) == 1 and s.inputs[0].grouping == "local":
                s.parallelism = s.inputs[0].segment.parallelism
            else:
                s.parallelism = 1

    def _check_identity(self) -> None:
        """``identity_partition()`` sends task i to task i: both stages need as many tasks."""
        for s in self.segments:
            n = s.nodes[0] if s.nodes else None
            if n is not None and n.kind == "repartition" and n.extra == "identity":
                src = s.inputs[0].segment
                if src.parallelism != s.parallelism:
                    msg = (f"identity_partition() after a stage of {src.parallelism} task(s) feeds one of "
                           f"{s.parallelism}: task i goes to task i, so give both the same parallelism_hint "
                           "(or use local_or_shuffle())")
                    raise ConfigError(msg)

    def _builder(self, spouts: list[_Segment]) -> TransactionalTopologyBuilder:
        """The builder, with every spout (the first names the topology's transactions)."""
        first = spouts[0]
        assert first.spout is not None and first.spout.spout_id is not None
        b = TransactionalTopologyBuilder(self.t.topology_id, first.spout.spout_id, first.spout.spout,
                                         first.parallelism)
        for s in spouts[1:]:
            assert s.spout is not None and s.spout.spout_id is not None
            b.set_spout(s.spout.spout_id, s.spout.spout, s.parallelism)
        return b

    def _name_stages(self, spouts: list[_Segment]) -> None:
        """A stage's component id is what the user wrote: its name(), else its operations
        ("each(Split) -> aggregate(Count)"), so errors, metrics and the page speak of them."""
        used = {s.spout.spout_id for s in spouts if s.spout is not None}
        for s in self.segments:
            if s.spout is not None and not s.ops:
                s.cid = s.spout.spout_id or ""
                continue
            label = next((n.name for n in s.nodes if n.name), None)
            base = _safe(label or " -> ".join(dict.fromkeys(op_label(op) for op in s.ops)) or "pass")
            s.cid, k = base, 2
            while s.cid in used:
                s.cid, k = f"{base} #{k}", k + 1
            used.add(s.cid)

    def _bolt(self, b: TransactionalTopologyBuilder, s: _Segment) -> None:
        inputs: list[tuple[str, str, str, Fields, int, bool]] = []   # (cid, stream, grouping, keys, side, arrow)
        if s.spout is not None:
            inputs.append((s.spout.spout_id or "", "default", "local", Fields(), 0, False))
        for i in s.inputs:
            src = i.segment
            if i.stream != "default":
                inputs.append((src.cid, i.stream, i.grouping, i.keys, i.side, False))
            elif src.columnar_out:
                inputs.append((src.cid, f"arrow-{s.cid}", "direct", i.keys, i.side, True))
            else:
                inputs.append((src.cid, "default", i.grouping, i.keys, i.side, False))
        main = [(c, i) for c, i in s.consumers if i.stream == "default"]
        arrow_outs = [ArrowOut(f"arrow-{c.cid}", i.grouping, tuple(i.keys), c.parallelism)
                      for c, i in main if s.columnar_out]
        rows_out = any(not s.columnar_out for _ in main)
        side_outs = tuple((i.stream, c.nodes[0].fields) for c, i in s.consumers if i.stream != "default")
        bolt_cls = TridentCommitterBolt if s.committer else TridentBolt
        desc = " -> ".join(dict.fromkeys(op_label(op) for op in s.ops)) or "pass"   # partial, final: once
        bolt = bolt_cls(list(s.ops), s.fields, rows_out, arrow_outs,
                        {(c, st): side for c, st, _, _, side, _ in inputs},
                        {(c, st) for c, st, _, _, _, arrow in inputs if arrow}, desc,
                        named=any(n.name for n in s.nodes), side_outs=side_outs)
        from transactional.engine.drpc import IDS_STREAM
        from trident.drpc import per_request  # a batched DRPC stream's stage: once per request

        bolt, drpc_spout = per_request(self._drpc, s, bolt)
        d = (b.set_committer_bolt if s.committer else b.set_bolt)(s.cid, bolt, s.parallelism)
        _subscribe(d, inputs)
        if drpc_spout is not None:
            d.all_grouping(drpc_spout, IDS_STREAM)


def _subscribe(d: Any, inputs: list[tuple[str, str, str, Fields, int, bool]]) -> None:
    """Subscribe the declared bolt ``d`` to each of its inputs with its grouping."""
    for cid, stream, grouping, keys, _, _ in inputs:
        if grouping == "direct":
            d.direct_grouping(cid, stream)
        elif grouping == "local":
            d.local_or_shuffle_grouping(cid, stream)
        elif grouping == "fields":
            d.fields_grouping(cid, keys, stream)
        elif grouping == "global":
            d.global_grouping(cid, stream)
        elif grouping == "all":
            d.all_grouping(cid, stream)
        else:
            d.shuffle_grouping(cid, stream)


def _safe(name: str) -> str:
    """A component id from a stage's name: no '/' or ':' (the builder's rule)."""
    return re.sub(r"[/:]+", "_", name).strip() or "x"
