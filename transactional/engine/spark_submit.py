"""A batch's processing job submitted to Spark with few Py4J calls (docs/design.md,
"Execution on Spark").

A small batch's job is one PySpark ``PipelinedRDD`` (its narrow stages pipelined into one
Python function) and a ``collect``. PySpark's ``collect`` builds the RDD on the JVM with
≈25 Py4J round trips a job: a reflection call for each JVM class and static method it
names, the Python workers' environment and includes converted to a Java map and list
again, the broadcasts' list, the call site set and reset, the result's socket read out of
a Java array. Each costs 0.1–0.8 ms here, more when the machine is busy, and the Java
objects they leave are deleted with more calls later. ``Submitter.collect`` does the same
with what does not change between jobs made once: the JVM classes and methods, the
environment, the includes, the broadcasts' list per set of broadcasts, and the Scala RDD
of an input many jobs read (``remember``; the engine's spout input stays a new RDD a
batch: docs/design.md). What reaches the JVM is what PySpark sends: the same pickled
function, environment, includes, broadcasts, job.

For any other RDD (not pipelined, already built, a barrier, profiled), or a PySpark
without these internals, it is PySpark's ``collect``.
"""

from __future__ import annotations

import importlib
import logging
import threading
from typing import Any

log = logging.getLogger("trident")

#: the broadcasts' lists kept (each with the Python broadcasts its key names: ids stay unique)
_MAX_CACHED = 4


class Submitter:
    """Collects PySpark RDDs of ``sc`` (thread-safe: jobs of several threads at once). One
    per run's executor: what it keeps (a run's broadcasts) goes with it."""

    def __init__(self, sc: Any) -> None:
        self.sc = sc
        self._lock = threading.Lock()
        self._env: tuple[Any, Any] | None = None               # (key, Java map and list)
        self._broadcasts: dict[tuple[int, ...], tuple[list[Any], Any]] = {}
        self._parents: dict[int, tuple[Any, Any]] = {}        # id(JavaRDD) -> (it, its Scala RDD): ``remember``
        try:
            collections: Any = importlib.import_module("py4j.java_collections")
            rdds: Any = importlib.import_module("pyspark.core.rdd")
            serializers: Any = importlib.import_module("pyspark.serializers")
            util: Any = importlib.import_module("pyspark.util")
            jvm = sc._jvm
            self._function = jvm.SimplePythonFunction
            self._python_rdd = jvm.PythonRDD
            self._collect_and_serve = self._python_rdd.collectAndServe
            self._threshold = int(jvm.PythonUtils.getBroadcastThreshold(sc._jsc))
            self._pipelined, self._pickle = rdds.PipelinedRDD, serializers.CloudPickleSerializer()
            self._load = util._load_from_socket
            self._to_list, self._to_map = collections.ListConverter(), collections.MapConverter()
            self.fast = True
        except Exception:  # noqa: BLE001 - another PySpark: its own collect
            log.debug("jobs submitted through PySpark's collect", exc_info=True)
            self.fast = False

    def _fits(self, rdd: Any) -> bool:
        """``rdd`` is a pipelined RDD not built yet, as ``collect`` here builds it."""
        return (self.fast and isinstance(rdd, self._pipelined) and rdd._jrdd_val is None
                and not rdd._bypass_serializer and not rdd.is_barrier and self.sc.profiler_collector is None)

    def collect(self, rdd: Any) -> list[Any]:
        """Every record of ``rdd`` on the driver, as ``rdd.collect()``."""
        if not self._fits(rdd):
            return list(rdd.collect())
        command = (rdd.func, None, rdd._prev_jrdd_deserializer, rdd._jrdd_deserializer)
        pickled = self._pickle.dumps(command)
        pickled_vars = list(self.sc._pickled_broadcast_vars)     # this thread's, as pickled
        self.sc._pickled_broadcast_vars.clear()
        if len(pickled) > self._threshold:                       # PySpark broadcasts it: its path
            return list(rdd.collect())
        env, includes = self._environment()
        func = self._function(bytearray(pickled), env, includes, self.sc.pythonExec, self.sc.pythonVer,
                              self._broadcast_list(pickled_vars), self.sc._javaAccumulator)
        job = self._python_rdd(self._parent(rdd._prev_jrdd), func, rdd.preservesPartitioning, False)
        sock_info = self._collect_and_serve(job)
        with self._load((sock_info[0], sock_info[1]), rdd._jrdd_deserializer) as stream:
            return list(stream)

    def _environment(self) -> tuple[Any, Any]:
        """The workers' environment and includes as Java objects, converted again when they change."""
        key = (tuple(sorted(self.sc.environment.items())), tuple(self.sc._python_includes))
        with self._lock:
            if self._env is None or self._env[0] != key:
                client = self.sc._gateway._gateway_client
                self._env = (key, (self._to_map.convert(dict(self.sc.environment), client),
                                   self._to_list.convert(list(self.sc._python_includes), client)))
            return self._env[1]

    def _broadcast_list(self, pickled_vars: list[Any]) -> Any:
        """The Java list of the broadcasts ``pickled_vars`` (Python ``Broadcast`` objects)."""
        key = tuple(id(b) for b in pickled_vars)
        with self._lock:
            hit = self._broadcasts.get(key)
            if hit is None:
                if len(self._broadcasts) >= _MAX_CACHED:
                    self._broadcasts.clear()
                java = self._to_list.convert([b._jbroadcast for b in pickled_vars], self.sc._gateway._gateway_client)
                hit = self._broadcasts[key] = (pickled_vars, java)
            return hit[1]

    def remember(self, rdd: Any) -> None:
        """``rdd`` is read by many jobs (the spout stages' input): ask the JVM for its Scala RDD once."""
        with self._lock:
            self._parents[id(rdd._jrdd)] = (rdd._jrdd, rdd._jrdd.rdd())

    def _parent(self, jrdd: Any) -> Any:
        """The Scala RDD of the JavaRDD ``jrdd`` a job reads from."""
        with self._lock:
            hit = self._parents.get(id(jrdd))
        return jrdd.rdd() if hit is None else hit[1]
