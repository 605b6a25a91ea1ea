// The status page: draws the status embedded in the page at once, then polls /api/status
// (every second for a driver's run, every 2 s for `trident ui`) and draws what it says.
// Everything a run reports (ids, messages, tracebacks) is set as text, never as HTML.
"use strict";

const SVGNS = "http://www.w3.org/2000/svg";
const PHASE_COLOR = { spout: "--spout", processing: "--processing", commit: "--commit" };
const STATUS_TEXT = {
  processing: "processing", waiting: "waiting", committing: "committing",
  committed: "committed", failed: "failed", cancelled: "cancelled", uncommitted: "uncommitted",
};
let last = null;           // the last status received
let graphKey = null;       // the graph drawn (redrawn only when it changes)
let errorsKey = null;
let configKey = null;
let runsKey = null;
const INITIAL = JSON.parse(document.getElementById("initial").textContent || "null") || {};
const QUERY = new URLSearchParams(location.search);
let topology = QUERY.get("topology");          // null: the server's default

const $ = (id) => document.getElementById(id);
const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function sv(tag, attrs, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function fmt(n) {
  if (n === null || n === undefined) return "–";
  if (typeof n !== "number") return String(n);
  if (Math.abs(n) >= 1e6) return (n / 1e6).toFixed(2) + "M";
  if (Number.isInteger(n)) return n.toLocaleString("en-US");
  return n.toLocaleString("en-US", { maximumFractionDigits: 1 });
}

function fmtSecs(s) {
  if (s === null || s === undefined) return "–";
  if (s < 1) return (s * 1000).toFixed(0) + " ms";
  if (s < 60) return s.toFixed(s < 10 ? 2 : 1) + " s";
  const m = Math.floor(s / 60), r = Math.floor(s % 60);
  if (m < 60) return `${m}m ${String(r).padStart(2, "0")}s`;
  return `${Math.floor(m / 60)}h ${String(m % 60).padStart(2, "0")}m`;
}

function fmtMs(ms) { return ms === null || ms === undefined ? "–" : fmtSecs(ms / 1000); }

function fmtLatency(ms) {
  if (ms === null || ms === undefined) return "–";
  if (ms < 0.01) return `${(ms * 1000).toFixed(1)} µs`;
  if (ms < 10) return `${ms.toFixed(3)} ms`;
  return `${ms.toFixed(0)} ms`;
}

function fmtWhen(unix) {                      // a wall-clock time: "14:03:07", with the date when not today
  if (!unix) return "–";
  const d = new Date(unix * 1000), now = new Date();
  const time = d.toLocaleTimeString("en-GB");
  return d.toDateString() === now.toDateString() ? time : `${d.toISOString().slice(0, 10)} ${time}`;
}

function retryingText(r) {
  const of = r.max_attempts ? ` of ${r.max_attempts}` : "";
  return `retrying txid ${r.txid} (attempt ${r.attempt}${of}) because ${r.because}`;
}

// -- header ---------------------------------------------------------------------------------
function renderHeader(s) {
  $("topology").textContent = s.topology;
  document.title = `${s.topology} · trident`;
  const failed = s.phase === "stopped" && s.stopped_because === "error";
  const phase = $("phase");
  phase.textContent = failed ? "stopped: error" : s.phase;
  phase.className = "badge " + (failed ? "failed" : String(s.phase).replace(/ /g, "-"));
  let said = ["stopped", "ended", "dead"].includes(s.phase) && !failed ? s.stopped_because || "" : "";
  if (s.control && s.control.state === "inactive" && !["stopped", "ended", "dead"].includes(s.phase)) {
    said = `deactivated${s.control.by ? ` by ${s.control.by}` : ""}: no new batches until activated`;
  }
  if (s.phase === "rebalancing") said = "rebalance in progress: the new task counts take over from the next txid";
  $("stopped-because").textContent = said;
  const spark = $("spark-ui");
  spark.hidden = !s.spark_ui;
  if (s.spark_ui) spark.href = s.spark_ui;
  const retry = $("retrying");
  retry.hidden = !s.retrying;
  retry.textContent = s.retrying ? retryingText(s.retrying)
    + (s.retrying.since !== undefined && s.retrying.since !== null ? ` · for ${fmtSecs(s.retrying.since)}` : "") : "";
  const verify = $("verify-run");
  verify.hidden = !s.verify;
  verify.textContent = s.verify ? `verify run: a scratch copy of topology '${s.verify.of}' under fault `
    + `'${s.verify.fault}' (trident verify ${s.verify.file}), not a production run` : "";
  const why = $("run-state-why");
  const bad = s.run_state && ["dead", "stale"].includes(s.run_state.state);
  why.hidden = !bad;
  why.textContent = bad ? `${s.run_state.state}: ${s.run_state.why}` : "";
  $("committed-txid").textContent = s.committed_txid === null ? "–" : s.committed_txid;
  $("in-flight").textContent = s.in_flight;
  $("batches").textContent = fmt(s.batches_committed);
  $("attempts").textContent = `${fmt(s.attempts)} · ${fmt(s.failed_attempts)}` +
    (s.cancelled_attempts ? ` · ${fmt(s.cancelled_attempts)}` : "");
  $("attempts").title = `${fmt(s.attempts)} attempts launched: ${fmt(s.failed_attempts)} failed` +
    (s.cancelled_attempts != null ? `, ${fmt(s.cancelled_attempts)} cancelled (replayed after an earlier txid failed, or at the stop)` : "");
  $("tps").textContent = fmt(s.recent_tuples_per_sec);
  $("latency-pct").textContent = `${fmtMs(s.commit_latency_ms.p50)} · ${fmtMs(s.commit_latency_ms.p99)}`;
  $("uptime").textContent = fmtSecs(s.uptime_secs);
}

function renderTopologies(rows, current) {
  const select = $("topology-select");
  select.hidden = !(rows && rows.length > 1);
  if (select.hidden) return;
  const key = JSON.stringify(rows.map((r) => r.topology_id));
  if (select.dataset.key !== key) {
    select.replaceChildren(...rows.map((r) => el("option", { value: r.topology_id },
      `${r.topology_id}${r.run ? ` (${r.run})` : ""}`)));
    select.dataset.key = key;
  }
  select.value = current;
}

// -- the topology graph -----------------------------------------------------------------------
function edgeLabel(e) {
  if (e.label) return e.label;
  let g = e.grouping;
  if (e.fields && e.fields.length) g += `(${e.fields.join(", ")})`;
  return e.stream && e.stream !== "default" ? `${e.stream}: ${g}` : g;
}

function drawGraph(g) {
  const W = g.node_w, H = g.node_h;
  const svg = sv("svg", { width: g.width, height: g.height, viewBox: `0 0 ${g.width} ${g.height}`,
                          role: "img", "aria-label": "topology graph" });
  const defs = sv("defs");
  const marker = sv("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
                                markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" });
  marker.appendChild(sv("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#9aa3b2" }));
  defs.appendChild(marker);
  svg.appendChild(defs);
  const at = Object.fromEntries(g.nodes.map((n) => [n.id, n]));
  const gap = g.col_gap || 90;
  const labels = [];
  for (const e of g.edges) {
    const a = at[e.source], b = at[e.target];
    if (!a || !b) continue;
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x - 2, y2 = b.y + H / 2;
    const dx = Math.max(30, (x2 - x1) / 2);
    const grp = sv("g", { class: "edge", "data-source": e.source, "data-target": e.target });
    grp.appendChild(sv("path", { d: `M ${x1} ${y1} C ${x1 + dx} ${y1}, ${x2 - dx} ${y2}, ${x2} ${y2}`,
                                 "marker-end": "url(#arrow)" }));
    // the label sits on the curve in the middle of the gap before the target: between
    // two columns of nodes, whatever layers the edge spans
    const lx = b.x - gap / 2;
    labels.push([grp, edgeLabel(e), lx, curveY([x1, y1], [x1 + dx, y1], [x2 - dx, y2], [x2, y2], lx)]);
    svg.appendChild(grp);
  }
  // labels in one gap never overlap: pushed apart downwards, in order of height
  const LH = 19;
  labels.sort((p, q) => p[2] - q[2] || p[3] - q[3]);
  for (let i = 1; i < labels.length; i++) {
    const prev = labels[i - 1], cur = labels[i];
    if (cur[2] === prev[2] && cur[3] < prev[3] + LH) cur[3] = prev[3] + LH;
  }
  const bottom = Math.max(g.height, ...labels.map((l) => l[3] + LH));
  svg.setAttribute("height", bottom);
  svg.setAttribute("viewBox", `0 0 ${g.width} ${bottom}`);
  for (const n of g.nodes) {
    const color = css(PHASE_COLOR[n.phase] || "--muted");
    const grp = sv("g", { class: `node phase-${n.phase}`, "data-id": n.id, transform: `translate(${n.x},${n.y})` });
    grp.appendChild(sv("rect", { class: "box", width: W, height: H, rx: 8, stroke: color }));
    grp.appendChild(sv("rect", { width: 7, height: H, rx: 3, fill: color }));
    grp.appendChild(sv("text", { class: "name fit", x: 16, y: 20 }, n.id));
    const writes = (n.writes || []).length ? ` → ${n.writes.join(", ")}` : "";   // the states the stage updates
    grp.appendChild(sv("text", { class: "sub fit", x: 16, y: 37 }, `×${n.parallelism}${writes} · ${n.class_name || n.kind}`));
    grp.appendChild(sv("text", { class: "counts", x: 16, y: 54 }, ""));
    if (n.committer) {
      const c = sv("g", { class: "committer", transform: `translate(${W - 14},14)` });
      c.appendChild(sv("circle", { r: 9, fill: css("--commit") }));
      c.appendChild(sv("text", { "text-anchor": "middle", y: 4, fill: "#fff", "font-size": 11, "font-weight": 700 }, "C"));
      c.appendChild(sv("title", {}, "committer: finish_batch runs in the commit phase, in txid order"));
      grp.appendChild(c);
    }
    const err = sv("circle", { class: "err", cx: W - (n.committer ? 34 : 14), cy: 14, r: 5, fill: css("--err"),
                               visibility: "hidden" });
    grp.appendChild(err);
    grp.appendChild(sv("title", {}, `${n.id}: ${n.kind}, ${n.phase} phase, parallelism ${n.parallelism}`
                       + ((n.writes || []).length ? `, writes ${n.writes.join(", ")}` : "")
                                     + (n.committer ? ", committer" : "")));
    svg.appendChild(grp);
  }
  for (const [edge, text, x, y] of labels) {            // grouping labels above edges and nodes
    const grp = sv("g", { class: "edge label", "data-source": edge.dataset.source, "data-target": edge.dataset.target });
    const w = text.length * 6.6 + 12;
    grp.appendChild(sv("rect", { x: x - w / 2, y: y - 9, width: w, height: 17, rx: 4 }));
    grp.appendChild(sv("text", { x, y: y + 4, "text-anchor": "middle" }, text));
    svg.appendChild(grp);
  }
  const box = $("graph");
  box.replaceChildren(svg);
  for (const t of svg.querySelectorAll("text.fit")) fit(t, W - (t.classList.contains("name") ? 44 : 22));
}

function curveY(p0, p1, p2, p3, x) {           // y of a cubic Bézier (x increasing in t) at x
  const at = (t, i) => (1 - t) ** 3 * p0[i] + 3 * (1 - t) ** 2 * t * p1[i] + 3 * (1 - t) * t * t * p2[i] + t ** 3 * p3[i];
  let lo = 0, hi = 1;
  for (let k = 0; k < 40; k++) { const m = (lo + hi) / 2; if (at(m, 0) < x) lo = m; else hi = m; }
  return at((lo + hi) / 2, 1);
}

function fit(text, width) {                             // shorten a label to the node's width
  const full = text.textContent;
  if (text.getComputedTextLength() <= width) return;
  let n = full.length;
  while (n > 1 && text.getComputedTextLength() > width) text.textContent = full.slice(0, --n) + "…";
  text.appendChild(sv("title", {}, full));
}

function updateGraph(s) {
  const key = JSON.stringify(s.graph);
  if (key !== graphKey) { drawGraph(s.graph); graphKey = key; }
  const byId = Object.fromEntries(s.components.map((c) => [c.id, c]));
  for (const node of document.querySelectorAll("#graph .node")) {
    const c = byId[node.dataset.id];
    if (!c) continue;
    const parts = [];
    if (c.kind === "spout") parts.push(`emitted ${fmt(c.emitted)}`);
    else parts.push(`exec ${fmt(c.executed)} · emit ${fmt(c.emitted)}`);
    if (c.lag !== undefined) parts.push(`lag ${fmt(c.lag)}`);
    node.querySelector("text.counts").textContent = parts.join(" · ");
    const err = s.errors[c.id];
    node.querySelector("circle.err").setAttribute("visibility", err ? "visible" : "hidden");
  }
}

// -- the txid pipeline --------------------------------------------------------------------------
function renderPipeline(s) {
  const box = $("pipeline");
  const items = [];
  let sepDone = false;
  for (const t of s.pipeline) {
    const ended = !["processing", "waiting", "committing", "uncommitted"].includes(t.status);
    if (!ended && !sepDone && items.length) { items.push(el("div", { class: "sep" })); sepDone = true; }
    const d = el("div", { class: `tx st-${t.status}${ended ? " ended" : ""}`, "data-txid": t.txid,
                          "data-status": t.status });
    d.appendChild(el("div", { class: "n" }, t.txid));
    const what = STATUS_TEXT[t.status] || t.status;
    d.appendChild(el("div", { class: "s" }, t.attempt > 1 ? `${what} · a${t.attempt}` : what));
    d.title = `txid ${t.txid}, attempt ${t.attempt}: ${what}`
      + (t.secs === null || t.secs === undefined ? "" : ended ? ` ${fmtSecs(t.secs)} ago` : ` for ${fmtSecs(t.secs)}`)
      + (t.component ? ` (in ${t.component})` : "");
    items.push(d);
  }
  if (!items.length) items.push(el("p", { class: "muted" }, s.mode === "history" ? "no uncommitted txid" : "no txid yet"));
  box.replaceChildren(...items);
}

// -- plots ---------------------------------------------------------------------------------------
function niceStep(raw) {                                // 1, 2, 2.5 or 5 times a power of ten
  if (!(raw > 0)) return 0.25;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 2.5, 5]) if (raw <= m * p * 1.000001) return m * p;
  return 10 * p;
}

function fmtAxis(v, unit) {
  if (unit === "s") return v === 0 ? "0" : v < 1 ? `${+(v * 1000).toFixed(1)} ms` : `${+v.toFixed(2)} s`;
  if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (v >= 1e4) return (v / 1e3).toFixed(0) + "k";
  if (v >= 1e3) return (v / 1e3).toFixed(1) + "k";
  return Number.isInteger(v) ? String(v) : v.toFixed(1);
}

function clock(t) {
  const m = Math.floor(t / 60), r = Math.floor(t % 60);
  return `${m}:${String(r).padStart(2, "0")}`;
}

// series: [{points: [[x, y]], color, kind: "bars" | "line" | "dots", width}]
function plot(canvas, series, xmin, xmax, unit, empty) {
  const dpr = window.devicePixelRatio || 1;
  const cssW = canvas.clientWidth || 600, cssH = canvas.clientHeight || 220;
  canvas.width = Math.round(cssW * dpr);
  canvas.height = Math.round(cssH * dpr);
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, cssW, cssH);
  const L = 58, R = 12, T = 10, B = 26;
  const w = cssW - L - R, h = cssH - T - B;
  let ymax = 0;
  for (const s of series) for (const [, y] of s.points) ymax = Math.max(ymax, y);
  const ystep = niceStep((ymax * 1.05) / 4);
  ymax = ystep * Math.max(1, Math.ceil((ymax * 1.05) / ystep));
  const X = (x) => L + (xmax > xmin ? (x - xmin) / (xmax - xmin) : 0) * w;
  const Y = (y) => T + h - (y / ymax) * h;
  ctx.font = "11px system-ui, sans-serif";
  ctx.strokeStyle = "#e3e6eb";
  ctx.fillStyle = "#6b7280";
  ctx.lineWidth = 1;
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (let v = 0; v <= ymax + ystep / 2; v += ystep) {
    const y = Math.round(Y(v)) + 0.5;
    ctx.beginPath(); ctx.moveTo(L, y); ctx.lineTo(L + w, y); ctx.stroke();
    ctx.fillText(fmtAxis(v, unit), L - 6, y);
  }
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  const span = xmax - xmin;
  const step = [5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600].find((s) => span / s <= 6) || 3600;
  for (let x = Math.ceil(xmin / step) * step; x <= xmax; x += step) ctx.fillText(clock(x), X(x), T + h + 6);
  ctx.strokeStyle = "#9aa3b2";
  ctx.beginPath(); ctx.moveTo(L, T + h + 0.5); ctx.lineTo(L + w, T + h + 0.5); ctx.stroke();
  let drawn = 0;
  for (const s of series) {
    const pts = s.points.filter(([x]) => x >= xmin && x <= xmax);
    drawn += pts.length;
    ctx.fillStyle = s.color;
    ctx.strokeStyle = s.color;
    if (s.kind === "bars") {
      const bw = Math.max(1, w / Math.max(1, span) - 1);
      ctx.globalAlpha = 0.28;
      for (const [x, y] of pts) if (y > 0) ctx.fillRect(X(x) - bw / 2, Y(y), bw, T + h - Y(y));
      ctx.globalAlpha = 1;
    } else if (pts.length) {
      ctx.lineWidth = s.width || 2;
      ctx.lineJoin = "round";
      ctx.beginPath();
      pts.forEach(([x, y], i) => (i ? ctx.lineTo(X(x), Y(y)) : ctx.moveTo(X(x), Y(y))));
      ctx.stroke();
      if (s.kind === "dots" && pts.length <= 300) {
        for (const [x, y] of pts) { ctx.beginPath(); ctx.arc(X(x), Y(y), 2.6, 0, 2 * Math.PI); ctx.fill(); }
      }
    }
  }
  if (!drawn) {
    ctx.fillStyle = "#6b7280";
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    ctx.font = "13px system-ui, sans-serif";
    ctx.fillText(empty, L + w / 2, T + h / 2);
  }
  canvas.dataset.points = String(drawn);
}

function movingAverage(points, n) {
  const out = [];
  let sum = 0;
  for (let i = 0; i < points.length; i++) {
    sum += points[i][1];
    if (i >= n) sum -= points[i - n][1];
    out.push([points[i][0] + 0.5, sum / Math.min(i + 1, n)]);
  }
  return out;
}

function renderPlots(s) {
  const tp = s.throughput.points;
  const lat = s.latency.points;
  const now = s.uptime_secs;
  const first = Math.min(tp.length ? tp[0][0] : now, lat.length ? lat[0][0] : now);
  const xmin = Math.max(0, Math.min(first, now - 30)), xmax = Math.max(now, xmin + 30);
  const bars = tp.map(([x, y]) => [x + 0.5, y]);
  plot($("throughput"), [
    { points: bars, color: css("--processing"), kind: "bars" },
    { points: movingAverage(tp, 5), color: css("--processing"), kind: "line", width: 2.2 },
  ], xmin, xmax, "", "no batch committed yet");
  plot($("latency"), [{ points: lat.map(([x, y]) => [x, y]), color: css("--commit"), kind: "dots", width: 1.6 }],
       xmin, xmax, "s", "no batch committed yet");
}

// -- tables ---------------------------------------------------------------------------------------
function renderComponents(s) {
  const cols = [["component", "id"], ["kind", "kind"], ["phase", "phase"], ["×", "parallelism", true],
                ["executed", "executed", true], ["emitted", "emitted", true],
                ["process latency", "process_latency_ms", true], ["capacity", "capacity", true]];
  if (s.mode !== "history") cols.push(["failed attempts", "failures", true]);
  for (const [title, key] of [["acked", "acked"], ["tuples failed", "failed"], ["pending", "pending"], ["lag", "lag"]]) {
    if (s.components.some((c) => c[key] !== undefined)) cols.push([title, key, true]);
  }
  cols.push(["last error", "error"]);
  const table = $("components");
  const head = el("tr");
  for (const [title, , num] of cols) head.appendChild(el("th", num ? { class: "num" } : {}, title));
  table.tHead.replaceChildren(head);
  const rows = s.components.map((c) => {
    const tr = el("tr", { "data-id": c.id });
    for (const [, key, num] of cols) {
      const v = c[key];
      if (key === "error") {
        const e = (s.errors || {})[c.id];
        const text = e ? `${fmtWhen(e.at_unix)} · ${e.error_type}: ${e.message}` : "–";
        // wrapped in its cell, at most ~4 lines: the whole error is in the title and below
        const td = el("td", e ? { class: "err" } : {}, text.length > 240 ? `${text.slice(0, 239)}…` : text);
        if (e) td.title = `txid ${e.txid}, attempt ${e.attempt}: ${e.error_type}: ${e.message}`;
        tr.appendChild(td);
      } else if (key === "process_latency_ms") {
        tr.appendChild(el("td", { class: "num" }, fmtLatency(v)));
      } else if (key === "capacity") {
        tr.appendChild(el("td", { class: v !== null && v !== undefined && v >= 0.8 ? "num hot" : "num" },
                          v === null || v === undefined ? "–" : v.toFixed(3)));
      } else if (key === "phase") {
        const td = el("td");
        const tag = el("span", { class: "phase-tag" }, c.committer ? `${v} · committer` : v);
        tag.style.background = css(PHASE_COLOR[v] || "--muted");
        td.appendChild(tag);
        tr.appendChild(td);
      } else {
        const cls = (num ? "num" : "") + (key === "failures" && v > 0 ? " bad" : "");
        tr.appendChild(el("td", cls ? { class: cls.trim() } : {}, num ? fmt(v) : v));
      }
    }
    return tr;
  });
  table.tBodies[0].replaceChildren(...rows);
}

function renderLag(s) {
  const rows = [];
  for (const [spout, parts] of Object.entries(s.lag || {})) {
    for (const [p, n] of Object.entries(parts)) {
      const tr = el("tr");
      tr.append(el("td", {}, spout), el("td", {}, p), el("td", { class: "num" }, fmt(n)));
      rows.push(tr);
    }
  }
  $("lag-section").hidden = rows.length === 0;
  $("lag").tBodies[0].replaceChildren(...rows);
}

function renderErrors(s) {
  const entries = Object.entries(s.errors || {});
  const key = JSON.stringify(entries.map(([c, e]) => [c, e.txid, e.attempt, e.count, e.at_unix]));
  if (key === errorsKey) return;
  errorsKey = key;
  const open = new Set([...document.querySelectorAll("#errors details[open]")].map((d) => d.dataset.component));
  const box = $("errors");
  if (!entries.length) { box.replaceChildren(el("p", { class: "muted" }, "none")); return; }
  box.replaceChildren(...entries.map(([c, e]) => {
    const d = el("details", { class: "error", "data-component": c });
    if (open.has(c)) d.open = true;
    const sum = el("summary");
    sum.append(el("b", {}, c), document.createTextNode(` ${e.error_type}: ${e.message} `),
               el("span", { class: "where" },
                  `— txid ${e.txid}, attempt ${e.attempt}` + (e.task !== null && e.task >= 0 ? `, task ${e.task}` : "")
                  + (e.count ? ` · ${e.kind} · ${e.count} failed attempt${e.count === 1 ? "" : "s"} in this component` : "")
                  + ` · at ${e.at_unix ? fmtWhen(e.at_unix) : clock(e.at)}`));
    d.append(sum, el("pre", {}, e.traceback || "(no traceback)"));
    return d;
  }));
}

function renderExtras(s) {
  const entries = Object.entries(s.extras || {});
  $("extras-section").hidden = entries.length === 0;
  $("extras").replaceChildren(...entries.map(([name, values]) => {
    const t = el("table", { "data-name": name });
    const cap = el("caption", { style: "text-align:left;font-weight:600;padding:4px 10px" }, name);
    t.appendChild(cap);
    for (const [k, v] of Object.entries(values)) {
      const tr = el("tr");
      tr.append(el("td", {}, k), el("td", { class: "num" }, fmt(v)));
      t.appendChild(tr);
    }
    return t;
  }));
}

function renderUserMetrics(s) {
  const rows = s.user_metrics || [];
  $("user-metrics-section").hidden = rows.length === 0;
  $("user-metrics").tBodies[0].replaceChildren(...rows.map((m) => {
    let value;
    if (m.kind === "counter") value = fmt(m.count);
    else if (m.kind === "meter") value = `${fmt(m.count)} (${fmt(m.rate)}/s)`;
    else if (m.kind === "gauge") value = Object.entries(m.tasks).map(([t, v]) => `task ${t}: ${fmt(v)}`).join(", ");
    else value = `n ${fmt(m.count)}, mean ${fmt(m.mean)}, p50 ${fmt(m.p50)}, p99 ${fmt(m.p99)}, max ${fmt(m.max)}`;
    const tr = el("tr", { "data-metric": `${m.component}/${m.name}` });
    tr.append(el("td", {}, m.component), el("td", {}, m.name), el("td", {}, m.kind), el("td", { class: "num" }, value));
    return tr;
  }));
}

function renderConfig(s) {
  const key = JSON.stringify(s.config);
  if (key === configKey) return;
  configKey = key;
  $("config").tBodies[0].replaceChildren(...Object.entries(s.config || {}).map(([k, v]) => {
    const tr = el("tr");
    tr.append(el("th", {}, k), el("td", {}, typeof v === "object" && v !== null ? JSON.stringify(v) : String(v)));
    return tr;
  }));
}

function renderRuns(s) {
  const runs = s.runs || [];
  $("runs-section").hidden = runs.length === 0;
  const key = JSON.stringify(runs);
  if (key === runsKey) return;
  runsKey = key;
  $("runs").tBodies[0].replaceChildren(...runs.map((r) => {
    const tr = el("tr", { "data-owner": r.owner || "", "data-ended": r.ended || "" });
    const txids = r.first_committed === null || r.first_committed === undefined ? "none"
      : r.first_committed === r.last_committed ? String(r.first_committed) : `${r.first_committed}..${r.last_committed}`;
    const how = el("td", { class: r.ended === "died" ? "err" : "" }, r.ended);
    const link = el("td");
    if (r.spark_ui) link.appendChild(el("a", { href: r.spark_ui, target: "_blank", rel: "noopener" }, "Spark UI ↗"));
    tr.append(el("td", {}, fmtWhen(r.started_at)), el("td", {}, fmtWhen(r.updated_at)), el("td", {}, r.owner || "?"),
              how, el("td", { class: "num" }, fmt(r.batches)), el("td", {}, txids),
              el("td", { class: "num" }, `${fmt(r.attempts)} · ${fmt(r.failed_attempts)}`),
              el("td", {}, r.stopped_because || ""), link);
    return tr;
  }));
}

function renderControls(s) {
  $("controls-section").hidden = !s.controls;
}

async function control(action) {
  const out = $("control-result");
  const token = $("control-token").value;
  if (action === "kill" && !window.confirm(`Kill the driver of ${last.topology}? It stops after its commit under way.`)) return;
  out.className = "muted";
  out.textContent = `${action}…`;
  try {
    const r = await fetch("/api/control", {
      method: "POST", cache: "no-store",
      headers: { "Content-Type": "application/json", "Authorization": `Bearer ${token}` },
      body: JSON.stringify({ topology: last.topology, action }),
    });
    const body = await r.json().catch(() => ({}));
    out.className = r.ok ? "ok" : "bad";
    out.textContent = r.ok ? `${action}: done (state ${body.state}${body.lock_holder ? `, driver ${body.lock_holder}` : ""})`
      : `${action} refused (HTTP ${r.status}): ${body.error || ""}`;
  } catch (e) {
    out.className = "bad";
    out.textContent = `${action} failed: ${e}`;
  }
}

// -- the loop ---------------------------------------------------------------------------------------
function render(s) {
  last = s;
  const fromState = s.mode === "history";
  $("plots").hidden = fromState;
  $("footer-live").hidden = fromState;
  $("footer-history").hidden = !fromState;
  if (fromState) $("coordination").textContent = s.coordination || "";
  renderHeader(s);
  renderControls(s);
  updateGraph(s);
  renderPipeline(s);
  if (!fromState) renderPlots(s);
  renderRuns(s);
  renderComponents(s);
  renderLag(s);
  renderErrors(s);
  renderExtras(s);
  renderUserMetrics(s);
  renderConfig(s);
  $("updated").textContent = `updated ${fmtWhen(Date.now() / 1000)}`;   // one clock format on the page
  document.body.dataset.ready = "1";
}

function statusUrl() {
  return "/api/status" + (topology ? `?topology=${encodeURIComponent(topology)}` : "");
}

async function refresh() {
  try {
    const r = await fetch(statusUrl(), { cache: "no-store" });
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    render(await r.json());
  } catch (e) {
    const phase = $("phase");
    phase.textContent = last && last.phase === "stopped" ? "stopped (server gone)" : "disconnected";
    phase.className = "badge " + (last && last.phase === "stopped" ? "stopped" : "disconnected");
  }
}

async function refreshTopologies() {
  try {
    const r = await fetch("/api/topologies", { cache: "no-store" });
    if (r.ok && last) renderTopologies(await r.json(), last.topology);
  } catch (e) { /* the next refresh says whether the server is gone */ }
}

window.addEventListener("resize", () => { if (last && last.mode !== "history") renderPlots(last); });
$("topology-select").addEventListener("change", (ev) => {
  topology = ev.target.value;
  history.replaceState(null, "", `?topology=${encodeURIComponent(topology)}`);
  graphKey = errorsKey = configKey = runsKey = null;
  refresh();
});
$("controls").addEventListener("submit", (ev) => {
  ev.preventDefault();
  control(ev.submitter ? ev.submitter.dataset.action : "");
});
// the first render: the status embedded in the page, before any request
if (INITIAL.status) {
  if (!topology) topology = INITIAL.status.topology;
  render(INITIAL.status);
  renderTopologies(INITIAL.topologies || [], INITIAL.status.topology);
}
const EVERY = INITIAL.status && INITIAL.status.mode === "history" ? 2000 : 1000;
if (!INITIAL.status) refresh();
setInterval(refresh, EVERY);
if (INITIAL.status && INITIAL.status.mode === "history") setInterval(refreshTopologies, 5000);
