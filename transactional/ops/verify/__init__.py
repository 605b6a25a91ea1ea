"""``trident verify FILE``: prove that a topology is exactly once, by running it under faults
and comparing every key with a run without faults (docs/verify.md).

1. **Reference run.** The topology file runs once, without faults, in a driver process of
   its own, under a scratch topology id (``verify-<hex>-ref``): its maps are
   ``verify-<hex>-ref:<name>``, never the user's keys, in a Redis and a ZooKeeper that
   verify starts for itself (``transactional.testing``) unless ``--state`` and
   ``--coordination`` name others. Its final state is read back key by key
   (``transactional.ops.snapshot``).
2. **Runs under faults**, each from the same input under a fresh scratch id: a driver
   SIGKILL at each commit crash point (``--crash-points``), seeded random SIGKILLs
   (``--kills N --seed S``: crash points at random txids), and task failures in the
   processing and commit tasks (``TRIDENT_FAIL_TASKS``). After each kill a new driver
   resumes the run (it was started beforehand and waits with Spark up, so a restart costs
   no start-up) until the run completes. ``--server-faults`` adds a run in which the Redis
   and ZooKeeper that verify started are stopped and started again mid-run
   (``ServerRestarts``).
3. **Verdict.** Each run's state against the reference, key by key and row by row:
   missing, doubled, extra, different, PASS, FAIL or UNCHECKED. A core (at-least-once)
   topology passes when nothing is missing; its duplicates are counted, not failed.

``--upgrade-to FILE2 [--switch-at K]`` verifies an upgrade: every run switches from the
file to ``FILE2`` at txid ``K``, after the same check ``trident upgrade`` makes (an unsafe
change is REFUSED and nothing runs), and one more run kills the driver at each step of the
switch (``transactional.ops.verify.upgrade``).

Kafka spouts read a fixed range: each partition's end offset, recorded before the reference
run (``kafka_end_offsets``), bounds every run.

User states (State API factories: PostgreSQL, Parquet, Kafka, the user's own) never write
the real systems: every run writes scratch copies (``StateFactory.scratch``), compared row
by row and dropped (``transactional.ops.verify.states``); a factory that cannot make one is
refused before anything runs. A run that compared nothing is UNCHECKED, not PASS; a FAIL
names the state, its component, the fault and the likely mistake
(``transactional.ops.verify.diagnose``).

Honest limits: a spout must say it reads the same input in a fresh run (``replayable``),
and what a bolt writes itself, outside maps, ``KeyValueState`` and State API states, is
neither redirected nor compared unless the file defines ``verify_outputs(topology_id)``
returning ``{name: {key: value}}``.
"""

from transactional.ops.verify.command import add_parser, command
from transactional.ops.verify.model import (
    CRASH_POINTS,
    SWITCH_POINTS,
    Kill,
    RunOutcome,
    VerifyError,
    VerifyOptions,
    VerifyReport,
    plan_random_kills,
    switch_kills,
)
from transactional.ops.verify.report import format_table, junit_xml
from transactional.ops.verify.runs import check_spouts, kafka_end_offsets, verify

__all__ = ["VerifyError", "VerifyOptions", "RunOutcome", "VerifyReport", "verify", "format_table",
           "junit_xml", "CRASH_POINTS", "Kill", "check_spouts", "plan_random_kills", "kafka_end_offsets",
           "add_parser", "command", "SWITCH_POINTS", "switch_kills"]
