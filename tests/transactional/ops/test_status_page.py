"""The status page in a real headless Chromium (Debian's ``chromium``, driven by
Playwright), loaded while a real topology runs: it must draw the status embedded in the
page at once (no request needed), the topology with labels clear of the nodes, the
committed txid, the txids in flight, the txid being retried and why, the plots, the counts,
process latency and capacity and the last error with its traceback and time, and its
controls must act only with the token. Then ``trident ui`` (the real command) serves the
page of a root's topologies after their drivers ended, from the coordinator state alone.
A screenshot of each is kept in ``tests/artifacts/`` (docs/operations.md)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from spouts import MemoryTransactionalSpout
from transactional import BaseBatchBolt, Fields, TopologyConfig, TransactionalTopologyBuilder, Values
from transactional.ops.run import OperatedRun as Engine
from transactional.ops.webui import attach
from transactional.testing import FaultPlan, with_faults

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
import transactional_words  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
# Chromium must not reach beyond loopback (docs: ENVIRONMENT, "Looking at what a person sees")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


class Pace(BaseBatchBolt):
    """Passes the batch's words on after a pause, so that several txids are in flight."""

    def prepare(self, conf, context, collector, id):
        self.collector, self.id, self.words = collector, id, []

    def execute(self, tuple):                          # ("tx", "word")
        self.words.append(tuple[1])

    def finish_batch(self):
        time.sleep(0.2)
        for w in self.words:
            self.collector.emit(Values(self.id, w))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "word"))


def paced_words(tid: str, per_partition: int = 300):
    """spout -> pace (fails every task of txid 4's first attempt) -> count (committer) ->
    bucketize -> buckets (committer): TransactionalWords with a pause."""
    tw = transactional_words
    spout = MemoryTransactionalSpout(tw.make_data(partitions=3, per_partition=per_partition), Fields("word"), 5)
    b = TransactionalTopologyBuilder(tid, "spout", spout, 2)
    plan = FaultPlan(seed=1, rate=1.0, max_attempt=1, txids=frozenset({4}))
    b.set_bolt("pace", with_faults(Pace(), plan), 2).shuffle_grouping("spout")
    b.set_bolt("count", tw.KeyedCountUpdater(), 3).fields_grouping("pace", Fields("word"))
    b.set_bolt("bucketize", tw.Bucketize(), 2).shuffle_grouping("count")
    b.set_bolt("buckets", tw.BucketCountUpdater(), 2).fields_grouping("bucketize", Fields("bucket"))
    return b.build()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """A headless Chromium (a profile of its own in a temp dir), one page per test."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (scripts/install.sh --test installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=str(CHROMIUM), headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1360, "height": 1000})
        try:
            yield context
        finally:
            context.close()


#: labels and nodes of the graph, as drawn: [[kind, id, left, top, right, bottom]]
BOXES = """() => [...document.querySelectorAll("#graph .node rect.box, #graph .edge.label rect")].map(r => {
    const b = r.getBoundingClientRect(), g = r.closest("g");
    return [g.classList.contains("node") ? "node" : "label", g.dataset.id || g.dataset.target, b.left, b.top,
            b.right, b.bottom]; })"""


def overlapping(boxes: list) -> list:
    """Pairs of a label and a node, or of two labels, whose boxes overlap."""
    out = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            if "label" in (a[0], b[0]) and a[2] < b[4] and b[2] < a[4] and a[3] < b[5] and b[3] < a[5]:
                out.append((a[:2], b[:2]))
    return out


def api(url: str) -> dict:
    with urllib.request.urlopen(url + "api/status", timeout=10) as r:
        return json.loads(r.read())


@pytest.mark.parametrize("executor", ["in-process", pytest.param("spark", marks=pytest.mark.spark_only)])
def test_the_status_page_shows_a_live_run(browser, executor, request):
    if executor == "spark":
        request.getfixturevalue("spark_context")
    topo = paced_words(f"status-{executor}-{uuid.uuid4().hex[:6]}")
    config = TopologyConfig(executor=executor, progress=False, max_spout_pending=3, retry_backoff_secs=1.5,
                            message_timeout_secs=120, metrics_port=0, control_token="open-sesame")
    engine = Engine(topo, config)
    observer = attach(engine.listeners, topo, config)
    assert observer is not None
    outcome: dict = {}

    def run():
        try:
            outcome["result"] = engine.run(None)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            outcome["error"] = e

    runner = threading.Thread(target=run, name="status-page-run", daemon=True)
    page = browser.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    outside: list[str] = []
    url = observer.url
    page.on("request", lambda r: None if r.url.startswith(url) else outside.append(r.url))
    try:
        # Step 0. served before the run begins: the first render is the status embedded in
        # the page -- no request of the page's own is needed (they are refused here)
        page.route("**/api/**", lambda route: route.abort())
        page.goto(url)
        assert page.evaluate("document.body.dataset.ready") == "1", problems
        assert page.inner_text("#phase") == "starting" and page.inner_text("#committed-txid") == "–"
        assert page.inner_text("#topology") == topo.topology_id
        assert page.locator("#graph .node").count() == 5
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"status_page-first-render-{executor}.png"), full_page=True)
        # the grouping labels sit between the nodes, clear of them and of each other
        boxes = page.evaluate(BOXES)
        assert sorted(b[0] for b in boxes) == ["label"] * 4 + ["node"] * 5 and overlapping(boxes) == []
        page.unroute("**/api/**")
        problems.clear()                                   # the refused requests' console errors
        runner.start()
        # the txid being retried, and why, while it waits out its backoff
        page.wait_for_function("""() => !document.getElementById("retrying").hidden""", timeout=120_000)
        assert page.inner_text("#retrying").startswith(
            "retrying txid 4 (attempt 2 of 5) because pace: FailedException: injected failure in finish_batch of pace")
        page.screenshot(path=str(ARTIFACTS / f"status_page-retrying-{executor}.png"), full_page=True)
        # Step 1. while it runs: txids committed, some in flight, and the injected failure shown
        page.wait_for_function(
            """() => document.body.dataset.ready === "1"
                     && Number(document.getElementById("committed-txid").textContent) >= 6
                     && document.querySelector('#errors details[data-component="pace"]') !== null
                     && Number(document.getElementById("throughput").dataset.points) > 0""",
            timeout=120_000)
        assert "error" not in outcome and runner.is_alive(), "the run ended before the page was checked"
        assert page.inner_text("#phase") == "running"
        assert page.inner_text("#topology") == topo.topology_id
        shown = int(page.inner_text("#committed-txid"))
        assert 6 <= shown <= api(url)["committed_txid"]
        # the topology: every component, its grouping labels, committer marks, phase colours
        nodes = page.eval_on_selector_all("#graph .node", "ns => ns.map(n => [n.dataset.id, n.classList[1]])")
        assert nodes == [["spout", "phase-spout"], ["pace", "phase-processing"], ["count", "phase-commit"],
                         ["bucketize", "phase-commit"], ["buckets", "phase-commit"]]
        committers = page.eval_on_selector_all("#graph .node:has(.committer)", "ns => ns.map(n => n.dataset.id)")
        assert committers == ["count", "buckets"]
        labels = page.eval_on_selector_all("#graph .edge.label text", "ts => ts.map(t => t.textContent)")
        assert labels == ["shuffle", "fields(word)", "shuffle", "fields(bucket)"]
        assert page.text_content('#graph .node[data-id="pace"] text.counts').startswith("exec ")
        assert overlapping(page.evaluate(BOXES)) == []
        assert page.is_hidden("#retrying")                 # txid 4 committed since
        from transactional.ops.webui import spark_ui_url

        assert page.is_hidden("#spark-ui") == (spark_ui_url() is None)
        # the txid pipeline: the last committed ones, then the ones in flight
        statuses = page.eval_on_selector_all("#pipeline .tx", "ts => ts.map(t => t.dataset.status)")
        assert "committed" in statuses
        # two plots drawn on their canvases (the throughput in the processing colour)
        for plot in ("throughput", "latency"):
            assert int(page.get_attribute(f"#{plot}", "data-points")) > 0
        coloured = page.evaluate("""() => {
            const c = document.getElementById("throughput"), d = c.getContext("2d")
                .getImageData(0, 0, c.width, c.height).data;
            let n = 0;
            for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0 && d[i + 2] > 150 && d[i] < 120) n++;
            return n; }""")
        assert coloured > 200, "the throughput line is not drawn"
        # per-component counts, and the last error with its traceback, folded
        heads = page.eval_on_selector_all("#components thead th", "ths => ths.map(t => t.textContent)")
        assert heads == ["component", "kind", "phase", "×", "executed", "emitted", "process latency", "capacity",
                         "failed attempts", "last error"]
        row = page.eval_on_selector_all('#components tbody tr[data-id="pace"] td', "tds => tds.map(t => t.textContent)")
        assert row[:4] == ["pace", "bolt", "processing", "2"] and int(row[4].replace(",", "")) > 0
        # Storm's columns: the pause of 0.2 s per batch and task makes pace's tasks the busiest
        assert row[6].endswith(" ms") and 0 < float(row[7]) and row[8] == "1"
        assert "FailedException: injected failure in finish_batch of pace" in row[9] and row[9][2] == ":"
        summary = page.inner_text('#errors details[data-component="pace"] summary')
        assert "FailedException: injected failure in finish_batch of pace" in summary and "txid 4, attempt 1" in summary
        assert not page.is_visible('#errors details[data-component="pace"] pre')
        page.click('#errors details[data-component="pace"] summary')
        trace = page.inner_text('#errors details[data-component="pace"] pre')
        assert trace.startswith("Traceback") and "FailedException" in trace
        shot = ARTIFACTS / f"status_page-{executor}.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 20_000
        # the controls: nothing is done without the token; with it, deactivate and activate
        assert page.is_visible("#controls-section")
        refused = page.evaluate("""() => fetch("/api/control", {method: "POST", headers: {"Authorization": "Bearer x"},
            body: JSON.stringify({action: "deactivate"})}).then(r => r.status)""")
        assert refused == 401 and api(url)["control"]["state"] == "active"
        problems[:] = [p for p in problems if "status of 401 (Unauthorized)" not in p]   # the console's note of it
        page.fill("#control-token", "open-sesame")
        page.click('#controls button[data-action="deactivate"]')
        page.wait_for_function("""() => document.getElementById("stopped-because").textContent
                                        .startsWith("deactivated by status page (127.0.0.1)")""", timeout=30_000)
        assert page.inner_text("#control-result").startswith("deactivate: done (state inactive, driver ")
        page.click('#controls button[data-action="activate"]')
        page.wait_for_function("""() => document.getElementById("stopped-because").textContent === "" """,
                               timeout=30_000)
        # Step 2. the run ends: the page says so, with the run's own figures
        runner.join(timeout=180)
        assert not runner.is_alive() and "error" not in outcome, outcome.get("error")
        result = outcome["result"]
        page.wait_for_function("""() => document.getElementById("phase").textContent === "stopped" """,
                               timeout=10_000)
        assert page.inner_text("#committed-txid") == str(result.last_txid) == "60"
        cancelled = api(url)["cancelled_attempts"]      # issue 39: the attempts figure counts the cancelled too
        assert page.inner_text("#attempts") == (f"{result.attempts} · {len(result.failures)}"
                                                + (f" · {cancelled}" if cancelled else ""))
        assert page.inner_text("#stopped-because") == "spout has nothing more"
        assert page.eval_on_selector_all("#pipeline .tx", "ts => ts.map(t => t.dataset.status)")[-1] == "committed"
        # the details opened stay open across refreshes
        assert page.is_visible('#errors details[data-component="pace"] pre')
        assert problems == [] and outside == []
        # Step 3. the driver stops serving: the page keeps what it showed and says so
        observer.stop()
        page.wait_for_function("""() => document.getElementById("phase").textContent.includes("server gone")""",
                               timeout=10_000)
        assert page.inner_text("#committed-txid") == "60"
        assert {p for p in problems if "ERR_CONNECTION_REFUSED" not in p} == set() and outside == []
    finally:
        page.close()
        observer.stop()
        runner.join(timeout=60)


@pytest.mark.integration
def test_trident_ui_serves_the_history_of_a_root_after_its_drivers_ended(browser, zk_url):
    """`trident ui --coordination zk://...` (the real command, no driver running) serves
    the page of every topology under the root from its coordinator state: the last run's
    graph, counts and Storm's columns, its last error with its time, the uncommitted txids,
    the runs of the topology id, newest first; the controls off without a token."""
    tid = f"words-{uuid.uuid4().hex[:6]}"
    base = dict(executor="in-process", progress=False, max_spout_pending=3, retry_backoff_secs=0.1,
                coordination=zk_url, accept_state_loss=True)   # memory:// state: the history is what is shown
    first = Engine(paced_words(tid, per_partition=100), TopologyConfig(**base)).run(8)
    second = Engine(paced_words(tid, per_partition=100), TopologyConfig(**base)).run(4)
    other = transactional_words.build_topology(f"other-{uuid.uuid4().hex[:6]}").build()
    Engine(other, TopologyConfig(**base)).run(2)
    assert (first.last_txid, second.last_txid) == (8, 12)
    ui = subprocess.Popen([sys.executable, "-m", "transactional.ops.cli", "ui", "--coordination", zk_url, "--port", "0",
                           "--topology", tid], cwd=Path(__file__).resolve().parents[3], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    page = browser.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    try:
        line = ui.stdout.readline()
        assert line.startswith("trident ui: http://127.0.0.1:"), (line, ui.stderr.read() if ui.poll() else "")
        url = line.split()[2]
        page.goto(url)
        assert page.evaluate("document.body.dataset.ready") == "1"
        assert page.inner_text("#topology") == tid and page.inner_text("#phase") == "ended"
        assert page.inner_text("#stopped-because") == "max_batches"
        assert page.inner_text("#committed-txid") == "12" and page.inner_text("#batches") == "4"
        assert page.is_hidden("#plots") and page.is_hidden("#controls-section")
        # the graph the driver recorded, labels clear of the nodes
        assert page.eval_on_selector_all("#graph .node", "ns => ns.map(n => n.dataset.id)") == [
            "spout", "pace", "count", "bucketize", "buckets"]
        assert overlapping(page.evaluate(BOXES)) == []
        row = page.eval_on_selector_all('#components tbody tr[data-id="pace"] td', "tds => tds.map(t => t.textContent)")
        assert row[:4] == ["pace", "bolt", "processing", "2"] and int(row[4]) == 4 * 15
        assert row[6].endswith(" ms") and float(row[7]) > 0
        # the runs of this id, newest first; the first one's failed attempt is in the error list
        runs = page.eval_on_selector_all("#runs tbody tr", "rs => rs.map(r => [...r.cells].map(c => c.textContent))")
        assert [(r[3], r[4], r[5], r[7]) for r in runs] == [("ended", "4", "9..12", "max_batches"),
                                                             ("ended", "8", "1..8", "max_batches")]
        assert runs[0][6] == "4 · 0" and runs[1][6] == f"{first.attempts} · 1"
        # the last error of each component, from the run it happened in, with its time
        summary = page.inner_text('#errors details[data-component="pace"] summary')
        assert "FailedException: injected failure in finish_batch of pace" in summary and "txid 4, attempt 1" in summary
        assert "last error" in page.inner_text("#components thead") and "FailedException" in row[8]
        # the topologies under the root
        options = page.eval_on_selector_all("#topology-select option", "os => os.map(o => o.value)")
        assert sorted(options) == sorted([tid, other.topology_id])
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "status_page_history.png"), full_page=True)
        # the controls are off: refused, never acted on
        code = page.evaluate("""(tid) => fetch("/api/control", {method: "POST", headers: {"Authorization": "Bearer x"},
            body: JSON.stringify({topology: tid, action: "deactivate"})}).then(r => r.status)""", tid)
        assert code == 403 and api(url)["control"] is None
        assert urllib.request.urlopen(url + "api/topologies", timeout=10).status == 200
        page.select_option("#topology-select", other.topology_id)
        page.wait_for_function(f"""() => document.getElementById("topology").textContent === "{other.topology_id}" """)
        assert page.inner_text("#committed-txid") == "2" and page.locator("#graph .node").count() == 4
        assert [p for p in problems if "status of 403" not in p] == []
    finally:
        page.close()
        ui.send_signal(signal.SIGINT)
        ui.wait(30)
    assert ui.returncode == 0


def test_the_page_links_the_spark_ui_of_the_run(browser):
    """A run on Spark with its UI on: the header links it (the address the driver's
    SparkContext reports, asked when the status is served)."""
    from transactional.ops.webui import RunObserver

    o = RunObserver(paced_words(f"link-{uuid.uuid4().hex[:6]}"), spark_ui=lambda: "http://127.0.0.1:4040")
    o.start()
    page = browser.new_page()
    try:
        page.goto(o.url)
        assert page.is_visible("#spark-ui") and page.get_attribute("#spark-ui", "href") == "http://127.0.0.1:4040"
        assert page.inner_text("#spark-ui") == "Spark UI ↗"
    finally:
        page.close()
        o.stop()


def test_trident_stages_show_their_operations_and_the_states_they_write(browser):
    """A Trident topology's stages are named by the user's operations, and each shows the
    states it updates (issue: stages carry the user's names)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
    import trident_word_count

    from transactional.ops.webui import RunObserver

    o = RunObserver(trident_word_count.build_topology().build())
    o.start()
    page = browser.new_page()
    try:
        page.goto(o.url)
        # a long name is cut to the box, whole in its tooltip
        names = page.eval_on_selector_all("#graph .node", "gs => gs.map(g => g.dataset.id)")
        assert sorted(names) == sorted([
            "sentences", "queries", "each(Split) -> aggregate(Count)", "each(Split)",
            "persistent_aggregate(word-counts)", "state_query(word-counts) -> filter(KnownWord) -> aggregate(Sum)",
            "persistent_aggregate(query-results)"]), names
        node = '#graph .node[data-id="persistent_aggregate(word-counts)"]'
        assert page.text_content(f"{node} text.sub").startswith("×2 → word-counts · Trident")
        title = page.eval_on_selector(
            '#graph .node[data-id="persistent_aggregate(query-results)"]',
            "g => [...g.children].filter(c => c.tagName === 'title').map(c => c.textContent).join()")
        assert "writes query-results" in title, title
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "status_page_trident.png"), full_page=True)
    finally:
        page.close()
        o.stop()


def test_the_page_shows_the_users_own_metrics(browser):
    """Issue 39 item 4: metrics registered with ``context.register_*`` in a table of their own."""
    from test_user_metrics import TOTAL, counted_topology

    topo = counted_topology(f"status-metrics-{uuid.uuid4().hex[:6]}")
    config = TopologyConfig(executor="in-process", progress=False, retry_backoff_secs=0.01, metrics_port=0)
    engine = Engine(topo, config)
    observer = attach(engine.listeners, topo, config)
    assert observer is not None
    page = browser.new_page()
    try:
        engine.run(None)
        page.goto(observer.url)
        page.wait_for_function("""() => !document.getElementById("user-metrics-section").hidden""", timeout=30_000)
        rows = page.eval_on_selector_all(
            "#user-metrics tbody tr", "trs => trs.map(tr => [...tr.cells].map(td => td.textContent))")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "status_page-user-metrics.png"), full_page=True)
        # the attempts figure counts the cancelled ones; one clock format on the page
        s = api(observer.url)
        assert s["attempts"] == s["batches_committed"] + s["failed_attempts"] + s["cancelled_attempts"]
        cancelled = f" · {s['cancelled_attempts']}" if s["cancelled_attempts"] else ""
        assert page.inner_text("#attempts") == f"{s['attempts']} · {s['failed_attempts']}{cancelled}"
        assert page.inner_text("#attempts-label").lower() == "attempts · failed · cancelled"
        import re

        assert re.fullmatch(r"updated \d\d:\d\d:\d\d", page.inner_text("#updated")), page.inner_text("#updated")
        err = page.inner_text('#components tr[data-id="split"] td.err')
        assert re.match(r"\d\d:\d\d:\d\d · FailedException: injected failure", err), err
        assert page.evaluate("""() => { const d = document.getElementById("components").parentElement;
                                      return d.scrollWidth <= d.clientWidth; }"""), "the components table scrolls"
    finally:
        page.close()
        observer.stop()
    by_name = {r[1]: r for r in rows}
    assert sorted(by_name) == ["batch_size", "committed", "length", "rate", "seen"]
    assert by_name["seen"][:3] == ["split", "seen", "counter"] and by_name["seen"][3] == f"{TOTAL}"
    assert by_name["committed"][:3] == ["sum", "committed", "counter"]
    assert by_name["rate"][3].startswith(f"{TOTAL} (") and by_name["rate"][3].endswith("/s)")
    assert by_name["length"][3].startswith(f"n {TOTAL}, mean 2")
    assert by_name["batch_size"][3].startswith("task 0: ")
