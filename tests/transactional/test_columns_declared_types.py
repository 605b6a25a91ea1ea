"""Declared column types (issue 27 item 2): ``Fields("w", "n", types={"n": "int64"})``
rides on the names, survives pickling, and a row spout feeding columnar consumers builds
those columns with the declared type, no inference (docs/trident.md, "Declared column
types"); a value that does not fit stops the run naming the field, the type and the value."""

from __future__ import annotations

import copy
import datetime
import decimal
import pickle
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from collectors import Collector
from pyspark import cloudpickle

from spouts import MemoryTransactionalSpout
from transactional import TopologyConfig, run_topology
from transactional.columns import emit_rows, rows_batch
from transactional.exceptions import ColumnTypeError, SpoutError, TopologyError, TopologyFailedError
from transactional.tuples import Fields, TransactionAttempt
from trident import Count, Sum, TridentTopology, state
from trident.spout import FixedBatchSpout

REPO = Path(__file__).resolve().parents[2]
TX = TransactionAttempt(1, 1)


# -- Fields with types -----------------------------------------------------------------------

def test_fields_with_types_stay_a_tuple_of_the_names() -> None:
    f = Fields("word", "count", types={"count": "int64"})
    assert f == ("word", "count") == Fields("word", "count") and hash(f) == hash(("word", "count"))
    assert Fields("a") == ("a",) and list(f) == ["word", "count"] and f.index("count") == 1
    assert dict(f.types) == {"count": pa.int64()} and dict(Fields("a").types) == {}
    assert repr(f) == "Fields('word', 'count', types={'count': 'int64'})"
    assert repr(Fields("a", "b")) == "Fields('a', 'b')"
    # pyarrow's own names, a DataType as it is; kept in field order
    g = Fields("t", "x", "s", types={"s": "utf8", "x": "double", "t": pa.timestamp("ms", tz="UTC")})
    assert list(g.types.items()) == [("t", pa.timestamp("ms", tz="UTC")), ("x", pa.float64()), ("s", pa.string())]
    # copies keep the types: Fields(fields), copy, a spout's declared output, a stream's fields
    assert Fields(f).types == f.types and copy.copy(f).types == f.types and copy.deepcopy(f).types == f.types
    assert dict(Fields(f, types={"word": "string"}).types) == {"word": pa.string()}
    spout = MemoryTransactionalSpout({0: [("a", 1)]}, f, 1)

    class Declarer:
        def declare(self, fields: Fields, stream: str = "default") -> None:
            self.fields = fields

    d = Declarer()
    spout.declare_output_fields(d)
    assert d.fields == ("tx", "word", "count") and dict(d.fields.types) == {"count": pa.int64()}
    FixedBatchSpout(f, 1, ("a", 1)).declare_output_fields(d)
    assert dict(d.fields.types) == {"count": pa.int64()}
    stream = TridentTopology("t").new_stream("s", spout)
    assert stream.fields == ("word", "count") and dict(stream.fields.types) == {"count": pa.int64()}


@pytest.mark.parametrize("dumps,loads", [
    *[((lambda o, p=p: pickle.dumps(o, protocol=p)), pickle.loads) for p in range(pickle.HIGHEST_PROTOCOL + 1)],
    (cloudpickle.dumps, cloudpickle.loads)])
def test_fields_with_types_round_trip_through_pickle_and_cloudpickle(dumps: Any, loads: Any) -> None:
    f = Fields("word", "n", "at", types={"n": "int64", "at": pa.timestamp("ms", tz="UTC")})
    g = loads(dumps(f))
    assert type(g) is Fields and g == f and repr(g) == repr(f) and g.types == f.types
    plain = loads(dumps(Fields("a", "b")))
    assert type(plain) is Fields and plain == ("a", "b") and dict(plain.types) == {}
    spout = loads(dumps(MemoryTransactionalSpout({0: [("a", None)]}, Fields("w", "n", types={"n": "int64"}), 1)))
    assert type(spout.fields) is Fields and dict(spout.fields.types) == {"n": pa.int64()}


def test_bad_declared_types_name_the_field_and_the_fix() -> None:
    with pytest.raises(TopologyError) as e:
        Fields("word", "count", types={"cnt": "int64"})
    assert str(e.value) == ("Fields('word', 'count'): types declares 'cnt', which is not one of the fields "
                            "['word', 'count']; declare types only of the fields (or add 'cnt' to them)")
    known = ("use one such as 'string', 'int64', 'float64', 'bool', 'binary', 'timestamp[ms]', 'date32' "
             "(pyarrow.type_for_alias), or a pyarrow.DataType such as pa.timestamp('ms', tz='UTC') or "
             "pa.list_(pa.int64())")
    with pytest.raises(TopologyError) as e:
        Fields("word", "count", types={"count": "int"})
    assert str(e.value) == ("Fields('word', 'count'): field 'count' is declared with type 'int', which is not "
                            f"an Arrow type name pyarrow knows (did you mean 'int64'?); {known}")
    with pytest.raises(TopologyError) as e:
        Fields("word", "count", types={"count": "integr64"})
    assert str(e.value) == ("Fields('word', 'count'): field 'count' is declared with type 'integr64', which is "
                            f"not an Arrow type name pyarrow knows; {known}")
    with pytest.raises(TopologyError) as e:
        Fields("word", "count", types={"count": int})
    assert str(e.value) == ("Fields('word', 'count'): field 'count' is declared with type <class 'int'>, which "
                            f"is not an Arrow type name pyarrow knows; {known}")
    with pytest.raises(TopologyError) as e:
        Fields("word", types=["word"])  # type: ignore[arg-type]
    assert str(e.value) == ("Fields('word'): types must be a dict of field name -> Arrow type, "
                            "e.g. types={'word': 'int64'}; got ['word']")
    assert isinstance(e.value, ValueError)


def test_importing_tuples_and_fields_without_types_does_not_import_pyarrow() -> None:
    code = ("import sys; from transactional.tuples import Fields; f = Fields('a', 'b'); "
            "import pickle; pickle.loads(pickle.dumps(f)); print('pyarrow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout == "False\n"


# -- rows_batch with declared types ----------------------------------------------------------

DT = datetime.datetime(2024, 5, 1, 12, 30, 0, 250_000)


@pytest.mark.parametrize("values,declared,arrow_type,back", [
    ([1, None, 3], "int64", pa.int64(), [1, None, 3]),
    ([None, None], "int64", pa.int64(), [None, None]),              # inference: no type at all
    ([1, 2.5, None], "float64", pa.float64(), [1.0, 2.5, None]),    # inference: two types
    ([1, 2], "float64", pa.float64(), [1.0, 2.0]),
    ([1.0, 2], "int64", pa.int64(), [1, 2]),                        # integral floats fit
    ([decimal.Decimal("3"), 4], "int32", pa.int32(), [3, 4]),
    ([DT, None], "timestamp[ms]", pa.timestamp("ms"), [DT, None]),
    ([[1, 2], [], None], pa.list_(pa.int64()), pa.list_(pa.int64()), [[1, 2], [], None]),
    (["x", b"y"], "binary", pa.binary(), [b"x", b"y"]),
    ([2 ** 63 + 1], "uint64", pa.uint64(), [2 ** 63 + 1]),            # beyond int64
], ids=["int+None", "all-None", "int+float", "int-as-float", "integral-floats", "decimal", "timestamp",
        "list", "str+bytes", "uint64"])
def test_a_declared_column_is_built_with_its_type(values: list[Any], declared: Any, arrow_type: Any,
                                                   back: list[Any]) -> None:
    rows = [(f"w{i}", v, i) for i, v in enumerate(values)]
    b = rows_batch(rows, Fields("w", "v", "i", types={"v": declared}))
    assert b.schema == pa.schema([("w", pa.string()), ("v", arrow_type), ("i", pa.int64())])
    assert b.column(1).to_pylist() == back and b.column(0).to_pylist() == [r[0] for r in rows]


def test_undeclared_columns_keep_inference_and_declared_values_are_checked_all_the_same() -> None:
    f = Fields("n", "x", types={"n": "int64"})
    assert rows_batch([(None, 1), (None, 2.5)], f) is None         # x: ints and floats, undeclared: rows
    assert rows_batch([(None, 1), (None, 2.5)], Fields("n", "x", types={"n": "int64", "x": "float64"})
                      ).schema == pa.schema([("n", pa.int64()), ("x", pa.float64())])
    with pytest.raises(ColumnTypeError):                            # the declared column still raises
        rows_batch([("seven", 1), (None, 2.5)], f)


def misfit(field: str, declared: str, value: str, why: str) -> str:
    return (f"spout field {field!r} is declared {declared} (Fields(..., types={{{field!r}: {declared!r}}})) but "
            f"holds {value}, which does not fit it: {why}. Fix the data, or declare the type its values have "
            f"(or leave {field!r} undeclared: its type is then inferred, and a batch whose values Arrow would "
            f"change goes row by row)")


@pytest.mark.parametrize("values,declared,message", [
    ([1, "x", 3], "int64", misfit("v", "int64", "'x' (str, row 1 of the batch)",
                                  "Could not convert 'x' with type str: tried to convert to int64")),
    ([1, 1.5], "int64", misfit("v", "int64", "1.5 (float, row 1 of the batch)",
                               "it has a fraction, which an integer type would drop")),
    ([decimal.Decimal("0.5")], "int64", misfit("v", "int64", "Decimal('0.5') (Decimal, row 0 of the batch)",
                                               "it has a fraction, which an integer type would drop")),
    ([None, True], "int64", misfit("v", "int64", "True (bool, row 1 of the batch)", "Expected integer, got bool")),
    ([2 ** 70], "int64", misfit("v", "int64", f"{2 ** 70} (int, row 0 of the batch)",
                                "Python int too large to convert to C long")),
    ([DT.replace(microsecond=1500)], "timestamp[ms]",
     misfit("v", "timestamp[ms]", f"{DT.replace(microsecond=1500)!r} (datetime, row 0 of the batch)",
            "it is finer than the type's unit (ms), which would drop the rest")),
    (["a", 7], "string", misfit("v", "string", "7 (int, row 1 of the batch)", "Expected bytes, got a 'int' object")),
], ids=["str-in-int64", "fraction", "decimal-fraction", "bool-in-int64", "beyond-int64", "finer-timestamp",
        "int-in-string"])
def test_a_value_that_does_not_fit_its_declared_type_raises_naming_field_type_and_value(
        values: list[Any], declared: str, message: str) -> None:
    f = Fields("w", "v", types={"v": declared})
    rows = [("w", v) for v in values]
    with pytest.raises(ColumnTypeError) as e:
        rows_batch(rows, f)
    assert str(e.value) == message
    assert isinstance(e.value, SpoutError)

    class Columnar:                               # a collector whose consumers take columns
        def columnar(self, stream: str = "default") -> bool:
            return True

        def emit(self, values: tuple, stream: str = "default") -> None:
            raise AssertionError("emitted a row: the declared column fell back to rows")

    with pytest.raises(ColumnTypeError) as e:
        emit_rows(Columnar(), TX, rows, f)
    assert str(e.value) == message


# -- the row spouts ----------------------------------------------------------------------------

ROWS = [("a", None, 1), ("b", None, 2.5)]      # n: None only; x: an int and a float


@pytest.mark.parametrize("make", [
    lambda f: FixedBatchSpout(f, 2, *ROWS), lambda f: MemoryTransactionalSpout({0: ROWS}, f, 2)],
    ids=["fixed", "memory"])
def test_row_spouts_emit_one_batch_of_the_declared_types(make: Any) -> None:
    declared = make(Fields("w", "n", "x", types={"n": "int64", "x": "float64"}))
    c = Collector(True)
    declared.get_emitter({}, None).emit_partition_batch(TX, c, 0, {"start": 0, "end": 2})
    assert not c.tuples and len(c.batches) == 1
    assert c.batches[0].schema == pa.schema([("w", pa.string()), ("n", pa.int64()), ("x", pa.float64())])
    assert c.batches[0].to_pylist() == [{"w": "a", "n": None, "x": 1.0}, {"w": "b", "n": None, "x": 2.5}]
    # undeclared: the same rows go one by one (no type for n, two for x)
    c = Collector(True)
    make(Fields("w", "n", "x")).get_emitter({}, None).emit_partition_batch(TX, c, 0, {"start": 0, "end": 2})
    assert not c.batches and c.tuples == [(TX, *r) for r in ROWS]
    # consumers taking rows get the rows as they are
    c = Collector(False)
    declared.get_emitter({}, None).emit_partition_batch(TX, c, 0, {"start": 0, "end": 2})
    assert not c.batches and c.tuples == [(TX, *r) for r in ROWS]


def test_a_memory_spouts_arrow_table_is_cast_to_the_declared_types() -> None:
    f = Fields("w", "n", types={"n": "float64"})
    spout = MemoryTransactionalSpout({0: pa.table({"w": ["a", "b"], "n": [1, None]})}, f, 2)
    assert spout.data[0].schema == pa.schema([("w", pa.string()), ("n", pa.float64())])
    c = Collector(True)
    spout.get_emitter({}, None).emit_partition_batch(TX, c, 0, {"start": 0, "end": 2})
    assert c.batches[0].to_pylist() == [{"w": "a", "n": 1.0}, {"w": "b", "n": None}]
    with pytest.raises(TopologyError) as e:
        MemoryTransactionalSpout({3: pa.table({"w": ["a"], "v": ["x"]})}, f, 1)
    assert str(e.value).startswith("partition 3: column 'v' (field 'n') is string, which does not cast to its "
                                   "declared type double: ")
    assert str(e.value).endswith(". Give the column that type, or declare the type it has")


# -- end to end: a columnar consumer gets the declared columns -----------------------------------

#: take 2: txid 1 has p1's [b None, b None], txid 2 p0's [a None, b None]: shares of None only
PARTS = {0: [("a", 1), ("b", None), ("a", None), ("b", None), ("a", 3), ("b", 4)],
         1: [("b", None), ("b", None), ("a", 5), ("a", None)]}
SCHEMA = pa.schema([("word", pa.string()), ("n", pa.int64())])


def zero_nulls(b: pa.RecordBatch) -> pa.RecordBatch:
    """Checks the batch came as the spout's declared columns (rows would be inferred: a
    share of None only is Arrow's null type), then counts a missing n as 0."""
    if b.schema != SCHEMA:
        msg = f"map_batches got {b.schema}, not the declared {SCHEMA}"
        raise AssertionError(msg)
    return pa.RecordBatch.from_arrays([b.column(0), pc.fill_null(b.column(1), 0)], names=["word", "n"])


def config(executor: str) -> TopologyConfig:
    return TopologyConfig(executor=executor, progress=False, message_timeout_secs=60, retry_backoff_secs=0.02,
                          max_spout_pending=3, max_attempts=2)


def test_a_row_spout_with_declared_types_feeds_columnar_stages_exactly(executor: str) -> None:
    t = TridentTopology(f"declared-{uuid.uuid4().hex[:8]}")
    spout = MemoryTransactionalSpout(PARTS, Fields("word", "n", types={"n": "int64"}), 2)
    s = t.new_stream("rows", spout).parallelism_hint(2).map_batches(zero_nulls, Fields("word", "n"))
    g = s.group_by(Fields("word"))
    g.persistent_aggregate(state.transactional("sums"), Fields("n"), Sum(), Fields("sum"))
    g.persistent_aggregate(state.transactional("counts"), Count(), Fields("count"))
    r = run_topology(t.build(), config(executor))
    assert r.batches_committed == 3 and not r.failures
    assert r.map_state("sums").multi_get(["a", "b"]) == [9, 4]
    assert r.map_state("counts").multi_get(["a", "b"]) == [5, 5]


def test_without_declared_types_a_share_of_none_only_goes_as_rows() -> None:
    """The counterpart: the same topology without the declaration fails in map_batches."""
    t = TridentTopology(f"undeclared-{uuid.uuid4().hex[:8]}")
    spout = MemoryTransactionalSpout(PARTS, Fields("word", "n"), 2)
    t.new_stream("rows", spout).parallelism_hint(2).map_batches(zero_nulls, Fields("word", "n")).name("check")
    with pytest.raises(TopologyFailedError) as e:
        run_topology(t.build(), config("in-process"))
    assert "map_batches got word: string\nn: null, not the declared word: string\nn: int64" in str(e.value)


def test_a_value_that_does_not_fit_stops_the_run_naming_spout_txid_field_and_value() -> None:
    t = TridentTopology(f"misfit-{uuid.uuid4().hex[:8]}")
    parts = {0: [("a", 1), ("b", 2), ("c", "three")]}
    spout = MemoryTransactionalSpout(parts, Fields("word", "n", types={"n": "int64"}), 2)
    t.new_stream("rows", spout).map_batches(zero_nulls, Fields("word", "n")).name("check")
    with pytest.raises(TopologyFailedError) as e:
        run_topology(t.build(), config("in-process"))
    assert e.value.txid == 2 and e.value.component == "rows"
    assert str(e.value) == ("stopped: txid 2 (attempt 1), component 'rows', task 0: ColumnTypeError: " + misfit(
        "n", "int64", "'three' (str, row 0 of the batch)",
        "Could not convert 'three' with type str: tried to convert to int64"))
