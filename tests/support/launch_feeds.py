"""The feeds of tests/transactional/engine/test_launch_policy.py, by run name: a module of
its own, so that the test's spout and bolts reach them through a module reference (pickled
by name) rather than a global of the test module (pickled by value, locks and all). The
runs use the in-process executor: every component shares this process's dict."""

from __future__ import annotations

from typing import Any

FEEDS: dict[str, Any] = {}
