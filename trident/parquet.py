"""Exactly once into Parquet files: ``ParquetStateFactory`` (docs/states.md).

A directory (local, or any pyarrow filesystem, or an fsspec one) holds::

    data/000000000007-00001-e3-9f1c2a4b.parquet    rows of txid 7 from task 1, driver epoch 3
    _committed/000000000007-00001-e3.json         its marker: {"txid", "partition",
                                                   "num_partitions", "rows", "epoch", "file"}

**Mechanism.** Every task writes every txid (also with no rows): first its data file under
a name no file had before, then its marker -- the manifest, published last by a write
and a rename, so that it names the old file or the new one, never a file being written.
A replayed txid (a crash before the driver recorded it, a failed attempt; with an opaque
spout perhaps another batch) writes a new data file and then its marker: in the same
driver epoch the same marker name (replaced by the rename), after a driver's takeover
the new epoch's. A replay **replaces**, never adds. What a replay superseded (the older
file, an older epoch's markers of that txid) is deleted at the task's next commit, when
the txid is recorded: a reader that listed the files before still finds them until then.

The driver's epoch is kept in ``_epoch``: a write from an older driver is refused
(checked before each write; a file system offers no atomic compare-and-write). A stale
driver paused between that check and its rename can still publish its marker of the
txid it was committing, under its own, older epoch: readers take a txid's markers of the
newest epoch that has all of them, so they ignore it as soon as the newer driver has
committed that txid (which it does: the stale driver never recorded it). Until then
they see that txid as the stale driver wrote it -- with a transactional spout the same
rows -- and its files stay behind, ignored, until removed by hand (docs/states.md).

**Retention** (``retain_txids=N``, ``retain_secs=S``): at each commit of txid ``t`` a task
deletes its own markers, then the files they name, of the txids it no longer keeps: older
than the newest ``N`` (``txid <= t - N``) or committed more than ``S`` seconds before ``t``
by the txids' recorded times (``begin_time``, kept in each marker as ``"time_ms"``) -- all of
them recorded, since ``t`` commits only after ``t - 1`` was. A txid goes from the readers'
view at once when its first marker goes (the reader rule needs every task's), and
``read_committed`` lists again when a file went while it read.

**The reader rule.** A txid is committed when, for one driver epoch, the markers of all
its ``num_partitions`` tasks exist; the newest such epoch's markers count. Read only the
data files those markers name (``committed_files``). Then no reader sees part of a txid,
a mix of two drivers' attempts of it, nor a file being written::

    pyarrow.parquet.read_table(committed_files("out/"))        # or read_committed("out/")
    duckdb.read_parquet(committed_files("out/"))
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from state.errors import ConfigError, LeadershipLostError, UnstorableValueError
from trident.operation import BaseStateUpdater, TridentCollector, TridentTuple
from trident.state import EPOCH, State, StateFactory

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


def data_name(txid: int, partition: int, epoch: int | None) -> str:
    """A new data file of ``(txid, partition)`` written by ``epoch``, relative to the root
    (a name no earlier write had: a replay never writes over a file a reader may read)."""
    return f"data/{txid:012d}-{partition:05d}-e{epoch or 0}-{uuid.uuid4().hex[:8]}.parquet"


def marker_name(txid: int, partition: int, epoch: int | None) -> str:
    """The marker of ``(txid, partition)`` written by driver ``epoch``, relative to the root."""
    return f"_committed/{txid:012d}-{partition:05d}-e{epoch or 0}.json"


class ParquetStateFactory(StateFactory):
    """Rows into Parquet files under ``path`` (see the module docstring). ``columns``: the
    column names in the order of each row's values; ``schema``: a ``pyarrow.Schema``
    (else types are inferred per file); ``filesystem``: a pyarrow or fsspec filesystem
    (else from ``path``: a local directory or a URI pyarrow knows)."""

    opaque_safe = True

    def __init__(self, path: str, columns: Sequence[str], *, schema: Any = None, filesystem: Any = None,
                 compression: str = "snappy", retain_txids: int | None = None,
                 retain_secs: float | None = None) -> None:
        """``retain_txids``/``retain_secs``: keep only the newest txids, or those committed
        within that many seconds (module docstring, "Retention"); None: keep every txid."""
        for what, v in (("retain_txids", retain_txids), ("retain_secs", retain_secs)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0
                                  or (what == "retain_txids" and not isinstance(v, int))):
                msg = (f"ParquetStateFactory({path!r}): {what} is a "
                       f"{'whole number of txids' if what == 'retain_txids' else 'number of seconds'} above 0 "
                       f"(or None: keep every txid), not {v!r}")
                raise ConfigError(msg)
        self.retain_txids, self.retain_secs = retain_txids, retain_secs
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

    # -- trident verify's scratch copies (trident.state.StateFactory.scratch) --

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
        self.last_txid: int | None = None
        # (txid, names relative to the root): what replays of txid superseded, deleted once
        # a later txid commits (then txid is recorded: no reader's list needs them).
        self.superseded: tuple[int, list[str]] | None = None
        self.time_ms: int | None = None          # the txid's recorded time (``begin_time``)

    def begin_time(self, time_ms: int) -> None:
        """The txid's recorded time (the engine's, the same on every replay): kept in its
        marker, what ``retain_secs`` is decided by."""
        self.time_ms = time_ms

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
        raise the epoch fence; 3. delete what replays of an earlier, now recorded txid
        superseded; 4. write the data file under a new name (none when there are no rows);
        5. publish the marker (write and rename), naming it; 6. note what it superseded."""
        import pyarrow.parquet as pq

        # Step 1.
        table = self._table(txid)
        # Step 2.
        self._fence()
        # Step 3.
        if self.superseded and self.superseded[0] < txid:
            self._delete(self.superseded[1])
            self.superseded = None
        self._retire(txid)
        # Step 4.
        data = data_name(txid, self.partition, self.epoch) if table.num_rows else None
        if data is not None:
            self.fs.create_dir(f"{self.root}/data", recursive=True)
            pq.write_table(table, f"{self.root}/{data}", filesystem=self.fs, compression=self.f.compression)
        # Step 5.
        marker = marker_name(txid, self.partition, self.epoch)
        replaced = _read_marker(self.fs, f"{self.root}/{marker}")
        doc = {"txid": txid, "partition": self.partition, "num_partitions": self.num_partitions,
               "rows": table.num_rows, "epoch": self.epoch, "file": data}
        if self.time_ms is not None:
            doc["time_ms"] = self.time_ms
        _write_atomic(self.fs, f"{self.root}/{marker}", json.dumps(doc).encode())
        # Step 6.
        old = [replaced["file"]] if replaced and replaced.get("file") not in (None, data) else []
        if self.last_txid is None or txid != self.last_txid + 1:
            old += self._older_epochs(txid)
        if old:
            prior = self.superseded[1] if self.superseded and self.superseded[0] == txid else []
            self.superseded = (txid, prior + old)
        self.last_txid = txid
        self.rows = []

    def _older_epochs(self, txid: int) -> list[str]:
        """Markers of ``txid`` that older drivers wrote for this task (task 0: also for the
        tasks a smaller task count no longer has), then the files they name."""
        markers, files = [], []
        for path, m in _markers(self.fs, self.root):
            if m is None:
                continue
            mine = m["partition"] == self.partition or (self.partition == 0 and m["partition"] >= self.num_partitions)
            if m["txid"] == txid and mine and (m.get("epoch") or 0) < (self.epoch or 0):
                markers.append(path[len(self.root) + 1:])
                files += [m["file"]] if m.get("file") else []
        return markers + files

    def _retire(self, txid: int) -> None:
        """Retention (module docstring): this task's markers of txids it no longer keeps
        (task 0: also those of tasks a smaller task count no longer has), then their files."""
        n, secs = self.f.retain_txids, self.f.retain_secs
        if n is None and (secs is None or self.time_ms is None):
            return
        import pyarrow.fs as pafs

        for info in self.fs.get_file_info(pafs.FileSelector(f"{self.root}/_committed", allow_not_found=True)):
            name = info.path.rsplit("/", 1)[-1]
            if not name.endswith(".json") or name.count("-") != 2:
                continue
            t, part = int(name[:12]), int(name[13:18])
            mine = part == self.partition or (self.partition == 0 and part >= self.num_partitions)
            if not mine or t >= txid:
                continue
            m = None if n is not None and t <= txid - n else _read_marker(self.fs, info.path)
            old = m is None or (secs is not None and self.time_ms is not None and m.get("time_ms") is not None
                                and m["time_ms"] <= self.time_ms - secs * 1000)
            if m is None:
                m = _read_marker(self.fs, info.path)
            if old and m is not None:
                self._delete([info.path[len(self.root) + 1:]] + ([m["file"]] if m.get("file") else []))

    def _delete(self, names: list[str]) -> None:
        for name in names:
            try:
                self.fs.delete_file(f"{self.root}/{name}")
            except (FileNotFoundError, OSError):
                pass

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


def _read_marker(fs: Any, path: str) -> dict[str, Any] | None:
    try:
        with fs.open_input_stream(path) as f:
            doc: dict[str, Any] = json.loads(f.read())
            return doc
    except (FileNotFoundError, OSError):
        return None


def _markers(fs: Any, root: str) -> list[tuple[str, dict[str, Any] | None]]:
    """Every marker under ``root`` with its path, ``None`` for one that vanished while
    being read (a commit deleted what a replay superseded: list again)."""
    import pyarrow.fs as pafs

    out: list[tuple[str, dict[str, Any] | None]] = []
    for info in fs.get_file_info(pafs.FileSelector(f"{root}/_committed", allow_not_found=True)):
        if info.path.endswith(".json"):
            out.append((info.path, _read_marker(fs, info.path)))
    return out


def _choose(markers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The markers of one txid that count: those of the newest epoch that has one for
    each of its ``num_partitions`` tasks (``[]``: not committed)."""
    by_epoch: dict[int, dict[int, dict[str, Any]]] = {}
    for m in markers:
        by_epoch.setdefault(m.get("epoch") or 0, {})[m["partition"]] = m
    for epoch in sorted(by_epoch, reverse=True):
        ms = by_epoch[epoch]
        n = next(iter(ms.values()))["num_partitions"]
        if set(ms) >= set(range(n)):
            return [ms[p] for p in range(n)]
    return []


def committed_files(path: str, filesystem: Any = None) -> list[str]:
    """The data files of every committed txid under ``path`` (the reader rule: the newest
    driver epoch that has the markers of all the txid's tasks), in txid and task order.
    A file a replay superseded stays until that task's next commit: read the list soon,
    or use ``read_committed``, which lists again when a file went."""
    fs, root = _fs(path, filesystem)
    for _ in range(10):
        listed = _markers(fs, root)
        if all(m is not None for _, m in listed):
            break
    else:
        msg = f"{path!r}: markers kept vanishing while being listed (a replay's cleanup); try again"
        raise OSError(msg)
    by_txid: dict[int, list[dict[str, Any]]] = {}
    for _, m in listed:
        assert m is not None
        by_txid.setdefault(m["txid"], []).append(m)
    return [f"{root}/{m['file']}" for txid in sorted(by_txid) for m in _choose(by_txid[txid]) if m["file"]]


def read_committed(path: str, filesystem: Any = None) -> Any:
    """Every committed row under ``path`` as one ``pyarrow.Table`` (listed again when a
    file named by the list was deleted before it was read: a replay's cleanup)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    fs, _ = _fs(path, filesystem)
    while True:
        files = committed_files(path, filesystem)
        if not files:
            return pa.table({})
        try:
            return pq.ParquetDataset(files, filesystem=fs).read()
        except OSError:
            if set(files) <= set(committed_files(path, filesystem)):
                raise                     # not a replay's cleanup: the files are still named


class ParquetUpdater(BaseStateUpdater):
    """``partition_persist``'s updater for ``ParquetStateFactory``: each tuple is a row."""

    def update_state(self, state: Any, tuples: list[TridentTuple], collector: TridentCollector) -> None:
        """Add the tuples as rows of this batch."""
        state.add_rows(tuples)
