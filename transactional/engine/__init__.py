"""The engine: what runs a topology (docs/design.md §4, §10).

In the order a batch meets them: ``planning`` (the spout's metadata for a txid),
``coordinator`` (the pure state machine), ``driver`` (the run loop and the commit protocol),
``plan`` (the topology compiled into stages, and the interpreter), ``spark`` (the executor
that runs stages as Spark jobs), ``task`` (one task: prepare, execute, finish_batch),
``routing`` (which task a tuple goes to), ``maps`` (the driver's maps, fenced), ``store``
(the coordinator's records). ``core/`` holds the same for core (at-least-once) topologies.
Nothing here is user API: users import ``transactional``.
"""
