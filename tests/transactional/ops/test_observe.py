"""The run observer, its metrics and its server (transactional.ops.webui; docs/operations.md):
exact figures for a known sequence of transitions, the JSON of /api/status, the timing of
ZooKeeper and Redis calls, and the Kafka spouts' lag."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from spouts import MemoryTransactionalSpout
from state import _timing
from transactional import (
    BaseBatchBolt,
    BaseTransactionalBolt,
    Committer,
    Fields,
    TopologyConfig,
    TransactionalTopologyBuilder,
)
from transactional.engine.events import Transition
from transactional.engine.task import TaskFailure
from transactional.ops.run import OperatedRun as Engine
from transactional.ops.webui import RunObserver, attach, config_summary, lag_source
from transactional.ops.webui.graph import label_width, topology_graph
from transactional.ops.webui.server import status_page

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
import transactional_words  # noqa: E402


class Partial(BaseBatchBolt):
    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "count"))


class Sum(BaseTransactionalBolt, Committer):
    def declare_output_fields(self, declarer):
        pass


def topology(tid: str = "obs"):
    spout = MemoryTransactionalSpout({0: ["a", "b"], 1: ["c"]}, Fields("word"), 1)
    b = TransactionalTopologyBuilder(tid, "spout", spout, 2)
    b.set_bolt("partial", Partial(), 3).shuffle_grouping("spout")
    b.set_bolt("sum", Sum()).global_grouping("partial")
    return b.build()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


TRACE = 'Traceback (most recent call last):\n  File "bolt.py", line 9, in finish_batch\nFailedException: boom\n'


def known_run(o: RunObserver) -> None:
    """Txid 1 commits; txid 2 fails in 'partial' (3, launched after it, is cancelled); both
    run again, 2 commits, 3 is processed and waits for its commit."""
    for t in [
        Transition("launched", 1, 1, 0.0), Transition("launched", 2, 1, 0.1),
        Transition("processed", 1, 1, 0.4), Transition("committing", 1, 1, 0.4),
        Transition("committed", 1, 1, 0.6, {"launched_at": 0.0, "executed": {"partial": 6, "sum": 3},
                                             "emitted": {"spout": 6, "partial": 3},
                                             "commit_secs": 0.2, "processing_secs": 0.4}),
        Transition("launched", 3, 1, 0.6),
        Transition("failed", 2, 1, 1.2, {"failure": TaskFailure("partial", 1, 2, 1, "failed", "FailedException",
                                                                "boom", TRACE)}),
        Transition("launched", 2, 2, 1.8), Transition("launched", 3, 2, 1.8),
        Transition("processed", 2, 2, 2.3), Transition("committing", 2, 2, 2.3),
        Transition("committed", 2, 2, 2.5, {"launched_at": 1.8, "executed": {"partial": 4, "sum": 3},
                                             "emitted": {"spout": 4, "partial": 3},
                                             "commit_secs": 0.2, "processing_secs": 0.5}),
        Transition("processed", 3, 2, 2.6),
    ]:
        o(t)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``{(sample name, sorted labels without topology): value}`` of a /metrics text."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = dict(s.labels)
            assert labels.pop("topology", "obs") == "obs"
            out[(s.name, tuple(sorted(labels.items())))] = s.value
    return out


def get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read()


@pytest.fixture
def served():
    clock = Clock()
    o = RunObserver(topology(), {"max_spout_pending": 3}, clock=clock)
    o.start("127.0.0.1", 0)
    yield o, clock
    o.stop()


def test_metrics_are_exact_for_a_known_sequence_of_transitions(served):
    o, clock = served
    known_run(o)
    clock.now = 3.2
    status, ctype, body = get(o.url + "metrics")
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    m = samples(body.decode())
    assert m[("trident_committed_txid", ())] == 2
    assert {s: m[("trident_txids_in_flight", (("status", s),))] for s in ("processing", "waiting", "committing")} \
        == {"processing": 0, "waiting": 1, "committing": 0}
    assert m[("trident_batches_committed_total", ())] == 2
    assert m[("trident_attempts_total", ())] == 5
    assert m[("trident_failures_total", (("component", "partial"), ("kind", "failed")))] == 1
    assert [k for k in m if k[0] == "trident_failures_total"] == [
        ("trident_failures_total", (("component", "partial"), ("kind", "failed")))]
    executed = {dict(k[1])["component"]: v for k, v in m.items() if k[0] == "trident_tuples_executed_total"}
    emitted = {dict(k[1])["component"]: v for k, v in m.items() if k[0] == "trident_tuples_emitted_total"}
    assert executed == {"spout": 0, "partial": 10, "sum": 6}
    assert emitted == {"spout": 10, "partial": 6, "sum": 0}
    # histograms: commit latency 0.6 and 0.7 s, processing 0.4 and 0.5 s, commit phase 0.2 and 0.2 s
    for name, total, le in [("trident_commit_latency_seconds", 1.3, {"0.5": 0, "1.0": 2}),
                            ("trident_processing_seconds", 0.9, {"0.25": 0, "0.5": 2}),
                            ("trident_commit_seconds", 0.4, {"0.1": 0, "0.25": 2})]:
        assert m[(f"{name}_count", ())] == 2
        assert m[(f"{name}_sum", ())] == pytest.approx(total)
        for bound, n in le.items():
            assert m[(f"{name}_bucket", (("le", bound),))] == n
    # nothing reported for what this run has not: core-topology acks, lag, other figures
    assert not [k for k in m if k[0].startswith(("trident_spout_", "trident_observed", "trident_state_call"))]


def test_api_status_holds_the_graph_pipeline_counts_series_and_last_errors(served):
    o, clock = served
    known_run(o)
    clock.now = 3.2
    status, ctype, body = get(o.url + "api/status")
    assert status == 200 and ctype == "application/json"
    s = json.loads(body)
    assert (s["topology"], s["phase"], s["committed_txid"], s["batches_committed"]) == ("obs", "running", 2, 2)
    assert (s["attempts"], s["failed_attempts"], s["in_flight"]) == (5, 1, 1)
    assert s["config"] == {"max_spout_pending": 3}
    assert [(p["txid"], p["attempt"], p["status"]) for p in s["pipeline"]] == [
        (1, 1, "committed"), (2, 1, "failed"), (3, 1, "cancelled"), (2, 2, "committed"), (3, 2, "waiting")]
    assert s["pipeline"][1]["component"] == "partial"
    assert s["pipeline"][-1]["since"] == 2.6 and s["pipeline"][-1]["secs"] == pytest.approx(0.6)
    comps = {c["id"]: c for c in s["components"]}
    assert {c: (v["executed"], v["emitted"], v["failures"]) for c, v in comps.items()} == {
        "spout": (0, 10, 0), "partial": (10, 6, 1), "sum": (6, 0, 0)}
    assert (comps["sum"]["phase"], comps["sum"]["committer"], comps["partial"]["parallelism"]) == ("commit", True, 3)
    assert s["graph"] == topology_graph(topology())
    assert [(e["source"], e["target"], e["grouping"]) for e in s["graph"]["edges"]] == [
        ("spout", "partial", "shuffle"), ("partial", "sum", "global")]
    # spout tuples committed per whole second (0.6 s: 6, 2.5 s: 4); commit latency per txid
    assert s["throughput"]["points"] == [[0.0, 6.0], [1.0, 0.0], [2.0, 4.0]]
    assert s["latency"]["points"] == [[0.6, 0.6, 1], [2.5, 0.7, 2]]
    assert s["spout_tuples"] == 10 and s["tuples_per_sec"] == pytest.approx(10 / 3.2, abs=0.05)
    assert s["commit_latency_ms"]["p50"] == pytest.approx(600, rel=0.01)
    at_unix = s["errors"]["partial"].pop("at_unix")
    assert s["errors"] == {"partial": {"txid": 2, "attempt": 1, "task": 1, "kind": "failed",
                                       "error_type": "FailedException", "message": "boom", "traceback": TRACE,
                                       "at": 1.2, "count": 1}}
    assert time.time() - 60 < at_unix <= time.time()       # the error's wall-clock time, for the page
    assert s["lag"] == {} and s["extras"] == {}
    assert s["retrying"] is None                            # txid 2 failed, then committed
    o(Transition("stopped", 2, 0, 4.0, {"reason": "max_batches"}))
    s = json.loads(get(o.url + "api/status")[2])
    assert (s["phase"], s["stopped_because"], s["in_flight"]) == ("stopped", "max_batches", 0)
    assert s["pipeline"][-1]["status"] == "cancelled"


def test_process_latency_capacity_and_the_txid_being_retried():
    """Storm's columns from the seconds the tasks ran (``busy_secs``), over a window; and
    "retrying txid N (attempt k of max) because ..." from a failure until that txid commits."""
    clock = Clock()
    o = RunObserver(topology(), {"max_attempts": 5}, clock=clock, window=10.0)
    o(Transition("launched", 1, 1, 0.0))
    o(Transition("committed", 1, 1, 1.0, {"launched_at": 0.0, "executed": {"partial": 1000, "sum": 6},
                                          "emitted": {"spout": 1000, "partial": 6},
                                          "busy_secs": {"spout": 0.2, "partial": 1.5, "sum": 0.003}}))
    o(Transition("launched", 2, 1, 1.0))
    o(Transition("failed", 2, 1, 1.5, {"failure": TaskFailure("sum", 0, 2, 1, "error", "RuntimeError",
                                                              "database is down", TRACE)}))
    clock.now = 5.0
    s = o.snapshot()
    assert s["retrying"] == {"txid": 2, "attempt": 2, "max_attempts": 5,
                             "because": "sum: RuntimeError: database is down", "since": 3.5}
    comps = {c["id"]: c for c in s["components"]}
    # process latency: task seconds per tuple executed (a spout: emitted), in ms
    assert {c: v["process_latency_ms"] for c, v in comps.items()} == {"spout": 0.2, "partial": 1.5, "sum": 0.5}
    # capacity: busy seconds over the window (5 s of run so far) times the parallelism (2, 3, 1)
    assert {c: v["capacity"] for c, v in comps.items()} == {"spout": 0.02, "partial": 0.1, "sum": 0.001}
    # the busy time of a commit older than the window no longer counts
    clock.now = 11.5
    assert o.snapshot()["components"][1]["capacity"] is None and o.capacity() == {}
    o(Transition("launched", 2, 2, 12.0))
    o(Transition("committed", 2, 2, 12.5, {"launched_at": 12.0, "executed": {"partial": 10}, "busy_secs": {"partial": 3.0}}))
    s = o.snapshot()
    assert s["retrying"] is None
    assert s["components"][1]["capacity"] == 0.1 and s["components"][1]["process_latency_ms"] == 4.4554   # 4.5 s / 1010


def test_a_run_nobody_reads_keeps_only_the_capacity_windows_busy_figures():
    """The busy seconds of each commit are kept for the capacity window only, also when no
    page or scrape ever asks for the capacity: 200 commits a second apart, a 10 s window,
    11 kept (the commits at 189..199 s), not 200."""
    clock = Clock()
    o = RunObserver(topology(), clock=clock, window=10.0)
    for i in range(1, 201):
        o(Transition("launched", i, 1, i - 1.0))
        o(Transition("committed", i, 1, float(i - 1), {"launched_at": i - 1.0, "busy_secs": {"partial": 0.5}}))
    assert [at for at, _ in o._busy_recent] == [float(i) for i in range(189, 200)]
    clock.now = 199.0
    assert o.capacity() == {"partial": round(11 * 0.5 / (10.0 * 3), 3)}


def test_a_timeout_failure_and_history_bounds():
    clock = Clock()
    o = RunObserver(topology(), clock=clock, history=3, recent=2)
    for i in range(1, 6):
        o(Transition("launched", i, 1, i - 1.0))
        o(Transition("committing", i, 1, i - 0.5))
        o(Transition("committed", i, 1, i - 0.4, {"launched_at": i - 1.0, "emitted": {"spout": i}}))
    clock.now = 9.0

    class Timeout:             # what the coordinator's timeout failure carries
        kind, component, task, traceback, message = "error", "(spark job)", -1, "", "not processed within 30s"

    o(Transition("launched", 6, 1, 8.0))
    o(Transition("failed", 6, 1, 9.0, {"failure": Timeout()}))
    s = o.snapshot()
    assert s["throughput"]["points"] == [[6.0, 0.0], [7.0, 0.0], [8.0, 0.0]]
    assert [p[2] for p in s["latency"]["points"]] == [3, 4, 5]
    assert [(p["txid"], p["status"]) for p in s["pipeline"]] == [(5, "committed"), (6, "failed")]
    assert s["errors"]["(spark job)"]["error_type"] == "Timeout"
    assert s["errors"]["(spark job)"]["task"] == -1


def test_core_topology_acks_lag_and_other_figures_are_exported(served):
    o, clock = served
    o(Transition("launched", 1, 1, 0.0))
    o(Transition("committing", 1, 1, 0.2))
    o(Transition("committed", 1, 1, 0.3, {"launched_at": 0.0, "emitted": {"spout": 5},
                                           "acked": {"spout": 4}, "failed": {"spout": 1}, "pending": {"spout": 7}}))
    o(Transition("launched", 2, 1, 0.4))
    o(Transition("committing", 2, 1, 0.5))
    o(Transition("committed", 2, 1, 0.6, {"launched_at": 0.4, "acked": {"spout": 7}, "failed": {"spout": 1},
                                           "pending": {"spout": 2}}))           # the run's totals so far
    o.observe_extra("acker", {"trees": 12, "timeouts": 0, "note": "not a number"})
    polls = []

    def lag():
        polls.append(clock.now)
        return {"spout": {"0": 40 - len(polls), "1": 0}}

    o.set_lag_source(lag)
    m = samples(get(o.url + "metrics")[2].decode())
    assert m[("trident_spout_acked_total", (("component", "spout"),))] == 7
    assert m[("trident_spout_failed_total", (("component", "spout"),))] == 1
    assert m[("trident_spout_pending", (("component", "spout"),))] == 2
    assert m[("trident_spout_lag", (("component", "spout"), ("partition", "0")))] == 39
    assert m[("trident_spout_lag", (("component", "spout"), ("partition", "1")))] == 0
    assert m[("trident_observed", (("key", "trees"), ("name", "acker")))] == 12
    assert ("trident_observed", (("key", "note"), ("name", "acker"))) not in m
    s = json.loads(get(o.url + "api/status")[2])
    assert s["lag"] == {"spout": {"0": 39, "1": 0}} and len(polls) == 1     # polled at most once a second
    assert s["extras"] == {"acker": {"trees": 12, "timeouts": 0, "note": "not a number"}}
    spout = next(c for c in s["components"] if c["id"] == "spout")
    assert (spout["acked"], spout["failed"], spout["pending"], spout["lag"]) == (7, 1, 2, 39)
    clock.now = 1.5
    assert o.lag() == {"spout": {"0": 38, "1": 0}}

    def broken():
        raise RuntimeError("broker away")

    o.set_lag_source(broken)                      # a failing source keeps the last figures
    assert o.lag() == {"spout": {"0": 38, "1": 0}}


def test_state_calls_are_timed_while_served_and_not_after(served):
    o, _ = served
    with _timing.timed("zookeeper", "reading"):
        pass
    with _timing.timed("redis", "writing"), _timing.timed("redis", "writing"):
        pass
    m = samples(get(o.url + "metrics")[2].decode())
    assert m[("trident_state_call_seconds_count", (("backend", "zookeeper"), ("op", "reading")))] == 1
    assert m[("trident_state_call_seconds_count", (("backend", "redis"), ("op", "writing")))] == 2
    o.stop()
    assert _timing.timed("redis", "reading") is _timing.timed("zookeeper", "reading")   # the shared no-op
    with _timing.timed("redis", "writing"):
        pass
    assert o.metrics.registry.get_sample_value(
        "trident_state_call_seconds_count", {"topology": "obs", "backend": "redis", "op": "writing"}) == 2


def test_the_server_serves_a_self_contained_page_and_404s():
    o = RunObserver(topology())
    o.start()
    try:
        status, ctype, body = get(o.url)
        assert status == 200 and ctype == "text/html; charset=utf-8"
        page = body.decode()
        assert page.startswith(status_page().split("/*STATUS_INITIAL*/")[0])
        assert "/*STATUS_" not in page and '"/api/status"' in page and 'id="committed-txid"' in page
        # the status now is in the page itself (the first render needs no request), as
        # JSON that cannot end its <script> element, whatever a run reports
        o(Transition("launched", 1, 1, 0.0))
        o(Transition("failed", 1, 1, 0.1, {"failure": TaskFailure("partial", 0, 1, 1, "error", "ValueError",
                                                                  "</script><script>alert(1)</script>", "")}))
        page = get(o.url)[2].decode()
        embedded = page.split('<script id="initial" type="application/json">')[1].split("</script>")[0]
        initial = json.loads(embedded)
        assert initial["status"]["topology"] == "obs" and initial["status"]["attempts"] == 1
        assert initial["status"]["errors"]["partial"]["message"] == "</script><script>alert(1)</script>"
        assert "<script>alert" not in page and initial["topologies"] == [
            {"topology_id": "obs", "last_committed_txid": None, "run": "running"}]
        # nothing is loaded from elsewhere: no external script, style, font or image
        for needle in ("<script src", "<link", "@import", "url(http", "src=\"http", "//cdn"):
            assert needle not in page
        assert get(o.url + "nothing")[0] == 404
        assert get(o.url + "favicon.ico")[0] == 204
        host, port = o.server.address
        assert host == "127.0.0.1" and port > 0 and o.url == f"http://127.0.0.1:{port}/"
    finally:
        o.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_attach_is_off_without_a_port_and_names_a_taken_port():
    listeners: list = []
    assert attach(listeners, topology(), TopologyConfig()) is None and listeners == []
    o = attach(listeners, topology(), TopologyConfig(metrics_port=0))
    try:
        assert listeners == [o] and o.url.startswith("http://127.0.0.1:")
        assert o.config == config_summary(TopologyConfig(metrics_port=0))
        taken = o.server.address[1]
        with pytest.raises(OSError, match=f"127.0.0.1:{taken}.*another --metrics-port"):
            attach([], topology(), TopologyConfig(metrics_port=taken))
    finally:
        o.stop()


def test_config_summary_hides_passwords():
    s = config_summary(TopologyConfig(state="redis://u:secret@127.0.0.1:6379/0", max_spout_pending=4))
    assert s["state"] == "redis://u:***@127.0.0.1:6379/0" and s["max_spout_pending"] == 4
    assert "secret" not in json.dumps(s)


def test_graph_layout_orders_layers_and_keeps_nodes_apart():
    g = topology_graph(transactional_words.build_topology("tw").build())
    assert [(n["id"], n["layer"]) for n in g["nodes"]] == [("spout", 0), ("count", 1), ("bucketize", 2), ("buckets", 3)]
    assert [n["phase"] for n in g["nodes"]] == ["spout", "commit", "commit", "commit"]
    assert [n["committer"] for n in g["nodes"]] == [False, True, False, True]
    assert g["edges"][0] == {"source": "spout", "target": "count", "stream": "default", "grouping": "fields",
                             "fields": ["word"], "label": "fields(word)"}
    xs = [n["x"] for n in g["nodes"]]
    assert xs == sorted(xs) and all(x + g["node_w"] <= g["width"] for x in xs)
    # the gap between layers fits the widest label with a margin either side (the page
    # draws labels in the gap before their target)
    assert g["col_gap"] == max(90, label_width("fields(bucket)") + 28) == 132.4
    assert [round(b["x"] - a["x"] - g["node_w"], 1) for a, b in zip(g["nodes"], g["nodes"][1:], strict=False)] == [g["col_gap"]] * 3
    # two bolts reading one spout share a layer, one above the other
    spout = MemoryTransactionalSpout({0: ["a"]}, Fields("w"), 1)
    b = TransactionalTopologyBuilder("fan", "spout", spout, 1)
    b.set_bolt("a", Partial()).shuffle_grouping("spout")
    b.set_bolt("b", Partial()).shuffle_grouping("spout")
    b.set_bolt("sum", Sum()).global_grouping("a").global_grouping("b")
    g = topology_graph(b.build())
    at = {n["id"]: n for n in g["nodes"]}
    assert (at["a"]["layer"], at["b"]["layer"], at["sum"]["layer"]) == (1, 1, 2)
    assert at["a"]["x"] == at["b"]["x"] and abs(at["a"]["y"] - at["b"]["y"]) >= g["node_h"]
    assert g["height"] >= at["b"]["y"] + g["node_h"]


def test_a_real_run_reports_what_its_result_reports():
    """An observer on a real engine's listeners (in-process executor) agrees with RunResult."""
    topo = transactional_words.build_topology(f"tw-{uuid.uuid4().hex[:6]}").build()
    config = TopologyConfig(executor="in-process", progress=False, max_spout_pending=3, metrics_port=0)
    engine = Engine(topo, config)
    o = attach(engine.listeners, topo, config)
    try:
        result = engine.run(None)
        s = json.loads(get(o.url + "api/status")[2])
        m = samples(get(o.url + "metrics")[2].decode().replace(f'topology="{topo.topology_id}"', 'topology="obs"'))
    finally:
        o.stop()
    assert (s["committed_txid"], s["batches_committed"], s["attempts"]) == (
        result.last_txid, result.batches_committed, result.attempts) == (9, 9, 9)
    assert {c["id"]: c["executed"] for c in s["components"]} == {c: result.executed.get(c, 0) for c in
                                                                 ("spout", "count", "bucketize", "buckets")}
    assert {c["id"]: c["emitted"] for c in s["components"]} == {c: result.emitted.get(c, 0) for c in
                                                                ("spout", "count", "bucketize", "buckets")}
    assert s["spout_tuples"] == result.tuples == 180
    assert (s["phase"], s["stopped_because"]) == ("stopped", result.stopped_because)
    assert m[("trident_commit_latency_seconds_count", ())] == 9
    assert m[("trident_tuples_emitted_total", (("component", "spout"),))] == 180


@pytest.mark.integration
def test_zookeeper_and_redis_calls_of_a_run_are_timed(zk_url, redis_url):
    topo = transactional_words.build_topology(f"tw-{uuid.uuid4().hex[:6]}").build()
    config = TopologyConfig(executor="in-process", progress=False, metrics_port=0, coordination=zk_url,
                            state=redis_url)
    engine = Engine(topo, config)
    o = attach(engine.listeners, topo, config)
    try:
        engine.run(None)
    finally:
        o.stop()
    reg, tid = o.metrics.registry, topo.topology_id

    def count(backend, op):
        return reg.get_sample_value("trident_state_call_seconds_count", {"topology": tid, "backend": backend, "op": op})

    # every commit reads and writes ZooKeeper and writes Redis
    assert count("zookeeper", "writing") >= 9 and count("zookeeper", "checking") >= 9
    assert count("redis", "writing") >= 9 and count("redis", "reading") >= 9


@pytest.mark.integration
def test_kafka_coordinators_report_lag_per_partition(kafka_broker, kafka_topic):
    from spouts.kafka import KafkaTransactionalSpout, OpaqueKafkaTransactionalSpout

    for kind in (KafkaTransactionalSpout, OpaqueKafkaTransactionalSpout):
        topic = f"{kafka_topic}-{kind.__name__[:6].lower()}"
        kafka_broker.create_topic(topic, 3)
        assert kafka_broker.produce(topic, {0: [f"p0-{i}" for i in range(25)], 1: ["a", "b", "c"]}) == {0: 25, 1: 3}
        c = kind(kafka_broker.bootstrap, topic, max_records_per_partition=10).get_coordinator({}, None)
        try:
            assert c.lag() == {}                                           # nothing planned yet
            m0, m1 = c.plan_partition(0, {"start": 0, "end": 0}), c.plan_partition(1, {"start": 0, "end": 0})
            assert c.plan_partition(2, {"start": 0, "end": 0}) is None
            assert c.lag() == {"0": 25, "1": 3, "2": 0}                    # nothing committed here yet
            c.committed(1, {"0": m0, "1": m1})
            assert c.lag() == {"0": 15, "1": 0, "2": 0}
            c.plan_partition(0, m0)                                        # txid 2 planned, not committed
            kafka_broker.produce(topic, {2: ["x"]})
            c.plan_partition(2, {"start": 0, "end": 0})
            assert c.lag() == {"0": 15, "1": 0, "2": 1}
            # the observer polls it through lag_source; coordinators without lag() are left out
            o = RunObserver(topology())
            o.set_lag_source(lag_source({"kafka": c, "memory": object()}))
            assert o.lag() == {"kafka": {"0": 15, "1": 0, "2": 1}}
            assert o.metrics.registry.get_sample_value(
                "trident_spout_lag", {"topology": "obs", "component": "kafka", "partition": "2"}) == 1
        finally:
            c.close()


def test_a_transition_it_cannot_read_is_skipped_not_raised(caplog):
    o = RunObserver(topology())
    o(Transition("committed", 1, 1, 0.5, {"launched_at": 0.0, "emitted": {"spout": "many"}}))
    o(Transition("committed", 2, 1, 0.9, {"launched_at": 0.5, "emitted": {"spout": 3}}))
    assert o.snapshot()["committed_txid"] == 2
    assert "skips a 'committed' transition of txid 1" in caplog.text


def test_listener_is_safe_under_concurrent_reads():
    """Transitions arrive on the engine's thread while the server reads snapshots."""
    o = RunObserver(topology())
    stop = threading.Event()
    errors = []

    def read():
        while not stop.is_set():
            try:
                o.snapshot()
                o.metrics.exposition()
            except Exception as e:  # noqa: BLE001
                errors.append(e)

    readers = [threading.Thread(target=read) for _ in range(2)]
    for r in readers:
        r.start()
    for i in range(1, 400):
        o(Transition("launched", i, 1, i * 0.01))
        o(Transition("committing", i, 1, i * 0.01))
        o(Transition("committed", i, 1, i * 0.01, {"launched_at": i * 0.01, "emitted": {"spout": 1}}))
    stop.set()
    for r in readers:
        r.join()
    assert errors == [] and o.snapshot()["batches_committed"] == 399


def test_a_core_topologys_spout_figures_reach_the_page_between_commits_too() -> None:
    """Acks a time-based checkpoint releases after the last commit are on the page and in
    the metrics while the run goes on (the engine pushes them; no commit carries them)."""
    import threading
    import time
    import uuid

    from spouts import MemorySpout
    from transactional import BaseRichBolt, BaseStatefulBolt, Fields, TopologyBuilder

    class Split(BaseRichBolt):
        def prepare(self, conf, context, collector):
            self.collector = collector

        def execute(self, tuple):
            for w in tuple[0].split():
                self.collector.emit((w,), anchors=tuple)
            self.collector.ack(tuple)

        def declare_output_fields(self, declarer):
            declarer.declare(Fields("word"))

    class Count(BaseStatefulBolt):
        def prepare(self, conf, context, collector):
            self.collector = collector

        def init_state(self, state):
            self.state = state

        def execute(self, tuple):
            self.state.put(tuple[0], self.state.get(tuple[0], 0) + 1)
            self.collector.ack(tuple)

    tid = f"core-page-{uuid.uuid4().hex[:6]}"
    b = TopologyBuilder(tid)
    b.set_spout("s", MemorySpout(["a b c", "b c d"] * 10, Fields("sentence"), name=tid), 1)
    b.set_bolt("split", Split(), 2).shuffle_grouping("s")
    b.set_bolt("count", Count(), 2).fields_grouping("split", Fields("word"))
    engine = Engine(b.build(), TopologyConfig(executor="in-process", progress=False, metrics_port=0,
                                              checkpoint_interval_ms=400, idle_timeout_secs=3.0))
    t = threading.Thread(target=engine.run, args=(None,))
    t.start()
    try:
        deadline = time.monotonic() + 20
        while engine.observer is None and time.monotonic() < deadline:
            time.sleep(0.01)
        seen = None
        while t.is_alive() and time.monotonic() < deadline:
            row = next((c for c in engine.observer.snapshot()["components"] if c["id"] == "s"), {})
            if row.get("acked") == 20 and row.get("pending") == 0:
                seen = row
                break
            time.sleep(0.02)
        assert seen is not None and t.is_alive(), "the released acks reached the page while the run went on"
        assert engine.result.batches_committed >= 1
    finally:
        t.join(30)


def post(url: str, body: dict | bytes, headers: dict | None = None) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json",
                                                                         **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_the_page_controls_are_off_without_a_token_and_never_act_without_it():
    """POST /api/control writes the control record `trident deactivate` writes -- only
    with the configured token; without one configured the controls are off (403)."""
    from state.base import MemoryTransactionalState
    from transactional.ops.status import topology_status
    from transactional.ops.webui import Controls

    tid = f"ctl-page-{uuid.uuid4().hex[:6]}"
    MemoryTransactionalState(tid).set("committed", {"txid": 3, "meta": None, "partitions": None})
    off = RunObserver(topology(tid))
    off.start("127.0.0.1", 0, Controls(None, "memory://"))
    on = RunObserver(topology(tid))
    on.start("127.0.0.1", 0, Controls("s3cret", "memory://"))
    try:
        ask = {"topology": tid, "action": "deactivate"}
        assert post(off.url + "api/control", ask, {"Authorization": "Bearer s3cret"})[0] == 403
        assert off.snapshot()["mode"] == "live" and json.loads(get(off.url + "api/status")[2])["controls"] is False
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"X-Trident-Token": "s3cre"}, {"Authorization": "s3cret"}):
            code, body = post(on.url + "api/control", ask, headers)
            assert (code, body["error"]) == (401, "a control request needs the control token (Authorization: Bearer TOKEN)")
        assert topology_status("memory://", tid)["control"] is None          # never acted on
        assert json.loads(get(on.url + "api/status")[2])["controls"] is True
        assert post(on.url + "api/control", {"topology": tid, "action": "pause"}, {"X-Trident-Token": "s3cret"})[0] == 400
        assert post(on.url + "api/control", b"not json", {"X-Trident-Token": "s3cret"})[0] == 400
        code, body = post(on.url + "api/control", ask, {"Authorization": "Bearer s3cret"})
        assert (code, body) == (200, {"topology_id": tid, "action": "deactivate", "state": "inactive",
                                      "lock_holder": None})
        assert topology_status("memory://", tid)["control"] == {"state": "inactive", "kill": None,
                                                                "by": "status page (127.0.0.1)"}
        code, body = post(on.url + "api/control", {"topology": tid, "action": "kill"}, {"X-Trident-Token": "s3cret"})
        assert code == 409 and "nothing to kill" in body["error"]
    finally:
        off.stop()
        on.stop()
        MemoryTransactionalState.reset(tid)


def test_the_control_token_is_a_setting_hidden_in_what_is_shown(monkeypatch):
    from transactional.ops.settings import env_layer

    assert TopologyConfig(control_token="s3cret").redacted()["control_token"] == "***"
    assert "control_token" not in config_summary(TopologyConfig(control_token="s3cret"))
    monkeypatch.setenv("TRIDENT_CONTROL_TOKEN", "from-env")
    assert env_layer().values["control_token"] == "from-env"
