"""A run never silently drops what an earlier run committed (real ZooKeeper and Redis):
the coordinator records which user state its committed txids were written to, and a run
whose state is another one -- or durable coordination paired with ``memory://`` state --
is refused before anything is written, naming both and ``--accept-state-loss``."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

from state.zookeeper import ZooKeeperTransactionalState
from transactional import Fields, TopologyBuilder, TopologyConfig, TopologyFailedError, run_topology
from transactional.exceptions import StateLossError
from transactional.ops.cli import _parser, config_from_args

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
import trident_word_count  # noqa: E402

import transactional_words  # noqa: E402

pytestmark = pytest.mark.integration


def config(coordination: str, state: str, **kw: object) -> TopologyConfig:
    return TopologyConfig(executor="in-process", progress=False, coordination=coordination, state=state,
                          lock_wait_secs=0, **kw)


def recorded(zk_url: str, tid: str, path: str) -> object:
    s = ZooKeeperTransactionalState.from_url(zk_url, tid, read_only=True)
    try:
        return s.get(path)
    finally:
        s.close()


def test_a_run_on_other_state_than_its_committed_txids_is_refused_naming_both(zk_url: str, redis_url: str) -> None:
    tid = f"words-{uuid.uuid4().hex[:8]}"
    first = run_topology(transactional_words.build_topology(tid), config(zk_url, "memory://", accept_state_loss=True))
    last = first.last_txid
    assert last is not None and last > 0
    assert recorded(zk_url, tid, "state") == {"kind": "memory", "location": ""}
    location = redis_url.removeprefix("redis://")
    with pytest.raises(StateLossError) as e:
        run_topology(transactional_words.build_topology(tid), config(zk_url, redis_url))
    assert str(e.value) == (
        f"topology {tid!r} committed txids up to {last} into state memory://, but this run's state is "
        f"redis://{location}: it would resume after txid {last} and what they wrote would be lost without a word. "
        "Run it with the state it committed to (--state memory://), or accept the loss knowingly with "
        "--accept-state-loss (TopologyConfig accept_state_loss=True)")
    assert recorded(zk_url, tid, "committed")["txid"] == last          # nothing written
    assert recorded(zk_url, tid, "state") == {"kind": "memory", "location": ""}
    # accepted knowingly: the run goes on, and from now on its state is Redis
    run_topology(transactional_words.build_topology(tid), config(zk_url, redis_url, accept_state_loss=True))
    assert recorded(zk_url, tid, "state") == {"kind": "redis", "location": location}
    # the same Redis through another spelling of its URL is the same state; another db is not
    host_port = location.split("/")[0]
    run_topology(transactional_words.build_topology(tid), config(zk_url, f"redis://{host_port}"))
    with pytest.raises(StateLossError, match=rf"into state redis://{host_port}/0, but this run's state is "
                                             rf"redis://{host_port}/1: "):
        run_topology(transactional_words.build_topology(tid), config(zk_url, f"redis://:pw@{host_port}/1"))


def test_durable_coordination_with_memory_state_is_refused_before_the_first_map_write(zk_url: str) -> None:
    tid = f"words-{uuid.uuid4().hex[:8]}"
    with pytest.raises(TopologyFailedError) as e:
        run_topology(transactional_words.build_topology(tid), config(zk_url, "memory://"))
    assert (f"topology {tid!r}: coordination {zk_url} is durable but state memory:// is not: a restart would resume "
            "after the txids this run commits while their state is gone with this process. Use a durable state "
            "(--state redis://host:port/db, TopologyConfig state=...), or accept the loss knowingly with "
            "--accept-state-loss (accept_state_loss=True)") in str(e.value)
    assert recorded(zk_url, tid, "committed") is None and recorded(zk_url, tid, "maps") is None


def test_a_trident_topology_with_zk_and_memory_state_is_refused_before_its_first_state_write(zk_url: str) -> None:

    with pytest.raises(TopologyFailedError, match=r"is durable but state memory:// is not"):
        run_topology(trident_word_count.build_topology(), config(zk_url, "memory://"))
    assert recorded(zk_url, "trident-word-count", "maps") is None


def test_a_stateful_core_topology_with_zk_and_memory_state_is_refused_at_start(zk_url: str) -> None:
    from spouts import MemorySpout

    from test_core_topology import WordCount

    tid = f"core-{uuid.uuid4().hex[:8]}"
    b = TopologyBuilder(tid)
    b.set_spout("words", MemorySpout([("cat",), ("dog",)], Fields("word"), name=tid), 1)
    b.set_bolt("count", WordCount(), 2).fields_grouping("words", Fields("word"))
    with pytest.raises(StateLossError, match=r"is durable but state memory:// is not"):
        run_topology(b, config(zk_url, "memory://"))
    assert recorded(zk_url, tid, "checkpoint") is None and recorded(zk_url, tid, "stateful") is None
    r = run_topology(b, config(zk_url, "memory://", accept_state_loss=True))
    assert r.key_value_state("count") == {"cat": 1, "dog": 1}


def test_the_cli_flag_sets_accept_state_loss() -> None:
    args = _parser().parse_args(["run", "x.py", "--accept-state-loss"])
    assert config_from_args(args).accept_state_loss is True
    assert config_from_args(_parser().parse_args(["run", "x.py"])).accept_state_loss is False
