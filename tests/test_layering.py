"""The layers: state/ and spouts/ (and the engine package's exceptions) load without
pyspark or the engine; backend clients load only when a URL of theirs is opened."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def loaded_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"],
                         cwd=REPO, capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_state_and_spouts_do_not_load_pyspark_or_the_engine():
    mods = loaded_after("import state, spouts, state.map, state.keys, state.base, transactional.exceptions")
    assert not {m for m in mods if m.split(".")[0] in ("pyspark", "py4j", "kazoo", "redis", "confluent_kafka")}
    assert not {m for m in mods if m.startswith("transactional._")}


def test_backend_clients_load_only_when_their_url_is_opened():
    mods = loaded_after("from state.map import open_map_backing\n"
                        "from state.base import open_transactional_state\n"
                        "open_map_backing('memory://', 't:m'); open_transactional_state('memory://', 't')")
    assert "redis" not in mods and "kazoo" not in mods


def test_one_registry_of_schemes_serves_config_and_openers():
    from state.backends import BACKENDS, COORDINATION, USER_STATE, opener
    from state.base import MemoryTransactionalState

    assert {(b.role, b.scheme) for b in BACKENDS} == {
        (COORDINATION, "memory"), (COORDINATION, "zk"), (USER_STATE, "memory"), (USER_STATE, "redis"),
        (USER_STATE, "rediss")}
    assert isinstance(opener(COORDINATION, "memory://")("memory://", "reg-t"), MemoryTransactionalState)
