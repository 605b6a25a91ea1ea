"""The accumulator that brings task reports to the driver (``transactional.engine.spark``).

A module of its own: Spark's workers unpickle it with every task, and importing it must
not import the driver's modules (``_spark`` imports the config, and pydantic with it).
"""

from __future__ import annotations

from typing import Any

from pyspark.accumulators import AccumulatorParam

from transactional.engine.reports import empty_report, merge_reports


class ReportParam(AccumulatorParam[dict[str, Any]]):
    """Merges task reports (``transactional.engine.reports.merge_reports``)."""

    def zero(self, value: dict[str, Any]) -> dict[str, Any]:
        return empty_report()

    def addInPlace(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        return merge_reports(a, b)
