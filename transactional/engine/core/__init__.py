"""Core (at-least-once) topologies on the engine: their driver, task adapter, acker and
the checkpoints of stateful bolts (docs/design.md §7)."""
