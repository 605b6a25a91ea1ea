"""``TopologyConfig``: every knob of a run, validated before anything starts (docs/design.md §8).

Storm's names map to fields: ``topology.max.spout.pending`` -> ``max_spout_pending``,
``topology.message.timeout.secs`` -> ``message_timeout_secs``,
``transactional.zookeeper.servers`` -> ``coordination``,
``topology.state.provider`` -> ``state`` (also accepted as ``state_provider``),
``topology.acker.executors`` -> ``ackers``,
``topology.state.checkpoint.interval.ms`` -> ``checkpoint_interval_ms``,
``topology.tick.tuple.freq.secs`` -> ``tick_tuple_freq_secs``.

Two kinds of topology read these settings: transactional ones (batches of a txid,
exactly once) and core Storm topologies (``TopologyBuilder``: tuple trees tracked by the
acker, at least once). ``max_spout_pending`` keeps Storm's meaning for each kind.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from state.backends import COORDINATION, USER_STATE, backend_for, check_url
from transactional.exceptions import ConfigError
from transactional.redaction import redact, remember, secrets_in


class TopologyConfig(BaseModel):
    """How to run a topology. Every default runs on one machine with no servers.

    >>> TopologyConfig(max_spout_pending=4).max_spout_pending
    4
    >>> TopologyConfig(max_spout_pending=0)
    Traceback (most recent call last):
    ...
    transactional.exceptions.ConfigError: invalid TopologyConfig: max_spout_pending: must be >= 1 (got 0)
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    spark_master: str = Field("local[*]", description="Spark master URL (local[*], spark://host:port, yarn, k8s://...)")
    spark_ui: bool = Field(True, description="the Spark web UI of a context this run creates (its address is logged at start; each attempt's jobs are described 'txid N attempt A (processing|commit)')")
    commit_placement: Literal["driver", "executors"] = Field("driver", description="where the commit phase runs: 'driver' (committers are the user's own classes in the driver process) or 'executors' (a Spark job per commit; each committer task writes its own maps; needs a state server such as redis://)")
    staged_counters: bool = Field(False, description="counter maps (trident.state.counters with Count/Sum) committed by reference: the processing job's tasks stage their counts in Redis and the commit adds them on every node, then records the txid; needs state='redis://' or 'redis+cluster://' (docs/redis.md, 'Staged commits')")
    executor: Literal["spark", "in-process"] = Field("spark", description="where processing tasks run: 'spark', or 'in-process' (the driver process, no Spark: for tests and debugging)")
    py_files: list[str] = Field(default_factory=list, description="code for executors (.py, .zip, .egg), as spark-submit --py-files; `trident run` adds a zip of the topology's local modules for non-local masters")
    archives: list[str] = Field(default_factory=list, description="archives unpacked in each executor's directory, as spark-submit --archives (e.g. 'venv.tar.gz#environment' with spark_conf spark.pyspark.python=./environment/bin/python)")
    app_name: str | None = Field(None, description="Spark application name; default 'trident-<topology_id>'")
    spark_conf: dict[str, str] = Field(default_factory=dict, description="extra Spark settings for a context this run creates")
    coordination: str = Field("memory://", description="coordinator state: memory:// or zk://host:port[,host:port]/<root>")
    coordination_auth: str | None = Field(None, description="ZooKeeper digest credentials 'user:password'; znodes get an ACL")
    state: str = Field("memory://", validation_alias=AliasChoices("state", "state_provider"), description="user state (maps of transactional topologies, KeyValueState of stateful bolts): memory://, redis://[user:password@]host:port/db, rediss://...; also accepted as state_provider (Storm's topology.state.provider)")
    state_options: dict[str, Any] = Field(default_factory=dict, description="passed to the map backing (e.g. serializer)")
    accept_state_loss: bool = Field(False, description="run although state an earlier run committed would be lost: the state store is not the one the coordinator's committed txids were written to, or durable coordination (zk://) is paired with memory:// state (refused otherwise, naming both)")
    allow_dropped_state: bool = Field(False, description="run a new version of a topology that no longer has a state (or spout) an earlier version stored values (or offsets) in: they are left unread (refused otherwise, naming the state; docs/operations.md)")
    max_spout_pending: int | None = Field(None, description="Storm's topology.max.spout.pending. Transactional topologies: txids emitted and not yet committed, at most (None: 3). Core topologies: spout tuples emitted and not yet acked or failed, per spout task (None: no bound but micro_batch_size x micro_batches_in_flight)")
    launch_policy: Literal["adaptive", "eager"] = Field("adaptive", description="transactional topologies: when the next txid is planned, within max_spout_pending. 'eager' (Storm's): whenever a slot is free. 'adaptive' (the default; measured faster than 'eager' at 1k-100k records/s, throughput kept: docs/performance.md, 'Latency: Kafka to Redis'): when no batch in flight is still processing (the others wait for or are in their commit), so a batch is planned the moment the previous one's processing ends and takes everything that arrived; while the spouts are backlogged (their last plan hit a per-batch cap, e.g. Kafka's max_records_per_partition) every slot fills, as 'eager'. Spouts that cannot tell a backlog count as backlogged (docs/design.md, 'Pipelining and max_spout_pending')")
    ackers: int = Field(1, description="core topologies: acker tasks tracking tuple trees (Storm's topology.acker.executors); 0 turns tracking off: spouts get ack right after emit")
    checkpoint_interval_ms: int = Field(1000, description="core topologies with stateful bolts: a checkpoint (prepare, then commit, of every bolt's KeyValueState) at most this often (Storm's topology.state.checkpoint.interval.ms); 0: after every micro-batch")
    tick_tuple_freq_secs: float | None = Field(None, description="core topologies: every bolt task gets a tick tuple (transactional.is_tick) in the first micro-batch after each such interval of the driver's clock (Storm's topology.tick.tuple.freq.secs; a bolt's add_configuration wins); None: no ticks")
    micro_batch_size: int = Field(5000, description="core topologies: the most spout tuples one micro-batch takes")
    micro_batches_in_flight: int = Field(2, description="core topologies: micro-batches processing at once (their processing jobs overlap; commits stay in order)")
    message_timeout_secs: float = Field(30.0, description="an attempt not processed in this time is cancelled and replayed")
    keep_batch_meta: int = Field(0, description="keep the spout metadata of the last N committed txids (0: dropped at commit) so that `trident replay ID --txids A..B` can re-emit those batches into scratch state (docs/verify.md)")
    max_attempts: int = Field(5, description="attempts of one txid before the run stops with an error")
    retry_backoff_secs: float = Field(0.5, description="wait before re-emitting a failed txid; doubles with each failure of that txid")
    retry_backoff_max_secs: float = Field(10.0, description="the longest wait before a re-emit")
    idle_timeout_secs: float | None = Field(0.0, description="when the spout has nothing new, wait this long for data before ending the run (None: forever)")
    poll_interval_secs: float = Field(0.2, description="how often an idle spout is asked again")
    lock_wait_secs: float | None = Field(15.0, description="another driver holds this topology's lock: wait this long, then fail naming it (0: at once, None: forever); the default outlasts the ZooKeeper session of a driver killed with -9")
    connect_timeout_secs: float = Field(10.0, description="time allowed to reach ZooKeeper/Redis at start")
    metrics_port: int | None = Field(None, description="serve Prometheus metrics (/metrics) and the status page (/) from the driver on this port (0: a free port, logged; None: off)")
    metrics_host: str = Field("127.0.0.1", description="the address the metrics and status page server binds")
    control_token: str | None = Field(None, description="a secret that turns on the status page's deactivate, activate and kill buttons; every such request must carry it (None: the buttons are off)")
    progress: bool | None = Field(None, description="log progress lines (None: when stderr is a terminal)")
    conf: dict[str, Any] = Field(default_factory=dict, description="user settings given to prepare(conf, ...)")
    drpc_servers: list[str] = Field(default_factory=list, description="Distributed RPC: the `trident drpc` servers ('host:port') a topology made with create_remote_topology() or new_drpc_stream(drpc=None) fetches requests from and answers (Storm's drpc.servers)")
    drpc_request_timeout_secs: float = Field(600.0, description="Distributed RPC: a request not answered in this time gets DRPCExecutionException('timed out') (Storm's drpc.request.timeout.secs)")
    drpc_batch_size: int = Field(256, description="Distributed RPC: the most requests one batch (txid) carries")
    drpc_on_driver_max_calls: int | None = Field(None, ge=0, description="Distributed RPC on Spark: batches that carry only DRPC calls run their processing in the driver's process instead of as a Spark job (no job to schedule: milliseconds, not a job's floor). None ('auto'): on a local master whose executors run the driver's Python (no archives, no other spark.pyspark.python), batches of up to drpc_batch_size calls whose expected work (from the CPU seconds earlier batches took) is at most 1 s; never on local-cluster or a cluster master, whose executors may have other packages, hardware or memory. N > 0: batches of at most N calls, on any master, without the work bound. 0: every batch is a Spark job (docs/performance.md, 'Latency: DRPC')")
    driver_batch_max_records: int | None = Field(0, ge=0, description="On Spark: batches whose spouts all know their size at planning (Kafka: the planned offset ranges; DRPC calls have drpc_on_driver_max_calls) run their processing in the driver's process instead of as a Spark job (no job to schedule). Default 0: every such batch is a Spark job -- measured at 10k records/s on local[2], the driver's one thread ran each small batch faster than a job but fell behind the input (batches run one after another there, sharing the driver with planning and commits). None ('auto', opt-in): under drpc_on_driver_max_calls' auto conditions (a local master whose executors run the driver's Python, commits on the driver), batches of up to 10,000 records whose expected work (from the seconds earlier batches took, here or on Spark) is at most 1 s, one at a time, and only while the batches processed there took at most half of the last second; larger or heavier batches, and every batch on local-cluster or a cluster master, are Spark jobs. N > 0: batches of at most N records, on any master, without the work bound (docs/performance.md, 'Latency: Kafka to Redis')")
    drpc_token: str | None = Field(None, description="Distributed RPC: the shared token the `trident drpc` servers check (their --token / TRIDENT_DRPC_TOKEN); None: TRIDENT_DRPC_TOKEN from the environment, if set")

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as e:
            raise ConfigError(_explain(e)) from None

    @field_validator("max_spout_pending", "max_attempts", "micro_batch_size", "micro_batches_in_flight", "drpc_batch_size")
    @classmethod
    def _at_least_one(cls, v: int | None) -> int | None:
        if v is not None and v < 1:
            msg = f"must be >= 1 (got {v})"
            raise ValueError(msg)
        return v

    @field_validator("message_timeout_secs", "connect_timeout_secs", "poll_interval_secs", "drpc_request_timeout_secs",
                     "tick_tuple_freq_secs")
    @classmethod
    def _positive(cls, v: float | None) -> float | None:
        if v is not None and not v > 0:
            msg = f"must be > 0 seconds (got {v})"
            raise ValueError(msg)
        return v

    @field_validator("idle_timeout_secs", "lock_wait_secs", "retry_backoff_secs", "retry_backoff_max_secs")
    @classmethod
    def _non_negative(cls, v: float | None) -> float | None:
        if v is not None and v < 0:
            msg = f"must be >= 0 seconds or None (got {v})"
            raise ValueError(msg)
        return v

    @field_validator("metrics_port")
    @classmethod
    def _port(cls, v: int | None) -> int | None:
        if v is not None and not 0 <= v <= 65535:
            msg = f"must be a TCP port 0..65535, or None for off (got {v})"
            raise ValueError(msg)
        return v

    @field_validator("ackers", "checkpoint_interval_ms", "keep_batch_meta")
    @classmethod
    def _non_negative_int(cls, v: int) -> int:
        if v < 0:
            msg = f"must be >= 0 (got {v})"
            raise ValueError(msg)
        return v

    def pending_batches(self, core: bool = False) -> int:
        """Batches in flight at most: ``max_spout_pending`` (default 3) for a transactional
        topology, ``micro_batches_in_flight`` for a core one."""
        if core:
            return self.micro_batches_in_flight
        return 3 if self.max_spout_pending is None else self.max_spout_pending

    @field_validator("spark_master")
    @classmethod
    def _master(cls, v: str) -> str:
        return check_master(v)

    @field_validator("coordination")
    @classmethod
    def _coordination_url(cls, v: str) -> str:
        return _checked_url(COORDINATION, v)

    @field_validator("state")
    @classmethod
    def _state_url(cls, v: str) -> str:
        return _checked_url(USER_STATE, v)

    @field_validator("coordination_auth")
    @classmethod
    def _auth(cls, v: str | None) -> str | None:
        if v is not None and ":" not in v:
            msg = "must be 'user:password'"
            raise ValueError(msg)
        return v

    @model_validator(mode="after")
    def _placement_needs_shared_state(self) -> TopologyConfig:
        if self.commit_placement == "executors" and not backend_for(USER_STATE, self.state).shared:
            msg = (
                "commit_placement='executors' needs user state that executors can reach: "
                "state='memory://' lives in the driver process. Use state='redis://host:port/db', "
                "or commit_placement='driver'"
            )
            raise ValueError(msg)
        return self

    @model_validator(mode="after")
    def _staged_needs_redis(self) -> TopologyConfig:
        if self.staged_counters and not self.state.startswith(("redis://", "rediss://", "redis+cluster://")):
            msg = (f"staged_counters=True stages counts where executors and the driver both reach them: "
                   f"state must be redis:// or redis+cluster://, not {self.state.split(':', 1)[0]}://. "
                   "Use a Redis state URL, or staged_counters=False")
            raise ValueError(msg)
        return self

    def model_post_init(self, context: Any, /) -> None:
        """Remember the secrets these settings carry (URL passwords, secret query
        parameters, ``coordination_auth``, values under secret keys of the dict settings),
        so that they are masked wherever they show up later (``transactional.redaction``)."""
        remember(secrets_in(self.model_dump()))

    def redacted(self) -> dict[str, Any]:
        """The settings with passwords and tokens hidden (``transactional.redaction.redact``),
        for logs, the status page and benchmark lines."""
        return dict(redact(self.model_dump()))

    def __repr_args__(self) -> Any:
        """``repr()`` and ``str()`` show the redacted settings."""
        return list(self.redacted().items())


_MASTER_FORMS = (
    r"local", r"local\[(\*|[1-9]\d*)\]", r"local\[(\*|[1-9]\d*),\s*[1-9]\d*\]",
    r"local-cluster\[[1-9]\d*,\s*[1-9]\d*,\s*[1-9]\d*\]",
    r"spark://[^\s/:,]+:\d{1,5}(,[^\s/:,]+:\d{1,5})*", r"yarn", r"k8s://(https?://)?[^\s/:]+(:\d{1,5})?(/\S*)?",
)


def check_master(v: str) -> str:
    """``v`` if it is a Spark master URL Spark accepts, else ``ValueError`` listing the forms.

    >>> check_master("spark://127.0.0.1:7077")
    'spark://127.0.0.1:7077'
    >>> check_master("spark:/127.0.0.1")
    Traceback (most recent call last):
    ...
    ValueError: 'spark:/127.0.0.1' is not a Spark master URL; use local, local[N], local[*], local[N,maxFailures], spark://host:port[,host:port], yarn or k8s://https://host:port
    """
    if not any(re.fullmatch(f, v) for f in _MASTER_FORMS):
        msg = (f"{v!r} is not a Spark master URL; use local, local[N], local[*], local[N,maxFailures], "
               "spark://host:port[,host:port], yarn or k8s://https://host:port")
        raise ValueError(msg)
    return v


def _checked_url(role: str, v: str) -> str:
    try:
        return check_url(role, v)
    except ConfigError as e:
        raise ValueError(str(e)) from None


#: where a user finds every setting, named instead of listing 29 names after each typo
SETTINGS_DOC = "the settings are TopologyConfig's fields: README's configuration table, or `trident run --help`"


def unknown_setting(key: str, known: Iterable[str] | None = None, cutoff: float = 0.6) -> str:
    """What to tell a user who wrote setting ``key``, which is not one: the closest known
    name, or where the names are listed.

    >>> unknown_setting("idle_timeout")
    "unknown setting (did you mean 'idle_timeout_secs'?)"
    """
    names = list(TopologyConfig.model_fields) if known is None else list(known)
    close = difflib.get_close_matches(key, names, n=1, cutoff=cutoff)
    if not close:   # a prefix or a suffix of a field: idle_timeout -> idle_timeout_secs
        close = [n for n in names if len(key) >= 4 and (n.startswith(key) or n.endswith(key))][:1]
    return f"unknown setting (did you mean {close[0]!r}?)" if close else f"unknown setting; {SETTINGS_DOC}"


def _explain(e: ValidationError) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "config"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = unknown_setting(loc)
        parts.append(f"{loc}: {msg}")
    return "invalid TopologyConfig: " + "; ".join(parts)
