"""``LocalCluster``: topologies running in the background of this process, as Storm's
``LocalCluster`` runs them (docs/drpc.md).

>>> from transactional import LocalCluster
>>> with LocalCluster() as cluster:                                     # doctest: +SKIP
...     cluster.submit_topology("reach", TopologyConfig(), topology)
...     print(drpc.execute("reach", "foo.com/blog/1"))
16

``submit_topology`` starts any topology (transactional, Trident, core, DRPC) on a thread
and returns at once; the run goes on until ``kill_topology`` (which stops it after the
commit under way, as ``trident kill`` does) or ``shutdown``. ``run_topology`` is unchanged:
it runs in the foreground until the spout has nothing more.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from transactional.config import TopologyConfig
from transactional.exceptions import ConfigError, TopologyError, TridentError
from transactional.result import RunResult

__all__ = ["LocalCluster"]
log = logging.getLogger("trident")


class _Running:
    def __init__(self, name: str, topology: Any, config: TopologyConfig) -> None:
        self.name = name
        self.topology = topology
        self.config = config
        self.started = threading.Event()        # the run holds the topology's lock (``on_start``)
        self.result: RunResult | None = None
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None


def _background(config: TopologyConfig, topology: Any) -> TopologyConfig:
    """``config`` for a background run (see ``LocalCluster``)."""
    updates: dict[str, Any] = {}
    if "idle_timeout_secs" not in config.model_fields_set:
        updates["idle_timeout_secs"] = None
    return config.model_copy(update=updates)


def _serve_drpc(name: str, config: TopologyConfig, topology: Any) -> None:
    """Check the DRPC spouts of ``topology`` against ``config`` and give their LocalDRPC
    queues the run's ``max_attempts`` and ``drpc_request_timeout_secs``."""
    from transactional.engine.drpc import drpc_spouts, local_queues, sink_for

    for spout in drpc_spouts(topology):
        if not spout.source.startswith("local:"):
            if not config.drpc_servers:
                sink_for(spout.source, spout.function, {})     # the ConfigError that says what to set
            continue
        if config.commit_placement != "driver":
            msg = (f"DRPC topology {name!r} serves a LocalDRPC, which lives in this process: run it with "
                   "commit_placement='driver' (results are returned from the commit phase)")
            raise ConfigError(msg)
        q = local_queues(spout.source).get(spout.function)
        if q is not None:
            q.max_attempts = config.max_attempts
            if q.timeout_secs is None:
                q.timeout_secs = config.drpc_request_timeout_secs


class LocalCluster:
    """Runs topologies on background threads of this process until they are killed.

    Settings a background run needs differently from ``run_topology`` are taken unless the
    config sets them: ``idle_timeout_secs=None`` (a topology runs until killed). A DRPC
    request wakes the driver at once (``transactional.engine.wakeup``): no faster polling
    is needed for DRPC topologies."""

    def __init__(self) -> None:
        self._running: dict[str, _Running] = {}
        self._lock = threading.Lock()

    def submit_topology(self, name: str, config: TopologyConfig | dict[str, Any] | None, topology: Any) -> None:
        """Start ``topology`` in the background under ``name`` and return at once
        (``TopologyError`` when a topology runs under that name already)."""
        from transactional.topology import as_topology

        topology = as_topology(topology, "submit_topology")
        if config is None:
            config = TopologyConfig()
        elif isinstance(config, dict):
            config = TopologyConfig(**config)
        config = _background(config, topology)
        _serve_drpc(name, config, topology)
        with self._lock:
            old = self._running.get(name)
            if old is not None and old.thread is not None and old.thread.is_alive():
                msg = f"a topology named {name!r} is running on this LocalCluster already; kill_topology({name!r}) first"
                raise TopologyError(msg)
            run = self._running[name] = _Running(name, topology, config)
            run.thread = threading.Thread(target=self._run, args=(run,), name=f"trident-local-{name}", daemon=True)
            run.thread.start()

    def _run(self, run: _Running) -> None:
        from transactional.ops.run import run_topology

        try:
            run.result = run_topology(run.topology, run.config, on_start=run.started.set)
        except BaseException as e:  # noqa: BLE001 - kept for kill_topology / shutdown, and logged
            run.error = e
            log.error("LocalCluster: topology %r stopped: %s", run.name, e)
            self._fail_calls(run, f"the topology serving this function stopped: {e}")
        finally:
            run.started.set()

    @staticmethod
    def _fail_calls(run: _Running, error: str) -> None:
        from transactional.engine.drpc import drpc_spouts, local_queues

        for spout in drpc_spouts(run.topology):
            q = local_queues(spout.source).get(spout.function) if spout.source.startswith("local:") else None
            if q is not None:
                q.fail_all(error)

    def kill_topology(self, name: str, timeout: float | None = None) -> RunResult | None:
        """Stop ``name`` after the commit under way (the txids in flight are cancelled; a
        later run emits them again) and wait for its thread; returns its ``RunResult``.
        Raises the run's error if it had stopped with one."""
        from transactional.ops.control import request

        with self._lock:
            run = self._running.pop(name, None)
        if run is None:
            msg = f"no topology named {name!r} runs on this LocalCluster (running: {sorted(self._running) or 'none'})"
            raise TridentError(msg)
        assert run.thread is not None
        run.started.wait(timeout)
        if run.thread.is_alive():
            c = run.config
            try:
                request(c.coordination, run.topology.topology_id, "kill", auth=c.coordination_auth,
                        connect_timeout=c.connect_timeout_secs, by=f"LocalCluster.kill_topology({name!r})")
            except TridentError:
                if run.thread.is_alive():
                    raise                    # else: it stopped by itself meanwhile
        run.thread.join(timeout)
        if run.thread.is_alive():
            msg = f"topology {name!r} did not stop within {timeout} s of kill_topology"
            raise TridentError(msg)
        self._fail_calls(run, "the topology serving this function was killed")
        if run.error is not None:
            raise run.error
        return run.result

    def rebalance(self, name: str, tasks: dict[str, int], wait_secs: float = 0.0) -> None:
        """Storm's ``rebalance``: give the components of running topology ``name`` the task
        counts ``tasks`` (component id -> count) at a txid boundary, after ``wait_secs``
        without new batches (docs/operations.md, "Changing a running topology").
        ``RebalanceRefusedError`` (nothing changed) names a component it cannot move."""
        from transactional.ops.control import request

        with self._lock:
            run = self._running.get(name)
        if run is None:
            msg = f"no topology named {name!r} runs on this LocalCluster (running: {sorted(self._running) or 'none'})"
            raise TridentError(msg)
        run.started.wait()
        c = run.config
        request(c.coordination, run.topology.topology_id, "rebalance", auth=c.coordination_auth,
                connect_timeout=c.connect_timeout_secs, by=f"LocalCluster.rebalance({name!r})", tasks=dict(tasks),
                wait=wait_secs)

    def shutdown(self) -> None:
        """Kill every topology of this cluster; raises the first error a run stopped with."""
        first: BaseException | None = None
        for name in list(self._running):
            try:
                self.kill_topology(name)
            except BaseException as e:  # noqa: BLE001 - stop the others first
                first = first or e
        if first is not None:
            raise first

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
