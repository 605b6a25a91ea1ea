"""ZooKeeper coordinator state (docs/design.md §5): the only module that imports kazoo.

``zk://host:port[,host:port]/<root>`` keeps one topology's coordinator state under
``/<root>/<topology_id>/``; every value is a JSON document in the data of one znode
(never pickle: nothing read back is ever executed)::

    /<root>/<topology_id>/committed          {"txid": 12, "meta": ...}  last committed batch
    /<root>/<topology_id>/meta/<txid>        {"meta": ..., "attempts": n}  uncommitted txids
    /<root>/<topology_id>/lock/<uuid>__lock__<seq>   ephemeral, data = owner (kazoo Lock)

Guarantees, and how:

1. **One driver.** ``acquire_lock`` is kazoo's ``Lock`` recipe: an ephemeral sequential
   znode under ``lock``; the lowest one holds the lock, its data names the owner.
2. **Fencing.** Once the lock is held, every ``set`` and ``delete`` is a ZooKeeper
   multi-op (transaction) that first *checks that this driver's lock znode still exists*.
   The znode is ephemeral, so when the session expires ZooKeeper deletes it and every
   later write of this driver fails atomically -- an expired driver can never write,
   even if its client silently started a new session. The write raises
   ``LeadershipLostError``; so does ``check_lock``.
3. **Connection trouble.** While the connection is lost (kazoo state SUSPENDED) every
   operation is retried (``KazooRetry``) until the client reconnects -- within the
   session timeout the session, its lock and its watches survive. A retried write is
   re-planned from what the server has (exists -> set, else create), so an operation
   whose first try was applied before the connection dropped is not applied twice.
   Retrying stops after ``retry_deadline`` seconds with ``StateUnavailableError``.
4. **Auth.** With ``auth="user:password"`` the client adds that digest identity and
   creates the topology's znodes with ``creator: all, world: read``: other clients can
   read (``trident status``) but not change them.
"""

from state.zookeeper.client import ZooKeeperTransactionalState, topology_ids
from state.zookeeper.url import CONNECT_ATTEMPT_SECS, DEFAULT_ROOT, parse_zk_url

__all__ = ["ZooKeeperTransactionalState", "parse_zk_url", "topology_ids", "DEFAULT_ROOT", "CONNECT_ATTEMPT_SECS"]
