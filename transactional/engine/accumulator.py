"""The accumulator that brings task reports to the driver (``transactional.engine.spark``).

A module of its own: Spark's workers unpickle it with every task, and importing it must
not import the driver's modules (``_spark`` imports the config, and pydantic with it).
"""

from __future__ import annotations

from pyspark.accumulators import AccumulatorParam

from transactional.engine.reports import TaskReport, empty_report, merge_reports


class ReportParam(AccumulatorParam[TaskReport]):
    """Merges task reports (``transactional.engine.reports.merge_reports``)."""

    def zero(self, value: TaskReport) -> TaskReport:
        return empty_report()

    def addInPlace(self, a: TaskReport, b: TaskReport) -> TaskReport:
        return merge_reports(a, b)
