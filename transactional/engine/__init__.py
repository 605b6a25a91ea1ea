"""The engine: what runs a topology (docs/design.md §4; core topologies §7, DRPC §12).

In the order a batch meets them: ``driver`` (``run_topology``, ``Engine``: the run loop, the
same for every topology kind), ``runner`` (one runner per topology kind:
``TransactionalRunner`` here, ``CoreRunner`` in ``core/``; each hands its collaborators a
``context.RunContext``), ``spout_planner`` (``Planner``: the spouts' metadata for a txid;
``core/spout_planner`` for core topologies), ``coordinator`` (the pure state machine),
``attempts`` (the processing jobs in flight, on driver threads), ``plan`` (the topology
compiled into stages), ``interpreter`` (runs a plan's stages through an executor:
``executors``, ``spark``), ``stage_tasks`` (the emitter and bolt task functions, which
report through ``reports``), ``task`` (the one task runner, ``run_task``, and the one
``Router``; each kind's ``TaskKind``), ``routing`` (which task a tuple goes to), ``commit``
(the one commit protocol, in txid order, with each kind's hooks), ``maps`` (the driver's
maps, fenced), ``task_states`` (a task's one door to state, ``TaskStates``: on the driver
and on executors) and ``store`` (the coordinator's records). ``events`` holds
what the engine publishes (``Transition``); the driver takes the rest of what its caller
wants of a run as a ``RunWatch`` (``transactional.ops.run`` adds the operator's tools):
the engine imports nothing of ``transactional.ops``. ``drpc/`` is Distributed RPC on the batch machinery;
``core/`` holds the spouts, acker, checkpoints, windows and task adapters of core
(at-least-once) topologies. Nothing here is user API: users import ``transactional``.
"""
