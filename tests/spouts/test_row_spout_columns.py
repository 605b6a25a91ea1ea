"""Row spouts feeding columnar consumers build one Arrow record batch per emit, in the
emitter task, and keep tuples where Arrow would change a value (issue 27 item 3)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from collectors import Collector

from spouts import MemoryTransactionalSpout
from transactional.columns import rows_batch
from transactional.tuples import Fields, TransactionAttempt
from trident.spout import FixedBatchSpout

TX = TransactionAttempt(1, 1)


def run(spout: Any, columns: bool, meta: dict) -> Collector:
    c = Collector(columns)
    spout.get_emitter({}, None).emit_partition_batch(TX, c, 0, meta)
    return c


ROWS = [("the cow", 1, 0.5, True, b"x"), ("jumped", 2, None, False, b"y"), ("over", None, 2.0, True, None)]


@pytest.mark.parametrize("spout", [
    FixedBatchSpout(Fields("s", "n", "f", "b", "raw"), 3, *ROWS),
    MemoryTransactionalSpout({0: ROWS}, Fields("s", "n", "f", "b", "raw"), 3)], ids=["fixed", "memory"])
def test_one_record_batch_with_the_rows_values_for_a_columnar_consumer(spout):
    c = run(spout, True, {"start": 0, "end": 3})
    assert not c.tuples and len(c.batches) == 1
    b = c.batches[0]
    assert b.schema.names == ["s", "n", "f", "b", "raw"]
    assert b.schema.types == [pa.string(), pa.int64(), pa.float64(), pa.bool_(), pa.binary()]
    assert [tuple(r.values()) for r in b.to_pylist()] == ROWS
    rows = run(spout, False, {"start": 0, "end": 3})
    assert not rows.batches and rows.tuples == [(TX, *r) for r in ROWS]


def test_cycling_fixed_batch_spout_wraps_around_in_one_batch():
    c = run(FixedBatchSpout(Fields("w"), 4, "a", "b", "c", cycle=True), True, {"start": 2, "end": 6})
    assert c.batches[0].column(0).to_pylist() == ["c", "a", "b", "c"]


@pytest.mark.parametrize("rows", [
    [(1,), (2.5,)],                  # ints mixed with floats: Arrow would make 1 -> 1.0
    [((1, 2),)],                     # tuples would come back as lists
    [(2 ** 70,)],                    # beyond 64 bits
    [({"a": 1},)], [(object(),)]])
def test_rows_whose_values_arrow_would_change_stay_tuples(rows):
    assert rows_batch(rows, ["v"]) is None
    c = run(MemoryTransactionalSpout({0: rows}, Fields("v"), 5), True, {"start": 0, "end": len(rows)})
    assert not c.batches and c.tuples == [(TX, *r) for r in rows]
