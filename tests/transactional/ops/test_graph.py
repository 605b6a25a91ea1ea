"""``transactional.ops.graph``: DOT text of transactional, Trident and core topologies, and
its rendering by Graphviz's ``dot``."""

from __future__ import annotations

import re
import subprocess
from types import SimpleNamespace

from spouts import MemoryTransactionalSpout
from spouts.core import BaseRichSpout
from transactional import BaseBasicBolt, BaseRichBolt, BaseStatefulBolt, Fields, TopologyBuilder
from transactional.bolt import BaseBatchBolt, BaseTransactionalBolt, Committer
from transactional.ops.graph import render, to_dot
from transactional.topology import Subscription, TransactionalTopologyBuilder
from trident import Count, FixedBatchSpout, TridentTopology, state


class Route(BaseBasicBolt):
    def execute(self, tuple, collector):
        pass

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "word"))
        declarer.declare(Fields("id", "error"), stream="errors")
        declarer.declare(Fields("id", "word"), stream="picked", direct=True)


class Sink(BaseTransactionalBolt, Committer):
    def declare_output_fields(self, declarer):
        pass


def words_topology():
    spout = MemoryTransactionalSpout({0: [("a",)]}, Fields("word"), 1)
    b = TransactionalTopologyBuilder("words", "spout", spout, 2)
    b.set_bolt("route", Route(), 3).fields_grouping("spout", Fields("word"))
    b.set_bolt("errors", BaseBatchBolt()).global_grouping("route", "errors")
    b.set_bolt("picked", BaseBatchBolt(), 2).direct_grouping("route", "picked")
    b.set_bolt("sink", Sink()).shuffle_grouping("route")
    return b.build()


def label(cid: str, class_name: str, tasks: str) -> str:
    return f'label=<<B>{cid}</B><BR/>{class_name}<BR/><FONT POINT-SIZE="10" COLOR="#555555">{tasks}</FONT>>'


def nodes(dot: str) -> dict[str, str]:
    return dict(re.findall(r'^\s*"([^"]+)" \[(label=.*)\];$', dot, re.M))


def edges(dot: str) -> dict[tuple[str, str], str]:
    return {(a, b): attrs for a, b, attrs in re.findall(r'^\s*"([^"]+)" -> "([^"]+)" \[(.*)\];$', dot, re.M)}


def test_components_are_nodes_with_id_class_tasks_committer_and_spouts_shaped_apart():
    dot = to_dot(words_topology())
    n = nodes(dot)
    assert n["spout"].startswith(label("spout", "MemoryTransactionalSpout", "2 tasks") + ", shape=cds")
    assert n["route"].startswith(label("route", "Route", "3 tasks") + ", shape=box")
    assert n["sink"].startswith(label("sink", "Sink", "1 task, committer") + ", shape=box")
    assert "peripheries=2" in n["sink"]
    assert "peripheries" not in n["route"]


def test_phases_are_boxes_and_edges_say_grouping_fields_and_stream():
    dot = to_dot(words_topology())
    processing = dot[dot.index('"cluster_processing"'):dot.index('"cluster_commit"')]
    commit = dot[dot.index('"cluster_commit"'):]
    assert 'label="processing phase: batches in parallel"' in processing
    assert all(f'"{c}" [' in processing for c in ("spout", "route", "errors", "picked"))
    assert 'label="commit phase: strictly in txid order"' in commit and '"sink" [' in commit
    e = edges(dot)
    assert e[("spout", "route")] == 'label="fields (word)"'
    assert e[("route", "errors")] == 'label="errors: global"'
    assert e[("route", "picked")] == 'label="picked: direct", style=dashed'
    assert e[("route", "sink")] == 'label="shuffle"'


def test_same_topology_same_text():
    assert to_dot(words_topology()) == to_dot(words_topology())


def test_trident_topology_draws_its_compiled_stages():
    t = TridentTopology("trident-count")
    (t.new_stream("sentences", FixedBatchSpout(Fields("sentence"), 2, ("a b",), ("b c",)))
     .group_by(Fields("sentence"))
     .persistent_aggregate(state.transactional("counts"), Count(), Fields("count")))
    built = t.build()
    dot = to_dot(built)
    assert dot.startswith('digraph "trident-count" {')
    assert 'label="topology \'trident-count\' (transactional)"' in dot
    n = nodes(dot)
    assert set(n) == {c.id for c in built.components}
    assert "shape=cds" in n["sentences"]
    assert any("committer" in attrs for attrs in n.values()), "persistent_aggregate commits"
    assert len(edges(dot)) == sum(len(c.inputs) for c in built.components)


class Numbers(BaseRichSpout):
    def next_tuple(self):
        pass

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n"))


class Total(BaseStatefulBolt):
    def declare_output_fields(self, declarer):
        pass


def test_core_topology_marks_stateful_bolts_and_names_its_kind():
    b = TopologyBuilder("core-count")
    b.set_spout("numbers", Numbers(), 2)
    b.set_bolt("double", BaseRichBolt(), 2).shuffle_grouping("numbers")
    b.set_bolt("total", Total()).global_grouping("numbers")
    dot = to_dot(b.build())
    assert "topology 'core-count' (core)" in dot
    assert 'label="commit: stateful bolts, in micro-batch order"' in dot
    n = nodes(dot)
    assert n["total"].startswith(label("total", "Total", "1 task, stateful")) and "peripheries=2" in n["total"]
    assert "committer" not in dot


def test_any_object_with_the_topology_fields_is_drawn_as_transactional():
    """graph.py reads only these attributes: no ``kind``, no methods, no blobs."""
    comp = SimpleNamespace
    t = SimpleNamespace(
        topology_id='odd "id"', commit_components=frozenset({"c"}),
        components=(comp(id="s", kind="spout", parallelism=1, committer=False, inputs=(), streams={}, class_name="S"),
                    comp(id="c", kind="bolt", parallelism=4, committer=True, streams={}, class_name="",
                         inputs=(Subscription("s", "default", "all"),))))
    dot = to_dot(t)
    assert dot.startswith('digraph "odd \\"id\\"" {') and "(transactional)" in dot
    assert nodes(dot)["c"].startswith(label("c", "?", "4 tasks, committer"))
    assert edges(dot)[("s", "c")] == 'label="all"'
    assert render(dot, "svg").lstrip().startswith(b"<?xml")   # dot parses the quoting


def test_render_png_and_svg_through_graphviz_dot():
    dot = to_dot(words_topology())
    png = render(dot, "png")
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    svg = render(dot, "svg").decode()
    assert "<svg" in svg and "route" in svg and "fields (word)" in svg
    check = subprocess.run(["dot", "-Tcanon"], input=dot, capture_output=True, text=True, check=True)
    assert "cluster_commit" in check.stdout


def test_html_in_names_is_escaped():
    comp = SimpleNamespace
    t = SimpleNamespace(topology_id="t", commit_components=frozenset(), components=(
        comp(id="a<b>&c", kind="spout", parallelism=1, committer=False, inputs=(), streams={},
             class_name="TridentBolt: each -> partial"),))
    dot = to_dot(t)
    assert label("a&lt;b&gt;&amp;c", "TridentBolt: each -&gt; partial", "1 task") in dot
    assert b"each &#45;&gt; partial" in render(dot, "svg")   # drawn as text, not markup
