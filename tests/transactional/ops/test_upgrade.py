"""A new version of a topology against the layout its committed txids were written with
(transactional/engine/changes.py, docs/operations.md "Changing a running topology"): each
kind of change is either refused before anything is written -- the committed txid, the
epoch and the stored values as they were -- or accepted, and the run goes on from there."""

from __future__ import annotations

import copy
import uuid
from collections import Counter
from typing import Any

import pytest

from spouts import MemoryTransactionalSpout, OpaqueMemoryTransactionalSpout
from state.base import open_transactional_state
from state.map.openers import open_memory_backing
from transactional import Fields, TopologyConfig, run_topology
from transactional.engine.changes import UpgradeRefusedError
from transactional.exceptions import ConfigError
from trident import BaseFilter, BaseFunction, Count, FixedBatchSpout, TridentTopology, state
from trident.state import BaseStateUpdater, State, StateFactory
from trident.windowing import WindowsStoreFactory

from trident_kill_topology import DATA, Split

CONFIG = TopologyConfig(executor="in-process", progress=False, max_spout_pending=1)


class Lengths(BaseFunction):
    def execute(self, tuple: Any, collector: Any) -> None:
        collector.emit((len(tuple[0]),))


class NotEmpty(BaseFilter):
    def is_keep(self, tuple: Any) -> bool:
        return bool(tuple[0])


def build(tid: str, **v: Any) -> Any:
    """The word count of version ``v`` (the defaults: version 1)."""
    t = TridentTopology(tid)
    spout = v.get("spout") or MemoryTransactionalSpout(DATA, Fields("sentence"), 4)
    s = t.new_stream("sentences", spout).parallelism_hint(2)
    if v.get("filter"):
        s = s.each(Fields("sentence"), NotEmpty())
    words = s.each(Fields("sentence"), v.get("split", Split)(), Fields("word"))
    if v.get("lengths"):
        words = words.each(Fields("word"), Lengths(), Fields("n"))
    if not v.get("drop"):
        keys = Fields("word", "n") if v.get("keys") else Fields("word")
        factory = v.get("factory") or state.transactional("counts")
        (words.group_by(keys).persistent_aggregate(factory, Count(), Fields("count"))
         .parallelism_hint(v.get("tasks", 1)))
    if v.get("second"):
        more = v.get("more") or state.opaque("more")
        words.group_by(Fields("word")).persistent_aggregate(more, Count(), Fields("count"))
    w = words.partition_by(Fields("word")) if v.get("regroup") else words.shuffle()
    w.partition_persist(Sink(), Fields("word"), Keep())
    (words.tumbling_window(4, WindowsStoreFactory("win"), Fields("word"), Count(), Fields("fired"))
     .parallelism_hint(v.get("window_tasks", 1)).each(Fields("fired"), NotEmpty()))
    return t.build()


class Sink(StateFactory):
    """A user's state that keeps nothing."""

    def make_state(self, conf: Any, metrics: Any, partition_index: int, num_partitions: int) -> State:
        return State()

    def scratch(self, namespace: str) -> Sink:
        """Its copy under ``trident verify`` (it keeps nothing, so a copy is another one)."""
        return Sink()

    def read_scratch(self) -> dict[str, Any]:
        """What a copy holds: nothing."""
        return {}


class Keep(BaseStateUpdater):
    def update_state(self, state: Any, tuples: Any, collector: Any) -> None:
        pass


class Split2(BaseFunction):        # the same operation, another body: a changed function
    def execute(self, tuple: Any, collector: Any) -> None:
        for w in str(tuple[0]).split(" "):
            collector.emit((w,))


Split2.__name__ = Split2.__qualname__ = "Split"

ACCEPTED = {
    "new stateless operation": {"filter": True},
    "changed function body": {"split": Split2},
    "new state": {"second": True},
    "map state's task count": {"tasks": 3},
    "state renamed, uid kept": {"factory": state.transactional("word-counts", uid="counts")},
    "state dropped, allowed": {"drop": True, "allow_dropped_state": True},
    "task count of a stage with windows (global grouping)": {"window_tasks": 2},
    "value version with migrate": {"factory": state.transactional("counts", version=2, migrate=lambda v, _f: v)},
}
REFUSED = {
    "state removed": ({"drop": True}, "state 'counts'", "removed or renamed"),
    "state renamed": ({"factory": state.transactional("word-counts")}, "state 'counts'", "uid='counts'"),
    "key fields": ({"lengths": True, "keys": True}, "state 'counts'", "key fields ['word'] -> ['word', 'n']"),
    "state kind": ({"factory": state.opaque("counts")}, "state 'counts'", "kind transactional -> opaque"),
    "value version without migrate": ({"factory": state.transactional("counts", version=2)}, "state 'counts'",
                                      "declare migrate="),
    "grouping of a stateful stream": ({"regroup": True}, "state 'Sink'", "grouping shuffle -> fields['word']"),
    "spout with stored offsets": ({"spout": FixedBatchSpout(Fields("sentence"), 4, ("a b",))}, "spout 'sentences'",
                                  "stored offsets belong to the old source"),
}


def committed_v1(tid: str) -> tuple[int, int]:
    """Version 1 run for 2 txids; (committed txid, epoch) after it."""
    r = run_topology(build(tid), CONFIG, max_batches=2)
    assert r.last_txid == 2
    return coordinator(tid)


def coordinator(tid: str) -> tuple[int, int]:
    st = open_transactional_state("memory://", tid)
    return (st.get("committed") or {}).get("txid"), st.get("epoch")


@pytest.mark.parametrize("change", sorted(ACCEPTED))
def test_a_safe_change_or_a_declared_migration_is_accepted_and_the_run_goes_on(change: str) -> None:
    tid = f"up-{uuid.uuid4().hex[:8]}"
    committed_v1(tid)
    v = dict(ACCEPTED[change])
    config = CONFIG.model_copy(update={"allow_dropped_state": bool(v.pop("allow_dropped_state", False))})
    r = run_topology(build(tid, **v), config, max_batches=1)
    assert (r.first_txid, r.last_txid) == (3, 3)
    assert coordinator(tid)[0] == 3


@pytest.mark.parametrize("change", sorted(REFUSED))
def test_an_unsafe_change_is_refused_naming_the_component_and_the_fix_before_any_write(change: str) -> None:
    tid = f"up-{uuid.uuid4().hex[:8]}"
    before = committed_v1(tid)
    counts = open_memory_backing("memory://", f"{tid}:counts", fence_scope=tid)
    stored = copy.deepcopy(counts.data)
    assert stored                           # version 1 counted words
    v, where, why = REFUSED[change]
    with pytest.raises(UpgradeRefusedError) as e:
        run_topology(build(tid, **v), CONFIG, max_batches=1)
    msg = str(e.value)
    assert "nothing was written" in msg and where in msg and why in msg, msg
    assert coordinator(tid) == before       # the epoch too: refused before the run took its own
    assert counts.data == stored            # and the stored values as they were


def test_a_transactional_map_fed_by_an_opaque_spout_is_refused_when_built() -> None:
    spout = OpaqueMemoryTransactionalSpout(DATA, Fields("sentence"), 4)
    with pytest.raises(ConfigError, match="fed by the opaque spout"):
        build("up-opaque", spout=spout)


# -- the command ----------------------------------------------------------------------------------

def new_version(tmp_path: Any, change: str) -> str:
    """A topology file building version 1 with ``change`` (of ACCEPTED or REFUSED)."""
    path = tmp_path / "v2.py"
    path.write_text("import test_upgrade as u\n\n\ndef build_topology():\n"
                    f"    v = {{**u.ACCEPTED, **{{k: w[0] for k, w in u.REFUSED.items()}}}}[{change!r}]\n"
                    "    return u.build('another-id', **{k: x for k, x in v.items() if k != 'allow_dropped_state'})\n")
    return str(path)


def upgrade(tmp_path: Any, tid: str, change: str, *flags: str) -> int:
    from transactional.ops.cli import main

    return main(["upgrade", new_version(tmp_path, change), "--from", tid, "--coordination", "memory://",
                 "--set", "executor=in-process", "--max-spout-pending", "1", "-q", *flags])


def test_upgrade_dry_run_prints_each_unsafe_change_and_writes_nothing(tmp_path: Any, capsys: Any) -> None:
    tid = f"up-{uuid.uuid4().hex[:8]}"
    before = committed_v1(tid)
    assert upgrade(tmp_path, tid, "state kind", "--dry-run") == 2
    out = capsys.readouterr().out
    assert f"{tid}: " in out and "(last committed txid 2)" in out
    assert ("  unsafe    state 'counts' (persistent_aggregate(counts)): kind transactional -> opaque: the stored "
            "values are of the old kind; keep the kind, or give the new one another name (a new, empty state)") in out
    assert "refused: nothing was written" in out
    assert coordinator(tid) == before


def test_upgrade_dry_run_of_safe_changes_then_the_upgrade_writes_from_the_next_txid(tmp_path: Any,
                                                                                   capsys: Any) -> None:
    tid = f"up-{uuid.uuid4().hex[:8]}"
    committed_v1(tid)
    assert upgrade(tmp_path, tid, "new state", "--dry-run") == 0
    out = capsys.readouterr().out
    assert "  safe      state 'more' (persistent_aggregate(more)): new state" in out
    assert "dry run: the new version would write from txid 3" in out
    assert coordinator(tid)[0] == 2
    assert upgrade(tmp_path, tid, "new state", "--max-batches", "1") == 0
    assert coordinator(tid)[0] == 3


def test_a_declared_migration_turns_each_value_of_the_earlier_version_as_the_new_version_reads_it() -> None:
    """Version 2 of ``counts`` counts in tenths: ``migrate`` multiplies a version-1 count by
    10 as txid 3 reads it; a key txid 3 does not touch is stored as version 1 wrote it and
    read through ``migrate`` too (the run's map)."""
    tid = f"up-{uuid.uuid4().hex[:8]}"
    committed_v1(tid)
    f = state.transactional("counts", version=2, migrate=lambda v, from_version: v * 10 if from_version == 1 else v)
    r = run_topology(build(tid, factory=f), CONFIG, max_batches=1)
    assert (r.first_txid, r.last_txid) == (3, 3)
    before = Counter(w for p in DATA for (s,) in DATA[p][:8] for w in s.split())
    third = Counter(w for p in DATA for (s,) in DATA[p][8:12] for w in s.split())
    words = sorted(before | third)
    got = dict(zip(words, r.map_state("counts").multi_get(words), strict=True))
    assert got == {w: 10 * before[w] + third[w] for w in words}
    untouched = [w for w in words if w not in third]
    assert untouched and all(r.map_state("counts").backing.wrapped.multi_get([w])[0]["val"] == before[w]
                             for w in untouched)
    st = open_transactional_state("memory://", tid)
    assert st.get("versions") == {"counts": [[2, 1]]}


class SplitWithoutThe(BaseFunction):        # version 2: "the" is no longer counted
    def execute(self, tuple: Any, collector: Any) -> None:
        for w in tuple[0].split():
            if w != "the":
                collector.emit((w,))


SplitWithoutThe.__name__ = SplitWithoutThe.__qualname__ = "Split"


@pytest.mark.integration
def test_upgrade_shadow_replays_kept_txids_with_the_new_code_and_prints_the_keys_that_differ(
        tmp_path: Any, capsys: Any, zk_url: str, redis_url: str) -> None:
    from transactional.ops.cli import main

    tid = f"up-{uuid.uuid4().hex[:8]}"
    cfg = CONFIG.model_copy(update={"coordination": zk_url, "state": redis_url, "keep_batch_meta": 10})
    run_topology(build(tid), cfg, max_batches=3)
    path = tmp_path / "v2.py"
    path.write_text("import test_upgrade as u\n\n\ndef build_topology():\n"
                    "    return u.build('x', split=u.SplitWithoutThe)\n")
    assert main(["upgrade", str(path), "--from", tid, "--dry-run", "--shadow", "1..3", "--coordination", zk_url,
                 "--state", redis_url, "-q"]) == 0
    out = capsys.readouterr().out
    the = Counter(w for p in DATA for (s,) in DATA[p][:12] for w in s.split())["the"]
    assert "shadow: txids 1..3 replayed with the new code into " in out
    assert f"  counts: 1 key(s) differ\n    'the': {the} -> None\n" in out
    assert "dry run: the new version would write from txid 4" in out
