"""Shipping code to Spark executors, as ``spark-submit --py-files`` does (docs/cluster.md).

On a cluster, executors run in other processes on other machines: they can import only
what is installed there or what Spark ships. ``code_zip`` packs what a topology needs
that is not installed: this package (``transactional``, ``spouts``, ``state``) and every
module the driver imported from outside the Python installation (the topology file's
sibling modules and local packages), one zip for ``SparkContext.addPyFile``.
Third-party libraries (kazoo, redis, pydantic, confluent-kafka, your own dependencies)
must be installed on the workers, or shipped as a packed environment with
``archives=["venv.tar.gz#environment"]`` and
``spark_conf={"spark.pyspark.python": "./environment/bin/python"}``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import site
import sys
import sysconfig
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger("trident")

#: the script ``spark-submit`` runs (its arguments are ``trident``'s: ``run FILE ...``)
SUBMIT_SCRIPT = str(Path(__file__).resolve().parent / "submit" / "trident_submit.py")

#: always shipped: the engine, the spouts and the state packages
OWN_PACKAGES = ("transactional", "spouts", "state")


def _installed_roots() -> list[Path]:
    """Directories whose modules count as installed (the standard library, site-packages)."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            roots.add(p)
    roots.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    roots.add(site.getusersitepackages() if hasattr(site, "getusersitepackages") else "")
    return [Path(r).resolve() for r in roots if r]


def _under(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def local_modules(extra: Iterable[str] = OWN_PACKAGES) -> dict[str, Path]:
    """The top-level modules and packages this process imported from outside the Python
    installation (name -> its file, or its package directory), and those named in
    ``extra`` wherever they are. Namespace packages and ``__main__`` are left out."""
    installed = _installed_roots()
    wanted = set(extra)
    out: dict[str, Path] = {}
    for name, mod in list(sys.modules.items()):
        if "." in name or name == "__main__" or mod is None:
            continue                      # a submodule's top-level package is listed too
        f = getattr(mod, "__file__", None)
        if not f or not f.endswith(".py"):
            continue                      # builtin, extension or namespace package
        path = Path(f).resolve()
        if name in wanted or not _under(path, installed):
            out[name] = path.parent if hasattr(mod, "__path__") else path
    for name in wanted - set(out):        # not imported here yet (e.g. state, imported lazily)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            origin = Path(spec.origin).resolve()
            out[name] = origin.parent if spec.submodule_search_locations is not None else origin
    return out


def code_zip(out_dir: str | Path | None = None, extra: Iterable[str] = OWN_PACKAGES) -> Path:
    """A zip of ``local_modules(extra)`` (``.py`` files; packages whole), named by its
    content's hash in ``out_dir`` (default: a new temporary directory)."""
    modules = local_modules(extra)
    files: list[tuple[str, Path]] = []
    for name, root in sorted(modules.items()):
        if root.is_dir():
            for p in sorted(root.rglob("*.py")):
                if "__pycache__" not in p.parts:
                    files.append((f"{name}/{p.relative_to(root).as_posix()}", p))
        else:
            files.append((f"{name}.py", root))
    digest = hashlib.sha256()
    for arc, p in files:
        digest.update(arc.encode())
        digest.update(p.read_bytes())
    out = Path(out_dir or tempfile.mkdtemp(prefix="trident-code-"))
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"trident-code-{digest.hexdigest()[:12]}.zip"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            for arc, p in files:
                z.write(p, arc)
        os.replace(tmp, path)
    log.info("shipping %d module(s) to executors in %s: %s", len(modules), path, ", ".join(sorted(modules)))
    return path


def needs_shipping(master: str) -> bool:
    """True for masters whose executors may not share this process's files (not ``local``)."""
    return not master.startswith("local")


def under_spark_submit() -> bool:
    """True when ``spark-submit`` started this driver (its ``--py-files`` ship the code)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ
