"""``ZooKeeperTransactionalState``: coordinator state in ZooKeeper (``state.zookeeper``'s
docstring says what it guarantees and how)."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    KazooException,
    LockTimeout,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import ForceRetryError, KazooRetry, RetryFailedError
from kazoo.security import CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE, Permissions

from state._timing import timed
from state.base import JSON, TransactionalState, encode_json
from state.errors import (
    ConfigError,
    LeadershipLostError,
    LockHeldError,
    StateCorruptError,
    StateError,
    StateUnavailableError,
)
from state.zookeeper.url import _check_name, _connect_hosts, parse_zk_url

log = logging.getLogger("state.zookeeper")

T = TypeVar("T")

LOCK_NODE = "lock"
_CONTENDER = re.compile(r"__lock__(\d{10})$")


class _Unavailable(Exception):
    """No connection came back before the retry deadline."""


class _TreeChanged(ForceRetryError):  # type: ignore[misc]  # kazoo has no type information: its classes are Any
    """A multi-op failed because a znode was (not) there; ``error`` says which."""

    def __init__(self, error: Exception) -> None:
        super().__init__(repr(error))
        self.error = error


class ZooKeeperTransactionalState(TransactionalState):
    """Coordinator state in ZooKeeper. Open it with ``from_url``; users do not subclass it.

    >>> s = ZooKeeperTransactionalState.from_url(          # doctest: +SKIP
    ...     "zk://127.0.0.1:2181/trident", "word-count", auth="app:secret")
    >>> s.acquire_lock("host-a:4242", wait=False, timeout=None)   # doctest: +SKIP
    >>> s.set("committed", {"txid": 1, "meta": [0, 3]})          # doctest: +SKIP
    >>> s.close()                                                 # doctest: +SKIP

    Called by the engine from one driver thread at a time (kazoo's own threads only
    report connection state changes).
    """

    waits_for_lock = True

    def __init__(self, client: KazooClient, *, hosts: str, root: str, topology_id: str,
                 secure: bool, session_timeout: float, retry_deadline: float,
                 read_only: bool = False,
                 sleep_func: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """Wrap a *started* kazoo client; prefer ``from_url``."""
        _check_name(topology_id, "topology_id")
        self.topology_id = topology_id
        self.hosts = hosts
        self.root = "/" + root
        self.base = f"{self.root}/{topology_id}"
        self.secure = secure
        self.read_only = read_only
        self.session_timeout = session_timeout
        self.retry_deadline = retry_deadline
        self._client = client
        self._clock = clock
        self._connected = threading.Event()
        if client.connected:
            self._connected.set()
        self._retry = KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0,
                                 max_jitter=0.2, deadline=retry_deadline,
                                 sleep_func=sleep_func, ignore_expire=True)
        self._lock: Any = None          # kazoo Lock while held
        self._fence: str | None = None  # full path of our lock znode while held
        self._lost = False              # sticky: lock lost, never write again
        self._known: set[str] = set()   # znodes this client wrote (a hint, not the truth)
        self._closed = False
        client.add_listener(self._on_state)
        if not read_only:
            self._call(self._ensure_base, what="creating the topology's root znode")

    # -- opening --------------------------------------------------------------------------
    @classmethod
    def from_url(cls, url: str, topology_id: str, *, auth: str | None = None,
                 connect_timeout: float = 10.0, session_timeout: float | None = None,
                 retry_deadline: float = 60.0, read_only: bool = False,
                 sleep_func: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> ZooKeeperTransactionalState:
        """Connect to ``zk://h:p[,h:p]/<root>`` and open ``topology_id``'s state.

        ``auth``: ``"user:password"`` for ZooKeeper digest auth (znodes then get the ACL
        creator-all, world-read). ``connect_timeout``: seconds to wait for the first
        connection; the ``StateUnavailableError`` comes within it. ``session_timeout``
        (default 10 s, or ``?session_timeout=`` in the URL): how long ZooKeeper keeps the
        session -- and so the lock -- of a driver it no longer hears from.
        ``retry_deadline``: how long an operation keeps retrying while disconnected.
        ``read_only``: create nothing and refuse writes and the lock (``trident status``).
        """
        hosts, root, options = parse_zk_url(url)
        if session_timeout is None:
            try:
                session_timeout = float(options.get("session_timeout", 10.0))
            except ValueError:
                msg = (
                    f"coordination URL {url!r}: session_timeout must be a "
                    "number of seconds"
                )
                raise ConfigError(msg) from None
        for name, value in (("connect_timeout", connect_timeout),
                            ("session_timeout", session_timeout),
                            ("retry_deadline", retry_deadline)):
            if not value > 0:
                msg = f"{name} must be > 0 seconds; got {value!r}"
                raise ConfigError(msg)
        auth_data = None
        acl = None
        if auth is not None:
            if ":" not in auth or not auth.split(":", 1)[0]:
                msg = (
                    "coordination auth must be 'user:password' (ZooKeeper "
                    "digest auth); got a value without ':'"
                )
                raise ConfigError(msg)
            auth_data = [("digest", auth)]
            acl = list(CREATOR_ALL_ACL) + list(READ_ACL_UNSAFE)
        client = KazooClient(
            hosts=_connect_hosts(hosts, session_timeout), timeout=session_timeout, auth_data=auth_data, default_acl=acl,
            connection_retry=dict(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0,
                                  max_jitter=0.2),
            command_retry=dict(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0,
                               max_jitter=0.2, deadline=retry_deadline))
        started = clock()
        try:
            # kazoo's start() stops the client when it times out; leave room for that.
            client.start(timeout=max(0.1, connect_timeout - 0.5))
        except KazooTimeoutError:
            msg = (
                f"cannot connect to ZooKeeper at {hosts} (coordination {url!r}) within "
                f"{connect_timeout:g}s (gave up after {clock() - started:.1f}s): start "
                "ZooKeeper there, or fix the coordination URL (TopologyConfig.coordination "
                "/ --coordination)"
            )
            raise StateUnavailableError(msg) from None
        try:
            return cls(client, hosts=hosts, root=root, topology_id=topology_id,
                       secure=auth is not None, session_timeout=session_timeout,
                       retry_deadline=retry_deadline, read_only=read_only,
                       sleep_func=sleep_func, clock=clock)
        except BaseException:
            _stop(client)
            raise

    def _ensure_base(self) -> None:
        # Parents of the topology znode stay open (other topologies share the root);
        # the topology's own znodes take the client's default ACL.
        self._wait(self._client.ensure_path_async(self.root, acl=OPEN_ACL_UNSAFE))
        self._wait(self._client.ensure_path_async(self.base))
        if self.secure:
            self._tighten_acls()

    def _tighten_acls(self) -> None:
        """A tree created without auth gets the creator-all, world-read ACL now."""
        acls, _ = self._wait(self._client.get_acls_async(self.base))
        if not any(a.id.scheme == "world" and a.perms & Permissions.WRITE for a in acls):
            return
        log.warning("securing %s: it was created without auth; setting ACL creator-all, "
                    "world-read on its znodes", self.base)
        for path in [self.base, *self._subtree(self.base)]:
            try:
                self._wait(self._client.set_acls_async(path, self._client.default_acl))
            except NoNodeError:
                pass

    # -- connection state -----------------------------------------------------------------
    def _on_state(self, state: str) -> bool:
        """kazoo listener (its thread; must not block). LOST while holding the lock means
        ZooKeeper dropped our session and with it our ephemeral lock znode."""
        if state == KazooState.CONNECTED:
            self._connected.set()
        else:
            self._connected.clear()
        if state == KazooState.LOST and self._fence is not None and not self._closed:
            log.error("ZooKeeper session of topology %r lost: its driver lock is gone; "
                      "no further commit is allowed", self.topology_id)
            self._lost = True
        elif state == KazooState.SUSPENDED and not self._closed:
            log.warning("connection to ZooKeeper at %s lost; operations wait for it to "
                        "come back", self.hosts)
        return False

    def _call(self, func: Callable[..., T], *args: Any, what: str, **kwargs: Any) -> T:
        """Run ``func`` until it succeeds while the connection comes and goes.

        Each try first waits for the client to be connected (so no request sits in
        kazoo's queue of a dead connection), then runs; a try cut by a connection loss is
        retried. After ``retry_deadline`` seconds: ``StateUnavailableError``.
        """
        if self._closed:
            msg = f"coordinator state of topology {self.topology_id!r} is closed"
            raise StateError(msg)
        deadline = self._clock() + self.retry_deadline

        def attempt() -> T:
            if not self._connected.wait(max(0.0, deadline - self._clock())):
                raise _Unavailable()
            return func(*args, **kwargs)

        try:
            with timed("zookeeper", what.split(" ", 1)[0]):
                return cast(T, self._retry.copy()(attempt))   # KazooRetry is untyped: it returns attempt()'s value
        except (RetryFailedError, _Unavailable, KazooTimeoutError):
            msg = (
                f"ZooKeeper at {self.hosts} did not answer for {self.retry_deadline:g}s "
                f"while {what} (topology {self.topology_id!r}); check that the ensemble "
                "is up and reachable"
            )
            raise StateUnavailableError(msg) from None
        except NoAuthError:
            msg = (
                f"ZooKeeper refused {what} under {self.base}: its znodes are protected by a "
                "digest ACL; give the right credentials (coordination_auth='user:password' "
                "/ --coordination-auth)"
            )
            raise StateError(msg) from None
        except ConnectionClosedError:
            msg = (
                f"coordinator state of topology {self.topology_id!r} is "
                "closed"
            )
            raise StateError(msg) from None

    def _wait(self, result: Any) -> Any:
        """The value of a kazoo async result, waiting at most ``retry_deadline``."""
        return result.get(timeout=self.retry_deadline)

    # -- paths and values -----------------------------------------------------------------
    def _abs(self, path: str) -> str:
        parts = [p for p in path.split("/") if p]
        for p in parts:
            _check_name(p, f"state path {path!r}")
        return "/".join([self.base, *parts])

    def _decode(self, path: str, data: bytes | None) -> JSON | None:
        if not data:
            return None  # a parent znode (e.g. "meta") carries no value
        try:
            return json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            msg = (
                f"znode {path} does not hold JSON ({e}); it was not "
                "written by spark-trident"
            )
            raise StateCorruptError(msg) from None

    def _encode(self, path: str, value: JSON) -> bytes:
        return encode_json(path, value).encode("utf-8")   # the rule of every backend (state.base)

    def _subtree(self, path: str) -> list[str]:
        """Descendants of ``path``, deepest first (children before parents)."""
        out: list[str] = []
        for child in self._wait(self._client.get_children_async(path)):
            full = f"{path}/{child}"
            out.extend(self._subtree(full))
            out.append(full)
        return out

    # -- fencing --------------------------------------------------------------------------
    def _fence_path(self) -> str | None:
        """Our lock znode when we hold the lock (writes must check it), else None."""
        if self._lost:
            why = "its ZooKeeper session expired"
            raise self._lost_error(why)
        return self._fence

    def _lost_error(self, why: str) -> LeadershipLostError:
        self._lost = True
        return LeadershipLostError(
            f"driver lost the lock of topology {self.topology_id!r} ({why}); it must not "
            f"commit any more. Restart it: it resumes from the last committed txid once it "
            f"holds the lock again (ZooKeeper {self.hosts}, {self.base}/{LOCK_NODE})")

    def _commit(self, fence: str | None, ops: Callable[[Any], None]) -> None:
        """One ZooKeeper multi-op: [check fence] + ``ops``; all or nothing."""
        tx = self._client.transaction()
        if fence is not None:
            tx.check(fence, -1)
        ops(tx)
        results = self._wait(tx.commit_async())
        if fence is not None and isinstance(results[0], (NoNodeError, BadVersionError)):
            why = "its lock znode is gone: the session expired"
            raise self._lost_error(why)
        for r in results:
            if isinstance(r, (NodeExistsError, NoNodeError, NotEmptyError)):
                raise _TreeChanged(r)  # the tree is not as planned: look again
            if isinstance(r, Exception) and not isinstance(r, RolledBackError):
                raise r

    # -- TransactionalState ---------------------------------------------------------------
    def get(self, path: str) -> JSON | None:
        """The JSON value of the znode at ``path``, or None when it does not exist."""
        full = self._abs(path)
        try:
            data, _ = self._call(lambda: self._wait(self._client.get_async(full)),
                                 what=f"reading {full}")
        except NoNodeError:
            return None
        return self._decode(full, data)

    def _writable(self) -> None:
        if self.read_only:
            msg = (
                f"coordinator state of topology {self.topology_id!r} was opened "
                "read-only"
            )
            raise StateError(msg)

    def set(self, path: str, value: JSON) -> None:
        """Write ``value`` at ``path`` (creating the znode and its parents), fenced by this driver's
        lock znode when it holds the lock; returns once ZooKeeper has it."""
        self._writable()
        full = self._abs(path)
        if full == self.base:
            msg = "set() needs a path below the topology root, e.g. 'committed'"
            raise ValueError(msg)
        data = self._encode(path, value)
        parent = full.rsplit("/", 1)[0]

        def attempt() -> None:
            # One round trip when the znode is known to exist (set_data) or its parent is
            # (create); a wrong guess costs one more: NoNode -> create / make the parent,
            # NodeExists -> set_data. Each try is one fenced multi-op.
            fence = self._fence_path()
            update = full in self._known
            for _ in range(4):
                try:
                    if update:
                        self._commit(fence, lambda tx: tx.set_data(full, data))
                    else:
                        self._commit(fence, lambda tx: tx.create(full, data))
                    self._known.add(full)
                    return
                except _TreeChanged as e:
                    if isinstance(e.error, NodeExistsError):
                        update = True
                    elif update:
                        update = False     # deleted meanwhile: create it
                    else:
                        self._wait(self._client.ensure_path_async(parent))
            raise ForceRetryError()

        self._call(attempt, what=f"writing {full}")

    def delete(self, path: str) -> None:
        """Delete ``path`` and its subtree in one fenced multi-op (never the lock znode); absent
        is not an error."""
        self._writable()
        full = self._abs(path)

        def attempt() -> None:
            fence = self._fence_path()
            try:
                nodes = self._subtree(full) + [full]
            except NoNodeError:
                return
            if fence is not None:
                nodes = [n for n in nodes if n != fence and not fence.startswith(n + "/")]
                if not nodes:
                    return

            def ops(tx: Any) -> None:
                for n in nodes:
                    tx.delete(n)

            self._commit(fence, ops)
            self._known.difference_update(nodes)

        self._call(attempt, what=f"deleting {full}")

    def children(self, path: str) -> list[str]:
        """Names of the direct children of the znode at ``path``; [] when it does not exist."""
        full = self._abs(path)
        try:
            return list(self._call(lambda: self._wait(self._client.get_children_async(full)),
                                  what=f"listing {full}"))
        except NoNodeError:
            return []

    # -- the driver lock ------------------------------------------------------------------
    def acquire_lock(self, owner: str, *, wait: bool, timeout: float | None) -> None:
        """Take the topology's lock (a kazoo ``Lock`` under ``<root>/<topology>/lock``) for ``owner``;
        its znode then fences every write. Raises ``LockHeldError`` naming the holder when not
        taken (at once, or after ``timeout`` seconds with ``wait``)."""
        self._writable()
        if self._lost:
            why = "its ZooKeeper session expired"
            raise self._lost_error(why)
        if self._lock is not None:
            return  # already ours
        self._call(lambda: None, what="waiting for the connection to take the lock")
        lock = self._client.Lock(f"{self.base}/{LOCK_NODE}", owner)
        try:
            if wait:
                got = lock.acquire(blocking=True, timeout=timeout)
            else:
                got = lock.acquire(blocking=False)
        except LockTimeout:
            got = False
        except NoAuthError:
            msg = (
                f"ZooKeeper refused the lock of topology {self.topology_id!r} under "
                f"{self.base}: its znodes are protected by a digest ACL; give the right "
                "credentials (coordination_auth='user:password' / --coordination-auth)"
            )
            raise StateError(msg) from None
        except KazooException as e:
            msg = (
                f"could not take the lock of topology "
                f"{self.topology_id!r} at ZooKeeper {self.hosts}: "
                f"{e!r}"
            )
            raise StateUnavailableError(msg) from None
        if not got:
            holder = self.lock_holder() or "another driver"
            waited = f" after waiting {timeout}s" if wait else ""
            msg = (
                f"topology {self.topology_id!r} is locked by {holder}{waited} (ZooKeeper "
                f"{self.hosts}, {self.base}/{LOCK_NODE}): only one driver may run it. Stop "
                f"that driver, or wait for the lock (lock_wait_secs); a killed driver's lock "
                f"goes when its ZooKeeper session expires (about "
                f"{self.session_timeout:g}s)"
            )
            raise LockHeldError(msg)
        self._lock = lock
        self._fence = f"{lock.path}/{lock.node}"
        self._lost = False

    def release_lock(self) -> None:
        """Delete our lock znode (idempotent). Without a connection this does not wait:
        the znode is ephemeral and goes with the session, which ``close`` ends."""
        lock, fence = self._lock, self._fence
        self._lock = self._fence = None
        if lock is None or fence is None or self._closed or self._lost:
            return
        lock.is_acquired = False
        if not self._connected.is_set():
            log.warning("releasing the lock of topology %r without a connection: it goes "
                        "when the session ends", self.topology_id)
            return
        try:
            self._wait(self._client.delete_async(fence))
        except NoNodeError:
            pass
        except (KazooException, KazooTimeoutError) as e:
            log.warning("could not release the lock of topology %r: %r", self.topology_id, e)

    def lock_holder(self) -> str | None:
        """The owner at the head of the lock's queue (the holder), or None when no one holds it."""
        contenders = self.lock_contenders()
        return contenders[0] if contenders else None

    def lock_contenders(self) -> list[str]:
        """Owners in the lock's queue, holder first, then the drivers waiting for it."""
        lock_dir = f"{self.base}/{LOCK_NODE}"

        def contenders() -> list[str]:
            try:
                names = self._wait(self._client.get_children_async(lock_dir))
            except NoNodeError:
                return []
            out = []
            for _, name in sorted((m.group(1), n) for n in names
                                  if (m := _CONTENDER.search(n)) is not None):
                try:
                    data, _ = self._wait(self._client.get_async(f"{lock_dir}/{name}"))
                except NoNodeError:
                    continue  # released meanwhile
                out.append(data.decode("utf-8", "replace"))
            return out

        return self._call(contenders, what=f"reading {lock_dir}")

    def check_lock(self) -> None:
        """Raise ``LeadershipLostError`` unless our lock znode still exists in our session.

        While the connection is suspended this blocks (retrying) until it is back: a
        reconnect within the session timeout keeps the lock, an expired session does not.
        """
        if self._lost:
            why = "its ZooKeeper session expired"
            raise self._lost_error(why)
        fence = self._fence
        if fence is None:
            msg = (
                f"this driver does not hold the lock of topology "
                f"{self.topology_id!r}; call acquire_lock first"
            )
            raise LeadershipLostError(msg)
        stat = self._call(lambda: self._wait(self._client.exists_async(fence)),
                          what=f"checking {fence}")
        session = self._client.client_id
        if stat is None or session is None or stat.ephemeralOwner != session[0]:
            why = "its lock znode is gone: the session expired"
            raise self._lost_error(why)

    def watch(self, path: str, callback: Callable[[JSON | None], None]) -> bool:
        """A kazoo ``DataWatch`` on ``path``: ``callback(value)`` now and on every change
        (from kazoo's thread; a value that is not JSON is passed as None and logged)."""
        full = self._abs(path)

        def changed(data: bytes | None, stat: Any) -> None:
            try:
                callback(None if data is None else self._decode(full, data))
            except StateCorruptError as e:
                log.warning("%s", e)
                callback(None)

        self._client.DataWatch(full, changed)
        return True

    @property
    def holds_lock(self) -> bool:
        """True while this driver holds the lock and has not lost it (no server round trip)."""
        return self._fence is not None and not self._lost

    @property
    def session_id(self) -> int | None:
        """The current ZooKeeper session id (for tests and diagnostics)."""
        cid = self._client.client_id
        return None if cid is None else cid[0]

    def close(self) -> None:
        """Release the lock, then end the ZooKeeper session (idempotent)."""
        if self._closed:
            return
        self.release_lock()
        self._closed = True
        self._client.remove_listener(self._on_state)
        _stop(self._client)

    def __enter__(self) -> ZooKeeperTransactionalState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ZooKeeperTransactionalState(zk://{self.hosts}{self.base})"


def topology_ids(url: str, *, auth: str | None = None, connect_timeout: float = 10.0) -> list[str]:
    """The topology ids under the root of ``zk://h:p[,h:p]/<root>`` (``trident list``);
    read-only."""
    hosts, root, _ = parse_zk_url(url)
    client = KazooClient(hosts=hosts, auth_data=[("digest", auth)] if auth else None)
    try:
        client.start(timeout=connect_timeout)
    except KazooTimeoutError:
        msg = f"cannot connect to ZooKeeper at {hosts} (coordination {url!r}) within {connect_timeout:g}s"
        raise StateUnavailableError(msg) from None
    try:
        return sorted(client.get_children("/" + root))
    except NoNodeError:
        return []
    finally:
        _stop(client)


def _stop(client: KazooClient) -> None:
    try:
        client.stop()
        client.close()
    except Exception:  # pragma: no cover - best effort on shutdown
        pass
