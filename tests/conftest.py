"""Shared fixtures: one SparkContext per test session; real servers come from the
``fixtures_*`` plugins (each starts its server on a free loopback port)."""

from __future__ import annotations

import os
import sys

import pytest

# tests/support holds the fixtures, child programs and crash plans; the repository root goes
# first so that tests/state, tests/trident, ... (no __init__.py) never shadow the packages.
_TESTS = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(_TESTS), os.path.join(_TESTS, "support")]
pytest_plugins = ["fixtures_servers", "fixtures_redis", "fixtures_zookeeper", "fixtures_kafka",
                  "fixtures_postgres", "fixtures_cluster"]


@pytest.fixture(scope="session")
def spark_context():
    """One local[2] SparkContext for the whole session (starting one costs ≈5 s)."""
    from transactional.config import TopologyConfig
    from transactional.engine.spark import get_or_create_context

    sc = get_or_create_context(TopologyConfig(spark_master="local[2]", spark_ui=False))
    yield sc
    sc.stop()


@pytest.fixture(params=["in-process", "spark"])
def executor(request: pytest.FixtureRequest) -> str:
    """The executor a test runs on, once each (``indirect`` parametrize lists pick some); a
    module may define its own ``executor`` fixture instead."""
    if request.param == "spark":
        request.getfixturevalue("spark_context")
    return request.param
