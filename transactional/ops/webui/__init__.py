"""Live metrics and a status page, served by the driver (docs/operations.md).

With ``TopologyConfig(metrics_port=...)`` (``trident run --metrics-port``) the engine
attaches a ``RunObserver`` to its listeners and serves, on ``metrics_host:metrics_port``:
``/`` (the status page: the topology drawn as a graph, the pipeline of txids, throughput
and commit latency plotted live, counts, process latency and capacity per component, the
last error of each, the txid being retried, a link to the Spark UI; and, with
``control_token`` set, deactivate/activate/kill buttons), ``/api/status`` (the same as
JSON) and ``/metrics`` (Prometheus). ``trident ui`` serves the same page without a
driver, from what the coordinator state keeps (``HistorySource``).

The engine's side is two calls::

    observer = attach(self.listeners, topology, config)     # None when metrics_port is None
    ...
    observer.stop()                                         # at the end of the run
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from transactional.ops.webui.observer import LagSource, RunObserver, lag_source
from transactional.ops.webui.server import Controls, StatusServer

__all__ = ["attach", "RunObserver", "StatusServer", "Controls", "LagSource", "lag_source", "config_summary",
           "spark_ui_url"]

log = logging.getLogger("trident.webui")

#: settings shown on the status page
SHOWN = ("spark_master", "executor", "commit_placement", "coordination", "state", "max_spout_pending",
         "message_timeout_secs", "max_attempts", "idle_timeout_secs")


def spark_ui_url() -> str | None:
    """The Spark UI's address of this process's SparkContext, None without one (or with
    its UI off). Never starts Spark, nor imports it."""
    if "pyspark" not in sys.modules:
        return None
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    if sc is None:
        return None
    url = sc.uiWebUrl
    return str(url) if url else None


def config_summary(config: Any) -> dict[str, Any]:
    """The settings of a ``TopologyConfig`` the status page shows (passwords hidden)."""
    d = config.redacted()
    return {k: d[k] for k in SHOWN if k in d}


def attach(listeners: list[Callable[[Any], None]], topology: Any, config: Any) -> RunObserver | None:
    """Serve the status page and metrics of a run of ``topology`` when
    ``config.metrics_port`` is set: start a ``RunObserver``'s server on
    ``config.metrics_host:metrics_port`` (0: a free port), append the observer to the
    engine's ``listeners`` and return it (its address logged, and in ``observer.url``);
    None, doing nothing, when ``metrics_port`` is None. The caller stops it
    (``observer.stop()``) when the run ends. With ``config.control_token`` the page's
    controls write the control record under ``config.coordination``.

    Raises ``OSError`` naming the address when it cannot be bound.
    """
    if config.metrics_port is None:
        return None
    observer = RunObserver(topology, config_summary(config),
                           spark_ui=spark_ui_url if config.executor == "spark" else None)
    controls = Controls(config.control_token, config.coordination, config.coordination_auth,
                        config.connect_timeout_secs)
    try:
        observer.start(config.metrics_host, config.metrics_port, controls)
    except OSError as e:
        msg = (f"cannot serve metrics on {config.metrics_host}:{config.metrics_port}: {e.strerror or e}; "
               "pick another --metrics-port (0: a free one)")
        raise OSError(e.errno, msg) from None
    listeners.append(observer)
    log.info("%s: status page %s, metrics %smetrics%s", topology.topology_id, observer.url, observer.url,
             "; its controls are on (control_token)" if controls.enabled else "")
    return observer
