"""A real ZooKeeper ensemble for tests: ``nodes`` ZooKeeper 3.8 server processes on loopback,
each with its own client, peer and election ports and its own data directory (``myid``).

    with ManagedZooKeeperEnsemble(nodes=3) as zk:
        url = zk.url("my-tests")       # 'zk://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3/my-tests'
        leader = zk.leader()           # the index of the node that leads now
        zk.kill(leader)                # SIGKILL; the two others elect a new leader
        zk.wait_quorum()               # ... and serve again
        zk.restart(leader)             # back as a follower, same data directory

A majority must run for the ensemble to serve (2 of 3). Ticks are short (250 ms by
default) so elections take about a second here.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from transactional.testing._process import free_port, wait_until
from transactional.testing.zookeeper import ManagedZooKeeper

__all__ = ["ManagedZooKeeperEnsemble", "EnsembleMember"]


class EnsembleMember(ManagedZooKeeper):
    """One server of an ensemble: ``ManagedZooKeeper`` with ``server.N`` lines and a ``myid``.
    Ready when it serves as ``leader`` or ``follower`` (only with a quorum)."""

    def __init__(self, myid: int, peers: list[tuple[int, int, int]], workdir: Path, *,
                 tick_time_ms: int) -> None:
        super().__init__(peers[myid - 1][0], workdir, tick_time_ms=tick_time_ms)
        self.myid = myid
        self.peers = peers     # (client, peer, election) ports of every member, by myid - 1

    def write_config(self) -> Path:
        """``zoo.cfg`` of a member: the single server's settings, the ensemble's
        ``server.N=127.0.0.1:peer:election`` lines and ``initLimit``/``syncLimit``."""
        cfg = super().write_config()
        (self.workdir / "data" / "myid").write_text(f"{self.myid}\n")
        lines = ["initLimit=10", "syncLimit=4", "reconfigEnabled=false", "standaloneEnabled=false"]
        lines += [f"server.{i + 1}=127.0.0.1:{peer}:{election}" for i, (_, peer, election) in enumerate(self.peers)]
        with cfg.open("a") as f:
            f.write("\n".join(lines) + "\n")
        return cfg

    def command(self) -> list[str]:
        """The java command line of a quorum peer (``QuorumPeerMain``)."""
        cmd = super().command()
        return ["org.apache.zookeeper.server.quorum.QuorumPeerMain" if c.endswith(".ZooKeeperServerMain") else c for c in cmd]

    @property
    def mode(self) -> str:
        """``leader``, ``follower``, or ``""`` (not serving: no quorum, electing, down)."""
        for line in self.four_letter("srvr", 0.5).splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return ""

    def is_ready(self) -> bool:
        """Serving in the ensemble: ``ruok`` answered and mode leader or follower."""
        return self.mode in ("leader", "follower")


class ManagedZooKeeperEnsemble:
    """``nodes`` ZooKeeper servers forming one ensemble (see the module docstring).
    ``start()`` launches them all and returns once each serves; ``destroy()`` stops every
    node and removes the directories."""

    start_timeout = 60.0

    def __init__(self, nodes: int = 3, *, tick_time_ms: int = 250, workdir: str | Path | None = None) -> None:
        if nodes < 3 or nodes % 2 == 0:
            msg = f"an ensemble here has an odd number of nodes, at least 3 (got {nodes})"
            raise ValueError(msg)
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="trident-zk-ensemble-"))
        ports = [(free_port(), free_port(), free_port()) for _ in range(nodes)]
        self.nodes = [EnsembleMember(i + 1, ports, self.workdir / f"zk{i + 1}", tick_time_ms=tick_time_ms)
                      for i in range(nodes)]

    def start(self) -> ManagedZooKeeperEnsemble:
        """Launch every node, then wait until each serves (a leader was elected)."""
        for n in self.nodes:
            if not n.running:
                n.launch()
        for n in self.nodes:
            n.wait_ready()
        return self

    @property
    def hosts(self) -> str:
        """``127.0.0.1:p1,127.0.0.1:p2,...``: the connect string of every node."""
        return ",".join(n.hosts for n in self.nodes)

    def url(self, root: str = "trident") -> str:
        """The coordination URL naming every node, e.g. ``zk://127.0.0.1:p1,...,127.0.0.1:p3/trident``."""
        return f"zk://{self.hosts}/{root.strip('/')}"

    def leader(self) -> int:
        """The index of the node that leads now; ``RuntimeError`` when none does."""
        for i, n in enumerate(self.nodes):
            if n.running and n.mode == "leader":
                return i
        msg = f"no node of the ensemble leads now (modes: {[n.mode for n in self.nodes]})"
        raise RuntimeError(msg)

    def followers(self) -> list[int]:
        """The indexes of the running nodes that follow now."""
        return [i for i, n in enumerate(self.nodes) if n.running and n.mode == "follower"]

    def kill(self, node: int) -> None:
        """SIGKILL node ``node`` (its data directory stays for ``restart``)."""
        self.nodes[node].kill()

    def restart(self, node: int) -> None:
        """Start node ``node`` again (after ``kill``) and wait until it serves."""
        self.nodes[node].stop()
        self.nodes[node].start()

    def wait_quorum(self, timeout: float | None = None) -> int:
        """Wait until one running node leads and every other running node follows; returns
        the leader's index."""
        def settled() -> bool:
            modes = [n.mode for n in self.nodes if n.running]
            return modes.count("leader") == 1 and modes.count("follower") == len(modes) - 1

        wait_until(settled, timeout or self.start_timeout, interval=0.1, what="the ZooKeeper ensemble to elect a leader")
        return self.leader()

    def destroy(self) -> None:
        """Stop every node and remove the ensemble's directory."""
        for n in self.nodes:
            n.destroy()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def logs(self) -> str:
        """The tail of every node's log."""
        return "\n".join(f"--- zk{n.myid} :{n.port}\n{n.logs(2000)}" for n in self.nodes)

    def __enter__(self) -> ManagedZooKeeperEnsemble:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.destroy()
