"""Kafka record produced -> its count committed in Redis: p50/p99 at a fixed offered rate,
for spark-trident and the peers on the same broker and Redis (docs/performance.md,
"Latency: Kafka to Redis"). Run through ``python benchmarks/latency.py --bench kafka``.

The harness (this process) owns the clock: a producing process of its own (``--produce``)
sends ``--rate`` records/s to a fresh 4-partition topic, each record a reference sentence (``make_corpus``) plus a
marker word ``mark<partition>``, and notes the time of each ``produce()`` (a case whose
producer reached less than 90% of the offered rate says ``"valid": false``); a reader thread
asks Redis every 0.5 ms for the four markers' counts. Every system counts every word of
every record exactly once, markers included, and commits a batch's counts atomically, so
when ``mark<p>`` goes from c to c' the records c .. c'-1 of partition p became committed
now: their latency is now less their produce time. The system under test runs in its own
process (``--system``): ``trident`` (this file, ``serve_trident``), ``bytewax``
(``peers/bytewax_kafka_latency.py``), ``sss`` / ``sss-realtime``
(``peers/structured_streaming_kafka_latency.py``). It prints one JSON line with
``"ready"`` once warm and where its counts are; at exit it writes its breakdown to
``--out``. The first ``--warmup`` seconds of records are produced and counted but not
measured. ``time.monotonic`` is one clock for all processes on this machine, so the
systems' own timestamps join the harness's records.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Any

import proc_cpu
import redis

HERE = os.path.dirname(os.path.abspath(__file__))
PARTITIONS = 4
MARKS = [f"mark{p}" for p in range(PARTITIONS)]
#: a case is the system's figure at the offered rate only if the producer's records reached
#: the broker at no less than this share of it (its final flush included)
VALID_SHARE = 0.9
#: the producer asks the broker's acknowledgement of about this many records a second (``ack_p50_ms``)
ACK_SAMPLES_PER_SEC = 500
#: what every case's line says of how it was measured (docs/performance.md, "Latency: Kafka to Redis")
METHOD = ("a fresh broker (Tansu) and redis-server per case; latency = a record's produce() call (paced "
          "producer, a process of its own) -> its count visible in Redis; valid when the records reached the "
          f"broker at >= {VALID_SHARE:.0%} of the offered rate; every process at the same priority")
SCRIPTS = {"trident": [os.path.join(HERE, "latency_kafka.py"), "--serve"],
           "bytewax": [os.path.join(HERE, "peers", "bytewax_kafka_latency.py")],
           "sss": [os.path.join(HERE, "peers", "structured_streaming_kafka_latency.py")],
           "sss-realtime": [os.path.join(HERE, "peers", "structured_streaming_kafka_latency.py"), "--realtime"]}


def is_valid(achieved: float, offered: float) -> bool:
    """True when the producer reached at least ``VALID_SHARE`` of the offered rate: below
    that the records reached the broker late and the figure includes that backlog."""
    return offered > 0 and achieved >= VALID_SHARE * offered


def pct(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (nearest rank) of ``values`` (seconds), in ms."""
    if not values:
        return None
    s = sorted(values)
    return round(s[max(0, -(-len(s) * q // 100) - 1)] * 1000, 1)


class Producer:
    """Sends ``total`` records at ``rate``/s round-robin over the partitions from a process
    of its own (``--produce``: the harness's reader thread and the system under test do not
    slow it); ``stamps[p][i]`` is the monotonic time record i of partition p was handed to
    the client. ``started``/``ended``: its first ``produce()`` and the end of its flush;
    ``achieved`` the records/s that reached the broker over that time."""

    def __init__(self, bootstrap: str, topic: str, rate: int, total: int) -> None:
        self.bootstrap, self.topic, self.rate, self.total = bootstrap, topic, rate, total
        self.stamps: list[list[float]] = [[] for _ in range(PARTITIONS)]
        self.started = self.ended = 0.0
        self.proc: subprocess.Popen[str] | None = None
        self.report: dict[str, Any] = {}

    def start(self) -> None:
        """Start the producing process; returns once it produces."""
        fd, self.path = tempfile.mkstemp(prefix="lat-stamps-", suffix=".bin")
        os.close(fd)
        cmd = [sys.executable, os.path.join(HERE, "latency_kafka.py"), "--produce", "--bootstrap", self.bootstrap,
               "--topic", self.topic, "--rate", str(self.rate), "--records", str(self.total), "--out", self.path]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert self.proc.stdout is not None
        self.started = float(json.loads(self.proc.stdout.readline())["started"])

    def join(self, timeout: float | None = None) -> None:
        """Wait for the process; load its stamps."""
        assert self.proc is not None and self.proc.stdout is not None
        self.report = json.loads(self.proc.stdout.readline() or "{}")
        self.proc.wait(timeout)
        self.ended = float(self.report.get("ended", time.monotonic()))
        from array import array
        with open(self.path, "rb") as f:
            for p in range(PARTITIONS):
                a = array("d")
                n = int(self.report["per_partition"][p])
                a.fromfile(f, n)
                self.stamps[p].extend(a.tolist())
        os.unlink(self.path)

    def run(self) -> None:
        """Produce and wait (the primer)."""
        self.start()
        self.join(60)

    @property
    def achieved(self) -> float:
        return self.total / max(1e-9, self.ended - self.started)


def produce_paced(bootstrap: str, topic: str, rate: int, total: int, out: str) -> None:
    """The producing process (``--produce``): prints ``{"started": t0}``, sends, flushes,
    writes each partition's stamps (float64, partition after partition) to ``out`` and prints
    ``{"ended": t, "per_partition": [...]}``."""
    from array import array

    from confluent_kafka import Producer as KProducer

    from transactional.testing import make_corpus

    values = [s.encode() for s in make_corpus(20_000)]
    p = KProducer({"bootstrap.servers": bootstrap, "linger.ms": 1, "enable.idempotence": False,
                   "queue.buffering.max.messages": 2_000_000})
    marks = [f" {m}".encode() for m in MARKS]
    stamps = [array("d") for _ in range(PARTITIONS)]
    acks: list[float] = []           # produce() -> the broker's acknowledgement, s, of every ``every``-th record
    every = max(1, rate // ACK_SAMPLES_PER_SEC)
    produce, n = p.produce, len(values)
    sent, t0 = 0, time.monotonic()
    print(json.dumps({"started": t0}), flush=True)
    while sent < total:
        now = time.monotonic()
        due = min(total, int((now - t0) * rate) + 1)
        while sent < due:
            part = sent % PARTITIONS
            if sent % every:
                produce(topic, values[sent % n] + marks[part], partition=part)
            else:
                produce(topic, values[sent % n] + marks[part], partition=part,
                        on_delivery=lambda err, msg, at=now: acks.append(time.monotonic() - at))
            stamps[part].append(now)
            sent += 1
        p.poll(0)
        time.sleep(0.0005)
    p.flush(120)
    ended = time.monotonic()
    with open(out, "wb") as f:
        for a in stamps:
            a.tofile(f)
    use = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"ended": ended, "per_partition": [len(a) for a in stamps], "ack_p50_ms": pct(acks, 50),
                      "ack_p99_ms": pct(acks, 99), "cpu_secs": round(use.ru_utime + use.ru_stime, 2)}), flush=True)


class Reader(threading.Thread):
    """Polls the four markers' committed counts; ``seen`` is (time, partition, first, end)
    per change, ``latencies`` (produce -> seen, s) with the record's produce time."""

    def __init__(self, url: str, where: dict[str, Any], producer: Producer, total: int) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url)
        self.where, self.producer, self.total = where, producer, total
        self.counts = [0] * PARTITIONS
        self.seen: list[tuple[float, int, int, int]] = []
        self.done = threading.Event()
        self.stop = False

    def read(self) -> list[int]:
        if "hash" in self.where:
            got = self.client.hmget(self.where["hash"], MARKS)
        else:
            got = self.client.mget(self.where["keys"])
        return [int(v) if v is not None else 0 for v in got]

    def run(self) -> None:
        while not self.stop:
            now_counts = self.read()
            now = time.monotonic()
            for p, c in enumerate(now_counts):
                if c > self.counts[p]:
                    self.seen.append((now, p, self.counts[p], c))
                    self.counts[p] = c
            if sum(self.counts) >= self.total:
                self.done.set()
                return
            if self.stop:
                return
            time.sleep(0.0005)


def _start(system: str, bootstrap: str, topic: str, url: str, total: int, out: str,
           extra: list[str]) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    cmd = [sys.executable, *SCRIPTS[system], "--bootstrap", bootstrap, "--topic", topic, "--redis", url,
           "--records", str(total), "--out", out, *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("{") and '"ready"' in line:
            ready = json.loads(line)
            if not ready["ready"]:
                proc.wait()
                raise RuntimeError(ready.get("error", "not ready"))
            return proc, ready
    msg = f"{system} exited ({proc.wait()}) before it was ready"
    raise RuntimeError(msg)


def run_case(system: str, rate: int, seconds: float, warmup: float, bootstrap: str, url: str,
             extra: list[str] | None = None, servers: dict[str, list[int]] | None = None) -> dict[str, Any]:
    """One (system, rate) case: the JSON line's dict. ``servers``: role -> pids of the
    broker and Redis, whose cores the line reports with the system's and the producer's."""
    from transactional.testing.kafka import create_topic

    topic = f"latency-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, PARTITIONS)
    redis.Redis.from_url(url).flushdb()
    total = int(rate * (warmup + seconds))
    load0 = os.getloadavg()
    with tempfile.NamedTemporaryFile(prefix=f"lat-{system}-", suffix=".json", delete=False) as f:
        out = f.name
    proc, ready = _start(system, bootstrap, topic, url, total + PARTITIONS, out, extra or [])
    try:
        primer = _prime(system, proc, bootstrap, topic, url, ready)
        producer = Producer(bootstrap, topic, rate, total)
        producer.stamps = [list(x) for x in primer.stamps]
        reader = Reader(url, ready, producer, total + PARTITIONS)
        reader.counts = [1] * PARTITIONS
        reader.start()
        producer.start()
        usage = Usage({"system": [proc.pid], **(servers or {})})
        deadline = time.monotonic() + warmup + seconds + 120
        while not reader.done.wait(0.5) and proc.poll() is None and time.monotonic() < deadline:
            pass
        cores = usage.cores()
        finished = reader.done.is_set()
        reader.stop = True
        reader.join()
        producer.join(180)
    finally:
        _end(proc)
    try:
        with open(out) as fh:
            own = json.load(fh)
    except (OSError, ValueError):
        own = {}
    os.unlink(out)
    line = _figures(system, rate, seconds, warmup, producer, reader, own)
    cores["producer"] = round(float(producer.report.get("cpu_secs", 0.0)) / max(1e-9, producer.ended - producer.started), 2)
    load1 = os.getloadavg()
    line.update({"completed": finished, "records_committed": sum(reader.counts) - PARTITIONS, "records": total,
                 "ack_p50_ms": producer.report.get("ack_p50_ms"), "ack_p99_ms": producer.report.get("ack_p99_ms"),
                 "cpu_cores": cores, "load_1min_before": round(load0[0], 2), "load_1min_after": round(load1[0], 2),
                 "load_before": [round(x, 2) for x in load0], "load_after": [round(x, 2) for x in load1],
                 "method": METHOD, "system_config": ready.get("config")})
    return line


def _prime(system: str, proc: subprocess.Popen[str], bootstrap: str, topic: str, url: str,
           ready: dict[str, Any]) -> Producer:
    """A primer record a partition, committed before the clock starts: every system has run
    its first batch (query start, workers, broadcast) before anything is measured."""
    primer = Producer(bootstrap, topic, 10_000, PARTITIONS)
    primer.run()
    reader = Reader(url, ready, primer, PARTITIONS)
    reader.start()
    deadline = time.monotonic() + 300
    while not reader.done.wait(0.5) and proc.poll() is None and time.monotonic() < deadline:
        pass
    reader.stop = True
    if not reader.done.is_set():
        said = [json.loads(x).get("error") for x in (proc.stdout.read() if proc.poll() is not None and proc.stdout
                                                     else "").splitlines() if x.startswith('{"ready": false')]
        msg = f"{system} did not commit the primer records (exit code {proc.poll()}){': ' if said else ''}{said}"
        raise RuntimeError(msg)
    return primer


def _end(proc: subprocess.Popen[str]) -> None:
    """Each system ends by itself once all is committed; else terminate, then kill."""
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Usage:
    """Cores used from now to ``cores()`` by each role's process trees (``proc_cpu``) and
    by the harness itself (its reader thread)."""

    def __init__(self, roles: dict[str, list[int]]) -> None:
        self.roles, self.before, self.own = roles, proc_cpu.snapshot(), os.times()

    def cores(self) -> dict[str, float]:
        after, own = proc_cpu.snapshot(), os.times()
        out = proc_cpu.used(self.before, after, self.roles)
        wall = max(1e-9, after.at - self.before.at)
        out["harness"] = round((own.user + own.system - self.own.user - self.own.system) / wall, 2)
        return out


def _figures(system: str, rate: int, seconds: float, warmup: float, producer: Producer, reader: Reader,
             own: dict[str, Any]) -> dict[str, Any]:
    """Latencies of the measured records (produced after the warm-up) and the breakdown."""
    t_measure = producer.started + warmup
    lat: list[float] = []
    parts: dict[str, list[float]] = {}
    batches = own.get("batches", [])         # [{committed, and the stage times, in monotonic s}]
    commits = sorted(batches, key=lambda b: b["committing"])   # a batch's counts show during its commit
    ci = 0
    for at, p, first, end in reader.seen:
        while ci + 1 < len(commits) and commits[ci + 1]["committing"] <= at:
            ci += 1
        batch = commits[ci] if commits and commits[ci]["committing"] <= at else None
        for i in range(first, end):
            made = producer.stamps[p][i]
            if made < t_measure:
                continue
            lat.append(at - made)
            if batch is not None:
                for k, v in _split(batch, made, at).items():
                    parts.setdefault(k, []).append(v)
    line: dict[str, Any] = {"benchmark": "latency-kafka", "system": system, "offered_per_sec": rate,
                            "seconds": seconds, "measured": len(lat),
                            "achieved_per_sec": round(producer.achieved),
                            "valid": is_valid(producer.achieved, rate),
                            "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "max_ms": pct(lat, 100)}
    line["breakdown_p50_ms"] = {k: pct(v, 50) for k, v in parts.items()}
    line["summary_p50_ms"] = {g: round(sum(line["breakdown_p50_ms"].get(k) or 0.0 for k in ks), 1)
                              for g, ks in GROUPS.items() if any(k in parts for k in ks)}
    line.update({k: v for k, v in own.items() if k != "batches"})
    return line


#: the breakdown's steps by what they are: waiting for a plan, planning, the batch's job
#: (launch, Spark, the result), the commit until the counts are visible
GROUPS = {"polling_waiting": ("polling_waiting",), "planning": ("planning",),
          "job": ("launching", "driver_to_spark_job", "spark_scheduling", "spark_stages", "spark_job_end",
                  "result_to_coordinator", "batch_job"),
          "commit": ("queued_for_commit", "commit_until_visible")}


def _split(batch: dict[str, Any], made: float, seen: float) -> dict[str, float]:
    """One record's time by step, from its batch's stamps: each step ends at the stamp
    named, the first starts at the record's production, the last ends when the reader saw
    the count (during the commit: the state is written before the commit is recorded)."""
    out: dict[str, float] = {}
    prev = made
    for name, key in (("polling_waiting", "plan_started"), ("planning", "planned"),
                      ("launching", "launched"), ("driver_to_spark_job", "job_submitted"),
                      ("spark_scheduling", "stage_started"), ("spark_stages", "stages_ended"),
                      ("spark_job_end", "job_ended"), ("result_to_coordinator", "processed"),
                      ("batch_job", "counted"),
                      ("queued_for_commit", "committing")):
        at = batch.get(key)
        if at is None:
            continue
        out[name] = max(0.0, at - prev)
        prev = max(prev, at)
    out["commit_until_visible"] = max(0.0, seen - prev)
    if "task_run_ms" in batch:
        out["task_run"] = batch["task_run_ms"] / 1000
    return out


def run_all(systems: list[str], rates: list[int], seconds: float, warmup: float,
            extra: dict[str, list[str]] | None = None) -> list[dict[str, Any]]:
    """Every (rate, system) case, one JSON line each (printed, and returned), rate by rate
    so that the systems at one rate are measured side by side. Each case gets a broker and
    a redis-server of its own: Tansu keeps every record in memory and its work per fetch
    grows with what it holds, so a shared broker made each case slower than the last
    (docs/performance.md, "Latency: Kafka to Redis")."""
    lines = []
    for rate in rates:
        for system in systems:
            load0 = os.getloadavg()
            try:
                line = _fresh_case(system, rate, seconds, warmup, (extra or {}).get(system))
            except Exception as e:  # noqa: BLE001 - a peer that cannot run says why, the rest go on
                line = {"benchmark": "latency-kafka", "system": system, "offered_per_sec": rate,
                        "error": f"{type(e).__name__}: {e}", "valid": False,
                        "load_1min_before": round(load0[0], 2), "load_1min_after": round(os.getloadavg()[0], 2),
                        "method": METHOD}
            print(json.dumps(line), flush=True)
            lines.append(line)
    return lines


def _fresh_case(system: str, rate: int, seconds: float, warmup: float, extra: list[str] | None) -> dict[str, Any]:
    """``run_case`` on a broker and a redis-server started for it (and destroyed after)."""
    from transactional.testing.kafka import ManagedKafka
    from transactional.testing.redis import ManagedRedis

    broker = ManagedKafka().start()
    server = ManagedRedis(appendonly=False).start()
    try:
        pids = {"broker": [broker.proc.pid] if broker.proc else [], "redis": [server.proc.pid] if server.proc else []}
        return run_case(system, rate, seconds, warmup, broker.bootstrap, server.url, extra, pids)
    finally:
        server.destroy()
        broker.destroy()


# -- the system under test: spark-trident ---------------------------------------------------------

def serve_trident(args: Any) -> None:
    """The Kafka word count as a user writes it (Trident, ``parallelism_hint(2)``, the
    columnar split, ``counters`` in Redis), run with ``TopologyConfig`` defaults but for
    ``--poll-interval`` and ``--on-driver``; stamps every batch's transitions and the Spark jobs' times."""
    sys.path.insert(0, HERE)
    from kafka_wordcount import build_trident

    from transactional import TopologyConfig
    from transactional.engine import driver
    from transactional.engine.spark import get_or_create_context
    from transactional.ops.run import OperatorWatch

    tid = f"latency-{uuid.uuid4().hex[:8]}"
    overrides: dict[str, Any] = {"poll_interval_secs": args.poll_interval} if args.poll_interval is not None else {}
    if args.launch_policy is not None:
        overrides["launch_policy"] = args.launch_policy
    if args.on_driver != "default":
        overrides["driver_batch_max_records"] = None if args.on_driver == "auto" else int(args.on_driver)
    cfg = TopologyConfig(spark_master=args.master, spark_ui=False, state=args.redis, progress=False,
                         idle_timeout_secs=args.idle_secs, max_spout_pending=args.max_spout_pending, **overrides)
    sc = get_or_create_context(cfg)
    sc.parallelize(range(4), 2).count()
    topo = build_trident(tid, args.bootstrap, args.topic, args.batch, args.parallelism, 1, True)
    stamps: dict[int, dict[str, float]] = {}

    def listen(t: Any) -> None:
        if t.kind in ("launched", "processed", "committing", "committed"):
            d = stamps.setdefault(t.txid, {})
            d[t.kind] = t.at
            if t.kind == "committed":
                d.update({k: t.info[k] for k in ("processing_secs", "commit_secs") if k in t.info})

    class Watch(OperatorWatch):
        def started(self, engine: Any) -> None:
            super().started(engine)
            engine.listeners.append(listen)

    rounds = _time_planning()
    keys = [f"{tid}:word-counts:{m}" for m in MARKS]
    print(json.dumps({"ready": True, "keys": keys, "config": {
        "parallelism_hint": args.parallelism, "max_spout_pending": cfg.max_spout_pending,
        "launch_policy": getattr(cfg, "launch_policy", "eager"),
        "poll_interval_secs": cfg.poll_interval_secs, "batch_records_max": args.batch,
        "master": args.master}}), flush=True)
    jobs0 = _spark_jobs(sc, None)
    r = driver.run_topology(topo, cfg, None, spark_context=sc, watch=Watch())
    spark = _spark_jobs(sc, jobs0)
    batches = [{"txid": t, **d, **spark.get(t, {}), **_round_before(rounds, d["launched"])}
               for t, d in sorted(stamps.items()) if "committed" in d and "launched" in d]
    own = {"batches": batches, "batches_committed": r.batches_committed,
           # a batch processed in the driver's process has no Spark job
           "driver_batches": sum(1 for b in batches if "job_submitted" not in b)}
    with open(args.out, "w") as f:
        json.dump(own, f)


def _time_planning() -> list[list[float]]:
    """Times the Kafka spout's planning on the driver: each round (``num_partitions`` then
    one ``plan_partition`` per partition: a ListOffsets each) as ``[start, end]``."""
    from spouts.kafka import KafkaTransactionalSpout

    rounds: list[list[float]] = []
    make = KafkaTransactionalSpout.get_coordinator

    def timed(self: Any, conf: Any, context: Any) -> Any:
        c = make(self, conf, context)
        count, plan = c.num_partitions, c.plan_partition

        def num_partitions() -> int:
            rounds.append([time.monotonic(), time.monotonic()])
            return int(count())

        def plan_partition(p: int, last: Any) -> Any:
            out = plan(p, last)
            rounds[-1][1] = time.monotonic()
            return out
        c.num_partitions, c.plan_partition = num_partitions, plan_partition
        return c
    KafkaTransactionalSpout.get_coordinator = timed  # type: ignore[method-assign]
    return rounds


def _round_before(rounds: list[list[float]], launched: float) -> dict[str, float]:
    """The planning round that ended last before ``launched``."""
    best = [r for r in rounds if r[1] <= launched]
    return {"plan_started": best[-1][0], "planned": best[-1][1]} if best else {}


_TXID = re.compile(r"txid (\d+) attempt \d+ \(processing\)")


def _spark_jobs(sc: Any, before: set[int] | None) -> Any:
    """With ``before`` None, the ids of Spark's jobs so far; else each later processing job's
    times by txid (monotonic s, from Spark's status store): ``job_submitted``,
    ``stage_started`` (its first stage), ``stages_ended`` (its last), ``job_ended``, and
    ``task_run_ms`` (the stages' executor run time per task)."""
    store = sc._jsc.sc().statusStore()
    jobs = store.jobsList(None)
    if before is None:
        return {jobs.apply(i).jobId() for i in range(jobs.size())}
    shift = time.monotonic() - time.time()       # Spark's times are epoch ms
    out: dict[int, dict[str, float]] = {}
    for i in range(jobs.size()):
        j = jobs.apply(i)
        desc = j.description()
        m = None if desc.isEmpty() else _TXID.search(str(desc.get()))
        if j.jobId() in before or m is None or j.submissionTime().isEmpty() or j.completionTime().isEmpty():
            continue
        d = out[int(m.group(1))] = {"job_submitted": j.submissionTime().get().getTime() / 1000 + shift,
                                    "job_ended": j.completionTime().get().getTime() / 1000 + shift}
        ids = j.stageIds()
        firsts, lasts, run = [], [], 0.0
        for sid in (ids.apply(k) for k in range(ids.size())):
            for s in _stages(store, sid):
                if not s.submissionTime().isEmpty() and not s.completionTime().isEmpty():
                    firsts.append(s.submissionTime().get().getTime() / 1000 + shift)
                    lasts.append(s.completionTime().get().getTime() / 1000 + shift)
                    run += s.executorRunTime() / max(1, s.numCompleteTasks())
        if firsts:
            d.update(stage_started=min(firsts), stages_ended=max(lasts), task_run_ms=run)
    return out


def _stages(store: Any, sid: int) -> list[Any]:
    try:
        return [store.lastStageAttempt(sid)]
    except Exception:  # noqa: BLE001 - a stage the store no longer keeps (or never ran: skipped)
        return []


def main_serve() -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--serve", action="store_true")
    ap.add_argument("--produce", action="store_true", help="be the producing process (Producer)")
    ap.add_argument("--rate", type=int, default=0)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--redis")
    ap.add_argument("--records", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--max-spout-pending", type=int, default=3)
    ap.add_argument("--launch-policy", choices=["adaptive", "eager"], default=None,
                    help="TopologyConfig.launch_policy (default: TopologyConfig's)")
    ap.add_argument("--batch", type=int, default=50_000, help="at most this many records a batch")
    ap.add_argument("--poll-interval", type=float, default=None, help="default: TopologyConfig's")
    ap.add_argument("--idle-secs", type=float, default=3.0)
    ap.add_argument("--on-driver", default="default",
                    help="driver_batch_max_records: 'default' (TopologyConfig's), 'auto', or N (0: every batch on Spark)")
    args = ap.parse_args()
    if args.produce:
        produce_paced(args.bootstrap, args.topic, args.rate, args.records, args.out)
    else:
        serve_trident(args)


if __name__ == "__main__":
    main_serve()
