"""The engine: what runs a topology (docs/design.md §4; core topologies §7, DRPC §12).

In the order a batch meets them: ``driver`` (``run_topology``, ``Engine``: the run loop),
``runner`` (one runner per topology kind: ``TransactionalRunner`` here, ``CoreRunner`` in
``core/``), ``planning`` (the spouts' metadata for a txid), ``coordinator`` (the pure state
machine), ``attempts`` (the processing jobs in flight, on driver threads), ``plan`` (the
topology compiled into stages, and the interpreter), ``spark`` (the executor that runs
stages as Spark jobs), ``task`` (one task: prepare, execute, finish_batch), ``routing``
(which task a tuple goes to), ``commit`` (the commit protocol, in txid order), ``maps``
(the driver's maps, fenced) and ``store`` (the coordinator's records). ``events`` holds
what the engine publishes (``Transition``); the driver takes the rest of what its caller
wants of a run as a ``RunWatch`` (``transactional.ops.run`` adds the operator's tools):
the engine imports nothing of ``transactional.ops``. ``drpc*`` is Distributed RPC on the batch machinery;
``core/`` holds the spouts, acker, checkpoints, windows and task adapters of core
(at-least-once) topologies. Nothing here is user API: users import ``transactional``.
"""
