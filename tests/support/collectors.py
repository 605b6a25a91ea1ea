"""A test collector for spout emitters: records what an emitter hands it, as record
batches (when its consumers take columns) or as tuples."""

from __future__ import annotations

from typing import Any


class Collector:
    def __init__(self, columns: bool) -> None:
        self.columns, self.batches, self.tuples = columns, [], []

    def columnar(self, stream: str = "default") -> bool:
        return self.columns

    def emit_columns(self, batch: Any, stream: str = "default") -> None:
        self.batches.append(batch)

    def emit(self, values: tuple, stream: str = "default") -> None:
        self.tuples.append(values)


class RowCollector:
    """What an emitter task emits as tuples, in order (``rows``)."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []

    def emit(self, values: tuple, stream: str = "default") -> None:
        self.rows.append(values)

    def emit_direct(self, task: int, values: tuple, stream: str = "default") -> None:
        self.rows.append(values)
