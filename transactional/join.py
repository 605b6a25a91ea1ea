"""``JoinBolt``: Storm's windowed join of several streams, in Python spelling (docs/windows.md).

    bolt = (JoinBolt("purchases", "user_id")                 # the first stream and its key
            .join("ads", "user_id", "purchases")             # ads.user_id = purchases.user_id
            .left_join("clicks", "user", "ads")              # clicks.user = ads.user_id, or None
            .select("user_id,ad_id,amount,clicks:page")
            .with_tumbling_window(Count(10)))
    builder.set_bolt("joiner", bolt).fields_grouping("purchases", Fields("user_id")) \\
                                     .fields_grouping("ads", Fields("user_id")) ...

Each window fired is joined on its own (a hash join, as Storm's): the tuples of the first
stream probe those of the next stream by key, the results probe the one after, and so on,
in the order the joins were declared; an inner join keeps only matches, a left join keeps
an unmatched record with the next stream's fields missing (None). A tuple's stream is its
source component (``JoinBolt(...)``; Storm's ``Selector.SOURCE``) or, with
``selector="stream"``, its stream id. ``select`` names the output fields: ``field`` (the
first tuple of the record that has it) or ``stream:field`` (that stream's); the output
field is named as written. Each result is emitted anchored to the tuples it joins.
"""

from __future__ import annotations

from typing import Any

from transactional.exceptions import TopologyError
from transactional.tuples import Fields
from transactional.windowing import BaseWindowedBolt, TupleWindow

__all__ = ["JoinBolt"]


class JoinBolt(BaseWindowedBolt):
    """Storm's ``JoinBolt`` (module docstring); configure its window with the ``with_*``
    methods of ``BaseWindowedBolt``.

    >>> b = JoinBolt("purchases", "user_id").join("ads", "user_id", "purchases").select("user_id,ad_id")
    >>> b.streams, b.output_fields
    (['purchases', 'ads'], ('user_id', 'ad_id'))
    """

    def __init__(self, source: str, field: str, selector: str = "source") -> None:
        if selector not in ("source", "stream"):
            msg = f"JoinBolt selector is 'source' (a tuple's component) or 'stream' (its stream id); got {selector!r}"
            raise TopologyError(msg)
        self.selector = selector
        #: stream -> (its key field, the prior stream it joins, "inner"/"left"); the first has no prior
        self.criteria: dict[str, tuple[str, str | None, str]] = {source: (field, None, "inner")}
        self.output_fields: tuple[str, ...] = ()
        self.output_stream = "default"

    @property
    def streams(self) -> list[str]:
        """The joined streams, in join order."""
        return list(self.criteria)

    def _join(self, stream: str, field: str, prior: str, how: str) -> JoinBolt:
        if stream in self.criteria:
            msg = f"JoinBolt: {stream!r} is already part of the join; join a stream once"
            raise TopologyError(msg)
        if prior not in self.criteria:
            msg = f"JoinBolt: stream {prior!r} was not declared before; join it first (streams so far: {self.streams})"
            raise TopologyError(msg)
        self.criteria[stream] = (field, prior, how)
        return self

    def join(self, stream: str, field: str, prior: str) -> JoinBolt:
        """Inner join: ``stream``'s ``field`` equals ``prior``'s key field."""
        return self._join(stream, field, prior, "inner")

    def left_join(self, stream: str, field: str, prior: str) -> JoinBolt:
        """Left join: as ``join``, and a record without a match in ``stream`` stays."""
        return self._join(stream, field, prior, "left")

    def select(self, fields: str) -> JoinBolt:
        """The output fields, comma separated: ``field`` or ``stream:field``."""
        names = tuple(f.strip() for f in fields.split(",") if f.strip())
        if not names:
            msg = f"JoinBolt.select takes field names, comma separated (e.g. 'user_id,ads:ad_id'); got {fields!r}"
            raise TopologyError(msg)
        self.output_fields = names
        return self

    def with_output_stream(self, stream: str) -> JoinBolt:
        """Emit on ``stream`` instead of ``default``."""
        self.output_stream = stream
        return self

    # -- the bolt ----------------------------------------------------------------------------------
    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector."""
        if not self.output_fields:
            msg = "JoinBolt: say what it emits with select('field,stream:field,...')"
            raise TopologyError(msg)
        self.collector = collector

    def declare_output_fields(self, declarer: Any) -> None:
        """The ``select``ed fields, on the output stream."""
        if not self.output_fields:
            msg = "JoinBolt: say what it emits with select('field,stream:field,...')"
            raise TopologyError(msg)
        declarer.declare(Fields(*self.output_fields), self.output_stream)

    def execute(self, window: TupleWindow) -> None:
        """Join the window's tuples and emit each result, anchored to the tuples joined."""
        for record in self.hash_join(window.get()):
            self.collector.emit(tuple(self._project(record)), anchors=[t for t in record if t is not None],
                                stream=self.output_stream)

    def _stream_of(self, t: Any) -> str:
        return str(t.source_component if self.selector == "source" else t.source_stream)

    def hash_join(self, tuples: list[Any]) -> list[list[Any]]:
        """The joined records (lists of tuples, None where a left join found nothing), in
        the first stream's arrival order."""
        first = self.streams[0]
        probe: list[list[Any]] = []
        tables: dict[str, dict[Any, list[Any]]] = {s: {} for s in self.streams[1:]}
        for t in tuples:
            s = self._stream_of(t)
            if s == first:
                probe.append([t])
            elif s in tables:
                tables[s].setdefault(self._get(t, self.criteria[s][0]), []).append(t)
        for s in self.streams[1:]:
            field, prior, how = self.criteria[s]
            assert prior is not None
            at, prior_key = self.streams.index(prior), self.criteria[prior][0]
            out: list[list[Any]] = []
            for rec in probe:
                key = None if rec[at] is None else self._get(rec[at], prior_key)
                if key is None:
                    continue
                matches = tables[s].get(key)
                if matches:
                    out += [[*rec, m] for m in matches]
                elif how == "left":
                    out.append([*rec, None])
            probe = out
        return probe

    @staticmethod
    def _get(t: Any, field: str) -> Any:
        return t[field] if field in t.fields else None

    def _project(self, record: list[Any]) -> list[Any]:
        values: list[Any] = []
        for name in self.output_fields:
            stream, _, field = name.rpartition(":")
            value = None
            for t in record:
                if t is not None and (not stream or self._stream_of(t) == stream) and field in t.fields:
                    value = t[field]
                    break
            values.append(value)
        return values
