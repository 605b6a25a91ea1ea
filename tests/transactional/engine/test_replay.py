"""``trident replay`` and ``keep_batch_meta`` (real ZooKeeper and Redis): kept metadata of the
last N txids, batches re-emitted exactly into a scratch namespace, traces, refusals; the
production maps never written."""

from __future__ import annotations

import io
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from state.zookeeper import ZooKeeperTransactionalState
from transactional import TopologyConfig, run_topology
from transactional.ops.replay import ReplayError, parse_txids, replay
from transactional.ops.snapshot import read_snapshot

REPO = Path(__file__).resolve().parents[3]
FILE = str(REPO / "examples" / "transactional_words.py")
sys.path.insert(0, str(REPO / "examples"))
import transactional_words  # noqa: E402

pytestmark = pytest.mark.integration


def config(zk_url: str, redis_url: str, **kw: object) -> TopologyConfig:
    return TopologyConfig(executor="in-process", progress=False, coordination=zk_url, state=redis_url, **kw)


def words_of(txids: range) -> Counter:
    """The words batches ``txids`` of the example hold (each partition's rows [7(t-1), 7t))."""
    take = transactional_words.PARTITION_TAKE_PER_BATCH
    return Counter(w for rows in transactional_words.DATA.values() for t in txids
                   for w in rows[(t - 1) * take:t * take])


def kept(zk_url: str, tid: str) -> list[int]:
    s = ZooKeeperTransactionalState.from_url(zk_url, tid, read_only=True)
    try:
        return sorted(int(n) for n in s.children("kept"))
    finally:
        s.close()


def test_keep_batch_meta_keeps_the_last_n_txids_and_none_by_default(zk_url: str, redis_url: str) -> None:
    tid = f"words-{uuid.uuid4().hex[:8]}"
    run_topology(transactional_words.build_topology(tid), config(zk_url, redis_url, keep_batch_meta=3))
    assert kept(zk_url, tid) == [7, 8, 9]
    other = f"words-{uuid.uuid4().hex[:8]}"
    run_topology(transactional_words.build_topology(other), config(zk_url, redis_url))
    assert kept(zk_url, other) == []


def test_replay_re_emits_exactly_the_kept_batches_into_scratch_and_never_the_production_maps(
        zk_url: str, redis_url: str) -> None:
    tid = f"transactional-words-{uuid.uuid4().hex[:6]}"
    cfg = config(zk_url, redis_url, keep_batch_meta=3)
    run_topology(transactional_words.build_topology(tid), cfg)
    production = read_snapshot(redis_url, zk_url, tid)
    trace = io.StringIO()
    scratch = f"{tid}-replay"
    done = replay(FILE, tid, (8, 9), scratch, cfg, trace="count", out=trace)
    assert done["committed"] == [8, 9] and done["traced_tasks"] == 6      # 3 tasks x 2 txids
    got = read_snapshot(redis_url, zk_url, scratch)
    assert {w: v["count"] for w, v in got["words"].items()} == dict(words_of(range(8, 10)))
    assert read_snapshot(redis_url, zk_url, tid) == production          # untouched
    lines = trace.getvalue().splitlines()
    heads = [line for line in lines if line.startswith("trace count task ")]
    assert len(heads) == 6 and heads[0].startswith("trace count task 0 txid 8: ")
    n_in = sum(int(h.split(": ")[1].split()[0]) for h in heads)
    assert n_in == sum(words_of(range(8, 10)).values())
    assert sum(line.startswith("  in  spout[") for line in lines) == n_in


def test_replay_refuses_txids_whose_metadata_is_gone_saying_how_many_are_kept(zk_url: str, redis_url: str) -> None:
    tid = f"words-{uuid.uuid4().hex[:8]}"
    cfg = config(zk_url, redis_url, keep_batch_meta=2)
    run_topology(transactional_words.build_topology(tid), cfg)
    with pytest.raises(ReplayError) as e:
        replay(FILE, tid, (6, 9), f"{tid}-r", cfg)
    assert str(e.value) == (
        f"topology {tid!r}: the metadata of txid 6 is gone, so its batch cannot be re-emitted. It keeps the spout "
        "metadata of its last 2 committed txid(s) (keep_batch_meta = 2; kept now: 8..9). Replay kept txids, or run "
        "the topology with a larger keep_batch_meta (TopologyConfig, --set keep_batch_meta=N) to keep more")
    with pytest.raises(ReplayError, match=r"--into 'w' is the topology's own id: replay never writes the production"):
        replay(FILE, "w", (8, 9), "w", cfg)
    replay(FILE, tid, (9, 9), f"{tid}-r", cfg)
    with pytest.raises(ReplayError, match=r"already holds a run; replay starts from an empty namespace"):
        replay(FILE, tid, (9, 9), f"{tid}-r", cfg)


def test_txid_ranges_parse_or_say_the_form() -> None:
    assert parse_txids("3..5") == (3, 5) and parse_txids("7") == (7, 7)
    with pytest.raises(ReplayError, match=r"--txids '5..3': give a range of txids A..B with 1 <= A <= B"):
        parse_txids("5..3")
