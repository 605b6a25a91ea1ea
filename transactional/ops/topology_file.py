"""Topology files: import one as a module, call its ``build_topology()`` and check what it
returned (``trident run``, ``describe``, ``package``, ``verify`` and ``replay`` share these).

A topology file defines ``build_topology()`` returning a ``TransactionalTopologyBuilder``,
a ``TopologyBuilder``, a ``trident.TridentTopology`` or a built ``Topology``
(docs/cli.md).
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from transactional.exceptions import TridentError

__all__ = ["load_topology_file", "SideEffectError", "no_side_effects", "built_topology"]

_MUST_RETURN = ("a TransactionalTopologyBuilder, a TopologyBuilder, a trident.TridentTopology "
                "or a built Topology")


def load_topology_file(path: str) -> ModuleType:
    """Import a topology file as a module. Executors cannot import a file by path: its
    classes and functions go to them by value, in the components' executor blobs only
    (``transactional.pickling.ship_by_value``); on the driver the commit phase and the
    spout's coordinator run the module's own classes."""
    p = Path(path)
    if not p.is_file():
        msg = f"trident: no such topology file: {path}"
        raise SystemExit(msg)
    name = f"trident_topology_{re.sub(r'[^0-9A-Za-z_]', '_', p.stem)}"
    loaded = sys.modules.get(name)
    if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve() != p.resolve():
        name = f"{name}_{len(sys.modules)}"       # another file of the same name (trident describe a/x.py b/x.py)
    spec = importlib.util.spec_from_file_location(name, p)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(p.resolve().parent))
    spec.loader.exec_module(module)
    from transactional.pickling import ship_by_value

    ship_by_value(module)   # executors cannot import a file by path
    if not hasattr(module, "build_topology"):
        msg = f"trident: {path} defines no build_topology(); it must return {_MUST_RETURN}"
        raise SystemExit(msg)
    return module


class SideEffectError(TridentError):
    """``build_topology()`` reached the network or started a process where it must be pure."""


@contextlib.contextmanager
def no_side_effects(where: str) -> Iterator[None]:
    """Refuse network connections and child processes while building ``where``'s topology
    (``trident describe``): ``build_topology()`` must be pure, setup goes in ``setup()``."""
    import socket
    import subprocess

    def refuse(what: str) -> Any:
        def refused(*args: Any, **kwargs: Any) -> Any:
            msg = (f"{where}: build_topology() {what}, but it must be pure: `trident describe` only reads the "
                   "topology. Move setup work (starting a broker, creating topics, producing, connecting) into "
                   "setup(), which `trident run` calls before build_topology() (docs/cli.md)")
            raise SideEffectError(msg)
        return refused

    saved = (socket.socket.connect, socket.socket.connect_ex, subprocess.Popen.__init__)
    socket.socket.connect = refuse("opened a network connection")            # type: ignore[method-assign]
    socket.socket.connect_ex = refuse("opened a network connection")         # type: ignore[method-assign]
    subprocess.Popen.__init__ = refuse("started a process")                  # type: ignore[method-assign]
    try:
        yield
    finally:
        socket.socket.connect, socket.socket.connect_ex, subprocess.Popen.__init__ = saved  # type: ignore[method-assign]


def built_topology(obj: Any, where: str) -> Any:
    """The built ``Topology`` of what ``build_topology()`` returned (``obj``): a
    ``Topology`` as is, a builder or ``TridentTopology`` built once. Anything else is a
    ``TridentError`` naming ``where`` (the file) and what it must return."""
    from transactional.topology import Topology

    if isinstance(obj, Topology):
        return obj
    build = getattr(obj, "build", None)
    if not callable(build):
        msg = f"{where}: build_topology() returned {_describe_value(obj)}; it must return {_MUST_RETURN}"
        raise TridentError(msg)
    topology = build()
    if not isinstance(topology, Topology):
        msg = (f"{where}: build_topology() returned a {type(obj).__name__} whose build() gave "
               f"{_describe_value(topology)}; it must return {_MUST_RETURN}")
        raise TridentError(msg)
    return topology


def _describe_value(v: Any) -> str:
    """"None", "a dict", "an OpaqueSpout": what a wrong return value was, for a message."""
    if v is None:
        return "None"
    name = type(v).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"
