"""What the terminal shows while ``trident`` runs: one-line log records with secrets masked,
and Spark kept quiet (its log4j lines at errors only, the JVM's start-up lines dropped)
unless ``--log-level DEBUG``."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from transactional.redaction import LOG_FILTER


class _CurrentStderr:
    """A stream that writes to whatever ``sys.stderr`` is at the time (log handlers keep
    their stream; ``quiet_spark`` replaces ``sys.stderr``)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


_HANDLER: logging.Handler | None = None


def setup_logging(level: str) -> None:
    """Log ``level`` and above to stderr, one line each; the "trident" logger's progress
    lines are INFO. kazoo's connection warnings and py4j's chatter show only at DEBUG
    (their errors always)."""
    global _HANDLER
    root = logging.getLogger()
    if _HANDLER is not None:
        root.removeHandler(_HANDLER)
    _HANDLER = logging.StreamHandler(_CurrentStderr())
    _HANDLER.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    _HANDLER.addFilter(LOG_FILTER)      # every logger's lines, kazoo's and Spark's too: secrets masked
    root.addHandler(_HANDLER)
    root.setLevel(level)
    debug = level == "DEBUG"
    logging.getLogger("kazoo").setLevel(logging.NOTSET if debug else logging.ERROR)
    logging.getLogger("py4j").setLevel(logging.WARNING if debug else logging.ERROR)


#: Spark's log4j2 settings for a quiet terminal: errors only, and no "Setting default log
#: level" banner (the loggers Spark checks for a custom level are set to it)
QUIET_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
logger.submit.name = org.apache.spark.deploy.SparkSubmit
logger.submit.level = error
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
"""
#: lines the JVM prints to stderr before any log4j setting applies
_JVM_NOISE = re.compile(rb"^(WARNING: Using incubator modules: |Using Spark's default log4j profile: |"
                        rb"Setting default log level to |To adjust logging level use sc\.setLogLevel)")


def _log4j2_file() -> str:
    digest = hashlib.sha1(QUIET_LOG4J2.encode()).hexdigest()[:10]
    path = Path(tempfile.gettempdir()) / f"trident-log4j2-quiet-{digest}.properties"
    if not path.is_file() or path.read_text() != QUIET_LOG4J2:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(QUIET_LOG4J2)
        tmp.replace(path)
    return str(path)


@contextlib.contextmanager
def quiet_spark(enabled: bool) -> Iterator[None]:
    """While in the block, a Spark JVM started by this process logs errors only (a log4j2
    file given through ``SPARK_SUBMIT_OPTS``, unless the user set one), and what processes
    started here write to stderr (the JVM and, through it, the Python workers) goes through
    a pipe that a thread copies to the terminal without the JVM's start-up lines. This
    process's own stderr is not delayed: ``sys.stderr`` writes to the terminal directly."""
    if not enabled:
        yield
        return
    saved_opts = os.environ.get("SPARK_SUBMIT_OPTS")
    user_log4j = "log4j2.configurationFile" in (saved_opts or "") or (
        bool(os.environ.get("SPARK_CONF_DIR")) and (Path(os.environ["SPARK_CONF_DIR"]) / "log4j2.properties").is_file())
    if not user_log4j:
        os.environ["SPARK_SUBMIT_OPTS"] = f"{saved_opts or ''} -Dlog4j2.configurationFile=file:{_log4j2_file()}".strip()
    sys.stderr.flush()
    try:
        terminal = os.dup(2)
    except OSError:                   # no stderr at all: nothing to keep quiet
        yield
        return
    read_end, write_end = os.pipe()
    own: IO[str] = open(os.dup(terminal), "w", buffering=1, encoding=getattr(sys.stderr, "encoding", None) or "utf-8",
                        errors="backslashreplace")
    saved_stream, sys.stderr = sys.stderr, own
    os.dup2(write_end, 2)
    os.close(write_end)
    threading.Thread(target=_copy_stderr, args=(read_end, terminal), name="trident-child-stderr", daemon=True).start()
    try:
        yield
    finally:
        own.flush()
        os.dup2(terminal, 2)          # children keep the pipe; this process writes to the terminal again
        sys.stderr = saved_stream
        own.close()
        if saved_opts is None:
            os.environ.pop("SPARK_SUBMIT_OPTS", None)
        else:
            os.environ["SPARK_SUBMIT_OPTS"] = saved_opts


def _copy_stderr(read_end: int, terminal: int) -> None:
    """Copy child processes' stderr lines to ``terminal``, without ``_JVM_NOISE``."""
    with os.fdopen(read_end, "rb") as pipe:
        for line in pipe:
            if _JVM_NOISE.match(line):
                continue
            try:
                os.write(terminal, line)
            except OSError:
                return
