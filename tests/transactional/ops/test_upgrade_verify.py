"""The upgrade matrix through ``trident verify FILE --upgrade-to FILE2`` (transactional/ops/verify/upgrade.py;
docs/operations.md, "Changing a running topology"): sixteen kinds of change to
tests/transactional/ops/test_upgrade.py's word count. Each unsafe kind is REFUSED before anything
runs, with ``trident upgrade``'s line, against servers that do not exist (so nothing can have
been written); each accepted kind PASSes a run whose drivers are SIGKILLed at the switch
(version 1 just after its last txid, version 2 before and after it records its layout, and at
its first txid's commit steps), compared key by key with a fault-free run that switches at the
same txid. A version 2 that is not exactly once across the switch FAILs with the keys that
differ."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from upgrade_versions import write_versions

from transactional.exceptions import ConfigError
from transactional.ops.verify import SWITCH_POINTS, VerifyOptions, format_table, switch_kills, verify

from test_upgrade import ACCEPTED, REFUSED

REPO = Path(__file__).resolve().parents[3]

#: the exact line of each unsafe kind (as ``trident upgrade --dry-run`` prints it)
REFUSAL = {
    "grouping of a stateful stream": "unsafe    state 'Sink' (partition_persist(Sink)): grouping shuffle -> "
                                     "fields['word'] of the stream that writes it: its keys would reach other tasks "
                                     "than hold them; keep the grouping, or a new state name",
    "key fields": "unsafe    state 'counts' (persistent_aggregate(counts)): key fields ['word'] -> ['word', 'n']: "
                  "the stored keys would no longer be found; keep the key fields, or a new state name",
    "spout with stored offsets": "unsafe    spout 'sentences': MemoryTransactionalSpout(None) -> FixedBatchSpout(None): "
                                 "its stored offsets belong to the old source; keep the spout, or give the new one "
                                 "another id (it starts from its beginning)",
    "state kind": "unsafe    state 'counts' (persistent_aggregate(counts)): kind transactional -> opaque: the stored "
                  "values are of the old kind; keep the kind, or give the new one another name (a new, empty state)",
    "state removed": "unsafe    state 'counts' (persistent_aggregate(counts)): removed or renamed: its stored values "
                     "would be left behind; keep it; if you renamed it, give it uid='counts'; or pass "
                     "--allow-dropped-state (allow_dropped_state=True) to drop them",
    "state renamed": "unsafe    state 'counts' (persistent_aggregate(counts)): removed or renamed: its stored values "
                     "would be left behind; keep it; if you renamed it, give it uid='counts'; or pass "
                     "--allow-dropped-state (allow_dropped_state=True) to drop them",
    "value version without migrate": "unsafe    state 'counts' (persistent_aggregate(counts)): value version 1 -> 2 "
                                     "without a migrate function; declare migrate=fn(value, from_version) on the state",
}

#: servers that do not exist: a refused upgrade must not need them
NOWHERE = {"state": "redis://127.0.0.1:9/0", "coordination": "zk://127.0.0.1:9/nowhere"}

#: the kinds verify runs: every accepted one of test_upgrade.py
MATRIX = sorted(ACCEPTED)


def test_the_matrix_has_sixteen_kinds() -> None:
    assert len(REFUSAL) == len(REFUSED) == 7 and sorted(REFUSAL) == sorted(REFUSED)
    assert len(MATRIX) == 8      # and the opaque spout feeding a transactional map, refused when built: 16


@pytest.mark.parametrize("change", sorted(REFUSED))
def test_an_unsafe_change_is_refused_by_verify_before_anything_runs(change: str, tmp_path: Path) -> None:
    v1, v2 = write_versions(tmp_path, change)
    report = verify(v1, VerifyOptions(upgrade_to=v2, **NOWHERE))
    assert report.verdict == "REFUSED" and not report.passed
    assert REFUSAL[change] in report.changes
    assert report.runs == [] and report.reference_txids == 0
    table = format_table(report)
    assert f"upgrade to {v2} at txid 3: {len(report.changes)} change(s)\n  " in table
    assert table.endswith(f"REFUSED: nothing was run and nothing was written; {v2} has unsafe change(s) that "
                          "`trident upgrade` and `trident run` refuse as well: fix them and verify again")


def test_a_transactional_map_fed_by_an_opaque_spout_is_refused_when_verify_builds_it(tmp_path: Path) -> None:
    extra = '{"opaque spout": {"spout": u.OpaqueMemoryTransactionalSpout(u.DATA, u.Fields("sentence"), 4)}}'
    v1, v2 = write_versions(tmp_path, "opaque spout", extra)
    with pytest.raises(ConfigError, match="fed by the opaque spout"):
        verify(v1, VerifyOptions(upgrade_to=v2, **NOWHERE))


def test_the_switch_kills_and_bad_flags(tmp_path: Path) -> None:
    from transactional.ops.verify import VerifyError

    v1, v2 = write_versions(tmp_path, "new state")
    with pytest.raises(VerifyError, match="--switch-at must be 2 or more"):
        verify(v1, VerifyOptions(upgrade_to=v2, switch_at=1, **NOWHERE))
    with pytest.raises(VerifyError, match="unknown switch point 'commit.nowhere'"):
        verify(v1, VerifyOptions(upgrade_to=v2, switch_points=("commit.nowhere",), **NOWHERE))
    with pytest.raises(VerifyError, match="--max-batches 2 ends the run before the switch at txid 3"):
        verify(v1, VerifyOptions(upgrade_to=v2, max_batches=2, **NOWHERE))


def test_a_kill_just_after_the_first_versions_last_txid_resumes_with_the_new_version() -> None:
    from transactional.ops.verify.drivers import _next_leg, _reaches
    from transactional.ops.verify.model import Kill, Leg

    legs = [Leg("v1.py", 2), Leg("v2.py", None)]
    assert [k.spec for k in switch_kills(SWITCH_POINTS[:3], 3)] == [
        "commit.after_record:txid=2", "upgrade.before_record:txid=3", "upgrade.recorded:txid=3"]
    assert _next_leg(legs, 0, Kill("commit.after_record", 2)) == 1      # txid 2 recorded: version 2 goes on
    assert _next_leg(legs, 0, Kill("commit.before_record", 2)) == 0     # not recorded: version 1 finishes it
    assert _next_leg(legs, 0, None) == 1 and _next_leg(legs, 1, Kill("commit.after_record", 3)) == 1
    assert _reaches(legs, 0, Kill("commit.after_record", 2)) and not _reaches(legs, 0, Kill("upgrade.recorded", 3))
    assert _reaches(legs, 1, Kill("upgrade.recorded", 3))


def options(zk_url: str, redis_url: str, v2: str, points: tuple[str, ...], **kw: object) -> VerifyOptions:
    return VerifyOptions(upgrade_to=v2, switch_points=points, crash_points=(), task_failures=False,
                         executor="in-process", max_batches=4, state=redis_url,
                         coordination=zk_url + "?session_timeout=0.5", **kw)  # type: ignore[arg-type]


def points_of(i: int) -> tuple[str, ...]:
    """Kind ``i``'s kills at the switch: before and after the switch record, and a commit step
    of the first new txid, taking turns (the CLI test kills at every point)."""
    first = ("commit.after_record@-1", "upgrade.before_record")[i % 2]
    commit = ("process.after_meta", "commit.before_write", "commit.before_record", "commit.after_record")[i % 4]
    return (first, "upgrade.recorded", commit)


@pytest.mark.integration
@pytest.mark.slow
def test_every_accepted_change_passes_verify_killed_at_the_switch(tmp_path: Path, zk_url: str,
                                                                  redis_url: str) -> None:
    for i, change in enumerate(MATRIX):
        folder = tmp_path / f"k{i}"
        folder.mkdir()
        v1, v2 = write_versions(folder, change)
        points = points_of(i)
        report = verify(v1, options(zk_url, redis_url, v2, points))
        row = report.runs[0]
        assert report.verdict == "PASS", (change, format_table(report))
        assert [r.fault for r in report.runs] == ["kills at the switch to txid 3"], change
        # version 1's driver, one per kill, and the one that completes (version 1's completes too
        # when the first kill is version 2's)
        assert (row.kills, row.kills_planned) == (3, 3), (change, row)
        assert row.drivers == 4 + (points[0] == "upgrade.before_record"), (change, row)
        assert row.landed == [k.spec for k in switch_kills(points, 3)], (change, row)
        assert report.reference_txids == 4 and row.compared == report.reference_keys > 0, change
        assert not any(c.startswith("unsafe") for c in report.changes), change


@pytest.mark.integration
@pytest.mark.slow
def test_verify_fails_a_new_version_that_is_not_exactly_once_across_the_switch(tmp_path: Path, zk_url: str,
                                                                              redis_url: str) -> None:
    """Version 2 adds a state, as ``new state`` does, but a non-transactional one: txid 3,
    written and then replayed after the kill before it was recorded, counts its words twice."""
    extra = '{"new non-transactional state": {"second": True, "more": u.state.non_transactional("more")}}'
    v1, v2 = write_versions(tmp_path, "new non-transactional state", extra)
    report = verify(v1, options(zk_url, redis_url, v2, ("commit.before_record",)))
    row = report.runs[0]
    assert "safe      state 'more' (persistent_aggregate(more)): new state" in report.changes
    assert report.verdict == "FAIL" and row.verdict == "FAIL", format_table(report)
    assert row.landed == ["commit.before_record:txid=3"]
    assert row.missing == row.extra == 0 and row.doubled + row.different > 0, row
    assert all(ex.split()[1].startswith("more[") for ex in row.examples), row.examples
    assert any("map 'more'" in w for w in row.where), row.where


@pytest.mark.integration
@pytest.mark.slow
def test_the_command_verifies_an_upgrade_killed_at_every_switch_point_and_exits_2_on_a_refused_one(
        tmp_path: Path, zk_url: str, redis_url: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    v1, v2 = write_versions(tmp_path, "value version with migrate")
    p = subprocess.run([sys.executable, "-m", "transactional.ops.cli", "verify", v1, "--upgrade-to", v2,
                        "--crash-points", "none", "--no-task-failures", "--executor", "in-process",
                        "--max-batches", "4", "--state", redis_url, "--coordination", zk_url + "?session_timeout=0.5",
                        "--json", "-q"], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    out = json.loads(p.stdout)
    assert (out["verdict"], out["switch_at"], out["upgrade_to"]) == ("PASS", 3, v2)
    assert "migration state 'counts' (persistent_aggregate(counts)): value version 1 -> 2: values stored before the " \
           "switch pass through migrate() as they are read" in out["changes"]
    (run,) = out["runs"]
    assert run["kills"] == len(SWITCH_POINTS) == 7 and run["verdict"] == "PASS"
    folder = tmp_path / "refused"
    folder.mkdir()
    r1, r2 = write_versions(folder, "state kind")
    p = subprocess.run([sys.executable, "-m", "transactional.ops.cli", "verify", r1, "--upgrade-to", r2,
                        "--state", NOWHERE["state"], "--coordination", NOWHERE["coordination"]],
                       capture_output=True, text=True, env=env, timeout=120, check=False)
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"  {REFUSAL['state kind']}\nREFUSED: nothing was run and nothing was written" in p.stdout


@pytest.mark.integration
def test_a_switch_after_the_first_versions_input_ran_dry_is_refused_saying_so(tmp_path: Path, zk_url: str,
                                                                              redis_url: str) -> None:
    from transactional.ops.verify import VerifyError

    v1, v2 = write_versions(tmp_path, "new state")
    opts = dataclasses.replace(options(zk_url, redis_url, v2, ()), max_batches=None, switch_at=40)
    with pytest.raises(VerifyError, match=f"the reference run's {v1} committed txids up to 15 only, its spouts ran "
                                          "dry before the switch at txid 40: give a smaller --switch-at"):
        verify(v1, opts)
