"""Distributed RPC (docs/drpc.md): Storm's Linear DRPC in Python.

A DRPC topology answers calls ``drpc.execute(function, args) -> str`` with a parallel
computation. ``LinearDRPCTopologyBuilder`` chains bolts; the first bolt receives
``(request_id, args)``, every tuple carries the request id first, and the last bolt emits
``(request_id, result)``:

>>> from transactional import BaseBasicBolt, Fields, Values
>>> class Exclaim(BaseBasicBolt):
...     def execute(self, tuple, collector):
...         collector.emit(Values(tuple[0], tuple[1] + "!"))
...     def declare_output_fields(self, declarer):
...         declarer.declare(Fields("id", "result"))
>>> drpc = LocalDRPC()
>>> builder = LinearDRPCTopologyBuilder("exclamation")
>>> _ = builder.add_bolt(Exclaim(), 3)
>>> topology = builder.create_local_topology(drpc)
>>> from transactional import LocalCluster, TopologyConfig
>>> with LocalCluster() as cluster:                                   # doctest: +SKIP
...     cluster.submit_topology("exclamation", TopologyConfig(), topology)
...     drpc.execute("exclamation", "hello")
'hello!'

A ``BaseBatchBolt`` in a DRPC topology is one instance per request and task:
``prepare(conf, context, collector, id)`` gets the request id, ``execute`` that request's
tuples, and ``finish_batch`` runs once the task has every tuple of the request -- on every
task of a middle bolt, also those that got none, and on the last bolt on the one task the
id hashes to (Storm's CoordinatedBolt). Requests travel in batches: one batch carries up
to ``drpc_batch_size`` requests (docs/drpc.md).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any

from transactional.bolt import BaseBasicBolt, BaseBatchBolt
from transactional.engine.drpc import (
    FAILED_STREAM,
    IDS_STREAM,
    RETURN_ID,
    SPOUT_ID,
    DRPCSpout,
    RequestBolt,
    RequestQueue,
    ReturnResults,
    local_queues,
)
from transactional.engine.drpc.remote import drpc_token
from transactional.exceptions import DRPCExecutionException, TopologyError
from transactional.topology import Topology, TransactionalTopologyBuilder
from transactional.tuples import Fields

__all__ = ["LinearDRPCTopologyBuilder", "LinearDRPCInputDeclarer", "LocalDRPC", "DRPCClient",
           "DRPCExecutionException", "FinishedCallback"]


class FinishedCallback:
    """Mixin for a DRPC bolt: ``finished_id(id)`` is called once the task has every tuple
    of request ``id`` (after ``finish_batch`` for a batch bolt), as Storm's
    ``FinishedCallback.finishedId``; it may emit."""

    def finished_id(self, id: Any) -> None:
        """The task has seen every tuple of request ``id``."""


class LinearDRPCInputDeclarer:
    """Returned by ``add_bolt``: how the bolt reads the previous bolt (each call replaces
    the last; the default is shuffle)."""

    def __init__(self, component: dict[str, Any]) -> None:
        self._c = component

    def _set(self, grouping: str, fields: tuple[str, ...] = ()) -> LinearDRPCInputDeclarer:
        if self._c["first"]:
            msg = (f"DRPC bolt {self._c['id']!r} is the first bolt: it reads the requests (shuffled); "
                   "groupings apply to the bolts after it")
            raise TopologyError(msg)
        self._c["grouping"], self._c["fields"] = grouping, fields
        return self

    def shuffle_grouping(self) -> LinearDRPCInputDeclarer:
        """The previous bolt's tuples spread evenly."""
        return self._set("shuffle")

    def fields_grouping(self, fields: Fields | tuple[str, ...] | str) -> LinearDRPCInputDeclarer:
        """Equal values of ``fields`` go to one task."""
        return self._set("fields", (fields,) if isinstance(fields, str) else tuple(fields))

    def global_grouping(self) -> LinearDRPCInputDeclarer:
        """Every tuple to task 0."""
        return self._set("global")

    def all_grouping(self) -> LinearDRPCInputDeclarer:
        """Every tuple to every task."""
        return self._set("all")

    def none_grouping(self) -> LinearDRPCInputDeclarer:
        """No preference (as shuffle)."""
        return self._set("none")


class LinearDRPCTopologyBuilder:
    """Storm's ``LinearDRPCTopologyBuilder``: a DRPC function computed by a chain of bolts.

    ``add_bolt(bolt, parallelism)`` appends a step (a ``BaseBasicBolt`` or a
    ``BaseBatchBolt``) and returns its declarer; ``create_local_topology(drpc)`` finishes a
    topology that serves ``drpc`` (a ``LocalDRPC``) in this process,
    ``create_remote_topology()`` one that serves the ``trident drpc`` servers named in
    ``TopologyConfig.drpc_servers``."""

    def __init__(self, function: str) -> None:
        if not isinstance(function, str) or not function or "/" in function or ":" in function:
            msg = f"DRPC function name must be a non-empty string without '/' or ':'; got {function!r}"
            raise TopologyError(msg)
        self.function = function
        self._bolts: list[dict[str, Any]] = []

    def add_bolt(self, bolt: Any, parallelism: int = 1) -> LinearDRPCInputDeclarer:
        """Append ``bolt`` with ``parallelism`` tasks (Storm's ``addBolt``)."""
        if not isinstance(bolt, (BaseBasicBolt, BaseBatchBolt)):
            msg = (f"DRPC bolt {len(self._bolts)} of {self.function!r} is a {type(bolt).__name__}; subclass "
                   "BaseBasicBolt or BaseBatchBolt")
            raise TopologyError(msg)
        c = {"id": f"bolt{len(self._bolts)}", "bolt": bolt, "parallelism": parallelism,
             "grouping": "shuffle", "fields": (), "first": not self._bolts}
        self._bolts.append(c)
        return LinearDRPCInputDeclarer(c)

    def create_local_topology(self, drpc: LocalDRPC) -> Topology:
        """The topology serving ``drpc``'s calls of this function; run it with
        ``LocalCluster.submit_topology`` in the process that holds ``drpc``."""
        if not isinstance(drpc, LocalDRPC):
            msg = f"create_local_topology takes a LocalDRPC; got {type(drpc).__name__}"
            raise TopologyError(msg)
        topology = self._build(drpc.source)
        drpc._serve(self.function)
        return topology

    def create_remote_topology(self) -> Topology:
        """The topology serving this function's calls on the ``trident drpc`` servers named
        in ``TopologyConfig.drpc_servers`` (checked when it starts)."""
        return self._build("remote")

    def _build(self, source: str) -> Topology:
        if not self._bolts:
            msg = (f"DRPC topology {self.function!r} has no bolt: add_bolt(...) at least once; the last bolt "
                   "emits (id, result)")
            raise TopologyError(msg)
        b = TransactionalTopologyBuilder(self.function, SPOUT_ID, DRPCSpout(self.function, source))
        prev = SPOUT_ID
        for c in self._bolts:
            d = b.set_bolt(c["id"], RequestBolt(c["bolt"], c["id"]), c["parallelism"])
            if c["first"]:
                d.shuffle_grouping(SPOUT_ID)
            elif c["grouping"] == "fields":
                d.fields_grouping(prev, c["fields"])
            else:
                getattr(d, f"{c['grouping']}_grouping")(prev)
            if c is self._bolts[-1] and c["grouping"] == "global" and not c["first"]:
                d.global_grouping(SPOUT_ID, IDS_STREAM)   # its one task that gets tuples finishes each request
            elif c is self._bolts[-1]:
                # the last bolt finishes a request on the one task its id hashes to (Storm's rule)
                d.fields_grouping(SPOUT_ID, ("id",), IDS_STREAM)
            else:
                d.all_grouping(SPOUT_ID, IDS_STREAM)
            prev = c["id"]
        r = b.set_bolt(RETURN_ID, ReturnResults(self.function, source, prev))
        r.global_grouping(prev).global_grouping(SPOUT_ID, IDS_STREAM)
        for c in self._bolts:
            r.global_grouping(c["id"], FAILED_STREAM)
        return b.build()


class LocalDRPC:
    """Storm's ``LocalDRPC``: a DRPC server inside this process, for topologies made with
    ``create_local_topology(drpc)`` and run by a ``LocalCluster`` here.

    ``timeout_secs``: how long ``execute`` waits for an answer; None takes the serving
    topology's ``drpc_request_timeout_secs`` (600 s, Storm's default)."""

    def __init__(self, timeout_secs: float | None = None) -> None:
        self.source = f"local:{uuid.uuid4().hex}"
        self.timeout_secs = timeout_secs
        self._queues = local_queues(self.source)

    def _serve(self, function: str) -> RequestQueue:
        q = self._queues.get(function)
        if q is None:
            q = self._queues[function] = RequestQueue(function, self.timeout_secs)
        return q

    def execute(self, function: str, args: str) -> str:
        """Call ``function`` with ``args``; the result as text. ``DRPCExecutionException``
        for an unknown function, args that are not text, a request that failed
        ``max_attempts`` times (with its error) or one not answered in time ("timed out")."""
        q = self._queues.get(function)
        if q is None:
            msg = (f"unknown DRPC function {function!r}: no topology serves it on this LocalDRPC "
                   f"(served: {sorted(self._queues) or 'none'}); make one with "
                   f"LinearDRPCTopologyBuilder({function!r}).create_local_topology(drpc)")
            raise DRPCExecutionException(msg)
        if not isinstance(args, str):
            msg = f"DRPC args of {function!r} must be text (str); got {type(args).__name__} {args!r}"
            raise DRPCExecutionException(msg)
        return q.wait(q.submit(args))

    def shutdown(self) -> None:
        """End every open call ("LocalDRPC shut down")."""
        for q in self._queues.values():
            q.fail_all("LocalDRPC shut down")


class DRPCClient:
    """Calls a ``trident drpc`` server (Storm's ``DRPCClient``): ``execute(function, args)``
    POSTs ``args`` to ``http://host:port/drpc/<function>`` and returns the result text.
    ``timeout``: seconds to wait for the answer; ``token``: the server's shared token
    (default: ``TRIDENT_DRPC_TOKEN``). ``retries``: how many more times a call is tried when
    the server cannot be reached or answers 503 (no running topology serves the function
    now: one restarting, a rebalance), waiting ``retry_backoff_secs``, doubling, between
    tries; an error the call itself caused (400, 401, 413) or a timeout is never retried
    (the call may have run)."""

    def __init__(self, host: str, port: int, timeout: float | None = None, token: str | None = None, *,
                 retries: int = 0, retry_backoff_secs: float = 0.5) -> None:
        if not isinstance(retries, int) or retries < 0:
            msg = f"retries must be an int >= 0; got {retries!r}"
            raise ValueError(msg)
        self.host, self.port, self.timeout = host, port, timeout
        self.retries, self.retry_backoff_secs = retries, retry_backoff_secs
        self._token = drpc_token(token)

    def __repr__(self) -> str:
        return f"DRPCClient({self.host!r}, {self.port}, timeout={self.timeout})"

    def _refusal(self, e: urllib.error.HTTPError) -> str:
        """The server's reason (its JSON ``error``), else its status and body."""
        body = e.read().decode(errors="replace")
        try:
            return str(json.loads(body)["error"])
        except (ValueError, KeyError, TypeError):
            return f"DRPC server {self.host}:{self.port} answered HTTP {e.code} {e.reason}: {body[:200]}".rstrip(": ")

    def execute(self, function: str, args: str) -> str:
        """The result of ``function(args)``; ``DRPCExecutionException`` with the server's
        error, "timed out", or why the server could not be reached (after ``retries``)."""
        import time

        attempt = 0
        while True:
            try:
                return self._execute_once(function, args)
            except DRPCExecutionException as e:
                if attempt == self.retries or not _retryable(e):
                    raise
            time.sleep(self.retry_backoff_secs * 2 ** attempt)
            attempt += 1

    def _execute_once(self, function: str, args: str) -> str:
        if not isinstance(args, str):
            msg = f"DRPC args of {function!r} must be text (str); got {type(args).__name__} {args!r}"
            raise DRPCExecutionException(msg)
        url = f"http://{self.host}:{self.port}/drpc/{urllib.parse.quote(function, safe='')}"
        headers = {"Content-Type": "text/plain; charset=utf-8"}
        if self.timeout is not None:
            headers["X-DRPC-Timeout"] = str(self.timeout)
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        try:
            data = args.encode()
        except UnicodeEncodeError as e:
            msg = f"DRPC args of {function!r} are not valid text: {e.reason} at position {e.start}"
            raise DRPCExecutionException(msg) from None
        req = urllib.request.Request(url, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=None if self.timeout is None else self.timeout + 5) as r:
                return str(r.read().decode())
        except urllib.error.HTTPError as e:
            raise DRPCExecutionException(self._refusal(e), e.code) from None
        except (urllib.error.URLError, OSError, TimeoutError) as e:
            reason = getattr(e, "reason", e)
            msg = f"DRPC server {self.host}:{self.port} unreachable or gone mid-call: {reason}"
            raise DRPCExecutionException(msg, UNREACHABLE if isinstance(e, urllib.error.URLError) else None) from None


#: ``DRPCExecutionException.status`` of a call whose server could not be reached
UNREACHABLE = 0


def _retryable(e: DRPCExecutionException) -> bool:
    """A server that could not be reached, or answered 503: a later try may be served."""
    return getattr(e, "status", None) in (UNREACHABLE, 503)
