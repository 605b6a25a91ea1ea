"""The layers: state/ and spouts/ (and the engine package's exceptions) load without
pyspark or the engine; backend clients load only when a URL of theirs is opened. Imports run
one way, state < transactional < spouts < trident -- and inside transactional, the API's
building blocks < the engine < ops < the entry points (docs/design.md) -- and no two modules
import each other, directly or in a circle."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def loaded_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"],
                         cwd=REPO, capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_state_and_spouts_do_not_load_pyspark_or_the_engine():
    mods = loaded_after("import state, spouts, state.map, state.keys, state.base, transactional.exceptions")
    assert not {m for m in mods if m.split(".")[0] in ("pyspark", "py4j", "kazoo", "redis", "confluent_kafka")}
    assert not {m for m in mods if m.startswith(("transactional.engine", "transactional.ops"))}, mods


def test_backend_clients_load_only_when_their_url_is_opened():
    mods = loaded_after("from state.map import open_map_backing\n"
                        "from state.base import open_transactional_state\n"
                        "open_map_backing('memory://', 't:m'); open_transactional_state('memory://', 't')")
    assert "redis" not in mods and "kazoo" not in mods


def test_one_registry_of_schemes_serves_config_and_openers():
    from state.backends import BACKENDS, COORDINATION, USER_STATE, opener
    from state.base import MemoryTransactionalState

    assert {(b.role, b.scheme) for b in BACKENDS} == {
        (COORDINATION, "memory"), (COORDINATION, "zk"), (USER_STATE, "memory"), (USER_STATE, "redis"),
        (USER_STATE, "rediss"), (USER_STATE, "redis+cluster")}
    assert isinstance(opener(COORDINATION, "memory://")("memory://", "reg-t"), MemoryTransactionalState)


# -- the import graph: packages in one order, no cycles -------------------------------------

#: lowest first: a module may import its own package's modules and those of the packages before it
PACKAGE_ORDER = ("state", "transactional", "spouts", "trident")


def _module_files() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGE_ORDER:
        for p in (REPO / pkg).rglob("*.py"):
            rel = p.relative_to(REPO).with_suffix("")
            mods[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = p
    return mods


def _imports(type_only: bool = False) -> dict[str, set[str]]:
    """module -> the project modules it imports, at module level or inside a function
    (``if TYPE_CHECKING:`` blocks left out, they never run, unless ``type_only``). Importing a name of a package
    resolves to its submodule when there is one; a module importing its own package's
    ``__init__`` is not an edge."""
    import ast

    mods = _module_files()

    def resolve(name: str) -> str | None:
        while name:
            if name in mods:
                return name
            name = name.rpartition(".")[0]
        return None

    def type_checking(node: ast.If) -> bool:
        t = node.test
        return ((isinstance(t, ast.Name) and t.id == "TYPE_CHECKING")
                or (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"))

    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        tree = ast.parse(p.read_text())
        skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and type_checking(node)
                for n in ast.walk(node)} if not type_only else set()
        pkg = m if p.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = pkg.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            for t in targets:
                r = resolve(t)
                if r and r != m and not m.startswith(r + "."):
                    edges[m].add(r)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            strong(v)
    return out


def test_no_module_imports_a_package_above_its_own():
    rank = {pkg: i for i, pkg in enumerate(PACKAGE_ORDER)}
    upward = sorted(f"{a} -> {b}" for a, bs in _imports().items() for b in bs
                    if rank[a.split(".")[0]] < rank[b.split(".")[0]])
    assert upward == [], f"imports against the order {' < '.join(PACKAGE_ORDER)}: {upward}"


#: inside ``transactional``, lowest first: the API's building blocks (topology, config, bolts,
#: tuples, RunResult, ...), the engine, the operator's tools, and the entry points that put a
#: run together for a user (``transactional.run_topology`` is ``transactional.ops.run``'s).
#: ``transactional.testing`` (servers and faults for tests and ``trident verify``) sits with ops.
LAYERS = ("api", "engine", "ops", "entry")
ENTRY_POINTS = ("transactional", "transactional.local_cluster", "transactional.drpc")


def layer(module: str) -> str | None:
    """The layer of a module of ``transactional`` (None for the other packages)."""
    parts = module.split(".")
    if parts[0] != "transactional":
        return None
    if module in ENTRY_POINTS:
        return "entry"
    return {"engine": "engine", "ops": "ops", "testing": "ops"}.get(parts[1], "api")


def _against_layers(edges: dict[str, set[str]]) -> list[str]:
    rank = {name: i for i, name in enumerate(LAYERS)}
    return sorted(f"{a} -> {b}" for a, bs in edges.items() for b in bs
                  if layer(a) and layer(b) and rank[layer(a)] < rank[layer(b)])  # type: ignore[index]


def test_inside_transactional_the_api_the_engine_ops_and_entry_points_import_downward():
    """The engine imports nothing of ops (it takes its listeners from its caller), and the
    API's building blocks nothing of either -- type-only imports included."""
    assert _against_layers(_imports(type_only=True)) == [], f"imports against {' < '.join(LAYERS)}"


def test_no_two_modules_import_each_other_directly_or_in_a_circle():
    assert _cycles(_imports()) == []


def test_the_import_graph_check_sees_cycles_and_upward_imports():
    """The checks above can fail: a circle of three and a pair are found, a chain is not."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}) == [
        ["a", "b", "c"], ["d", "e"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    edges = _imports()
    assert "state.errors" in edges["transactional.exceptions"]     # a real edge, resolved to its module
    assert "transactional.engine.replay" in edges["transactional.engine.spout_planner"]   # function-local imports count
    assert _against_layers({"transactional.result": {"transactional.engine.events"},
                            "transactional.engine.driver": {"transactional.ops.run", "transactional.topology"},
                            "transactional.ops.run": {"transactional.engine.driver"},
                            "transactional.local_cluster": {"transactional.ops.run"}}) == [
        "transactional.engine.driver -> transactional.ops.run", "transactional.result -> transactional.engine.events"]
    assert "transactional.engine.driver" not in edges["transactional.engine.attempts"]    # only under TYPE_CHECKING
    assert "transactional.engine.driver" in _imports(type_only=True)["transactional.engine.attempts"]


def test_the_guard_of_what_state_and_spouts_load_can_fail():
    """The names it refuses are real modules: importing the engine's events loads them."""
    assert "transactional.engine.events" in loaded_after("import transactional.engine.events")
