"""A topology as a graph to draw: nodes placed in layers, edges labelled with groupings.

A simple layered (Sugiyama-style) layout: a spout is in layer 0, a bolt one layer right
of its furthest source; within a layer, nodes are ordered by the mean position of their
sources (two sweeps), so that edges cross little on the small DAGs topologies are. Plain
data out, drawn by the status page as SVG.
"""

from __future__ import annotations

from typing import Any

__all__ = ["topology_graph", "edge_label", "label_width", "NODE_W", "NODE_H"]

NODE_W, NODE_H = 190, 64          # a node's box (px)
COL_GAP, ROW_GAP, PAD = 90, 34, 16
#: an edge label's width estimate: px per character (11 px sans-serif) and padding
LABEL_CHAR_W, LABEL_PAD, LABEL_MARGIN = 6.6, 12, 14


def edge_label(grouping: str, fields: list[str], stream: str) -> str:
    """The label of an edge: ``fields(word)``, ``shuffle``; ``stream: ...`` off ``default``;
    ``Arrow batches`` for a Trident stage's columns (routed by the sending task)."""
    g = f"{grouping}({', '.join(fields)})" if fields else grouping
    if stream.startswith("arrow-"):   # a Trident stage's Arrow buffers, sent to the tasks they are for
        return "Arrow batches"
    return f"{stream}: {g}" if stream and stream != "default" else g


def label_width(label: str) -> float:
    """The width (px) the page gives an edge label's box."""
    return round(len(label) * LABEL_CHAR_W + LABEL_PAD, 1)


def topology_graph(topology: Any) -> dict[str, Any]:
    """``{"nodes": [...], "edges": [...], "width", "height", "node_w", "node_h"}`` of a
    ``Topology``. A node: ``id``, ``kind`` (spout, bolt), ``class_name``, ``parallelism``,
    ``committer``, ``phase`` (spout, processing, commit: where it runs, docs/design.md §4),
    ``layer``, ``order``, ``x``, ``y`` (its box's top left). An edge: ``source``, ``target``,
    ``stream``, ``grouping``, ``fields``, ``label``. The gap between layers (``col_gap``)
    is wide enough for the widest label, which the page puts in the gap before the
    edge's target: labels never cover a node.

    >>> from spouts import MemoryTransactionalSpout
    >>> from transactional import Fields, TransactionalTopologyBuilder
    >>> from transactional.bolt import BaseBatchBolt
    >>> b = TransactionalTopologyBuilder("doc", "spout", MemoryTransactionalSpout({0: ["a"]}, Fields("w"), 1))
    >>> _ = b.set_bolt("count", BaseBatchBolt(), 2).shuffle_grouping("spout")
    >>> g = topology_graph(b.build())
    >>> [(n["id"], n["layer"], n["phase"]) for n in g["nodes"]], g["edges"][0]["grouping"]
    ([('spout', 0, 'spout'), ('count', 1, 'processing')], 'shuffle')
    """
    comps = list(topology.components)
    commit = set(topology.commit_components)
    layer: dict[str, int] = {}
    for c in comps:                       # spouts first, then bolts in topological order
        layer[c.id] = 0 if c.kind == "spout" else 1 + max((layer.get(s.source, 0) for s in c.inputs), default=0)
    layers: dict[int, list[str]] = {}
    for c in comps:
        layers.setdefault(layer[c.id], []).append(c.id)
    sources = {c.id: [s.source for s in c.inputs] for c in comps}
    pos = {cid: i for ids in layers.values() for i, cid in enumerate(ids)}
    for _ in range(2):
        for li in sorted(layers)[1:]:
            ids = layers[li]
            ids.sort(key=lambda cid: (sum(pos[s] for s in sources[cid]) / max(1, len(sources[cid])), pos[cid]))
            for i, cid in enumerate(ids):
                pos[cid] = i
    edges = [{"source": s.source, "target": c.id, "stream": s.stream, "grouping": s.grouping,
              "fields": list(s.fields), "label": edge_label(s.grouping, list(s.fields), s.stream)}
             for c in comps for s in c.inputs]
    gap = max([COL_GAP] + [label_width(e["label"]) + 2 * LABEL_MARGIN for e in edges])
    rows = max((len(ids) for ids in layers.values()), default=1)
    height = PAD * 2 + rows * NODE_H + (rows - 1) * ROW_GAP
    width = PAD * 2 + len(layers) * NODE_W + max(0, len(layers) - 1) * gap
    nodes = []
    for c in comps:
        li, n = layer[c.id], len(layers[layer[c.id]])
        top = PAD + (rows - n) * (NODE_H + ROW_GAP) / 2
        nodes.append({
            "id": c.id, "kind": c.kind, "class_name": c.class_name, "parallelism": c.parallelism,
            "committer": bool(c.committer), "writes": list(c.writes),
            "phase": "spout" if c.kind == "spout" else ("commit" if c.id in commit else "processing"),
            "layer": li, "order": pos[c.id],
            "x": round(PAD + li * (NODE_W + gap), 1), "y": round(top + pos[c.id] * (NODE_H + ROW_GAP), 1),
        })
    return {"nodes": nodes, "edges": edges, "width": round(width, 1), "height": height, "node_w": NODE_W,
            "node_h": NODE_H, "col_gap": round(gap, 1)}
