"""Counter additions staged by the processing job and applied by reference at commit: a
txid's commit with no second Spark job and no data through the driver (docs/redis.md,
"Staged commits").

1. **Stage** (in the processing job, on the executors). Each task that ends with partial
   counts writes them beside the counter map, one staged part per hash slot (on one Redis:
   one part), keyed by txid, attempt and task: ``<prefix>~staged:<t>:<a>:<task>{<tag>}``.
   The staging checks each slot's fence first: a task of a driver whose epoch was
   superseded stages nothing (``LeadershipLostError``). A part expires after
   ``stage_ttl_ms`` (an attempt that never commits leaves nothing for good). The task
   returns a ``StagedRef`` (its id and slots): a few hundred bytes, whatever the keys.
2. **Apply** (the driver's commit of txid t, after t-1 is recorded). From the refs of every
   task of the attempt, the driver sends each node one script naming the parts of its
   slots, the nodes at once: the node checks every slot's fence and that every part is
   there, then adds each slot's parts (merged) with the counter map's own add
   (``LUA_FENCED_ADD``: fence, applied marker, record of the values before) and deletes
   them. On a cluster each node's script is followed by ``WAIT`` for its replicas, as every
   write of ``RedisClusterMapBacking`` is.
3. **Record** t in the coordinator (the caller's step, after ``apply`` returned).

What a crash leaves: staged parts only (before step 2: nothing in the map; the replay
stages and applies anew), or some nodes' slots added (a driver killed during step 2:
their slots' markers say t, so the replay's apply skips them and adds the rest), or
everything added and t not recorded (the replay skips every slot). A part lost before it
was applied (a master failed over before its replica had it, the TTL passed) fails the
apply with ``StateUnavailableError`` naming it: the batch is replayed and staged again.
Exactly once holds for transactional spouts (a replay stages the identical batch), as for
``CounterMap``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from redis.crc import key_slot

from state.errors import ConfigError, StateCorruptError, StateUnavailableError
from state.keys import encode_key
from state.map import APPLIED_KEY, PRIOR_KEY, Fence, fence_error, open_map_backing
from state.redis import RedisMapBacking
from state.redis_cluster import RedisClusterMapBacking, slot_tag
from state.serializers import _dumps_batch
from state.staged_scripts import LUA_APPLY_STAGED, LUA_STAGE, Staged

__all__ = ["StagedCounters", "StagedRef", "STAGE_TTL_MS"]

#: How long a staged part lives when no commit applies it (ms): a day.
STAGE_TTL_MS = 86_400_000


@dataclass(frozen=True)
class StagedRef:
    """What a processing task hands the driver for the commit: which task of which attempt
    staged parts, and in which slots (``[0]`` on one Redis)."""

    txid: int
    attempt: int
    task: int
    slots: tuple[int, ...]
    keys: int = 0


class StagedCounters:
    """A counter map's staging area (module docstring): ``stage`` on the executors,
    ``apply`` on the driver. Values end in the layout of ``CounterMap`` (``state.map``),
    so the map, ``CommittedReader`` and ``redis-cli`` read them as any counter map's.
    Picklable (ships with the processing job; reconnects on first use).

    Redis or Redis Cluster only: staged parts live where the executors and the driver both
    reach them."""

    def __init__(self, url: str, topology_id: str, name: str, *, stage_ttl_ms: int = STAGE_TTL_MS,
                 **options: Any) -> None:
        backing = open_map_backing(url, f"{topology_id}:{name}", fence_scope=topology_id, **options)
        if not isinstance(backing, RedisMapBacking):
            msg = (f"staged commits need user state that executors and the driver both reach "
                   f"(redis:// or redis+cluster://), not {url.split(':', 1)[0]}://")
            raise ConfigError(msg)
        self.backing = backing
        self.name = name
        self.cluster = isinstance(backing, RedisClusterMapBacking)
        self.stage_ttl_ms = stage_ttl_ms

    # -- names -------------------------------------------------------------------------------------
    def _in_slot(self, key: str, slot: int) -> str:
        return f"{key}{{{slot_tag(slot)}}}" if self.cluster else key

    def _part_key(self, txid: int, attempt: int, task: int, slot: int) -> str:
        return self._in_slot(f"{self.backing.prefix}~staged:{txid}:{attempt}:{task}", slot)

    def _slot_keys(self, slot: int) -> list[str]:
        """A slot's fence, applied marker and record (``RedisClusterMapBacking``'s layout)."""
        p = self.backing.prefix
        return [self._in_slot(k, slot) for k in (self.backing.fence_key, p + APPLIED_KEY, p + PRIOR_KEY)]

    def slot_of(self, full_key: str) -> int:
        """The slot a stored key is in (0 on one Redis)."""
        return key_slot(full_key.encode()) if self.cluster else 0

    # -- step 1: stage ---------------------------------------------------------------------------
    def stage(self, txid: int, attempt: int, task: int, epoch: int, keys: Sequence[Any],
              deltas: Sequence[int]) -> StagedRef:
        """Stage ``deltas[i]`` for ``keys[i]`` (integers; keys distinct within the call) as
        task ``task``'s part of attempt ``attempt`` of ``txid``; ``LeadershipLostError`` when
        a newer driver epoch fenced the map. Returns the ``StagedRef`` the driver applies."""
        prefix = self.backing.prefix
        by_slot: dict[int, tuple[list[str], list[str]]] = {}
        for k, d in zip(keys, deltas, strict=True):
            if type(d) is not int:
                msg = (f"staged counter map {self.name!r}: key {k!r} has delta {d!r}; staged adds are "
                       "integers (use CounterMap for floats)")
                raise TypeError(msg)
            name = prefix + encode_key(k)
            ks, ds = by_slot.setdefault(self.slot_of(name), ([], []))
            ks.append(name)
            ds.append(str(d))
        parts = {s: (self._slot_keys(s)[0], self._part_key(txid, attempt, task, s), _dumps_batch([ks, ds]))
                 for s, (ks, ds) in by_slot.items()}

        def args(slots: list[int]) -> list[Any]:
            return [str(epoch), str(self.stage_ttl_ms), *(x for s in slots for x in parts[s])]

        self._run(list(parts), args, "staging", 0, Fence(epoch, txid))
        return StagedRef(txid, attempt, task, tuple(sorted(parts)), len(keys))

    # -- step 2: apply ---------------------------------------------------------------------------
    def apply(self, txid: int, epoch: int, refs: Sequence[StagedRef], *,
              after_node: Callable[[int], None] | None = None) -> None:
        """Add every part that ``refs`` name to the map, each node's slots atomically checked
        first (module docstring); returns once every node (and, on a cluster, its replicas)
        took its slots. ``LeadershipLostError`` / ``StateAheadError`` when a fence refuses;
        ``StateUnavailableError`` when a part is gone (the batch must be replayed).
        ``after_node(i)``: the nodes are applied one after another, and it is called after
        the i-th (fault injection: a driver killed between nodes); otherwise all at once."""
        by_slot: dict[int, list[str]] = {}
        for r in refs:
            if r.txid != txid:
                msg = f"a staged part of txid {r.txid} handed to the commit of txid {txid}"
                raise ValueError(msg)
            for s in r.slots:
                by_slot.setdefault(s, []).append(self._part_key(r.txid, r.attempt, r.task, s))
        if not by_slot:
            return

        def args(slots: list[int]) -> list[Any]:
            out: list[Any] = [str(epoch), str(txid), "int"]
            for s in slots:
                out += [*self._slot_keys(s), len(by_slot[s]), *by_slot[s]]
            return out

        wait = cast(RedisClusterMapBacking, self.backing).wait_replicas if self.cluster else 0
        fence = Fence(epoch, txid)
        if after_node is None:
            self._run(list(by_slot), args, "applying staged adds to", wait, fence)
            return
        for i, node_slots in enumerate(self._by_node(list(by_slot))):
            self._run(node_slots, args, "applying staged adds to", wait, fence)
            after_node(i)

    def _by_node(self, slots: list[int]) -> list[list[int]]:
        """``slots`` grouped by the node serving each now (one group on one Redis)."""
        if not self.cluster:
            return [slots]
        nm = cast(RedisClusterMapBacking, self.backing).cluster.nodes_manager
        out: dict[str, list[int]] = {}
        for s in slots:
            out.setdefault(nm.get_node_from_slot(s).name, []).append(s)
        return [out[n] for n in sorted(out)]

    # -- one script per node -------------------------------------------------------------------
    def _run(self, slots: list[int], args: Any, what: str, wait: int, fence: Fence) -> None:
        script = LUA_STAGE if what == "staging" else LUA_APPLY_STAGED
        if self.cluster:
            b = cast(RedisClusterMapBacking, self.backing)

            def make(node_slots: list[int]) -> tuple[str, list[Any], int, str]:
                return script, args(node_slots), wait, self._slot_keys(node_slots[0])[0]

            replies = [reply for _, reply in b.on_nodes(slots, make, what)]
        else:
            replies = [self.backing.run_script(what, script, [self.backing.fence_key], args(slots))]
        for reply in replies:
            self._check(reply, fence)

    def _check(self, reply: Any, fence: Fence) -> None:
        code = int(reply[0])
        if code == Staged.DONE:
            return
        if code == Staged.FENCED:
            fe, ft = int(reply[2]), int(reply[3])
            reason = "epoch" if fence.epoch is not None and fe > fence.epoch else "txid"
            raise fence_error(reason, f"counter map {self.name!r} at {self.backing.address}", fe, ft, fence)
        if code == Staged.MISSING:
            msg = (f"staged part {reply[2]!r} of counter map {self.name!r} at {self.backing.address} is gone "
                   "(expired, or lost in a failover before its replica had it); the batch fails and is "
                   "replayed, staging it again")
            raise StateUnavailableError(msg)
        msg = f"counter map {self.name!r} at {self.backing.address} refused a staged add: {reply[2:]!r}"
        raise StateCorruptError(msg)
