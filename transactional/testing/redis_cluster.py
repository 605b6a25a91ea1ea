"""A real Redis Cluster for tests: ``masters`` masters with ``replicas`` replicas each, one
``redis-server --cluster-enabled yes`` per node on free loopback ports, joined by
``redis-cli --cluster create``.

    with ManagedRedisCluster(masters=3, replicas=1) as cluster:
        cluster.url                 # 'redis+cluster://127.0.0.1:p1,127.0.0.1:p2,...'
        cluster.kill_master(0)      # SIGKILL the master of slot 0; returns once a replica took over
        cluster.reshard(100, source=0, target=1)   # move 100 slots (redis-cli --cluster reshard)

Nodes run without persistence (``--save '' --appendonly no``): a killed master is replaced
by its replica, which holds what reached it. ``cluster-node-timeout`` is short (1 s by
default) so a failover takes a few seconds. Needs ``redis-server`` and ``redis-cli``.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from transactional.testing._process import free_port, wait_until
from transactional.testing.redis import ManagedRedis, redis_server_binary

__all__ = ["ManagedRedisCluster", "cluster_url"]


def cluster_url(ports: list[int]) -> str:
    """``redis+cluster://127.0.0.1:p1,127.0.0.1:p2,...`` of loopback nodes.

    >>> cluster_url([7000, 7001])
    'redis+cluster://127.0.0.1:7000,127.0.0.1:7001'
    """
    return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in ports)


def _low_port() -> int:
    """A free loopback port below 55536 (Redis Cluster refuses higher client ports: its bus
    port used to be the client port + 10000), tried at random below the ephemeral range."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 32000)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    msg = "no free loopback port in 20000-32000 for a Redis Cluster node"
    raise RuntimeError(msg)


def _redis_cli() -> str:
    found = shutil.which("redis-cli") or ("/usr/bin/redis-cli" if Path("/usr/bin/redis-cli").exists() else None)
    if found is None or redis_server_binary() is None:
        msg = "redis-server/redis-cli are not installed; install them with `apt-get install -y redis-server`"
        raise RuntimeError(msg)
    return found


class ManagedRedisCluster:
    """``masters`` masters and ``masters * replicas`` replicas on loopback (see the module
    docstring). ``start()`` returns once every node reports ``cluster_state:ok`` and every
    replica is in sync; ``destroy()`` stops every node and removes the directories."""

    def __init__(self, masters: int = 3, replicas: int = 1, *, node_timeout_ms: int = 1000,
                 workdir: str | Path | None = None) -> None:
        if masters < 3:
            msg = f"a Redis Cluster needs at least 3 masters, not {masters}"
            raise ValueError(msg)
        self.masters, self.replicas, self.node_timeout_ms = masters, replicas, node_timeout_ms
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="trident-redis-cluster-"))
        self.nodes: list[ManagedRedis] = [
            ManagedRedis(port=_low_port(), workdir=self.workdir / f"node{i}", appendonly=False,
                         extra_args=["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                     "--cluster-port", str(free_port()),
                                     "--cluster-node-timeout", str(node_timeout_ms),
                                     "--cluster-replica-validity-factor", "0"])
            for i in range(masters * (1 + replicas))]
        self._paused: set[int] = set()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> ManagedRedisCluster:
        """Start every node and create the cluster (``redis-cli --cluster create``)."""
        cli = _redis_cli()
        for n in self.nodes:
            n.start()
        subprocess.run([cli, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
                        "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                       check=True, capture_output=True, timeout=60)
        self.wait_ok()
        return self

    def wait_ok(self, timeout: float = 60.0) -> None:
        """Wait until every running node reports ``cluster_state:ok``, sees ``masters``
        masters serving all 16384 slots, and every replica's link to its master is up."""
        wait_until(self._healthy, timeout, interval=0.1, what="the Redis Cluster to be ok")

    def _healthy(self) -> bool:
        try:
            for n in self.running_nodes():
                c = self._client(n)
                try:
                    info = c.execute_command("CLUSTER", "INFO").decode()
                    if "cluster_state:ok" not in info or f"cluster_size:{self.masters}" not in info:
                        return False
                    rep = c.info("replication")
                    if rep.get("role") == "slave" and rep.get("master_link_status") != "up":
                        return False
                finally:
                    c.connection_pool.disconnect()
            return True
        except OSError:
            return False
        except Exception:  # a node loading or refusing while the cluster settles
            return False

    def destroy(self) -> None:
        """Stop every node and remove the cluster's directory."""
        for n in self.nodes:
            n.destroy()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> ManagedRedisCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    # -- addresses ---------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """``redis+cluster://127.0.0.1:p1,...`` naming every node (a client needs only one)."""
        return cluster_url([n.port for n in self.nodes])

    def running_nodes(self) -> list[ManagedRedis]:
        """The nodes whose process runs (and is not paused)."""
        return [n for n in self.nodes if n.running and n.port not in self._paused]

    def _client(self, node: ManagedRedis) -> Any:
        import redis  # the test harness may import redis: it is not the product's state layer

        return redis.Redis(host="127.0.0.1", port=node.port, socket_timeout=2.0, socket_connect_timeout=1.0)

    def slots(self) -> list[tuple[int, int, int]]:
        """``(first slot, last slot, master port)`` of every slot range, as a running node sees it."""
        c = self._client(self.running_nodes()[0])
        try:
            return sorted((int(r[0]), int(r[1]), int(r[2][1])) for r in c.execute_command("CLUSTER", "SLOTS"))
        finally:
            c.connection_pool.disconnect()

    def master_ports(self) -> list[int]:
        """The ports of the masters, ordered by their first slot."""
        seen: list[int] = []
        for _, _, port in self.slots():
            if port not in seen:
                seen.append(port)
        return seen

    def node(self, port: int) -> ManagedRedis:
        """The node on ``port``."""
        return next(n for n in self.nodes if n.port == port)

    # -- faults ------------------------------------------------------------------------------
    def kill_master(self, i: int, timeout: float = 60.0) -> ManagedRedis:
        """SIGKILL master ``i`` (by the order of their first slot) and wait until one of its
        replicas has taken over its slots and the cluster is ok again; returns the killed node."""
        victim, port = self.kill_master_now(i)
        self.wait_failover(port, timeout)
        return victim

    def replica_of(self, i: int) -> ManagedRedis:
        """A running replica of master ``i`` (by ``master_ports`` order)."""
        port = self.master_ports()[i]
        for n in self.running_nodes():
            c = self._client(n)
            try:
                rep = c.info("replication")
            finally:
                c.connection_pool.disconnect()
            if rep.get("role") == "slave" and int(rep.get("master_port", 0)) == port:
                return n
        msg = f"master {i} (port {port}) has no running replica"
        raise RuntimeError(msg)

    def pause(self, node: ManagedRedis) -> None:
        """SIGSTOP ``node`` (it keeps its connections and answers nothing: a stalled replica)."""
        assert node.proc is not None
        os.killpg(node.proc.pid, signal.SIGSTOP)
        self._paused.add(node.port)

    def resume(self, node: ManagedRedis) -> None:
        """SIGCONT a paused node."""
        assert node.proc is not None
        os.killpg(node.proc.pid, signal.SIGCONT)
        self._paused.discard(node.port)

    def kill_master_now(self, i: int) -> tuple[ManagedRedis, int]:
        """SIGKILL master ``i`` without waiting for a failover; returns the node and its port
        (``wait_failover(port)`` waits)."""
        port = self.master_ports()[i]
        victim = self.node(port)
        victim.kill()
        return victim, port

    def wait_failover(self, port: int, timeout: float = 60.0) -> None:
        """Wait until no slot is served by the master that was on ``port`` and the cluster is ok."""
        wait_until(lambda: self._served_without(port), timeout, interval=0.1,
                   what=f"a replica to take over from the killed master on port {port}")

    def revive(self, node: ManagedRedis, timeout: float = 60.0) -> None:
        """Start a killed node again (its ``nodes.conf`` kept): it rejoins as a replica of
        the master that replaced it; returns once the cluster is ok and in sync."""
        node.start()
        self.wait_ok(timeout)

    def _served_without(self, port: int) -> bool:
        try:
            return port not in {p for _, _, p in self.slots()} and self._healthy_after_kill()
        except Exception:
            return False

    def _healthy_after_kill(self) -> bool:
        for n in self.running_nodes():
            c = self._client(n)
            try:
                if "cluster_state:ok" not in c.execute_command("CLUSTER", "INFO").decode():
                    return False
            finally:
                c.connection_pool.disconnect()
        return True

    def reshard(self, slots: int, source: int, target: int, timeout: float = 120.0) -> None:
        """Move ``slots`` slots from master ``source`` to master ``target`` (indexes of
        ``master_ports``) with ``redis-cli --cluster reshard``, keys and all."""
        ports = self.master_ports()
        ids = {}
        for p in (ports[source], ports[target]):
            c = self._client(self.node(p))
            try:
                ids[p] = c.execute_command("CLUSTER", "MYID").decode()
            finally:
                c.connection_pool.disconnect()
        subprocess.run([_redis_cli(), "--cluster", "reshard", f"127.0.0.1:{ports[source]}",
                        "--cluster-from", ids[ports[source]], "--cluster-to", ids[ports[target]],
                        "--cluster-slots", str(slots), "--cluster-yes", "--cluster-pipeline", "100"],
                       check=True, capture_output=True, timeout=timeout)

    def wait_replicated(self, timeout: float = 10.0) -> None:
        """Wait until every running replica has the replication offset of its master."""
        deadline = time.monotonic() + timeout
        for n in self.running_nodes():
            c = self._client(n)
            try:
                if c.info("replication").get("role") == "master":
                    left = max(0.0, deadline - time.monotonic())
                    c.execute_command("WAIT", self.replicas, int(left * 1000))
            finally:
                c.connection_pool.disconnect()

    def logs(self) -> str:
        """The tail of every node's log."""
        return "\n".join(f"--- node :{n.port}\n{n.logs(2000)}" for n in self.nodes)
