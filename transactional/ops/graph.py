"""A picture of a topology: Graphviz DOT text from a built ``Topology``, and its rendering
(``trident describe --format dot|svg|png``).

``to_dot`` is a pure function of the topology's plain data. It reads only what every kind
of topology has -- ``topology_id``, ``components`` (each: ``id``, ``kind``, ``parallelism``,
``committer``, ``inputs``, ``streams``, ``class_name``), ``commit_components`` and ``kind``
("transactional" when absent) -- so transactional, Trident and core topologies draw alike:

* a spout is a blue arrow-shaped box, a bolt a rounded box; each names its
  id, class and parallelism (tasks);
* a committer (a stateful bolt in a core topology) has a double border and says so;
* components sit in one of two boxes, the phase they run in: processing (batches in
  parallel) or commit (strictly in txid order);
* an edge says its grouping, the fields of a fields grouping and the stream when it is
  not "default"; a direct grouping is dashed.

``render`` turns DOT into SVG or PNG bytes with the ``graphviz`` package, which runs
Graphviz's ``dot`` program (Debian package ``graphviz``).

>>> from spouts import MemoryTransactionalSpout
>>> from transactional import Fields, TransactionalTopologyBuilder
>>> from transactional.bolt import BaseBatchBolt
>>> b = TransactionalTopologyBuilder("doc", "spout", MemoryTransactionalSpout({0: [("a",)]}, Fields("w"), 1))
>>> _ = b.set_bolt("count", BaseBatchBolt(), 2).fields_grouping("spout", Fields("w"))
>>> print([ln.strip() for ln in to_dot(b.build()).splitlines() if "->" in ln][0])
"spout" -> "count" [label="fields (w)"];
"""

from __future__ import annotations

import importlib
from typing import Any

from transactional.exceptions import TridentError

__all__ = ["to_dot", "render", "FORMATS", "GraphvizMissingError"]

#: what ``trident describe --format`` takes; ``render`` makes the last two
FORMATS = ("text", "dot", "svg", "png")

_PHASES = {
    "transactional": {"processing": "processing phase: batches in parallel",
                      "commit": "commit phase: strictly in txid order"},
    "core": {"processing": "processing: micro-batches in parallel",
             "commit": "commit: stateful bolts, in micro-batch order"},
}
_SPOUT = 'shape=cds, style="filled", fillcolor="#dbe9f6", color="#3b6ea5", margin="0.25,0.12"'
_BOLT = 'shape=box, style="rounded,filled", fillcolor="#ffffff", color="#444444"'
_COMMIT_BOLT = 'shape=box, style="rounded,filled", fillcolor="#fdf0d5", color="#b5651d"'


class GraphvizMissingError(TridentError):
    """Rendering SVG or PNG needs Graphviz's ``dot`` program, and it is not installed."""


def _quote(text: str) -> str:
    """A DOT double-quoted string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _phase(topology: Any, component: Any) -> str:
    return "commit" if component.id in topology.commit_components else "processing"


def _html(text: str) -> str:
    """``text`` inside a Graphviz HTML-like label."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def _node(topology: Any, c: Any, kind: str) -> str:
    mark = ("stateful" if kind == "core" else "committer") if c.committer else ""
    tasks = f"{c.parallelism} task{'' if c.parallelism == 1 else 's'}"
    label = (f"<<B>{_html(c.id)}</B><BR/>{_html(c.class_name or '?')}<BR/>"
             f'<FONT POINT-SIZE="10" COLOR="#555555">{_html(f"{tasks}, {mark}" if mark else tasks)}</FONT>>')
    attrs = _SPOUT if c.kind == "spout" else (_COMMIT_BOLT if _phase(topology, c) == "commit" else _BOLT)
    if c.committer:
        attrs += ", peripheries=2"
    return f"{_quote(c.id)} [label={label}, {attrs}];"


def _edge(source: str, target: str, sub: Any) -> str:
    label = sub.grouping
    if sub.fields:
        label += f" ({', '.join(sub.fields)})"
    if sub.stream != "default":
        label = f"{sub.stream}: {label}"
    style = ", style=dashed" if sub.grouping == "direct" else ""
    return f"{_quote(source)} -> {_quote(target)} [label={_quote(label)}{style}];"


def to_dot(topology: Any) -> str:
    """The DOT text of ``topology`` (a built ``transactional.topology.Topology`` of any
    kind): nodes for components, edges for subscriptions, a box per phase.

    The text depends only on the topology: the same topology gives the same text."""
    kind = getattr(topology, "kind", "transactional") or "transactional"
    phases = _PHASES.get(kind, _PHASES["transactional"])
    title = f"topology {topology.topology_id!r} ({kind})"
    out = [
        f"digraph {_quote(topology.topology_id)} {{",
        f"  label={_quote(title)}; labelloc=t; fontname=\"Helvetica\"; fontsize=16;",
        "  rankdir=LR; nodesep=0.35; ranksep=0.6;",
        '  node [fontname="Helvetica", fontsize=11, margin="0.15,0.06"];',
        '  edge [fontname="Helvetica", fontsize=10, color="#555555"];',
    ]
    for phase in ("processing", "commit"):
        members = [c for c in topology.components if _phase(topology, c) == phase]
        if not members:
            continue
        color = "#fbf7ee" if phase == "commit" else "#f6f8fa"
        out += [f"  subgraph {_quote('cluster_' + phase)} {{",
                f"    label={_quote(phases[phase])}; labeljust=l; style=\"rounded,filled\"; "
                f"fillcolor={_quote(color)}; color=\"#bbbbbb\"; fontsize=11;"]
        out += [f"    {_node(topology, c, kind)}" for c in members]
        out.append("  }")
    for c in topology.components:
        out += [f"  {_edge(sub.source, c.id, sub)}" for sub in c.inputs]
    out.append("}")
    return "\n".join(out) + "\n"


def render(dot: str, fmt: str) -> bytes:
    """``dot`` drawn as ``fmt`` ("svg" or "png") by Graphviz's ``dot`` program. Raises
    ``GraphvizMissingError`` naming the package to install when the program (or the
    ``graphviz`` Python package) is missing."""
    if fmt not in ("svg", "png"):
        msg = f"render() draws svg or png, not {fmt!r}; DOT text is to_dot()'s"
        raise ValueError(msg)
    try:   # untyped (no py.typed): imported as a plain module object
        graphviz: Any = importlib.import_module("graphviz")
    except ImportError:
        msg = "drawing svg or png needs the graphviz Python package: pip install 'graphviz>=0.20'"
        raise GraphvizMissingError(msg) from None
    try:
        data: bytes = graphviz.Source(dot).pipe(format=fmt)
    except graphviz.ExecutableNotFound:
        msg = (f"drawing {fmt} needs Graphviz's `dot` program, which is not installed (or not on PATH): "
               "apt-get install graphviz (or bash scripts/install.sh); --format text and --format dot "
               "work without it")
        raise GraphvizMissingError(msg) from None
    return data
