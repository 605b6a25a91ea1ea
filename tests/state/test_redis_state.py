"""Redis user state against a real redis-server, and the pure
exactly-once rules of ``state/map/`` as properties.

- ``TestMapContract``: the TransactionalMap/OpaqueMap rules, parametrized over the
  ``memory`` and ``redis`` backings: every backing must behave the same.
- ``TestRedisBacking``: what only Redis has: key layout, one read + one write per
  ``multi_update`` measured with ``INFO commandstats``, fencing, auth, TLS, errors,
  restart with AOF, pickling.
- ``TestRules``: hypothesis properties of the value objects ``TransactionalValue`` /
  ``OpaqueValue`` (``from_stored``, ``get``, ``update``, ``to_stored``), as the maps use them.
"""

from __future__ import annotations

import json
import math
import pickle
import re
import socket
import time
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from state.map import (
    CounterMap,
    CounterRecord,
    Fence,
    MemoryMapBacking,
    OpaqueMap,
    OpaqueValue,
    TransactionalMap,
    TransactionalValue,
    commit_maps,
    open_map_backing,
    reset_memory_maps,
)
from state.redis import JSON, RedisMapBacking, decode_key, encode_key
from transactional.exceptions import (
    ConfigError,
    LeadershipLostError,
    StateAheadError,
    StateCorruptError,
    StateUnavailableError,
    UnstorableValueError,
)
from transactional.testing._process import free_port

pytestmark = pytest.mark.integration

MAPS = {"transactional": TransactionalMap, "opaque": OpaqueMap}


def add(n: int):
    return lambda old: (old or 0) + n


def _apply(value_class, key, stored, txid, fn, attempt=None):
    """One update of ``key`` for batch ``txid`` through the value objects, as a map makes it:
    ``fn`` on the value before ``txid``; ``(new_stored, user_value, changed)``."""
    old = value_class.from_stored(key, stored)
    new = old.update(txid, attempt, fn(old.get(txid, key)))
    if new is not old:                   # the commit's form for a batch of keys
        assert value_class.stored_updates(txid, attempt, [new[1]], [old.get(txid, key)]) == [new.to_stored()]
    return new.to_stored(), new[1], new.to_stored() != stored


def transactional_apply(key, stored, txid, fn, attempt=None):
    return _apply(TransactionalValue, key, stored, txid, fn, attempt)


def opaque_apply(key, stored, txid, fn, attempt=None):
    return _apply(OpaqueValue, key, stored, txid, fn, attempt)


def core(stored: Any) -> Any:
    """A stored wrapper value without the bookkeeping the rules may add (``attempt``)."""
    return {k: v for k, v in stored.items() if k != "attempt"} if isinstance(stored, dict) else stored


def commit(m, txid: int, keys: list, updaters) -> list:
    """One batch through a map as the framework drives it."""
    m.begin_commit(txid)
    try:
        return m.multi_update(keys, updaters)
    finally:
        m.commit(txid)


@pytest.fixture(params=["memory", "redis"])
def backing(request: pytest.FixtureRequest):
    """A fresh, empty backing of each kind."""
    if request.param == "memory":
        yield MemoryMapBacking()
        return
    url = request.getfixturevalue("redis_url")
    b = RedisMapBacking.from_url(url, request.getfixturevalue("redis_namespace"))
    yield b
    b.close()


# -- the contract every backing meets ---------------------------------------------------------

class TestMapContract:
    def test_absent_keys_read_as_none(self, backing):
        assert backing.multi_get(["a", "b"]) == [None, None]
        assert TransactionalMap(backing).multi_get(["a"]) == [None]

    def test_values_round_trip(self, backing):
        vals = [{"txid": 1, "val": {"n": 1, "l": [1, 2.5, "é", None, True]}},
                {"txid": 1, "curr": "x", "prev": None}]
        backing.multi_put(["a", "b"], vals)
        assert backing.multi_get(["b", "a", "c"]) == [vals[1], vals[0], None]

    def test_keys_of_other_types_are_distinct(self, backing):
        keys = ["1", 1, ("a", 1), "~x", b"\x00"]
        m = TransactionalMap(backing)
        commit(m, 1, keys, [add(i) for i in range(1, 6)])
        assert m.multi_get(keys) == [1, 2, 3, 4, 5]

    def test_key_identity_is_one_definition_for_every_backing(self, backing):
        """1, 1.0, True and "1" are four keys everywhere; ("a", 1) and ["a", 1] are one."""
        m = TransactionalMap(backing)
        keys = [1, 1.0, True, "1", ("a", 1), ["a", 1], None]
        assert commit(m, 1, keys, [add(i) for i in (1, 2, 4, 8, 16, 32, 64)]) == [1, 2, 4, 8, 16, 48, 64]
        assert m.multi_get([True, 1.0, 1, "1", ["a", 1], None, 0, False]) == [4, 2, 1, 8, 48, 64, None, None]

    def test_transactional_same_txid_rebuilds_on_prev(self, backing):
        m = TransactionalMap(backing)
        assert commit(m, 1, ["a", "b"], add(1)) == [1, 1]
        assert commit(m, 2, ["a"], add(5)) == [6]
        assert commit(m, 2, ["a", "b"], add(5)) == [6, 6]  # replay of 2: both built on the value before 2
        assert m.multi_get(["a", "b"]) == [6, 6]
        assert backing.multi_get(["a"]) == [{"txid": 2, "val": 6, "prev": 1}]

    def test_a_transactional_value_without_prev_keeps_the_skip_rule(self, backing):
        """``{txid, val}`` (written by a version before ``prev``): the replay of its own
        txid cannot know the value before it, so it skips the key as that version did."""
        backing.multi_put(["a", "b"], [{"txid": 1, "val": 3}, {"txid": 2, "val": 9}])
        m = TransactionalMap(backing)
        assert commit(m, 2, ["a", "b"], add(5)) == [8, 9]
        assert backing.multi_get(["a", "b"]) == [{"txid": 2, "val": 8, "prev": 3}, {"txid": 2, "val": 9}]
        assert commit(m, 3, ["b"], add(1)) == [10]

    def test_opaque_same_txid_rebuilds_on_prev(self, backing):
        m = OpaqueMap(backing)
        commit(m, 1, ["a"], add(10))
        assert commit(m, 2, ["a"], add(5)) == [15]
        assert core(backing.multi_get(["a"])[0]) == {"txid": 2, "curr": 15, "prev": 10}
        assert commit(m, 2, ["a"], add(3)) == [13]  # a different replay of 2: 10 + 3
        assert commit(m, 2, ["a"], add(3)) == [13]  # and again: still built on prev
        assert commit(m, 3, ["a"], add(1)) == [14]
        assert core(backing.multi_get(["a"])[0]) == {"txid": 3, "curr": 14, "prev": 13}

    def test_resume_right_after_a_partial_commit(self, backing):
        # txid 5 wrote "a" and died before "b" (and before the coordinator recorded it)
        t, o = TransactionalMap(backing), OpaqueMap(backing)
        commit(t, 4, ["ta", "tb"], add(1))
        commit(o, 4, ["oa", "ob"], add(1))
        commit(t, 5, ["ta"], add(2))
        commit(o, 5, ["oa"], add(7))  # the first attempt of 5 saw other tuples
        assert commit(t, 5, ["ta", "tb"], add(2)) == [3, 3]
        assert commit(o, 5, ["oa", "ob"], add(2)) == [3, 3]

    @pytest.mark.parametrize("kind", MAPS)
    def test_newer_stored_txid_is_an_error(self, backing, kind):
        m = MAPS[kind](backing)
        commit(m, 7, ["a"], add(1))
        with pytest.raises(StateAheadError, match=r"'a'.*txid 7.*txid 6"):
            commit(m, 6, ["a"], add(1))
        assert m.multi_get(["a"]) == [1]

    @pytest.mark.parametrize("kind", MAPS)
    @pytest.mark.parametrize("bad", [{"foo": 1}, [1, 2], 42, "text", {"txid": 1}])
    def test_corrupt_value_is_an_error_naming_the_key(self, backing, kind, bad):
        backing.multi_put(["good", "weird-key"], [{"txid": 1, "val": 1, "curr": 1, "prev": 0}, bad])
        m = MAPS[kind](backing)
        with pytest.raises(StateCorruptError, match="weird-key"):
            commit(m, 2, ["good", "weird-key"], add(1))
        with pytest.raises(StateCorruptError, match="weird-key"):
            m.multi_get(["weird-key"])
        assert backing.multi_get(["weird-key", "good"]) == [bad, {"txid": 1, "val": 1, "curr": 1, "prev": 0}]

    @pytest.mark.parametrize("kind", MAPS)
    @pytest.mark.parametrize("combiner, batches, expected", [
        ("sum", [[3, 4], [5, 0]], [8, 4]),
        ("count", [[1, 1], [2, 0]], [3, 1]),
        ("min", [[3, 4], [1, 9]], [1, 4]),
        ("max", [[3, 4], [1, 9]], [3, 9]),
        ("replace", [[3, 4], [1, 9]], [1, 9]),
        (lambda old, new: (old or "") + new, [["a", "b"], ["c", "d"]], ["ac", "bd"]),
    ], ids=["sum", "count", "min", "max", "replace", "function"])
    def test_multi_combine(self, backing, kind, combiner, batches, expected):
        m = MAPS[kind](backing)
        for txid, values in enumerate(batches, start=1):
            for attempt in (1, 2):   # a replay of the whole txid after its write: no effect
                m.begin_commit(txid, attempt)
                m.multi_combine(["x", "y"], values, combiner)
                m.commit(txid)
        assert m.multi_get(["x", "y"]) == expected

    def test_multi_combine_rejects_unknown_combiner(self, backing):
        m = TransactionalMap(backing)
        m.begin_commit(1)
        with pytest.raises(ValueError, match="unknown combiner 'avg'"):
            m.multi_combine(["x"], [1], "avg")

    @pytest.mark.parametrize("kind", MAPS)
    def test_one_read_and_one_write_per_multi_update(self, backing, kind):
        m = MAPS[kind](backing)
        keys = [f"k{i}" for i in range(300)]
        before = backing.round_trips
        commit(m, 1, keys, add(1))
        assert backing.round_trips - before == 2
        before = backing.round_trips
        commit(m, 1, keys, add(1))  # a replay: Transactional computes what it stored, no write
        assert backing.round_trips - before == (1 if kind == "transactional" else 2)


key_values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([0.0, 1.0, 2.5]),
                                     st.sampled_from(["", "1", "a", "~a", "a:b"])),
                          lambda inner: st.tuples(inner, inner), max_leaves=3)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(updates=st.lists(st.tuples(key_values, st.integers(1, 5)), min_size=1, max_size=12))
def test_memory_and_redis_agree_on_which_keys_are_the_same(redis_url, updates):
    """The same updates through a memory and a Redis backing give the same map."""
    maps = [TransactionalMap(MemoryMapBacking()),
            TransactionalMap(RedisMapBacking.from_url(redis_url, f"k-{uuid.uuid4().hex[:8]}:c", check=False))]
    keys = [k for k, _ in updates]
    for m in maps:
        commit(m, 1, keys, [add(n) for _, n in updates])
    assert maps[0].multi_get(keys) == maps[1].multi_get(keys)


# -- Redis only ----------------------------------------------------------------------------------

def _cmdstats(client) -> dict[str, int]:
    return {k.removeprefix("cmdstat_"): v["calls"] for k, v in client.info("commandstats").items()}


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    d = {k: after[k] - before.get(k, 0) for k in after}
    return {k: v for k, v in d.items() if v and k != "info"}


# what LUA_FENCED_MSET runs on the server (counted by commandstats, not round trips)
SCRIPT_INNER = {"get", "set", "type", "mset"}


class TestRedisBacking:
    @pytest.mark.parametrize("kind", MAPS)
    @pytest.mark.parametrize("nkeys", [3, 2500])
    def test_commandstats_one_read_one_write_whatever_the_key_count(
            self, redis_server, redis_url, redis_namespace, kind, nkeys):
        probe = redis_server.client()
        m = MAPS[kind](RedisMapBacking.from_url(redis_url, redis_namespace))
        keys = [f"k{i}" for i in range(nkeys)]
        for txid in (1, 2):
            before = _cmdstats(probe)
            commit(m, txid, keys, add(1))
            d = _delta(_cmdstats(probe), before)
            sent = {k: v for k, v in d.items() if k not in SCRIPT_INNER}
            assert sent == {"mget": 1, "evalsha": 1}, d
            # inside the script: one fence GET/SET, MSET in chunks of 1000, TYPE per key
            assert d.get("get", 0) == 1 and d.get("set", 0) == 1, d
            assert d["mset"] == math.ceil(nkeys / 1000), d
        assert m.multi_get(keys[:2]) == [2, 2]

    def test_commandstats_replay_of_transactional_batch_only_reads(self, redis_server, redis_url, redis_namespace):
        probe = redis_server.client()
        m = TransactionalMap(RedisMapBacking.from_url(redis_url, redis_namespace))
        commit(m, 1, ["a", "b"], add(1))
        before = _cmdstats(probe)
        commit(m, 1, ["a", "b"], add(1))
        assert _delta(_cmdstats(probe), before) == {"mget": 1}

    def test_key_layout_and_value_forms(self, redis_server, redis_url):
        client = redis_server.client()
        t = TransactionalMap(RedisMapBacking.from_url(redis_url, "wc:counts"))
        o = OpaqueMap(RedisMapBacking.from_url(redis_url, "wc:opaque"))
        commit(t, 1, ["apple", 7, ("a", 1)], add(3))
        commit(o, 1, ["apple"], add(3))
        commit(o, 2, ["apple"], add(2))
        assert client.get("wc:counts:apple") == b'{"txid":1,"val":3,"prev":null}'
        assert client.get("wc:counts:~j7") == b'{"txid":1,"val":3,"prev":null}'
        assert client.get('wc:counts:~j["a",1]') == b'{"txid":1,"val":3,"prev":null}'
        assert core(json.loads(client.get("wc:opaque:apple"))) == {"txid": 2, "curr": 5, "prev": 3}
        # a backing made by hand fences its own namespace ("0:" no epoch, then the txid)
        assert client.get("wc:counts:~fence") == b"0:1" and client.get("wc:opaque:~fence") == b"0:2"
        assert json.loads(client.get("wc:opaque:~written:driver")) == {"txid": 2, "attempt": None, "keys": ["apple"]}
        assert sorted(k.decode() for k in client.keys("wc:*")) == sorted([
            "wc:counts:apple", "wc:counts:~j7", 'wc:counts:~j["a",1]', "wc:counts:~fence",
            "wc:opaque:apple", "wc:opaque:~fence", "wc:opaque:~written:driver"])

    @pytest.mark.parametrize("key", ["a", "~a", "", "a:b", 0, -1, 2.5, True, None, ("x", (1, 2)), b"\xff"])
    def test_encode_key_round_trips(self, key):
        back = decode_key(encode_key(key))
        norm = (lambda k: [norm(x) for x in k] if isinstance(k, (list, tuple)) else k)
        assert norm(back) == norm(key) and type(back) is (list if isinstance(key, tuple) else type(key))

    def test_encode_key_rejects_unstorable_keys(self):
        with pytest.raises(TypeError, match="cannot be stored"):
            encode_key(object())

    def test_scan_and_clear(self, redis_url, redis_namespace):
        b = RedisMapBacking.from_url(redis_url, redis_namespace)
        commit(TransactionalMap(b), 1, ["a", 2, ("t", 1)], add(1))
        assert b.scan() == {"a": {"txid": 1, "val": 1, "prev": None}, 2: {"txid": 1, "val": 1, "prev": None},
                            ("t", 1): {"txid": 1, "val": 1, "prev": None}}
        assert b.clear() == 4  # three keys and the fence
        assert b.scan() == {}

    def test_namespaces_are_isolated(self, redis_url):
        a = TransactionalMap(RedisMapBacking.from_url(redis_url, "topo-a:counts"))
        b = TransactionalMap(RedisMapBacking.from_url(redis_url, "topo-b:counts"))
        commit(a, 5, ["k"], add(1))
        commit(b, 1, ["k"], add(2))  # a different namespace has its own txids and fence
        assert a.get("k") == 1 and b.get("k") == 2

    def test_stale_writer_is_fenced_atomically(self, redis_url, redis_namespace):
        new = TransactionalMap(RedisMapBacking.from_url(redis_url, redis_namespace))
        stale_backing = RedisMapBacking.from_url(redis_url, redis_namespace)
        stale = TransactionalMap(stale_backing)
        commit(new, 3, ["a"], add(1))
        commit(new, 3, ["c"], add(1))  # another task of the same txid: allowed
        # a stale driver still on txid 2 writes keys the new one never touched
        with pytest.raises(StateAheadError, match=rf"{redis_namespace}.*txid 3.*txid 2"):
            commit(stale, 2, ["b", "d"], add(100))
        assert stale_backing.multi_get(["b", "d"]) == [None, None]  # nothing written
        unfenced = RedisMapBacking.from_url(redis_url, redis_namespace, fenced=False)
        commit(TransactionalMap(unfenced), 2, ["b"], add(100))
        assert new.get("b") == 100

    def test_non_string_redis_value_is_never_overwritten(self, redis_server, redis_url, redis_namespace):
        client = redis_server.client()
        client.hset(f"{redis_namespace}:h", "f", "1")
        b = RedisMapBacking.from_url(redis_url, redis_namespace)
        with pytest.raises(StateCorruptError, match=rf"'{redis_namespace}:h'.*hash"):
            commit(OpaqueMap(b), 1, ["a", "h", "z"], add(1))
        assert client.hgetall(f"{redis_namespace}:h") == {b"f": b"1"}
        assert b.multi_get(["a", "z"]) == [None, None]  # the whole batch was refused

    def test_unreadable_bytes_are_corrupt_naming_the_key(self, redis_server, redis_url, redis_namespace):
        redis_server.client().set(f"{redis_namespace}:a", b"\x80\x04not json")
        m = TransactionalMap(RedisMapBacking.from_url(redis_url, redis_namespace))
        with pytest.raises(StateCorruptError, match=rf"'{redis_namespace}:a'.*JSON cannot read"):
            commit(m, 1, ["a"], add(1))

    def test_pluggable_serializer(self, redis_server, redis_url, redis_namespace):
        class Upper:
            """JSON, stored upper-cased, to see the serializer is used both ways."""

            def dumps(self, v: Any) -> bytes:
                return JSON.dumps(v).upper()

            def loads(self, data: bytes) -> Any:
                return JSON.loads(data.lower())

        m = TransactionalMap(RedisMapBacking.from_url(redis_url, redis_namespace, serializer=Upper()))
        commit(m, 1, ["a"], add(2))
        assert redis_server.client().get(f"{redis_namespace}:a") == b'{"TXID":1,"VAL":2,"PREV":NULL}'
        assert m.get("a") == 2
        with pytest.raises(ConfigError, match="dumps"):
            RedisMapBacking.from_url(redis_url, redis_namespace, serializer=object())

    def test_pickles_without_its_connection_and_reconnects_lazily(self, redis_factory):
        server = redis_factory(password="pickle-pw")
        b = RedisMapBacking.from_url(server.url, "p:counts", serializer=pickle)
        commit(OpaqueMap(b), 1, ["a"], add(4))
        server.stop()
        copy = pickle.loads(pickle.dumps(b))  # no connection is made while unpickling
        assert copy.round_trips == 0 and copy.serializer is pickle
        with pytest.raises(StateUnavailableError, match=f"127.0.0.1:{server.port}"):
            copy.multi_get(["a"])
        server.start()
        assert OpaqueMap(copy).get("a") == 4
        from_client = RedisMapBacking(server.client(), "p:counts", serializer=pickle)
        again = pickle.loads(pickle.dumps(from_client))
        assert OpaqueMap(again).get("a") == 4
        assert "pickle-pw" not in repr(again) and "pickle-pw" not in again.address

    def test_open_map_backing_selects_redis(self, redis_url, redis_namespace):
        b = open_map_backing(redis_url, redis_namespace)
        assert isinstance(b, RedisMapBacking) and b.namespace == redis_namespace
        with pytest.raises(ConfigError, match="redis://"):
            RedisMapBacking.from_url("http://127.0.0.1:1/0", redis_namespace)
        with pytest.raises(ConfigError, match="namespace"):
            RedisMapBacking.from_url(redis_url, "")

    # -- auth, TLS, unreachable ----------------------------------------------------------------
    def test_password_auth(self, redis_factory):
        server = redis_factory(password="s3cret:/@x", appendonly=False)
        m = TransactionalMap(RedisMapBacking.from_url(server.url, "a:counts"))
        commit(m, 1, ["a"], add(1))
        assert m.get("a") == 1

    @pytest.mark.parametrize("how", ["wrong", "missing"])
    def test_bad_password_is_a_clear_config_error(self, redis_factory, how):
        server = redis_factory(password="s3cret", appendonly=False)
        url = server.url_for(password="not-it") if how == "wrong" else f"redis://127.0.0.1:{server.port}/0"
        t0 = time.monotonic()
        with pytest.raises(ConfigError) as e:
            RedisMapBacking.from_url(url, "a:counts")
        msg = str(e.value)
        assert f"127.0.0.1:{server.port}" in msg and "password" in msg
        assert "not-it" not in msg and "s3cret" not in msg
        assert time.monotonic() - t0 < 5

    def test_acl_user(self, redis_factory):
        server = redis_factory(password="admin", appendonly=False)
        server.client().acl_setuser("alice", enabled=True, passwords=["+alice-pw"],
                                    keys=["acl:*"], commands=["+@all"])
        m = OpaqueMap(RedisMapBacking.from_url(server.url_for(username="alice", password="alice-pw"), "acl:counts"))
        commit(m, 1, ["a"], add(1))
        assert m.get("a") == 1
        with pytest.raises(ConfigError, match=rf"alice@127.0.0.1:{server.port}"):
            RedisMapBacking.from_url(server.url_for(username="alice", password="nope"), "acl:counts")
        denied = RedisMapBacking.from_url(server.url_for(username="alice", password="alice-pw"), "other:counts")
        with pytest.raises(StateUnavailableError, match=r"alice@.*no permissions"):
            commit(TransactionalMap(denied), 1, ["a"], add(1))

    def test_tls(self, redis_factory, tmp_path):
        import shutil

        if shutil.which("openssl") is None:
            pytest.fail("the TLS test needs the openssl CLI: apt-get install -y openssl (.ci/run installs it)")
        from transactional.testing.redis import make_tls_files

        server = redis_factory(tls=make_tls_files(tmp_path), appendonly=False)
        b = RedisMapBacking.from_url(server.url, "tls:counts")
        assert b.address.startswith("rediss://")
        commit(TransactionalMap(b), 1, ["a"], add(1))
        assert TransactionalMap(b).get("a") == 1
        with pytest.raises(StateUnavailableError, match="ssl_ca_certs"):  # CA not trusted
            RedisMapBacking.from_url(server.url.split("?")[0], "tls:counts", connect_timeout=3)

    def test_unreachable_is_a_clear_error_naming_the_address(self):
        port = free_port()  # nothing listens there
        t0 = time.monotonic()
        with pytest.raises(StateUnavailableError, match=rf"127.0.0.1:{port}.*start redis-server"):
            RedisMapBacking.from_url(f"redis://:pw@127.0.0.1:{port}/3", "x:counts")
        assert time.monotonic() - t0 < 10

    def test_silent_server_times_out_within_connect_timeout(self):
        with socket.socket() as silent:  # accepts TCP connections, never answers
            silent.bind(("127.0.0.1", 0))
            silent.listen(8)
            port = silent.getsockname()[1]
            t0 = time.monotonic()
            with pytest.raises(StateUnavailableError, match=rf"127.0.0.1:{port}"):
                RedisMapBacking.from_url(f"redis://127.0.0.1:{port}/0", "x:counts", connect_timeout=1.0)
            assert time.monotonic() - t0 < 5

    # -- restarts and failures mid-commit -------------------------------------------------------
    @pytest.mark.parametrize("how", ["stop", "kill"])
    def test_restart_with_aof_keeps_values(self, redis_factory, how):
        server = redis_factory(appendonly=True)
        t = TransactionalMap(RedisMapBacking.from_url(server.url, "r:t"))
        o = OpaqueMap(RedisMapBacking.from_url(server.url, "r:o"))
        keys = [f"k{i}" for i in range(50)]
        for txid in range(1, 4):
            commit(t, txid, keys, add(txid))
            commit(o, txid, keys, add(txid))
        getattr(server, how)()
        server.start()
        # the same objects carry on: stale pooled connections are replaced, the write
        # script is loaded again (the script cache does not survive a restart)
        assert commit(t, 4, keys, add(4)) == [10] * 50
        assert commit(o, 4, keys, add(4)) == [10] * 50
        assert commit(o, 4, keys[:1], add(1)) == [7]  # prev survived the restart too

    def test_redis_down_mid_commit_fails_the_batch_and_the_replay_is_exact(self, redis_factory):
        server = redis_factory(appendonly=True)
        backing = RedisMapBacking.from_url(server.url, "d:counts")
        m = OpaqueMap(backing)
        commit(m, 1, ["a", "b"], add(1))
        server.kill()
        t0 = time.monotonic()
        with pytest.raises(StateUnavailableError, match=rf"127.0.0.1:{server.port}.*replayed"):
            commit(m, 2, ["a", "b"], add(5))
        assert time.monotonic() - t0 < 5  # fails fast; the engine replays
        server.start()
        assert commit(m, 2, ["a", "b"], add(5)) == [6, 6]

    def test_many_keys_batch(self, redis_url, redis_namespace):
        m = OpaqueMap(RedisMapBacking.from_url(redis_url, redis_namespace))
        keys = [f"w{i}" for i in range(10_000)]
        commit(m, 1, keys, add(1))
        assert commit(m, 2, keys, add(2))[-1] == 3
        assert m.multi_get(keys[::1000]) == [3] * 10


class TestCounterWrites:
    """``CounterMap``'s one atomic add per txid (``multi_add``) on a real server."""

    def test_adds_once_per_txid_and_a_replay_adds_nothing(self, redis_url, redis_namespace):
        b = RedisMapBacking.from_url(redis_url, redis_namespace)
        m = CounterMap(b)
        for txid, deltas in [(1, {"a": 2, "b": 3}), (1, {"a": 2, "b": 3}), (2, {"a": 1, "c": -4})]:
            m.begin_commit(txid, epoch=1)
            m.add(list(deltas), list(deltas.values()))
            m.commit(txid)
        assert m.multi_get(["a", "b", "c", "d"]) == [3, 3, -4, None]
        assert b.client.get(f"{redis_namespace}:a") == b"3"        # a plain Redis integer

    def test_every_script_runs_again_after_the_server_forgot_it(self, redis_server, redis_url, redis_namespace):
        """The scripts are redis-py's registered scripts: after SCRIPT FLUSH (or a restart
        without persistence) each loads itself again -- the write, the counter's read and
        add, and the write of several maps."""
        scope = redis_namespace.split(":")[0]
        t, u = (TransactionalMap(RedisMapBacking.from_url(redis_url, f"{scope}:{n}"), n) for n in "tu")
        c = CounterMap(RedisMapBacking.from_url(redis_url, f"{scope}:c"), "c")
        flush = redis_server.client().script_flush
        for txid in (1, 2):
            for m in (t, u, c):
                m.begin_commit(txid, epoch=1)
                flush()
                assert m.multi_combine(["a"], [txid]) == [1 + (txid == 2) * 2]   # the counter's read script
            flush()
            t.commit(txid)                      # the write script
            flush()
            commit_maps([u, c], txid)          # several maps in one script (a counter's add inside)
        flush()
        assert [m.get("a") for m in (t, u, c)] == [3, 3, 3]
        c.begin_commit(3, epoch=1)
        c.add(["a"], [4])
        flush()
        c.commit(3)                             # the counter's add script alone
        assert c.get("a") == 7

    @pytest.mark.parametrize(("bad", "what"), [
        ("set", "string that is not an integer"),
        ("hset", "non-string value"),
        ("big", "number that the addition would overflow"),
        ("float-in-int", "string that is not an integer"),
    ])
    def test_a_key_that_refuses_leaves_every_key_as_it_was(self, redis_url, redis_namespace, bad, what):
        b = RedisMapBacking.from_url(redis_url, redis_namespace)
        m = CounterMap(b)
        m.begin_commit(1, epoch=1)
        m.add(["old1", "old2"], [5, 0])
        m.commit(1)
        r, key = b.client, f"{redis_namespace}:bad"
        {"set": lambda: r.set(key, "many"), "hset": lambda: r.hset(key, "f", "1"),
         "big": lambda: r.set(key, str(2**63 - 2)), "float-in-int": lambda: r.set(key, "1.5")}[bad]()
        before = {k: r.dump(k) for k in r.keys(f"{redis_namespace}:*")}
        m.begin_commit(2, epoch=1)
        # absent keys and present ones (one holding 0) before and after the refusing key
        m.add(["new1", "old1", "old2", "bad", "new2"], [1, 2, 3, 4, 5])
        with pytest.raises(StateCorruptError, match=f"holds a {what}.*nothing was overwritten"):
            m.commit(2)
        # every key as it was (the one holding 0 too: the script read each value first)
        assert {k: r.dump(k) for k in r.keys(f"{redis_namespace}:*")} == before
        assert CounterMap(b).multi_get(["old1", "old2", "new1", "new2"]) == [5, 0, None, None]

    def test_arrow_columns_add_as_lists_do_and_fall_back_where_they_must(self, redis_url, redis_namespace):
        import pyarrow as pa

        b = RedisMapBacking.from_url(redis_url, redis_namespace)
        calls = []
        columns = b.encode_columns
        b.encode_columns = lambda *a: calls.append(len(a[0])) or columns(*a)   # type: ignore[method-assign]
        m = CounterMap(b)
        cases = [
            (pa.array(["a", "b"]), pa.array([2, 3])),                    # straight from the arrays
            (pa.array(["~x", "a"]), pa.array([1, 1])),                   # a key needing encoding: lists
            (pa.array(["a", "c"], pa.large_string()), pa.array([5, 7], pa.int32())),
        ]
        for txid, (keys, deltas) in enumerate(cases, 1):
            m.begin_commit(txid, epoch=1)
            m.add_columns(keys, deltas)
            m.commit(txid)
        m.begin_commit(4, epoch=1)                                       # arrays, then more in the txid
        m.add_columns(pa.array(["b"]), pa.array([10]))
        m.add(["b", "d"], [1, 1])
        assert m.multi_get(["b", "d"]) == [14, 1]
        m.commit(4)
        m.begin_commit(4, epoch=1)                                       # a replay adds nothing
        m.add_columns(pa.array(["a"]), pa.array([100]))
        m.commit(4)
        assert CounterMap(b).multi_get(["a", "b", "c", "~x", "d"]) == [8, 14, 7, 1, 1]
        assert calls == [2, 2, 1]              # the case with "~x" went the list way
        assert b.client.get(f"{redis_namespace}:~s~x") == b"1"

    def test_reads_of_a_txid_added_already_see_the_values_before_it(self, redis_url, redis_namespace):
        """Attempt 1 of txid 2 added, and the driver died before recording txid 2: the
        replay reads the values before txid 2 (a key that held 0 is 0, an absent one None,
        a float exactly), one round trip a read, and adds nothing again."""
        b = RedisMapBacking.from_url(redis_url, redis_namespace)
        m = CounterMap(b)
        m.begin_commit(1, epoch=1)
        m.add(["zero", "f"], [0, 0.1])
        m.commit(1)
        for attempt in (1, 2):
            m.begin_commit(2, attempt, epoch=1)
            before = b.round_trips
            assert m.multi_get_committed(["zero", "f", "new"]) == [0, 0.1, None]
            assert b.round_trips - before == 1
            assert m.multi_combine(["zero", "new"], [3, 4]) == [3, 4]
            m.commit(2)
        assert m.multi_get(["zero", "new"]) == [3, 4]
        b.client.delete(f"{redis_namespace}:~prior")   # as a version before the record left it
        m.begin_commit(2, 3, epoch=1)
        assert m.multi_get_committed(["zero", "new"]) == [3, 4]

    def test_floats_are_checked_before_anything_is_added(self, redis_url, redis_namespace):
        b = RedisMapBacking.from_url(redis_url, redis_namespace)
        m = CounterMap(b)
        m.begin_commit(1, epoch=1)
        m.add(["x", "y"], [0.5, 1])
        m.commit(1)
        b.client.set(f"{redis_namespace}:z", "nope")
        m.begin_commit(2, epoch=1)
        m.add(["x", "z"], [0.25, 1.0])
        with pytest.raises(StateCorruptError, match="'.*:z'.*string that is not a number"):
            m.commit(2)
        assert CounterMap(b).multi_get(["x", "y"]) == [0.5, 1]


# -- the pure rules, as properties ---------------------------------------------------------

stored_txids = st.integers(min_value=1, max_value=1000)
values = st.one_of(st.none(), st.integers(-10**6, 10**6))
increments = st.integers(-1000, 1000)
batch = st.dictionaries(st.sampled_from("abcdef"), increments, max_size=6)


class TestRules:
    @given(prior=st.one_of(st.none(), st.builds(lambda t, v: {"txid": t, "val": v}, stored_txids, values)),
           gap=st.integers(1, 5), inc=increments)
    def test_transactional_applying_batch_t_twice_equals_once(self, prior, gap, inc):
        txid = (prior["txid"] if prior else 0) + gap
        once, val1, changed1 = transactional_apply("k", prior, txid, add(inc))
        twice, val2, changed2 = transactional_apply("k", once, txid, add(inc))
        assert twice == once and val2 == val1 and changed1 and not changed2
        assert val1 == ((prior["val"] if prior else None) or 0) + inc

    @given(prior=st.one_of(st.none(), st.builds(lambda t, c, p: {"txid": t, "curr": c, "prev": p},
                                                stored_txids, values, values)),
           gap=st.integers(1, 5), first=st.lists(increments, max_size=4), final=increments)
    def test_opaque_a_different_replay_of_t_after_a_crash_builds_on_prev(self, prior, gap, first, final):
        txid = (prior["txid"] if prior else 0) + gap
        clean, clean_val, _ = opaque_apply("k", prior, txid, add(final))
        s = prior
        for inc in first:  # earlier attempts of t, each with other tuples, then a crash
            s, _, _ = opaque_apply("k", s, txid, add(inc))
        replayed, val, _ = opaque_apply("k", s, txid, add(final))
        assert replayed == clean and val == clean_val

    @given(stored=stored_txids, behind=st.integers(1, 50), kind=st.sampled_from(["t", "o"]))
    def test_a_newer_stored_txid_always_raises(self, stored, behind, kind):
        value = {"txid": stored, "val": 1} if kind == "t" else {"txid": stored, "curr": 1, "prev": 0}
        apply = transactional_apply if kind == "t" else opaque_apply
        with pytest.raises(StateAheadError):
            apply("k", value, stored - behind, add(1))

    @given(txid=stored_txids, val=values, prev=values, attempt=st.one_of(st.none(), st.integers(0, 5)))
    def test_a_value_object_stores_what_it_was_read_from(self, txid, val, prev, attempt):
        for cls, stored in ((TransactionalValue, {"txid": txid, "val": val, "prev": prev}),
                            (TransactionalValue, {"txid": txid, "val": val}),
                            (OpaqueValue, {"txid": txid, "attempt": attempt, "curr": val, "prev": prev})):
            assert cls.from_stored("k", stored).to_stored() == stored
        assert TransactionalValue.from_stored("k", None).get(txid) is None
        assert OpaqueValue.from_stored("k", None).get(txid) is None

    @given(txid=st.integers(1, 6), data=st.data())
    def test_a_batch_load_is_get_of_each_value(self, txid, data):
        """``befores`` (a map's load of a batch) is ``from_stored(...).get(txid)`` of each value,
        whatever the values: absent, older, this txid's, newer, the older form, not ours."""
        t = st.integers(0, 7)
        forms = {
            TransactionalValue: st.one_of(
                st.none(), st.builds(lambda x, v, p: {"txid": x, "val": v, "prev": p}, t, values, values),
                st.builds(lambda x, v: {"txid": x, "val": v}, t, values), st.just({"txid": "1", "val": 2}),
                st.just(7), st.just({"txid": 1})),
            OpaqueValue: st.one_of(
                st.none(), st.builds(lambda x, a, c, p: {"txid": x, "attempt": a, "curr": c, "prev": p},
                                     t, st.integers(0, 3), values, values),
                st.builds(lambda x, c: {"txid": x, "curr": c}, t, values), st.just(7)),
        }
        for cls, form in forms.items():
            stored = data.draw(st.lists(form, max_size=5))
            keys = [f"k{i}" for i in range(len(stored))]

            def one(i, cls=cls, stored=stored):
                v = cls.from_stored(f"k{i}", stored[i])
                return v.get(txid, f"k{i}"), v.txid == txid

            try:
                expected = [one(i) for i in range(len(stored))]
            except (StateAheadError, StateCorruptError, TypeError) as e:
                with pytest.raises(type(e), match=re.escape(str(e))):
                    cls.befores(keys, stored, txid)
                continue
            got = cls.befores(keys, stored, txid)
            if cls is TransactionalValue:
                assert got == ([b for b, _ in expected], [i for i, (_, same) in enumerate(expected) if same])
            else:
                assert got == [b for b, _ in expected]

    @given(txid=stored_txids, attempt=st.integers(0, 5), other=st.integers(0, 5), curr=values, prev=values)
    def test_an_opaque_rollback_leaves_the_value_before_the_txid(self, txid, attempt, other, curr, prev):
        v = OpaqueValue(txid, curr, prev, other)
        assert v.failed(txid, attempt) == (other != attempt) and not v.failed(txid + 1, attempt)
        back = v.rolled_back()
        assert back.get(txid) == back.get(txid + 1) == prev and not back.failed(txid, attempt)

    @given(applied=st.integers(0, 9), txid=st.integers(1, 9))
    def test_a_counter_txid_is_added_once_and_read_as_before_it(self, applied, txid):
        rec = CounterRecord(applied, applied, {"a": 4})
        assert rec.added(txid) == (applied >= txid)
        if applied > txid:
            with pytest.raises(StateAheadError, match=f"key 'a' was written by txid {applied}, newer"):
                rec.get("a", 7, txid)
        else:
            assert rec.get("a", 7, txid) == (4 if applied == txid else 7)

    def test_a_value_that_is_not_the_flavours_names_its_key(self):
        with pytest.raises(StateCorruptError, match=r"key 'k' holds 5, not a OpaqueMap value \{'txid'"):
            OpaqueValue.from_stored("k", 5)
        with pytest.raises(StateCorruptError, match=r"key 'k' holds \{'txid': 1\}, not a TransactionalMap value"):
            TransactionalValue.from_stored("k", {"txid": 1})

    @given(batches=st.lists(batch, min_size=1, max_size=6), data=st.data())
    def test_transactional_crash_replays_count_each_batch_once(self, batches, data):
        m = TransactionalMap(MemoryMapBacking())
        for txid, b in enumerate(batches, start=1):
            keys = sorted(b)
            partial = data.draw(st.lists(st.sampled_from(keys), unique=True) if keys else st.just([]))
            if partial:  # the driver died after writing some keys of this batch
                commit(m, txid, partial, [add(b[k]) for k in partial])
            commit(m, txid, keys, [add(b[k]) for k in keys])  # the replay, identical batch
        expected = {k: sum(b.get(k, 0) for b in batches) for k in "abcdef" if any(k in b for b in batches)}
        assert dict(zip(expected, m.multi_get(list(expected)), strict=True)) == expected

    @given(batches=st.lists(st.tuples(batch, batch), min_size=1, max_size=6))
    def test_opaque_crash_replays_with_other_batches_count_only_the_last(self, batches):
        m = OpaqueMap(MemoryMapBacking())
        for txid, (first, final) in enumerate(batches, start=1):
            if first:  # first attempt emitted `first`, wrote it, died before the record
                commit(m, txid, sorted(first), [add(first[k]) for k in sorted(first)])
            keys = sorted(set(first) | set(final))  # the replay touches what it emits
            commit(m, txid, keys, [add(final.get(k, 0)) for k in keys])
        touched = {k for f, g in batches for k in (*f, *g)}
        got = dict(zip(sorted(touched), m.multi_get(sorted(touched)), strict=True))
        assert got == {k: sum(g.get(k, 0) for _, g in batches) for k in sorted(touched)}

    def test_transactional_map_is_wrong_when_a_replay_differs(self):
        """Why OpaqueMap exists: a replay of txid 1 emitting other keys than its first
        attempt leaves that attempt's values in a TransactionalMap; an OpaqueMap puts them
        back before the replay commits (``rollback``)."""
        t, o = TransactionalMap(MemoryMapBacking()), OpaqueMap(MemoryMapBacking())
        for m in (t, o):
            m.begin_commit(1, 1)
            m.multi_update(["a"], add(5))       # attempt 1 of txid 1 saw "a" 5 times,
            m.flush()                           # wrote, then died
            m.begin_commit(1, 2)
            m.rollback(["driver"])
            m.multi_update(["b"], add(3))       # the opaque replay of txid 1 emits "b" 3 times
            m.commit(1)
        assert o.multi_get(["a", "b"]) == [None, 3] and t.multi_get(["a", "b"]) == [5, 3]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.tuples(batch, batch), min_size=1, max_size=5))
def test_opaque_crash_replays_on_redis(redis_url, batches):
    """The same property through the Redis backing (a fresh namespace per example)."""
    m = OpaqueMap(RedisMapBacking.from_url(redis_url, f"h-{uuid.uuid4().hex[:8]}:c", check=False))
    for txid, (first, final) in enumerate(batches, start=1):
        if first:
            commit(m, txid, sorted(first), [add(first[k]) for k in sorted(first)])
        keys = sorted(set(first) | set(final))
        if keys:
            commit(m, txid, keys, [add(final.get(k, 0)) for k in keys])
    touched = sorted({k for f, g in batches for k in (*f, *g)})
    assert dict(zip(touched, m.multi_get(touched), strict=True)) == {
        k: sum(g.get(k, 0) for _, g in batches) for k in touched}


# -- the maps of one txid: all written or none; names never share keys -------------------------------

def _stored(client, pattern: str) -> dict[str, Any]:
    """Every key matching ``pattern``: its string value, or its type and contents."""
    out: dict[str, Any] = {}
    for k in client.keys(pattern):
        t = client.type(k).decode()
        out[k.decode()] = client.get(k) if t == "string" else (t, client.hgetall(k) if t == "hash" else None)
    return out


class TestMapsOfATxid:
    @staticmethod
    def maps(url: str, tid: str) -> list:
        """Map "first" (transactional), "n" (counter) and "second" (opaque) of topology ``tid``."""
        def on(name: str) -> RedisMapBacking:
            return RedisMapBacking.from_url(url, f"{tid}:{name}", fence_scope=tid)
        return [TransactionalMap(on("first"), "first"), CounterMap(on("n"), "n"), OpaqueMap(on("second"), "second")]

    @staticmethod
    def txid(maps: list, txid: int, epoch: int = 1) -> None:
        for m in maps:
            m.begin_commit(txid, 1, epoch=epoch)
        first, n, second = maps
        first.multi_combine(["a", "b"], [txid, 1])
        n.add(["c", "d"], [txid, 2])
        second.multi_combine(["e"], [txid])
        try:
            commit_maps(maps, txid)
        except BaseException:
            for m in maps:
                m.abort()
            raise

    def test_a_txids_maps_on_one_redis_are_written_in_one_script(self, redis_server, redis_url):
        tid = f"one-{uuid.uuid4().hex[:6]}"
        maps = self.maps(redis_url, tid)
        self.txid(maps, 1)             # (loads the script on first use)
        assert [m.get(k) for m, k in zip(maps, "ace", strict=True)] == [1, 1, 1]
        before = _cmdstats(redis_server.client())
        self.txid(maps, 2)
        assert _delta(_cmdstats(redis_server.client()), before)["evalsha"] == 1
        assert [m.get(k) for m, k in zip(maps, "ace", strict=True)] == [3, 3, 3]

    @pytest.mark.parametrize("refusal", ["hash in the opaque map", "not a number in the counter map",
                                         "a newer epoch"])
    def test_a_refused_part_leaves_every_map_of_the_txid_as_it_was(self, redis_server, redis_url, refusal):
        """Txid 2 of three maps on one Redis is refused by its last part (a key of another
        type), its middle part (a counter key that is not a number: INCRBY fails after the
        first part was written) or the fence: every key, the fence included, is as txid 1
        left it."""
        client = redis_server.client()
        tid = f"undo-{uuid.uuid4().hex[:6]}"
        maps = self.maps(redis_url, tid)
        self.txid(maps, 1)
        if refusal == "hash in the opaque map":
            client.delete(f"{tid}:second:e")
            client.hset(f"{tid}:second:e", "not", "ours")
            error, match = StateCorruptError, rf"'{tid}:second:e'.* holds a hash"
        elif refusal == "not a number in the counter map":
            client.set(f"{tid}:n:d", "junk")
            error, match = StateCorruptError, rf"'{tid}:n:d'.* holds a string that is not an integer"
        else:
            RedisMapBacking.from_url(redis_url, f"{tid}:~epoch", fence_scope=tid).multi_put([], [], Fence(2, None))
            error, match = LeadershipLostError, r"newer epoch \(2\).*epoch is 1"
        before = _stored(client, f"{tid}:*")
        for m in maps:
            m._cache = {}       # a map that read nothing trusts nothing (the type check runs)
        with pytest.raises(error, match=match) as e:
            self.txid(maps, 2)
        assert e.value.trident_map == {"hash in the opaque map": "second",
                                       "not a number in the counter map": "n"}.get(refusal, "first")
        assert _stored(client, f"{tid}:*") == before

    def test_a_value_that_cannot_be_stored_is_found_before_anything_is_sent(self, redis_server, redis_url):
        tid = f"unstorable-{uuid.uuid4().hex[:6]}"
        maps = self.maps(redis_url, tid)
        self.txid(maps, 1)
        before, stats = _stored(redis_server.client(), f"{tid}:*"), _cmdstats(redis_server.client())
        for m in maps:
            m.begin_commit(2, 1, epoch=1)
        maps[0].multi_combine(["a"], [2])
        maps[2].multi_combine(["e"], [{"tags": {"x"}}], "replace")
        with pytest.raises(UnstorableValueError, match=r"^map 'second', txid 2: the value \{'tags': \{'x'\}\} "
                           r"\(dict\) of key 'e' cannot be stored \(TypeError: .*set"):
            commit_maps(maps, 2)
        assert _delta(_cmdstats(redis_server.client()), stats).get("evalsha", 0) == 0
        assert _stored(redis_server.client(), f"{tid}:*") == before

    def test_a_counter_part_written_before_a_refused_part_is_put_back_with_its_record(self, redis_server,
                                                                                      redis_url):
        """Txid 2 of a counter map (1 key: its part runs first) and a transactional map (3
        keys, one of them a hash: refused, run last). The counter's keys, its applied
        marker and its record of txid 1's before-values (``~prior``) are all put back: a
        read in txid 1 still sees the values before txid 1, and the replay of txid 2
        reads the values before txid 2."""
        client = redis_server.client()
        tid = f"prior-{uuid.uuid4().hex[:6]}"

        def on(name: str) -> RedisMapBacking:
            return RedisMapBacking.from_url(redis_url, f"{tid}:{name}", fence_scope=tid)

        n, big = CounterMap(on("n"), "n"), TransactionalMap(on("big"), "big")

        def txid(t: int) -> None:
            for m in (n, big):
                m._cache = {}            # a map that read nothing trusts nothing (the type check runs)
                m.begin_commit(t, 1, epoch=1)
            n.add(["c"], [t * 10])
            big.multi_combine(["x", "y", "z"], [t, t, t])
            try:
                commit_maps([n, big], t)
            except BaseException:
                for m in (n, big):
                    m.abort()
                raise

        txid(1)
        client.delete(f"{tid}:big:z")
        client.hset(f"{tid}:big:z", "not", "ours")
        before = _stored(client, f"{tid}:*")
        assert before[f"{tid}:n:~applied"] == b"1" and before[f"{tid}:n:~prior"][0] == "hash"
        with pytest.raises(StateCorruptError, match=rf"'{tid}:big:z'.* holds a hash") as e:
            txid(2)
        assert e.value.trident_map == "big"
        assert _stored(client, f"{tid}:*") == before
        n.begin_commit(1, 1, epoch=1)    # the record of txid 1 is intact
        assert n.multi_get_committed(["c"]) == [None]
        n.abort()
        client.delete(f"{tid}:big:z")
        txid(2)
        assert n.get("c") == 30 and client.get(f"{tid}:n:~applied") == b"2"
        n.begin_commit(2, 2, epoch=1)    # a replay of txid 2 reads the values before it
        assert n.multi_get_committed(["c"]) == [10]
        n.abort()

    def test_counter_maps_whose_names_hold_the_separator_keep_their_own_record(self, redis_server, redis_url):
        """The record of map "c:x" is not map "c"'s key "x:~prior": every counter map's
        marker and record use its own key prefix."""
        client = redis_server.client()
        for url in ("memory://", redis_url):
            reset_memory_maps("csep:")
            maps = [CounterMap(open_map_backing(url, f"csep:{name}", fence_scope="csep"), name) for name in ("c:x", "c")]
            for t in (1, 2):
                for m in maps:
                    m.begin_commit(t, 1, epoch=1)
                maps[0].add(["k"], [t])
                maps[1].add(["x:~prior", "x:~applied"], [10 * t, 100 * t])
                commit_maps(maps, t)
            for m in maps:
                m.begin_commit(2, 2, epoch=1)    # a replay of txid 2: the values before it
            assert maps[0].multi_get_committed(["k"]) == [1], url
            assert maps[1].multi_get_committed(["x:~prior", "x:~applied"]) == [10, 100], url
            for m in maps:
                m.abort()
            assert (maps[0].get("k"), maps[1].get("x:~prior"), maps[1].get("x:~applied")) == (3, 30, 300), url
        assert sorted(k.decode() for k in client.keys("csep:*")) == sorted([
            "csep:~c%3Ax:k", "csep:~c%3Ax:~applied", "csep:~c%3Ax:~prior",
            "csep:c:x:~prior", "csep:c:x:~applied", "csep:c:~applied", "csep:c:~prior", "csep:~fence"])

    def test_maps_whose_names_hold_the_separator_keep_their_own_keys(self, redis_server, redis_url):
        """Map "a:b" key "x" and map "a" key "b:x" were one Redis key; names with ':' or
        '%' now have a segment of their own, and every other name keeps its layout."""
        client = redis_server.client()
        pairs = [("a:b", "x", 1), ("a", "b:x", 2), ("a%3Ab", "x", 3), ("a:b:x", "y", 4), ("a", "b:x:y", 5)]
        for url in ("memory://", redis_url):
            reset_memory_maps("sep:")
            maps = {n: TransactionalMap(open_map_backing(url, f"sep:{n}", fence_scope="sep"), n) for n, _, _ in pairs}
            for m in maps.values():
                m.begin_commit(1, 1, epoch=1)
            for n, k, v in pairs:
                maps[n].multi_combine([k], [v])
            commit_maps(list(maps.values()), 1)
            fresh = {n: TransactionalMap(open_map_backing(url, f"sep:{n}", fence_scope="sep")) for n in maps}
            assert [fresh[n].get(k) for n, k, _ in pairs] == [1, 2, 3, 4, 5], url
        assert sorted(k.decode() for k in client.keys("sep:*")) == sorted([
            "sep:~a%3Ab:x", "sep:a:b:x", "sep:a%3Ab:x", "sep:~a%3Ab%3Ax:y", "sep:a:b:x:y", "sep:~fence"])
        assert RedisMapBacking.from_url(redis_url, "sep:a").scan() == {"b:x": {"txid": 1, "val": 2, "prev": None},
                                                                        "b:x:y": {"txid": 1, "val": 5, "prev": None}}

    @pytest.mark.parametrize("namespace", ["counts", ":counts", "wc:"])
    def test_a_namespace_that_is_not_scope_and_name_is_refused(self, redis_url, namespace):
        for url in ("memory://", redis_url):
            with pytest.raises(ConfigError, match=re.escape(f"map namespace must be '<scope>:<name>' (the engine's "
                                                            f"is '<topology_id>:<state name>'), e.g. 'wc:counts'; "
                                                            f"got {namespace!r}")):
                open_map_backing(url, namespace)


def test_the_scripts_reply_codes_are_the_enum_by_name():
    """The write scripts name their reply codes as ``Reply`` does (one table, in Lua and in
    Python), and return no bare number."""
    from state.redis_scripts import LUA_FENCED_ADD, LUA_FENCED_MSET, LUA_FENCED_MULTI, Reply

    prelude = "local " + ", ".join(r.name for r in Reply) + " = " + ", ".join(str(int(r)) for r in Reply)
    assert prelude == "local WRITTEN, TXID_AHEAD, NOT_OURS, EPOCH_AHEAD, CLAIMED, ADDED_BEFORE = 0, 1, 2, 3, 4, 5"
    for script in (LUA_FENCED_MSET, LUA_FENCED_ADD, LUA_FENCED_MULTI):
        assert script.startswith(prelude + "\n")
        assert re.findall(r"return \{\s*\d", script) == []
    assert {int(r) for r in Reply} == set(range(6))
