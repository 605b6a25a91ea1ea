"""Storm's names as a Storm user writes them (docs/trident.md): a ``StateFactory`` that sets
``self.name``, the three-argument ``state_query``, every ``from trident import ...`` of the
docs, and ``parallelism_hint`` on a state setting the tasks of the stage that feeds it (on
a real local Spark, with exact counts)."""

from __future__ import annotations

import ast
import collections
import importlib
import re
import uuid
from pathlib import Path
from typing import Any

from spouts import MemoryTransactionalSpout
from transactional import Fields, TopologyConfig, run_topology
from trident import Count, TridentTopology, state
from trident.builtin import SnapshotGet
from trident.state import BaseStateUpdater, State, StateFactory

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]


class _Rows(State):
    """Appends ``(label, task, tasks, *row)`` lines to a file per task at commit (a toy
    sink; the lines are what the test reads back)."""

    def __init__(self, path: str, label: str, task: int, tasks: int) -> None:
        self.path, self.label, self.task, self.tasks = path, label, task, tasks
        self.pending: list[tuple[Any, ...]] = []

    def begin_commit(self, txid: int) -> None:
        self.pending = []

    def commit(self, txid: int) -> None:
        with open(f"{self.path}/{self.label}-{self.task}", "a") as f:
            for row in self.pending:
                f.write("\t".join(map(str, (txid, self.task, self.tasks, *row))) + "\n")


class NamedFactory(StateFactory):
    """As a Storm user writes a factory: it keeps its own ``name``."""

    def __init__(self, name: str, path: str = "") -> None:
        self.name = name
        self.path = path

    def make_state(self, conf: dict[str, Any], metrics: Any, partition_index: int, num_partitions: int) -> State:
        return _Rows(self.path, self.name, partition_index, num_partitions)


class Append(BaseStateUpdater):
    def update_state(self, st: Any, tuples: Any, collector: Any) -> None:
        st.pending += [tuple(t.get_values()) for t in tuples]


def test_a_state_factory_may_set_its_own_name(tmp_path: Path) -> None:
    t = TridentTopology(f"named-{uuid.uuid4().hex[:8]}")
    factory = NamedFactory("sentence-log", str(tmp_path))
    st = t.new_stream("s", MemoryTransactionalSpout([("a",), ("b",)], Fields("w"), 1)).partition_persist(
        factory, Fields("w"), Append())
    assert factory.name == "sentence-log" and factory.state_name == "sentence-log" and st.name == "sentence-log"
    assert "partition_persist(sentence-log) (TridentCommitterBolt)" in t.describe()
    run_topology(t.build(), TopologyConfig(executor="in-process", progress=False))
    assert (tmp_path / "sentence-log-0").read_text() == "1\t0\t1\ta\n2\t0\t1\tb\n"


def test_state_query_takes_storms_three_arguments() -> None:
    t = TridentTopology(f"snap3-{uuid.uuid4().hex[:8]}")
    total = t.new_stream("src", MemoryTransactionalSpout(["a", "b", "c", "d"], Fields("w"), 2)).persistent_aggregate(
        state.transactional("total"), Count(), Fields("count"))
    asks = t.new_stream("asks", MemoryTransactionalSpout(["q1", "q2"], Fields("q"), 1))
    got = asks.state_query(total, SnapshotGet(), Fields("total"))
    assert list(got.fields) == ["q", "total"]
    grouped = asks.group_by(Fields("q")).state_query(total, SnapshotGet(), Fields("total2"))
    assert list(grouped.fields) == ["q", "total2"]
    r = run_topology(t.build(), TopologyConfig(executor="in-process", progress=False))
    assert r.map_state("total").multi_get(["$GLOBAL"]) == [4]


def _doc_imports() -> list[tuple[str, str]]:
    """Every ``from trident... import ...`` / ``import trident...`` statement in the
    docs' and README's code blocks, as ``(file, statement)``."""
    out = []
    for path in DOCS:
        for block in re.findall(r"```python\n(.*?)```", path.read_text(), re.S):
            for m in re.finditer(r"^(from trident[\w.]* import \([^)]*\)|from trident[\w.]* import [^(\n]*|"
                                 r"import trident[^\n]*)$", block, re.M):
                out.append((path.name, m.group(1)))
    return out


#: ``trident.<x>`` in the docs' prose that are not Python names: file names, the
#: logger of the status page, the headers of the Kafka state's records (and the keys of a lake
#: table's commit properties), the conf key of a verify run
NOT_PYTHON = {"trident.toml", "trident.md", "trident.webui", "trident.txid", "trident.seq", "trident.epoch",
              "trident.state", "trident.task", "trident.verify"}


def _doc_references() -> list[tuple[str, str]]:
    out = []
    for path in DOCS:
        for ref in re.findall(r"`(trident(?:\.[A-Za-z_]\w*)+)", path.read_text()):
            if ref not in NOT_PYTHON:
                out.append((path.name, ref))
    return sorted(set(out))


def test_every_trident_import_and_name_of_the_docs_works() -> None:
    imports = _doc_imports()
    assert len(imports) >= 5, imports
    for doc, statement in imports:
        ast.parse(statement)
        try:
            exec(statement, {})  # noqa: S102 - the docs' own import lines
        except ImportError as e:
            raise AssertionError(f"{doc}: {statement!r} fails: {e}") from None
    refs = _doc_references()
    assert ("trident.md", "trident.windowing.TumblingCountWindow") in refs
    for doc, ref in refs:
        parts = ref.split(".")
        for i in range(len(parts), 0, -1):       # the longest importable module, then attributes
            try:
                obj: Any = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            for attr in parts[i:]:
                assert hasattr(obj, attr), f"{doc}: `{ref}` does not resolve ({attr})"
                obj = getattr(obj, attr)
            break
    # the names the docs' examples use without a module, as Storm users write them
    import trident
    from trident import builtin, state, windowing

    for mod, names in [(builtin, ["FilterNull", "Equals", "Negate", "SnapshotGet", "MinBy", "MaxBy",
                                  "TupleCollectionGet", "MapGet", "FirstN", "Debug"]),
                       (windowing, ["TumblingCountWindow", "SlidingCountWindow", "TumblingDurationWindow",
                                    "SlidingDurationWindow", "WindowsStoreFactory", "InMemoryWindowsStoreFactory",
                                    "RedisWindowsStoreFactory", "Duration"]),
                       (state, ["State", "StateFactory", "BackingMapStateFactory", "TransactionalMapFactory",
                                 "OpaqueMapFactory", "NonTransactionalMapFactory", "IBackingMap"])]:
        for name in names:
            assert getattr(trident, name) is getattr(mod, name), name
            assert name in trident.__all__, name
    assert trident.Count is builtin.Count                 # the aggregator; a window's Count is windowing.Count


WORDS = {0: [(w,) for w in "the cow jumped over the moon the man went to the moon".split()],
         1: [(w,) for w in "a cow and a moon and the end of the cow".split()]}


def test_parallelism_hint_on_a_state_sets_its_stage_on_spark(spark_context: Any, tmp_path: Path) -> None:
    t = TridentTopology(f"hint-{uuid.uuid4().hex[:8]}")
    s = t.new_stream("words", MemoryTransactionalSpout(WORDS, Fields("word"), 4)).parallelism_hint(2)
    (s.group_by(Fields("word")).aggregate(Fields("word"), Count(), Fields("count"))
     .partition_persist(NamedFactory("counts", str(tmp_path)), Fields("word", "count"), Append())
     .parallelism_hint(3))
    s.partition_by(Fields("word")).partition_persist(NamedFactory("words", str(tmp_path)), Fields("word"),
                                                     Append()).parallelism_hint(3)
    topology = t.build()
    tasks = {c.id: c.parallelism for c in topology.bolts}
    assert tasks["aggregate(Count) #2"] == 3 and tasks["partition_persist(counts)"] == 3, tasks
    assert tasks["partition_persist(words)"] == 3 and "pass" not in tasks, tasks   # one stage, fields-grouped
    run_topology(topology, TopologyConfig(executor="spark", progress=False, max_spout_pending=2))
    want = collections.Counter(w for rows in WORDS.values() for (w,) in rows)
    for label, count_of in [("counts", lambda row: int(row[1])), ("words", lambda row: 1)]:
        rows = [line.split("\t") for f in sorted(tmp_path.glob(f"{label}-*")) for line in f.read_text().splitlines()]
        assert {(int(task), int(n)) for _, task, n, *_ in rows} == {(0, 3), (1, 3), (2, 3)}, label
        got: collections.Counter[str] = collections.Counter()
        task_of: dict[str, set[int]] = collections.defaultdict(set)
        for _, task, _, word, *rest in rows:
            got[word] += count_of([word, *rest])
            task_of[word].add(int(task))
        assert got == want, label                              # exact counts
        assert all(len(ts) == 1 for ts in task_of.values()), (label, task_of)   # each word on one task
