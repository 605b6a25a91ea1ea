"""``KeyValueState`` (``state/keyvalue.py``), Storm's stateful-bolt state: pending,
prepared and committed changes, rollback, and recovery by a state opened again after a
crash, on ``memory://`` and a real redis-server."""

from __future__ import annotations

import uuid

import pytest

from state.keyvalue import KeyValueState, RedisKeyValueState, open_key_value_state
from transactional.exceptions import LeadershipLostError, StateCorruptError


@pytest.fixture(params=["memory", "redis"])
def reopen(request: pytest.FixtureRequest):
    """A function opening (again) this test's state: as a restarted process would."""
    namespace = f"kv-{uuid.uuid4().hex[:10]}:wordcount:0"
    url = "memory://" if request.param == "memory" else request.getfixturevalue("redis_url")
    return lambda: open_key_value_state(url, namespace)


def test_get_sees_pending_then_prepared_then_committed(reopen) -> None:
    s: KeyValueState = reopen()
    s.put("cat", 1), s.put("dog", 1)
    s.prepare_commit(1), s.commit(1)
    s.put("cat", 2)
    s.prepare_commit(2)
    s.put("cat", 3), s.delete("dog"), s.put(("a", 1), {"n": [1, 2]})
    assert (s.get("cat"), s.get("dog", "gone"), s.get(("a", 1)), s.get("eel")) == (3, "gone", {"n": [1, 2]}, None)
    assert reopen().get("cat") == 2                  # another reader: prepared, not pending
    assert sorted(map(repr, s.items())) == sorted(map(repr, [("cat", 3), (("a", 1), {"n": [1, 2]})]))


def test_a_prepared_checkpoint_is_committed_by_the_recovery_after_a_crash(reopen) -> None:
    s = reopen()
    s.put("cat", 1)
    s.prepare_commit(1), s.commit(1)
    s.put("cat", 5), s.put("dog", 2), s.delete("cat")
    s.prepare_commit(2)                              # every bolt prepared txid 2, then the crash
    del s
    r = reopen()                                     # recovery: commit the prepared checkpoint
    assert r.prepared_txid() == 2 and r.committed_txid() == 1
    r.commit(2)
    assert (r.get("cat"), r.get("dog"), r.committed_txid(), r.prepared_txid()) == (None, 2, 2, None)
    r.commit(2)                                      # committing again on a second recovery: nothing
    assert reopen().get("dog") == 2 and reopen().prepared_txid() is None


def test_an_unprepared_checkpoint_is_discarded_and_a_rollback_leaves_nothing_prepared(reopen) -> None:
    s = reopen()
    s.put("cat", 1)
    s.prepare_commit(1), s.commit(1)
    s.put("cat", 9)                                  # pending only: the crash loses it
    assert reopen().get("cat") == 1
    s.prepare_commit(2)
    r = reopen()                                     # txid 2 was not prepared by every bolt
    r.rollback()
    assert (r.get("cat"), r.prepared_txid(), reopen().prepared_txid(), reopen().get("cat")) == (1, None, None, 1)
    if isinstance(r, RedisKeyValueState):
        assert not r.client.exists(f"{r.namespace}:~prepare")


def test_out_of_order_commits_are_refused_naming_the_txids(reopen) -> None:
    s = reopen()
    with pytest.raises(StateCorruptError, match="commit of txid 1, which was not prepared"):
        s.commit(1)
    s.put("x", 1), s.prepare_commit(3)
    with pytest.raises(StateCorruptError, match="commit of txid 4, but txid 3 is prepared"):
        s.commit(4)
    with pytest.raises(StateCorruptError, match="holds prepared txid 3; commit or roll it back before preparing txid 4"):
        s.prepare_commit(4)
    s.commit(3)
    assert reopen().get("x") == 1


def test_unknown_providers_are_named() -> None:
    with pytest.raises(ValueError, match=r"no KeyValueState provider for 'zk://h:2181/x'; use memory:// or redis://"):
        open_key_value_state("zk://h:2181/x", "ns")


@pytest.fixture(params=["memory", "redis"])
def url(request: pytest.FixtureRequest) -> str:
    return "memory://" if request.param == "memory" else request.getfixturevalue("redis_url")


def test_a_driver_fenced_out_by_a_newer_epoch_writes_nothing(url: str) -> None:
    """A driver paused mid-checkpoint and resumed after another took over: its commit and
    its rollback are refused, and the state stays as the newer driver left it."""
    scope = f"kv-{uuid.uuid4().hex[:10]}"
    old = open_key_value_state(url, f"{scope}:count:0", fence_scope=scope, epoch=1)
    old.put("cat", 1), old.prepare_commit(1), old.commit(1)
    old.put("cat", 99), old.prepare_commit(2)                   # then the pause
    new = open_key_value_state(url, f"{scope}:count:0", fence_scope=scope, epoch=2)
    new.raise_fence()                                           # the new driver's first act
    new.rollback()                                              # its recovery: txid 2 was not recorded prepared
    new.put("cat", 2), new.prepare_commit(3), new.commit(3)
    with pytest.raises(LeadershipLostError, match=r"epoch 2 has written state of 'kv-.*' since this one \(epoch 1\)"):
        old.commit(2)
    with pytest.raises(LeadershipLostError):
        old.rollback()
    with pytest.raises(LeadershipLostError):
        open_key_value_state(url, f"{scope}:count:1", fence_scope=scope, epoch=1).raise_fence()
    again = open_key_value_state(url, f"{scope}:count:0")
    assert (again.get("cat"), again.committed_txid(), again.prepared_txid()) == (2, 3, None)
