"""Operating a run: the ``trident`` command, settings, logs, progress, status, control,
the topology graph, shipping code to a cluster, and the status page (docs/operations.md)."""
