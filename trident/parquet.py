"""Exactly once into Parquet files: ``ParquetStateFactory`` (docs/states.md).

A directory (local, or any pyarrow filesystem, or an fsspec one) holds::

    data/000000000007-00001.parquet               rows of txid 7 from task 1
    _committed/000000000007-00001.json            its marker: {"txid", "partition",
                                                   "num_partitions", "rows", "epoch", "file"}

**Mechanism.** Every task writes every txid (also with no rows): first its data file, then
its marker, both under names fixed by ``(txid, task)`` -- the marker is the manifest,
published last. A replayed txid (a crash before the driver recorded it, a failed
attempt; with an opaque spout perhaps another batch) writes the same names again: it
**overwrites**, never adds. The driver's epoch is kept in ``_epoch``: a write from an
older driver is refused (checked before each write; a file system offers no atomic
compare-and-write, so a stale driver paused between that check and its write is the one
case this cannot refuse).

**The reader rule.** A txid is committed when the markers of all its ``num_partitions``
tasks exist; read only the data files those markers name (``committed_files``). Then no
reader sees part of a txid, nor a file being written::

    pyarrow.parquet.read_table(committed_files("out/"))        # or read_committed("out/")
    duckdb.read_parquet(committed_files("out/"))
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Sequence
from typing import Any

from state.errors import ConfigError, LeadershipLostError, UnstorableValueError
from trident.operation import BaseStateUpdater, TridentCollector, TridentTuple
from trident.states import EPOCH, State, StateFactory

__all__ = ["ParquetStateFactory", "ParquetState", "ParquetUpdater", "committed_files", "read_committed"]


def _fs(path: str, filesystem: Any = None) -> tuple[Any, str]:
    """A pyarrow filesystem and the path in it."""
    import pyarrow.fs as pafs

    if filesystem is None:
        fs, p = pafs.FileSystem.from_uri(path) if "://" in path else (pafs.LocalFileSystem(), path)
        return fs, p.rstrip("/")
    if not isinstance(filesystem, pafs.FileSystem):       # an fsspec filesystem
        filesystem = pafs.PyFileSystem(pafs.FSSpecHandler(filesystem))
    return filesystem, path.rstrip("/")


def data_name(txid: int, partition: int) -> str:
    """The data file of ``(txid, partition)``, relative to the root."""
    return f"data/{txid:012d}-{partition:05d}.parquet"


def marker_name(txid: int, partition: int) -> str:
    """The marker of ``(txid, partition)``, relative to the root."""
    return f"_committed/{txid:012d}-{partition:05d}.json"


class ParquetStateFactory(StateFactory):
    """Rows into Parquet files under ``path`` (see the module docstring). ``columns``: the
    column names in the order of each row's values; ``schema``: a ``pyarrow.Schema``
    (else types are inferred per file); ``filesystem``: a pyarrow or fsspec filesystem
    (else from ``path``: a local directory or a URI pyarrow knows)."""

    opaque_safe = True

    def __init__(self, path: str, columns: Sequence[str], *, schema: Any = None, filesystem: Any = None,
                 compression: str = "snappy") -> None:
        self.path = str(path)
        self.columns = list(columns)
        if not self.columns:
            msg = f"ParquetStateFactory({path!r}): name at least one column"
            raise ConfigError(msg)
        self.schema = schema
        self.filesystem = filesystem
        self.compression = compression

    @property
    def name(self) -> str:
        """``parquet:<path>``."""
        return f"parquet:{self.path}"

    # -- trident verify's scratch copies (trident.states.StateFactory.scratch) --

    #: on a scratch copy: the real directory
    scratch_of: str | None = None

    def scratch(self, namespace: str) -> ParquetStateFactory:
        """A copy writing into the directory ``<path>.<namespace>`` beside the real one (on the
        same file system, which every executor reaches); the real directory is not touched."""
        c = copy.copy(self)
        c.scratch_of = self.path
        c.path = f"{self.path.rstrip('/')}.{namespace}"
        return c

    def read_scratch(self) -> dict[Any, Any] | None:
        """The committed rows (``read_committed``) as ``{row: count}``."""
        if self.scratch_of is None:
            return None
        out: dict[Any, Any] = {}
        for r in read_committed(self.path, self.filesystem).to_pylist():
            row = tuple(json.dumps(v, sort_keys=True, default=str) if isinstance(v, (dict, list)) else v
                        for v in (r.get(c) for c in self.columns))
            out[row] = out.get(row, 0) + 1
        return out

    def drop_scratch(self) -> None:
        """Remove the scratch directory."""
        if self.scratch_of is not None:
            fs, root = _fs(self.path, self.filesystem)
            try:
                fs.delete_dir(root)
            except (FileNotFoundError, OSError):
                pass

    def make_state(self, conf: dict[str, Any], metrics: Any, partition_index: int, num_partitions: int) -> ParquetState:
        """Check the directory can be written (a probe file), before any batch."""
        fs, root = _fs(self.path, self.filesystem)
        probe = f"{root}/_committed/.probe-{partition_index}"
        try:
            fs.create_dir(f"{root}/_committed", recursive=True)
            fs.create_dir(f"{root}/data", recursive=True)
            with fs.open_output_stream(probe) as out:
                out.write(b"ok")
            fs.delete_file(probe)
        except OSError as e:
            msg = (f"Parquet state directory {self.path!r} cannot be written ({e}); give a directory this "
                   "process may create files in")
            raise ConfigError(msg) from None
        return ParquetState(self, fs, root, partition_index, num_partitions, conf.get(EPOCH))


class ParquetState(State):
    """One task's files: rows of a batch (``add_rows``) written at ``commit(txid)``, data
    file first, marker last."""

    def __init__(self, factory: ParquetStateFactory, fs: Any, root: str, partition: int, num_partitions: int,
                 epoch: int | None) -> None:
        self.f, self.fs, self.root = factory, fs, root
        self.partition, self.num_partitions, self.epoch = partition, num_partitions, epoch
        self.rows: list[tuple[Any, ...]] = []

    def begin_commit(self, txid: int) -> None:
        """Start batch ``txid``."""
        self.rows = []

    def add_rows(self, rows: Iterable[Sequence[Any]]) -> None:
        """Rows of this batch (values in the order of ``columns``)."""
        n = len(self.f.columns)
        for r in rows:
            r = tuple(r)
            if len(r) != n:
                msg = f"a row for {self.f.name} has {len(r)} values {r!r}; the state writes {self.f.columns}"
                raise UnstorableValueError(msg)
            self.rows.append(r)

    def _table(self, txid: int) -> Any:
        import pyarrow as pa

        cols: list[Any] = list(zip(*self.rows, strict=True)) if self.rows else [[] for _ in self.f.columns]
        try:
            if self.f.schema is not None:
                return pa.Table.from_arrays([pa.array(list(c), type=self.f.schema.field(n).type)
                                             for n, c in zip(self.f.columns, cols, strict=True)], schema=self.f.schema)
            return pa.Table.from_arrays([pa.array(list(c)) for c in cols], names=self.f.columns)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, KeyError) as e:
            for name, c in zip(self.f.columns, cols, strict=True):
                try:
                    pa.array(list(c)) if self.f.schema is None else pa.array(list(c), type=self.f.schema.field(name).type)
                except Exception:  # noqa: BLE001
                    bad = next((v for v in c if _unencodable(v, self.f.schema, name)), "?")
                    msg = (f"{self.f.name} column {name!r} of txid {txid}: Parquet cannot store {bad!r} ({e}); "
                           "nothing of the batch was written. Give the column one type pyarrow can store")
                    raise UnstorableValueError(msg) from None
            msg = f"{self.f.name}: txid {txid}'s rows cannot be a Parquet table: {e}"
            raise UnstorableValueError(msg) from None

    def commit(self, txid: int) -> None:
        """Steps: 1. build the table (a value Parquet cannot store stops here); 2. check and
        raise the epoch fence; 3. write the data file (or remove an earlier attempt's when
        there are no rows); 4. publish the marker."""
        import pyarrow.parquet as pq

        # Step 1.
        table = self._table(txid)
        # Step 2.
        self._fence()
        # Step 3.
        data = f"{self.root}/{data_name(txid, self.partition)}"
        if table.num_rows:
            self.fs.create_dir(data.rsplit("/", 1)[0], recursive=True)
            pq.write_table(table, data, filesystem=self.fs, compression=self.f.compression)
        else:
            try:
                self.fs.delete_file(data)
            except (FileNotFoundError, OSError):
                pass
        # Step 4.
        marker = {"txid": txid, "partition": self.partition, "num_partitions": self.num_partitions,
                  "rows": table.num_rows, "epoch": self.epoch,
                  "file": data_name(txid, self.partition) if table.num_rows else None}
        _write_atomic(self.fs, f"{self.root}/{marker_name(txid, self.partition)}", json.dumps(marker).encode())
        self.rows = []

    def _fence(self) -> None:
        if self.epoch is None:
            return
        path = f"{self.root}/_epoch"
        try:
            with self.fs.open_input_stream(path) as f:
                stored = int(f.read().decode() or 0)
        except (FileNotFoundError, OSError, ValueError):
            stored = 0
        if stored > self.epoch:
            msg = (f"{self.f.name}: a newer driver (epoch {stored}) writes here; this driver (epoch {self.epoch}) "
                   "lost its lock and writes nothing")
            raise LeadershipLostError(msg)
        if stored < self.epoch:
            _write_atomic(self.fs, path, str(self.epoch).encode())


def _unencodable(v: Any, schema: Any, name: str) -> bool:
    import pyarrow as pa

    try:
        pa.array([v]) if schema is None else pa.array([v], type=schema.field(name).type)
        return False
    except Exception:  # noqa: BLE001
        return True


def _write_atomic(fs: Any, path: str, data: bytes) -> None:
    """Write ``data`` to a temporary name, then move it to ``path`` (a rename where the
    file system has one: readers see the old file or the new one)."""
    tmp = f"{path}.tmp"
    with fs.open_output_stream(tmp) as out:
        out.write(data)
    fs.move(tmp, path)


def committed_files(path: str, filesystem: Any = None) -> list[str]:
    """The data files of every committed txid under ``path`` (the reader rule: a txid
    whose tasks' markers all exist), in txid and task order."""
    import pyarrow.fs as pafs

    fs, root = _fs(path, filesystem)
    infos = fs.get_file_info(pafs.FileSelector(f"{root}/_committed", allow_not_found=True))
    by_txid: dict[int, list[dict[str, Any]]] = {}
    for info in infos:
        if not info.path.endswith(".json"):
            continue
        with fs.open_input_stream(info.path) as f:
            m = json.loads(f.read())
        by_txid.setdefault(m["txid"], []).append(m)
    out = []
    for txid in sorted(by_txid):
        ms = by_txid[txid]
        n = ms[0]["num_partitions"]
        if {m["partition"] for m in ms} >= set(range(n)):
            out += [f"{root}/{m['file']}" for m in sorted(ms, key=lambda m: m["partition"]) if m["file"]]
    return out


def read_committed(path: str, filesystem: Any = None) -> Any:
    """Every committed row under ``path`` as one ``pyarrow.Table``."""
    import pyarrow.parquet as pq

    fs, _ = _fs(path, filesystem)
    files = committed_files(path, filesystem)
    if not files:
        import pyarrow as pa

        return pa.table({})
    return pq.ParquetDataset(files, filesystem=fs).read()


class ParquetUpdater(BaseStateUpdater):
    """``partition_persist``'s updater for ``ParquetStateFactory``: each tuple is a row."""

    def update_state(self, state: Any, tuples: list[TridentTuple], collector: TridentCollector) -> None:
        """Add the tuples as rows of this batch."""
        state.add_rows(tuples)
