"""transactional.engine.routing: one function per grouping, the same placement on every path. The
expected tasks below are what the engine chose before routing was one module (a task run
again, a restarted topology and a moved stateful bolt all rely on them staying put)."""

from __future__ import annotations

import pyarrow as pa

from transactional.engine import routing

WORDS = [(None, f"w{i}", i) for i in range(8)]


def placed(grouping: str, n: int, field_idx: list[int] = (), **kw) -> list[list[str]]:
    lists: list[list] = [[] for _ in range(n)]
    send = routing.grouper(grouping, [l.append for l in lists], field_idx, **kw)
    for v in WORDS:
        send(v)
    return [[v[1] for v in l] for l in lists]


def test_each_grouping_places_tuples_where_the_engine_always_did():
    assert placed("fields", 3, [1]) == [["w0"], ["w1", "w2", "w4", "w7"], ["w3", "w5", "w6"]]
    assert placed("fields", 3, [1, 2]) == [["w5"], ["w0", "w1", "w3", "w6"], ["w2", "w4", "w7"]]
    assert placed("shuffle", 4, start=routing.shuffle_start(1, 5)) == [
        ["w3", "w7"], ["w0", "w4"], ["w1", "w5"], ["w2", "w6"]]
    assert placed("none", 4, start=routing.shuffle_start(2, 5)) == [
        ["w0", "w4"], ["w1", "w5"], ["w2", "w6"], ["w3", "w7"]]
    assert placed("global", 3) == [[v[1] for v in WORDS], [], []]
    assert placed("all", 2) == [[v[1] for v in WORDS]] * 2
    assert placed("local_or_shuffle", 3, task=2, local=True) == [[], [], [v[1] for v in WORDS]]
    assert placed("local_or_shuffle", 4, task=1, start=routing.shuffle_start(1, 5)) == placed(
        "shuffle", 4, start=routing.shuffle_start(1, 5))
    assert [routing.stable_hash(x) for x in ["w0", 7, b"x", ("a", 1), None, True, 2.5]] == [
        24353445, 10946727, 3533047, 2663982, 2021149, 1458195, 21070585]


def test_the_tasks_of_one_component_begin_their_shuffle_at_consumer_tasks_apart():
    """Each task of a component starts its round robin at another consumer task (4 or 5
    consumer tasks: all different), and the next txid moves each start one further; with
    3 consumer tasks they all start at the same one (routing.SHUFFLE_SPREAD's comment)."""
    def first(task: int, txid: int, n: int) -> int:
        return routing.choose_tasks("shuffle", n, start=routing.shuffle_start(task, txid))(WORDS[0])[0]

    assert [first(t, 9, 4) for t in range(4)] == [2, 1, 0, 3]
    assert [first(t, 10, 4) for t in range(4)] == [3, 2, 1, 0]
    assert [first(t, 9, 5) for t in range(5)] == [0, 3, 1, 4, 2]
    assert [first(t, 9, 3) for t in range(3)] == [1, 1, 1]


def test_core_topologies_choose_the_tasks_the_same_functions_place_tuples_on():
    choose = routing.choose_tasks("shuffle", 4, start=routing.shuffle_start(2, 9))
    assert [choose(v) for v in WORDS[:5]] == [(0,), (1,), (2,), (3,), (0,)]
    choose = routing.choose_tasks("fields", 3, [1])
    assert [choose(v) for v in WORDS] == [(0,), (1,), (1,), (2,), (1,), (2,), (2,), (1,)]
    assert routing.choose_tasks("all", 3)(WORDS[0]) == (0, 1, 2)
    assert routing.choose_tasks("global", 3)(WORDS[0]) == (0,)
    assert routing.choose_tasks("local_or_shuffle", 3, task=1, local=True)(WORDS[0]) == (1,)


def test_rows_of_an_arrow_batch_go_where_the_same_tuples_would():
    b = pa.record_batch({"word": [v[1] for v in WORDS], "n": [v[2] for v in WORDS]})
    for keys, idx in ((["word"], [1]), (["word", "n"], [1, 2])):
        parts = routing.split_batch("fields", b, 3, keys, task=0, local=False)
        by_task = [[] for _ in range(3)]
        for t, part in parts:
            by_task[t] = part.column(0).to_pylist()
        assert by_task == placed("fields", 3, idx)
    assert [(t, p.num_rows) for t, p in routing.split_batch("shuffle", b, 3, [], task=2, local=False)] == [
        (2, 3), (0, 3), (1, 2)]
    assert [(t, p.num_rows) for t, p in routing.split_batch("all", b, 2, [], task=1, local=False)] == [(0, 8), (1, 8)]
    assert [t for t, _ in routing.split_batch("local_or_shuffle", b, 3, [], task=1, local=True)] == [1]
    assert [t for t, _ in routing.split_batch("global", b, 3, [], task=1, local=False)] == [0]


def test_direct_grouping_sends_to_the_task_named():
    lists: list[list] = [[], []]
    routing.direct([l.append for l in lists])(1, WORDS[0])
    assert lists == [[], [WORDS[0]]]
