"""Spark: the context, and the ``SparkExecutor`` the plan interpreter runs stages on.

Stage 0 runs the spout's P emitter tasks (every task gets the attempt and metadata: the
all-grouping of Storm's batch stream); every bolt is a ``partitionBy`` +
``mapPartitionsWithIndex`` stage of N partitions, partition = task. A task sends one
record per (consumer, consumer task, stream) holding all its tuples for it, so the
shuffle moves a few large records, not one per tuple. What flows into commit-phase
components is collected to the driver; failures, counters and opaque spouts' actual
metadata come back through an accumulator, as data (``transactional/engine/reports.py``).
"""

from __future__ import annotations

import dataclasses
import glob
import logging
import os
import re
import socket
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from pyspark import SparkConf, SparkContext, StorageLevel

from transactional.config import TopologyConfig
from transactional.engine.accumulator import ReportParam
from transactional.engine.executors import flatten, for_consumers, task_of
from transactional.engine.plan import Stage
from transactional.engine.reports import empty_report
from transactional.engine.spark_submit import Submitter
from transactional.engine.task_groups import InFlight, grouped_source, grouped_stage, spark_tasks
from transactional.exceptions import ConfigError
from transactional.topology import Topology

log = logging.getLogger("trident")


def _standalone_masters(master: str) -> list[tuple[str, str]]:
    """The (host, port) pairs of a ``spark://host:port[,host:port]`` master; [] for others."""
    if not master.startswith("spark://"):
        return []
    return [(hp.rpartition(":")[0], hp.rpartition(":")[2]) for hp in master.removeprefix("spark://").split(",")]


def _loopback_master(master: str) -> bool:
    """A local master, or a standalone master on this machine's loopback."""
    if master.startswith("local"):
        return True
    hosts = [h for h, _ in _standalone_masters(master)]
    return bool(hosts) and all(h in ("127.0.0.1", "localhost", "::1") for h in hosts)


def check_master_reachable(master: str, timeout: float = 3.0) -> None:
    """For ``spark://`` masters: at least one of the masters accepts a connection, else
    ``ConfigError`` naming them (Spark itself would retry for a minute, then print pages of
    stack traces)."""
    masters = _standalone_masters(master)
    if not masters:
        return
    tried = []
    for host, port in masters:
        try:
            socket.create_connection((host, int(port)), timeout=timeout).close()
            return
        except OSError as e:
            tried.append(f"{host}:{port} ({e.strerror or e})")
    msg = (f"cannot reach the Spark master {master}: {', '.join(tried)}. Start it (spark-class "
           "org.apache.spark.deploy.master.Master --host HOST --port PORT), or fix spark_master / --master")
    raise ConfigError(msg)


#: JVM options of a context this package creates for a ``local[...]`` master or a standalone
#: master on loopback (driver and executors; override with ``spark_conf``)
LOCAL_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseParallelGC"


def spark_app_name(topology_id: str) -> str:
    """The Spark application name of a topology's run: ``trident-<id>``, or the id itself
    when it already says trident (``trident-q``, not ``trident-trident-q``).

    >>> spark_app_name("words"), spark_app_name("trident-q")
    ('trident-words', 'trident-q')
    """
    return topology_id if topology_id.startswith("trident") else f"trident-{topology_id}"


def get_or_create_context(config: TopologyConfig, app_name: str = "trident") -> SparkContext:
    """The active SparkContext, or a new one for ``config.spark_master``: bound to loopback
    when the master is local or on loopback; the Spark UI on unless ``config.spark_ui`` is
    False (its address is logged)."""
    active = SparkContext._active_spark_context
    if active is not None:
        ship(active, config)
        return active
    check_master_reachable(config.spark_master)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    _prefer_java_17()
    conf = (SparkConf().setMaster(config.spark_master).setAppName(config.app_name or app_name)
            .set("spark.ui.enabled", "true" if config.spark_ui else "false")
            .set("spark.ui.showConsoleProgress", "false")
            .set("spark.executorEnv.PYTHONHASHSEED", "0")
            .set("spark.python.task.killTimeout", "1s")
            .set("spark.scheduler.mode", "FAIR"))
    # Python workers talk to their executor over a Unix domain socket (Spark 4.1+; an
    # unknown setting before): a trivial 2-task job takes about 50 ms instead of 90 here
    conf.set("spark.python.unix.domain.socket.enabled", "true")
    _on_this_machine(conf, config)
    if config.archives:
        conf.set("spark.archives", ",".join(config.archives))
    for k, v in config.spark_conf.items():
        conf.set(k, v)
    sc = SparkContext(conf=conf)
    sc.setLogLevel("ERROR")
    if sc.uiWebUrl:
        log.info("Spark UI of %s (master %s): %s", sc.appName, sc.master, sc.uiWebUrl)
    ship(sc, config, archives=False)
    return sc


def _prefer_java_17() -> None:
    """Spark 4 runs on Java 17/21: prefer 17 when present and ``JAVA_HOME`` is not set."""
    if "JAVA_HOME" not in os.environ:
        for jdk in sorted(glob.glob("/usr/lib/jvm/java-17-openjdk-*")):
            os.environ["JAVA_HOME"] = jdk
            break


def _on_this_machine(conf: SparkConf, config: TopologyConfig) -> None:
    """The settings of a master on this machine (loopback, local): bind to loopback, the
    JVMs' options, the workers' interpreter, the forking daemon."""
    if _loopback_master(config.spark_master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")   # loopback only, before the JVM starts
        conf.set("spark.driver.host", "127.0.0.1").set("spark.driver.bindAddress", "127.0.0.1")
        # every JVM on this machine, spending its CPU on many small jobs: C2's compilations
        # and G1's concurrent threads cost more than they return (the columnar word count
        # on local[2]: 2.5-3.1M -> 3.7-3.9M words/s, docs/performance.md)
        conf.set("spark.driver.extraJavaOptions", LOCAL_JAVA_OPTIONS)
        if not config.spark_master.startswith("local"):
            conf.set("spark.executor.extraJavaOptions", LOCAL_JAVA_OPTIONS)
        # the topology's broadcast crosses no network here: compressing it only costs (a spout
        # holding 60 MB of Arrow tables started its first batch 0.1-0.2 s later with it)
        conf.set("spark.broadcast.compress", "false")
    if _loopback_master(config.spark_master):
        # workers on this machine run this very interpreter (a virtualenv's python need not be
        # the python3 on PATH, which Spark would start: cron, systemd and IDEs run
        # .venv/bin/trident without activating it), unless PYSPARK_PYTHON or
        # spark.pyspark.python says otherwise (pyspark reads only the environment variable,
        # and sends it with every task: executors start that interpreter)
        chosen = config.spark_conf.get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON")
        os.environ["PYSPARK_PYTHON"] = chosen or sys.executable
    if config.spark_master.startswith("local"):
        conf.set("spark.python.daemon.module", "transactional.engine.daemon")   # import once, fork
        if log.isEnabledFor(logging.DEBUG):        # the workers' broken pipes, when jobs are cancelled
            os.environ["TRIDENT_WORKER_DEBUG"] = "1"


def worker_python(sc: SparkContext) -> str:
    """The interpreter Spark starts its Python workers with, as Spark chooses it."""
    chosen = getattr(sc, "pythonExec", None) or os.environ.get("PYSPARK_PYTHON")
    return chosen if chosen and chosen != "python3" else "python3 (the first on the workers' PATH)"


_NO_PROJECT = re.compile(r"No module named '(transactional|trident|spouts|state)'|"
                         r"finding module specification for '(transactional|trident)\.")


def worker_import_error(sc: SparkContext, text: str) -> str | None:
    """If ``text`` (a failed job's error) says Spark's Python workers could not import this
    project, a message naming the interpreter they ran and the fix; else None."""
    if not _NO_PROJECT.search(text):
        return None
    return (f"Spark's Python workers cannot import spark-trident: they run {worker_python(sc)}, which "
            f"does not have it installed (this driver runs {sys.executable}). Install spark-trident "
            "into that interpreter, or point the workers at one that has it: PYSPARK_PYTHON=... or "
            "TopologyConfig(spark_conf={'spark.pyspark.python': ...}); on a cluster, ship an environment "
            "with --archives (docs/cluster.md)")


_UNPICKLABLE = re.compile(r"PicklingError: (?:Could not serialize object: )?(.*)")


def unpicklable_output(text: str) -> str | None:
    """If ``text`` (a failed job's error) says Spark could not pickle what a task emitted
    (the same on every attempt), a message naming the value's error and the fix; else None."""
    m = _UNPICKLABLE.search(text)
    if m is None:
        return None
    return (f"a value emitted between stages cannot be pickled ({m.group(1).strip()}): tuples cross Spark "
            "stages as pickles, so emit plain values (str, int, float, bytes, lists, dicts, dataclasses) and keep "
            "locks, connections and clients in the component, made in prepare()")


_SHIPPED: set[tuple[int, str]] = set()


def ship(sc: SparkContext, config: TopologyConfig, archives: bool = True) -> None:
    """Add ``config.py_files`` (and ``archives``) to ``sc`` once each, for its executors."""
    for path in config.py_files:
        if (id(sc), path) not in _SHIPPED:
            sc.addPyFile(path)
            _SHIPPED.add((id(sc), path))
    for path in config.archives if archives else ():
        if (id(sc), path) not in _SHIPPED:
            sc.addArchive(path)
            _SHIPPED.add((id(sc), path))


def _with_parts(rdd: Any, parts: int) -> Any:
    """``rdd``, knowing it has ``parts`` partitions (``_parts``)."""
    rdd._trident_parts = parts
    return rdd


def _parts(rdd: Any) -> int:
    """The partitions of ``rdd``: as this executor made it (no Py4J call), else asked of the JVM."""
    known = getattr(rdd, "_trident_parts", None)
    return int(known) if known is not None else int(rdd.getNumPartitions())


class SparkExecutor:
    """Stages as Spark RDDs: the spout's emitters are ``parallelize(range(P), P)`` mapped
    by task, a bolt is ``partitionBy(N)`` (partition = task; skipped for
    ``local_or_shuffle``) then ``mapPartitionsWithIndex``. One job per attempt and phase,
    in its own job group, described "txid N attempt A (processing|commit)" in the Spark UI.
    Reports come back through an accumulator. While several jobs run at once, a spout
    stage and the ``local_or_shuffle`` stages behind it run as fewer Spark tasks, each
    carrying several logical tasks (``transactional.engine.task_groups``)."""

    def __init__(self, sc: SparkContext) -> None:
        self.sc = sc
        self._local = threading.local()
        #: Spark 4 can cancel the jobs a group submits after the cancel
        self._future_jobs = int(sc.version.split(".")[0]) >= 4
        self._cores = sc.defaultParallelism
        self._in_flight = InFlight()
        self._submit = Submitter(sc)

    def begin(self, group: str, description: str) -> None:
        self.sc.setJobGroup(group, description, interruptOnCancel=True)
        self._local.persisted = []
        self._in_flight.begin()

    def shared(self, topology: Topology) -> Any:
        # executors load each component's ``blob``; ``driver_blob`` is for this process, and so
        # is a core topology's spout (its tasks run on the driver)
        slim = dataclasses.replace(topology, components=tuple(
            dataclasses.replace(c, driver_blob=b"", origin="",
                                blob=b"" if topology.core and c.kind == "spout" else c.blob)
            for c in topology.components))
        return self.sc.broadcast(slim)

    def accumulator(self) -> Any:
        return self.sc.accumulator(empty_report(), ReportParam())

    def source(self, stage: Stage, fn: Callable[[int, Iterable[Any]], Iterator[Any]]) -> Any:
        n = stage.parallelism
        parts = spark_tasks(n, self._cores, self._in_flight.count())
        # a new RDD each batch: one RDD read by every batch's job made each job's tasks run
        # 4-5x longer here (≈200 against ≈50 ms a small batch; docs/performance.md)
        out = self.sc.parallelize(range(parts), parts).mapPartitionsWithIndex(
            grouped_source(fn, n, parts) if parts < n else fn)
        return _with_parts(out, parts)

    def records(self, stage: Stage, parts: list[list[Any]]) -> Any:
        return _with_parts(self.sc.parallelize(parts, len(parts)).flatMap(flatten), len(parts))

    def select(self, data: Any, consumers: frozenset[int]) -> Any:
        return _with_parts(data.filter(for_consumers(consumers)), _parts(data))

    def stage(self, stage: Stage, inputs: Sequence[Any], fn: Callable[[int, Iterable[Any]], Iterator[Any]],
              combine: Callable[[list[Any]], list[Any]] | None = None) -> Any:
        u = inputs[0] if len(inputs) == 1 else self.sc.union(list(inputs))
        if not stage.local:   # local_or_shuffle: task i reads task i, no shuffle
            u = u.partitionBy(stage.parallelism, task_of)
        elif (parts := _parts(u)) < stage.parallelism:   # its source's tasks run grouped
            fn = grouped_stage(fn, stage.parallelism, parts, combine)
        return _with_parts(u.mapPartitionsWithIndex(fn), stage.parallelism if not stage.local else _parts(u))

    def persist(self, data: Any) -> None:
        data.persist()
        self._local.persisted.append(data)

    def collect(self, datasets: Sequence[Any]) -> list[Any]:
        final = datasets[0] if len(datasets) == 1 else self.sc.union(list(datasets))
        return self._submit.collect(final)

    def keep(self, datasets: Sequence[Any]) -> Any:
        final = datasets[0] if len(datasets) == 1 else self.sc.union(list(datasets))
        final.persist(StorageLevel.MEMORY_AND_DISK)
        final.count()
        return final

    def materialize(self, data: Any) -> Any:
        data.persist(StorageLevel.MEMORY_AND_DISK)
        data.count()
        self._local.persisted.append(data)
        return data

    def release(self, kept: Any) -> None:
        try:
            kept.unpersist(blocking=False)
        except Exception:  # noqa: BLE001 - the context may be gone already
            pass

    def end(self) -> None:
        self._in_flight.end()
        for r in getattr(self._local, "persisted", ()):
            r.unpersist(blocking=False)
        self._local.persisted = []

    def cancel(self, group: str) -> None:
        """Cancel the jobs of ``group``, those it submits later included: an attempt's thread
        may not have submitted its job yet when the attempt is cancelled (Spark 4's
        ``cancelJobGroupAndFutureJobs``; before it, the jobs running now)."""
        jsc = self.sc._jsc.sc()
        if self._future_jobs:
            jsc.cancelJobGroupAndFutureJobs(group)
        else:
            jsc.cancelJobGroup(group)

    def explain(self, error: str) -> str | None:
        return worker_import_error(self.sc, error) or unpicklable_output(error)
