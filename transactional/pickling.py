"""Pickling components: for executors (user classes by value) and for the driver (by identity).

Where user classes come from. Each component is pickled for the driver at build, and
for executors when it runs there:

* ``ComponentSpec.blob``, for executors (Spark's Python workers, other processes): with
  cloudpickle, classes and functions of scripts, test modules and topology files (which a
  worker cannot import) *by value*, with the module globals their code reads. Their
  modules are registered with ``cloudpickle.register_pickle_by_value`` only while this
  blob is made. Only components that run on executors get one: at build, the spouts'
  emitters (not a core topology's spouts, which run on the driver) and the
  processing-phase bolts; the commit components only when a run places them on the
  executors (``Topology.placed("executors")``, at the run's start). So a committer on the
  driver may use module globals that cannot be pickled (Storm's ``DATABASE`` map holding
  locks); a component on executors that reaches one is a ``TopologyError`` naming the
  global, its module and the fix.
* ``ComponentSpec.driver_blob``, for the process that built the topology (the driver: the
  commit phase, the spout's coordinator, the in-process executor): the instance's state by
  value, but every class, function and module *by identity* -- the very objects the
  builder was given, kept in a table of this process. So committers and coordinators run
  the user's own classes: module globals are shared, as in Storm's ``LocalCluster`` (the
  seed's static ``DATABASE`` map works), and later edits of those globals are seen.

``ComponentSpec.new_instance()`` uses the driver form in the process that built the
topology (and in processes forked from it afterwards, which hold the same table), the
executor form everywhere else. The by-value form is never loaded in the building
process: loading a by-value class where it was defined makes cloudpickle overwrite the
user's class in place with methods whose globals are a frozen copy of the module's.
"""

from __future__ import annotations

import io
import sys
import threading
import types
from typing import Any

from pyspark import cloudpickle

from transactional.exceptions import TopologyError

_OWN_PACKAGES = ("transactional", "spouts", "state", "trident")

#: build id -> the classes, functions and modules its driver blobs refer to (kept for the
#: life of the process: a few objects per build). A process that does not hold a build's
#: table (any process but the builder and its later forks) loads the executor blobs.
_DRIVER_OBJECTS: dict[str, list[Any]] = {}
#: modules whose classes and functions always go to executors by value (``ship_by_value``)
_SHIPPED_BY_VALUE: set[str] = set()
#: cloudpickle's by-value registry is process-wide: one executor blob at a time
_REGISTRATION = threading.Lock()


def ship_by_value(module: types.ModuleType) -> None:
    """Ship ``module``'s classes and functions to executors by value, wherever in a
    component they are reached (e.g. a topology file loaded by path, which executors
    cannot import). Only the executor blobs are affected: the module is registered with
    cloudpickle while they are made, never for the rest of the process."""
    if not isinstance(module, types.ModuleType):
        msg = f"ship_by_value takes a module; got {type(module).__name__}"
        raise TypeError(msg)
    _SHIPPED_BY_VALUE.add(module.__name__)


def _driver_object(origin: str, index: int) -> Any:
    """Unpickling a driver blob: the object at ``index`` of build ``origin``'s table."""
    return _DRIVER_OBJECTS[origin][index]


class _DriverPickler(cloudpickle.Pickler):
    """Pickles instances by value and every class, function and module by identity: as
    a reference into the build's table of this process's live objects."""

    def __init__(self, file: Any, origin: str, table: list[Any]) -> None:
        super().__init__(file)  # type: ignore[no-untyped-call]  # cloudpickle has no annotations
        self._origin, self._table = origin, table
        self._index = {id(o): i for i, o in enumerate(table)}

    def reducer_override(self, obj: Any) -> Any:
        if obj is _driver_object:
            return NotImplemented             # by name: it is the loader itself
        if isinstance(obj, (type, types.FunctionType, types.ModuleType)):
            i = self._index.get(id(obj))
            if i is None:
                i = self._index[id(obj)] = len(self._table)
                self._table.append(obj)
            return _driver_object, (self._origin, i)
        return super().reducer_override(obj)  # type: ignore[no-untyped-call]


def _pickle(cid: str, obj: Any, origin: str, table: list[Any], *, executors: bool) -> tuple[bytes, bytes]:
    """The executor blob (``b""`` unless ``executors``: the component runs on executors
    whatever the placement) and the driver blob (see the module docstring) of a component."""
    blob = _executor_pickle(cid, obj, committer=False) if executors else b""
    try:
        buf = io.BytesIO()
        _DriverPickler(buf, origin, table).dump(obj)  # type: ignore[no-untyped-call]
    except Exception as e:  # noqa: BLE001 - reported with the component's name
        msg = (
            f"component {cid!r} ({type(obj).__name__}) cannot be pickled: {e}. Create connections "
            "and other unpicklable members in prepare(), not in __init__"
        )
        raise TopologyError(msg) from e
    return blob, buf.getvalue()


def _executor_pickle(cid: str, obj: Any, *, committer: bool) -> bytes:
    """``obj`` pickled for executors: classes and functions from scripts, test modules and
    topology files (which a worker cannot import) by value, with the globals they read.
    ``TopologyError`` names what cannot be pickled: a module global reached through such
    code, or else the component's own members."""
    with _REGISTRATION:
        before = set(cloudpickle.list_registry_pickle_by_value())
        modules = _by_value(obj, 3, set(), {})
        for name in _SHIPPED_BY_VALUE:
            if name in sys.modules:
                modules[name] = sys.modules[name]
        added = []
        for name, mod in modules.items():
            if name not in before:
                try:
                    cloudpickle.register_pickle_by_value(mod)
                except (ValueError, TypeError):
                    continue
                added.append(mod)
        try:
            blob: bytes = cloudpickle.dumps(obj)
            return blob
        except Exception as e:  # noqa: BLE001 - reported with the component's name
            culprit = _unpicklable_global(obj)     # while the modules are still registered
            if culprit is None:
                msg = (
                    f"component {cid!r} ({type(obj).__name__}) cannot be pickled, but it is "
                    f"shipped to Spark executors: {e}. Create connections and other "
                    "unpicklable members in prepare(), not in __init__"
                )
                raise TopologyError(msg) from e
            name, module, reader, error = culprit
            where = getattr(module, "__file__", None)
            elsewhere = ("or run the commit phase on the driver (commit_placement='driver', the default), "
                         "where committers share the driver's module globals" if committer else
                         "or keep such state in a committer (it runs on the driver with "
                         "commit_placement='driver', the default, sharing the module's globals)")
            msg = (
                f"component {cid!r} ({type(obj).__name__}) runs on Spark executors, but {reader} reads "
                f"the module global {name} of {module.__name__}{f' ({where})' if where else ''}, which "
                f"cannot be pickled: {error}. Executors cannot import that module, so its code goes to "
                f"them by value with the globals it reads, and they are other processes: they never "
                f"share the driver's {name}. Create what {name} holds (locks, connections) in prepare(), "
                f"{elsewhere}, or in map state (context.map_state)"
            )
            raise TopologyError(msg) from e
        finally:
            for mod in added:
                try:
                    cloudpickle.unregister_pickle_by_value(mod)
                except ValueError:
                    pass


def _unpicklable_global(obj: Any) -> tuple[str, types.ModuleType, str, Exception] | None:
    """The first module global that code pickled by value with ``obj`` reads and that
    cannot be pickled: (its name, its module, the function reading it, the error); None
    when there is none (call with the by-value modules registered)."""
    seen: set[int] = set()
    todo: list[tuple[Any, int]] = [(obj, 0)]
    while todo:
        x, depth = todo.pop(0)
        if id(x) in seen or depth > 6:
            continue
        seen.add(id(x))
        if isinstance(x, types.FunctionType):
            culprit = _function_globals(x, depth, todo)
            if culprit is not None:
                return culprit
        elif isinstance(x, type):
            _class_members(x, depth, todo)
        else:
            todo.extend((t, depth + 1) for t in type(x).__mro__)
            if isinstance(x, (dict, list, tuple, set, frozenset)):
                if len(x) <= 32:
                    todo.extend((v, depth + 1) for v in (x.values() if isinstance(x, dict) else x))
            elif hasattr(x, "__dict__"):
                todo.extend((v, depth + 1) for v in vars(x).values())
    return None


def _function_globals(x: types.FunctionType, depth: int,
                      todo: list[tuple[Any, int]]) -> tuple[str, types.ModuleType, str, Exception] | None:
    """``_unpicklable_global`` for function ``x`` pickled by value: the first global it
    reads that cannot be pickled, else None; the classes and functions it reaches go to ``todo``."""
    from pyspark.cloudpickle.cloudpickle import _extract_code_globals, _should_pickle_by_reference

    if _should_pickle_by_reference(x):
        return None
    module = sys.modules.get(x.__globals__.get("__name__", ""))
    for name in sorted(_extract_code_globals(x.__code__)):
        if name not in x.__globals__:
            continue
        value = x.__globals__[name]
        if isinstance(value, (type, types.FunctionType)):
            todo.append((value, depth + 1))
            continue
        if isinstance(value, types.ModuleType) or module is None:
            continue
        try:
            cloudpickle.dumps(value)
        except Exception as e:  # noqa: BLE001 - the culprit
            return name, module, f"{x.__qualname__}()", e
    cells = [c.cell_contents for c in x.__closure__ or () if c.cell_contents is not None]
    todo.extend((v, depth + 1) for v in [*cells, *(x.__defaults__ or ())])
    return None


def _class_members(x: type, depth: int, todo: list[tuple[Any, int]]) -> None:
    """``_unpicklable_global`` for class ``x`` pickled by value: its functions, classes and
    properties go to ``todo``."""
    from pyspark.cloudpickle.cloudpickle import _should_pickle_by_reference

    if x.__module__ == "builtins" or _should_pickle_by_reference(x):
        return
    for v in vars(x).values():
        if isinstance(v, (staticmethod, classmethod)):
            v = v.__func__
        if isinstance(v, property):
            todo.extend((f, depth + 1) for f in (v.fget, v.fset, v.fdel) if f is not None)
        elif isinstance(v, (types.FunctionType, type)):
            todo.append((v, depth + 1))


def _by_value(obj: Any, depth: int, seen: set[int], found: dict[str, types.ModuleType]) -> dict[str, types.ModuleType]:
    """The modules (by name) of ``obj``'s classes, and of the classes and functions it
    holds (a wrapped bolt, a callback), that are neither ours nor installed: they go to
    executors by value."""
    if id(obj) in seen or depth < 0:
        return found
    seen.add(id(obj))
    targets = [obj] if callable(obj) and not isinstance(obj, type) and hasattr(obj, "__module__") else []
    targets += list(type(obj).__mro__) if not isinstance(obj, type) else list(obj.__mro__)
    for t in targets:
        name = getattr(t, "__module__", None)
        mod = sys.modules.get(name or "")
        if mod is None or name is None or name in ("builtins", "__main__"):
            continue
        f = getattr(mod, "__file__", "") or ""
        if name.split(".")[0] not in _OWN_PACKAGES and "site-packages" not in f and "/lib/python" not in f:
            found[name] = mod
    children: list[Any] = []
    if isinstance(obj, (dict, list, tuple, set, frozenset)):
        if len(obj) <= 32:  # settings and wrapped components, not data
            children = list(obj.values() if isinstance(obj, dict) else obj)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        children = list(vars(obj).values())
    for c in children:
        if not isinstance(c, (str, bytes, int, float, bool, type(None))):
            _by_value(c, depth - 1, seen, found)
    return found
