"""What the server fixtures share: knowing that a test failed (to print server logs),
and a factory of private servers a test may stop, kill and restart."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from transactional.testing._process import ManagedProcess

S = TypeVar("S", bound=ManagedProcess)
_REPORTS = pytest.StashKey[dict]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # noqa: ARG001
    rep = yield
    item.stash.setdefault(_REPORTS, {})[rep.when] = rep
    return rep


def test_failed(request: pytest.FixtureRequest) -> bool:
    """True when the requesting test failed (in setup, call or teardown so far)."""
    return any(r.failed for r in request.node.stash.get(_REPORTS, {}).values())


test_failed.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


def print_logs(server: ManagedProcess, what: str) -> None:
    print(f"\n----- {what} log ({server.log_path}) -----\n{server.logs()}")


def private_servers(request: pytest.FixtureRequest, make_server: Callable[..., S],
                    what: str) -> Iterator[Callable[..., S]]:
    """Body of a ``*_factory`` fixture: ``factory(**kwargs)`` starts a server; all are
    destroyed after the test, their logs printed if it failed."""
    servers: list[S] = []

    def make(**kwargs) -> S:
        server = make_server(**kwargs)
        servers.append(server)
        server.start()
        return server

    yield make
    failed = test_failed(request)
    for i, server in enumerate(servers):
        if failed:
            print_logs(server, f"private {what} #{i}")
        server.destroy()
