"""ZooKeeper coordinator state against a real ZooKeeper 3.8 server.

The contract of ``TransactionalState`` runs over the memory and the ZooKeeper backends;
then what only ZooKeeper has: the layout, connection trouble (unreachable, restarted,
partitioned), the driver lock, fencing after session expiry, and digest auth.

A raw kazoo client appears here only to look at or poke the znodes from outside.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from state.base import MemoryTransactionalState, TransactionalState, open_transactional_state
from state.zookeeper import ZooKeeperTransactionalState, parse_zk_url
from transactional.exceptions import (
    ConfigError,
    LeadershipLostError,
    LockHeldError,
    StateCorruptError,
    StateError,
    StateUnavailableError,
    StateValueError,
)
from transactional.testing._process import free_port, wait_until
from transactional.testing.zookeeper import ManagedZooKeeper, TcpProxy

pytestmark = pytest.mark.integration


def _run(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any], threading.Event]:
    """Run ``fn`` in a thread; returns (thread, outcome dict, done event)."""
    out: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e
        finally:
            done.set()

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, out, done


@pytest.fixture
def raw_zk(zk_server: ManagedZooKeeper) -> Iterator[Callable[..., KazooClient]]:
    """``raw_zk(auth=None)``: a plain kazoo client on the shared server, for looking from
    outside; stopped after the test."""
    clients: list[KazooClient] = []

    def make(auth: str | None = None, hosts: str | None = None) -> KazooClient:
        c = KazooClient(hosts=hosts or zk_server.hosts,
                        auth_data=[("digest", auth)] if auth else None)
        c.start(timeout=10)
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.stop()
        c.close()


def _znode(url: str, topology_id: str, path: str = "") -> str:
    _, root, _ = parse_zk_url(url)
    return "/".join(p for p in ["", root, topology_id, path] if p != "") or "/"


# ---------------------------------------------------------------------------------------
# The contract, over both backends
# ---------------------------------------------------------------------------------------

@pytest.fixture(params=["memory", "zk"])
def backend(request: pytest.FixtureRequest) -> Iterator[Callable[[str], TransactionalState]]:
    """``open(topology_id)``: a state of the backend under test; closed afterwards."""
    url = "memory://" if request.param == "memory" else request.getfixturevalue("zk_url")
    opened: list[TransactionalState] = []
    prefix = f"contract-{uuid.uuid4().hex[:8]}-"

    def open_(topology_id: str = "topo") -> TransactionalState:
        s = open_transactional_state(url, prefix + topology_id)
        opened.append(s)
        return s

    yield open_
    for s in opened:
        s.close()
    MemoryTransactionalState.reset()


@pytest.fixture
def state(backend: Callable[[str], TransactionalState]) -> TransactionalState:
    return backend("topo")


class TestContract:
    def test_absent_is_none(self, state: TransactionalState) -> None:
        assert state.get("committed") is None
        assert state.get("meta/7") is None
        assert state.children("meta") == []

    @pytest.mark.parametrize("value", [
        {"txid": 3, "meta": {"0": [0, 10], "1": [5, 9]}}, [1, 2.5, "x", None, True],
        "text é", 0, -12, 3.25, False, None, {},
    ])
    def test_set_get_round_trips_json(self, state: TransactionalState, value: Any) -> None:
        state.set("committed", value)
        assert state.get("committed") == value

    def test_values_are_json_not_python(self, state: TransactionalState) -> None:
        state.set("meta/1", {"meta": (1, 2), "by_int": {3: "c"}})
        assert state.get("meta/1") == {"meta": [1, 2], "by_int": {"3": "c"}}
        with pytest.raises(TypeError):
            state.set("meta/2", {"meta": object()})
        with pytest.raises(TypeError):
            state.set("meta/2", {1, 2})
        assert state.get("meta/2") is None

    def test_what_zookeeper_refuses_every_backend_refuses_with_the_same_error(self, state: TransactionalState) -> None:
        """One rule (``state.base.encode_json``): a set, NaN or a value over ZooKeeper's
        limit is refused by the memory backend too, naming the path and the field."""
        with pytest.raises(StateValueError) as e:
            state.set("meta/2", {"meta": {"s": {"0": {"start": 4, "seen": {4}}}}, "attempts": 1})
        assert str(e.value) == (
            "value for state path 'meta/2' is not JSON: ['meta']['s']['0']['seen'] is a set ({4}); coordinator "
            "state holds JSON values only (dicts with string keys, lists, strings, finite numbers, booleans and None)")
        with pytest.raises(StateValueError, match=r"'meta/2' is not JSON: \['meta'\]\[1\] is nan \(JSON has no NaN"):
            state.set("meta/2", {"meta": [0, float("nan")]})
        with pytest.raises(StateError, match="'meta/2' is 1100011 bytes; ZooKeeper takes at most 1000000"):
            state.set("meta/2", {"meta": "x" * 1_100_000})
        assert state.get("meta/2") is None and state.children("meta") == []

    def test_overwrite(self, state: TransactionalState) -> None:
        state.set("committed", {"txid": 1})
        state.set("committed", {"txid": 2})
        assert state.get("committed") == {"txid": 2}

    def test_nested_paths_and_children(self, state: TransactionalState) -> None:
        for t in (3, 1, 2):
            state.set(f"meta/{t}", {"meta": t, "attempts": 0})
        state.set("committed", {"txid": 0, "meta": None})
        assert sorted(state.children("meta"), key=int) == ["1", "2", "3"]
        assert sorted(state.children("")) == ["committed", "meta"]
        assert state.get("meta") is None  # a parent holds no value
        assert state.get("/meta//2/") == {"meta": 2, "attempts": 0}  # slashes normalised

    def test_delete_is_recursive_and_idempotent(self, state: TransactionalState) -> None:
        state.set("meta/1", {"meta": 1})
        state.set("meta/2", {"meta": 2})
        state.delete("meta/1")
        assert state.children("meta") == ["2"]
        state.delete("meta/1")  # absent: no error
        state.delete("meta")
        assert state.children("meta") == [] and state.get("meta/2") is None
        state.delete("nothing/here")

    def test_survives_reopening(self, backend: Callable[[str], TransactionalState]) -> None:
        first = backend("topo")
        first.set("committed", {"txid": 5, "meta": [10, 15]})
        first.set("meta/6", {"meta": [15, 20], "attempts": 1})
        first.close()
        again = backend("topo")
        assert again.get("committed") == {"txid": 5, "meta": [10, 15]}
        assert again.children("meta") == ["6"]

    def test_topologies_are_isolated(self, backend: Callable[[str], TransactionalState]) -> None:
        a, b = backend("a"), backend("b")
        a.set("committed", {"txid": 1})
        assert b.get("committed") is None and b.children("") == []

    def test_lock_is_exclusive_and_names_holder(
            self, backend: Callable[[str], TransactionalState]) -> None:
        a, b = backend("topo"), backend("topo")
        assert a.lock_holder() is None
        a.acquire_lock("host-a:111", wait=False, timeout=None)
        a.check_lock()
        assert a.lock_holder() == b.lock_holder() == "host-a:111"
        with pytest.raises(LockHeldError, match="host-a:111"):
            b.acquire_lock("host-b:222", wait=False, timeout=None)
        a.release_lock()
        a.release_lock()  # idempotent
        assert b.lock_holder() is None
        b.acquire_lock("host-b:222", wait=False, timeout=None)
        assert a.lock_holder() == "host-b:222"


# ---------------------------------------------------------------------------------------
# ZooKeeper only
# ---------------------------------------------------------------------------------------

@pytest.fixture
def zk_open(zk_url: str) -> Iterator[Callable[..., ZooKeeperTransactionalState]]:
    """``zk_open(topology_id="topo", url=zk_url, **options)``; closed after the test."""
    opened: list[ZooKeeperTransactionalState] = []

    def open_(topology_id: str = "topo", url: str | None = None,
              **options: Any) -> ZooKeeperTransactionalState:
        s = ZooKeeperTransactionalState.from_url(url or zk_url, topology_id, **options)
        opened.append(s)
        return s

    yield open_
    for s in opened:
        s.close()


class TestUrlAndLayout:
    def test_parse(self) -> None:
        assert parse_zk_url("zk://h1:2181,h2:2182/a/b") == ("h1:2181,h2:2182", "a/b", {})
        assert parse_zk_url("zk://h:1")[1] == "trident"
        assert parse_zk_url("zk://h:1/r?session_timeout=3")[2] == {"session_timeout": "3"}

    @pytest.mark.parametrize("url, words", [
        ("redis://h:1/r", "not a ZooKeeper URL"),
        ("zk:///r", "names no ZooKeeper host"),
        ("zk://u:p@h:1/r", "coordination_auth"),
        ("zk://h:1/r?retries=3", "unknown option"),
        ("zk://h:x/r", "not a number"),
        ("zk://h:1/zookeeper", "reserved"),
        ("zk://h:1/r?session_timeout=soon", "number of seconds"),
    ])
    def test_bad_urls(self, url: str, words: str) -> None:
        with pytest.raises(ConfigError, match=words):
            ZooKeeperTransactionalState.from_url(url, "topo")

    def test_bad_options(self, zk_url: str) -> None:
        with pytest.raises(ConfigError, match="topology_id"):
            ZooKeeperTransactionalState.from_url(zk_url, "a/b")
        with pytest.raises(ConfigError, match="user:password"):
            ZooKeeperTransactionalState.from_url(zk_url, "topo", auth="nocolon")
        with pytest.raises(ConfigError, match="connect_timeout"):
            ZooKeeperTransactionalState.from_url(zk_url, "topo", connect_timeout=0)

    def test_layout_is_json_under_root_and_topology(
            self, zk_open: Callable[..., ZooKeeperTransactionalState], zk_url: str,
            raw_zk: Callable[..., KazooClient]) -> None:
        s = zk_open("words")
        s.set("committed", {"txid": 4, "meta": {"0": [0, 3]}})
        s.set("meta/5", {"meta": {"0": [3, 6]}, "attempts": 2})
        s.acquire_lock("host:9", wait=False, timeout=None)
        raw = raw_zk()
        data, _ = raw.get(_znode(zk_url, "words", "committed"))
        assert json.loads(data) == {"txid": 4, "meta": {"0": [0, 3]}}
        data, _ = raw.get(_znode(zk_url, "words", "meta/5"))
        assert json.loads(data) == {"meta": {"0": [3, 6]}, "attempts": 2}
        lock_nodes = raw.get_children(_znode(zk_url, "words", "lock"))
        assert len(lock_nodes) == 1
        data, stat = raw.get(_znode(zk_url, "words", "lock/" + lock_nodes[0]))
        assert data == b"host:9" and stat.ephemeralOwner == s.session_id

    def test_non_json_znode_is_reported_not_executed(
            self, zk_open: Callable[..., ZooKeeperTransactionalState], zk_url: str,
            raw_zk: Callable[..., KazooClient]) -> None:
        s = zk_open("topo")
        raw_zk().create(_znode(zk_url, "topo", "committed"), b"\x80\x04K\x01.", makepath=True)
        with pytest.raises(StateCorruptError, match="committed"):
            s.get("committed")

    def test_too_large_value_is_refused(
            self, zk_open: Callable[..., ZooKeeperTransactionalState]) -> None:
        with pytest.raises(StateError, match="bytes"):
            zk_open().set("meta/1", {"meta": "x" * 1_100_000})


class TestConnection:
    def test_unreachable_gives_clear_error_in_time(self) -> None:
        port = free_port()
        t0 = time.monotonic()
        with pytest.raises(StateUnavailableError) as e:
            ZooKeeperTransactionalState.from_url(f"zk://127.0.0.1:{port}/r", "topo",
                                                 connect_timeout=3.0)
        elapsed = time.monotonic() - t0
        assert elapsed < 3.0, elapsed
        assert f"127.0.0.1:{port}" in str(e.value) and "start ZooKeeper" in str(e.value)

    def test_unresolvable_host_gives_clear_error_in_time(self) -> None:
        t0 = time.monotonic()
        with pytest.raises(StateUnavailableError, match="no-such-host.invalid:2181"):
            ZooKeeperTransactionalState.from_url("zk://no-such-host.invalid:2181/r", "topo",
                                                 connect_timeout=1.5)
        assert time.monotonic() - t0 < 1.5

    def test_default_connect_timeout_is_within_ten_seconds(self) -> None:
        import inspect

        default = inspect.signature(ZooKeeperTransactionalState.from_url) \
            .parameters["connect_timeout"].default
        assert default <= 10.0

    def test_unreachable_through_open_transactional_state(self) -> None:
        port = free_port()
        with pytest.raises(StateUnavailableError, match=f"127.0.0.1:{port}"):
            open_transactional_state(f"zk://127.0.0.1:{port}/r", "topo", connect_timeout=1.0)

    def test_restart_mid_use_completes_pending_write(
            self, zk_factory: Callable[..., ManagedZooKeeper]) -> None:
        server = zk_factory()
        s = ZooKeeperTransactionalState.from_url(server.url("r"), "topo", session_timeout=10)
        try:
            s.acquire_lock("driver-1", wait=False, timeout=None)
            for t in range(1, 4):
                s.set(f"meta/{t}", {"meta": t, "attempts": 0})
            s.set("committed", {"txid": 0, "meta": None})
            session = s.session_id
            server.kill()  # as a crash: SIGKILL

            def commit() -> None:
                s.check_lock()
                s.set("committed", {"txid": 1, "meta": 1})
                s.delete("meta/1")

            _, out, done = _run(commit)
            assert not done.wait(0.5), out  # blocks while ZooKeeper is down
            server.start()
            assert done.wait(20), "pending write did not complete after reconnect"
            assert "error" not in out, out.get("error")
            assert s.session_id == session  # the session, and so the lock, survived
            s.check_lock()
            assert s.get("committed") == {"txid": 1, "meta": 1}
            assert sorted(s.children("meta")) == ["2", "3"]
            s.set("committed", {"txid": 2, "meta": 2})
        finally:
            s.close()
        again = ZooKeeperTransactionalState.from_url(server.url("r"), "topo")
        try:
            assert again.get("committed") == {"txid": 2, "meta": 2}
            assert again.lock_holder() is None  # released on close
        finally:
            again.close()

    def test_down_too_long_gives_state_unavailable(
            self, zk_factory: Callable[..., ManagedZooKeeper]) -> None:
        server = zk_factory()
        s = ZooKeeperTransactionalState.from_url(server.url("r"), "topo", retry_deadline=1.0)
        try:
            server.stop()
            t0 = time.monotonic()
            with pytest.raises(StateUnavailableError, match=server.hosts):
                s.get("committed")
            assert time.monotonic() - t0 < 5
        finally:
            s.close()


class TestLockAndFencing:
    def test_second_driver_waits_until_released(
            self, zk_open: Callable[..., ZooKeeperTransactionalState]) -> None:
        a, b = zk_open(), zk_open()
        a.acquire_lock("host-a:1", wait=False, timeout=None)
        t0 = time.monotonic()
        with pytest.raises(LockHeldError, match="host-a:1.*after waiting 0.3s"):
            b.acquire_lock("host-b:2", wait=True, timeout=0.3)
        assert 0.25 < time.monotonic() - t0 < 5
        assert a.lock_holder() == "host-a:1"  # the failed contender left nothing behind

        _, out, done = _run(lambda: b.acquire_lock("host-b:2", wait=True, timeout=20))
        assert not done.wait(0.3)
        a.set("committed", {"txid": 1})
        a.release_lock()
        assert done.wait(10) and "error" not in out, out
        assert a.lock_holder() == "host-b:2"
        b.check_lock()
        with pytest.raises(LeadershipLostError, match="does not hold"):
            a.check_lock()

    def test_lock_of_closed_driver_goes_to_the_waiting_one(
            self, zk_open: Callable[..., ZooKeeperTransactionalState]) -> None:
        a, b = zk_open(), zk_open()
        a.acquire_lock("host-a:1", wait=False, timeout=None)
        _, out, done = _run(lambda: b.acquire_lock("host-b:2", wait=True, timeout=None))
        a.close()
        assert done.wait(10) and "error" not in out, out
        assert b.lock_holder() == "host-b:2"

    def test_expired_session_can_never_commit(
            self, zk_server: ManagedZooKeeper, zk_url: str,
            zk_open: Callable[..., ZooKeeperTransactionalState]) -> None:
        """A partition longer than the session timeout: ZooKeeper expires driver A's
        session, B takes the lock and commits; when A comes back, its pending commit and
        every later write are refused."""
        _, root, _ = parse_zk_url(zk_url)
        proxy = TcpProxy(zk_server.port)
        try:
            a = zk_open(url=f"zk://127.0.0.1:{proxy.port}/{root}", session_timeout=1.0)
            b = zk_open()
            a.acquire_lock("driver-a", wait=False, timeout=None)
            a.set("committed", {"txid": 1, "meta": "a"})
            a.set("meta/2", {"meta": "a2", "attempts": 0})

            proxy.cut()
            # B waits for A's lock; it gets it once ZooKeeper expires A's session.
            b.acquire_lock("driver-b", wait=True, timeout=20)
            _, out, done = _run(lambda: a.set("committed", {"txid": 2, "meta": "a"}))
            assert not done.wait(0.3)  # A is cut off: its write waits
            b.check_lock()
            b.set("committed", {"txid": 2, "meta": "b"})
            b.delete("meta/2")

            proxy.heal()
            assert done.wait(20), "A's write did not finish after the partition healed"
            assert isinstance(out.get("error"), LeadershipLostError), out
            with pytest.raises(LeadershipLostError, match="lost the lock"):
                a.check_lock()
            with pytest.raises(LeadershipLostError):
                a.set("committed", {"txid": 3, "meta": "a"})
            with pytest.raises(LeadershipLostError):
                a.delete("meta")
            with pytest.raises(LeadershipLostError):
                a.acquire_lock("driver-a", wait=False, timeout=None)
            assert b.get("committed") == {"txid": 2, "meta": "b"}
            assert a.get("committed") == {"txid": 2, "meta": "b"}  # reads still work
            assert a.lock_holder() == "driver-b"
            b.check_lock()
        finally:
            proxy.close()

    def test_fencing_is_atomic_with_the_write(
            self, zk_open: Callable[..., ZooKeeperTransactionalState], zk_url: str,
            raw_zk: Callable[..., KazooClient]) -> None:
        """Even before A hears of it: once its lock znode is gone, the write fails as a
        whole (the check and the write are one ZooKeeper multi-op)."""
        a = zk_open()
        a.acquire_lock("driver-a", wait=False, timeout=None)
        a.set("committed", {"txid": 1})
        raw = raw_zk()
        lock_dir = _znode(zk_url, "topo", "lock")
        for name in raw.get_children(lock_dir):
            raw.delete(f"{lock_dir}/{name}")  # what ZooKeeper does when the session expires
        with pytest.raises(LeadershipLostError):
            a.set("committed", {"txid": 2})
        assert json.loads(raw.get(_znode(zk_url, "topo", "committed"))[0]) == {"txid": 1}
        with pytest.raises(LeadershipLostError):
            a.check_lock()

    def test_expired_session_through_a_session_takeover(
            self, zk_server: ManagedZooKeeper,
            zk_open: Callable[..., ZooKeeperTransactionalState]) -> None:
        """kazoo's own way to expire a session: another client connects with the same
        session id and password, then closes it."""
        a = zk_open(session_timeout=2.0)
        a.acquire_lock("driver-a", wait=False, timeout=None)
        session_id, password = a._client.client_id  # noqa: SLF001 - test reaches in
        thief = KazooClient(hosts=zk_server.hosts, client_id=(session_id, password))
        thief.start(timeout=10)
        thief.stop()
        thief.close()
        wait_until(lambda: not a.holds_lock, 10, what="A to notice its session expired")
        with pytest.raises(LeadershipLostError):
            a.check_lock()
        with pytest.raises(LeadershipLostError):
            a.set("committed", {"txid": 9})
        assert a.get("committed") is None
        b = zk_open()
        b.acquire_lock("driver-b", wait=False, timeout=None)


class TestAuth:
    def test_others_cannot_modify_but_can_read(
            self, zk_open: Callable[..., ZooKeeperTransactionalState], zk_url: str,
            raw_zk: Callable[..., KazooClient]) -> None:
        owner = zk_open("secure", auth="app:s3cret")
        owner.acquire_lock("driver-a", wait=False, timeout=None)
        owner.set("committed", {"txid": 3, "meta": None})
        owner.set("meta/4", {"meta": [1, 2], "attempts": 1})
        committed = _znode(zk_url, "secure", "committed")

        for intruder in (raw_zk(), raw_zk(auth="app:wrong"), raw_zk(auth="other:x")):
            assert json.loads(intruder.get(committed)[0])["txid"] == 3  # world-readable
            with pytest.raises(NoAuthError):
                intruder.set(committed, b'{"txid": 99}')
            with pytest.raises(NoAuthError):
                intruder.delete(_znode(zk_url, "secure", "meta/4"))
            with pytest.raises(NoAuthError):
                intruder.create(_znode(zk_url, "secure", "meta/5"), b"{}")
            with pytest.raises(NoAuthError):
                intruder.create(_znode(zk_url, "secure", "lock/x__lock__0000000000"), b"x")

        plain = zk_open("secure")  # our own client, without the credentials
        assert plain.get("committed") == {"txid": 3, "meta": None}
        assert plain.lock_holder() == "driver-a"
        with pytest.raises(StateError, match="coordination_auth"):
            plain.set("committed", {"txid": 99})
        with pytest.raises(StateError, match="coordination_auth"):
            plain.acquire_lock("driver-b", wait=False, timeout=None)

        same = zk_open("secure", auth="app:s3cret")  # the same identity may
        owner.close()
        same.acquire_lock("driver-b", wait=False, timeout=None)
        same.set("committed", {"txid": 4, "meta": None})
        assert plain.get("committed") == {"txid": 4, "meta": None}

    def test_tree_created_without_auth_is_secured(
            self, zk_open: Callable[..., ZooKeeperTransactionalState], zk_url: str,
            raw_zk: Callable[..., KazooClient]) -> None:
        zk_open("late").set("meta/1", {"meta": 1})
        zk_open("late", auth="app:s3cret")
        with pytest.raises(NoAuthError):
            raw_zk().set(_znode(zk_url, "late", "meta/1"), b"{}")
