"""Options of the ``pocketmq`` data source, parsed and checked once on the driver.

Spark hands options over as strings with case-insensitive names; every problem is reported as
an :class:`~pocketmq.errors.InvalidArgumentError` naming the option. Unknown options are
refused (a misspelt option silently ignored is worse than an error).

Reading::

    namesrv                  NameServer address(es) "h1:9876;h2:9876" (default $POCKETMQ_NAMESRV,
                             else 127.0.0.1:9876)
    topic                    topic, or a comma-separated list (``load("t")`` works too)
    startingOffsets          earliest | latest | group | JSON (batch default earliest, streaming latest)
    endingOffsets            latest | JSON (batch only; default latest)
    maxMessagesPerTrigger    streaming: at most this many queue positions per micro-batch
    tags                     tag expression "a || b" ("*" = all, the default)
    group                    consumer group whose offsets are committed (and read by
                             startingOffsets=group)
    commitOffsets            true | false: commit the group's offsets when Spark commits a
                             micro-batch (default true when ``group`` is set)
    readFromSlave            never | preferred | fallback (default fallback: slaves when the master
                             cannot be reached)
    failOnDataLoss           true | false (default true): fail when requested offsets were deleted
    pullBatchSize            messages per pull (default 4096; the broker caps it with
                             maxTransferCountOnMessageInMemory)
    pullMaxBytes             bytes per pull (default 16 MiB; capped by the broker's
                             maxTransferBytesOnMessageInMemory)
    pullTimeoutMs            deadline of one pull (default 10000)
    requestTimeoutMs         deadline of routes and offset calls (default 5000)
    readTimeoutMs            how long a task waits for messages its range says exist, e.g. on a
                             slave still catching up (default 30000)
    maxMessagesPerPartition  split a queue's range into partitions of at most this many positions
                             (default 0 = one partition per queue)
    checkCrc                 true | false: verify each body's CRC32 (default true)
    tls                      true | false: connect with TLS (default false; implied by tlsCaFile)
    tlsCaFile                PEM CA to verify the servers with (default: the system's roots); the
                             path must exist on the driver and every executor
    tlsCertFile, tlsKeyFile  client certificate and key (PEM) for clusters requiring mutual TLS

Writing::

    namesrv, topic           as above; ``topic`` is used for rows whose topic column is null or absent
    tls, tlsCaFile, ...      as above
    producerGroup            stored with each message (default none)
    sendBatchSize            messages per SendMessageBatch (default 256)
    sendBatchBytes           bytes per SendMessageBatch (default 1 MiB)
    sendTimeoutMs            deadline of one batch send, retries included (default 10000)
    sendRetries              extra attempts of a batch that stored nothing (default 2)
    maxInflightBatches       batches in flight per task (default 4)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Literal

from pocketmq.client.producer import namesrv_from_env
from pocketmq.client.tags import parse_subscription
from pocketmq.errors import InvalidArgumentError
from pocketmq.spark.offsets import Offsets, parse_json
from pocketmq.wire.tls import ClientTls, TlsFileError

__all__ = ["OffsetSpec", "ReadFromSlave", "ReadOptions", "WriteOptions"]

ReadFromSlave = Literal["never", "preferred", "fallback"]
StartKind = Literal["earliest", "latest", "group", "json"]

_READ_KEYS = {
    "namesrv", "topic", "startingoffsets", "endingoffsets", "maxmessagespertrigger", "tags", "group",
    "commitoffsets", "readfromslave", "failondataloss", "pullbatchsize", "pullmaxbytes", "pulltimeoutms",
    "requesttimeoutms", "readtimeoutms", "maxmessagesperpartition", "checkcrc",
    "tls", "tlscafile", "tlscertfile", "tlskeyfile",
}
_WRITE_KEYS = {
    "namesrv", "topic", "producergroup", "sendbatchsize", "sendbatchbytes", "sendtimeoutms",
    "sendretries", "maxinflightbatches", "tls", "tlscafile", "tlscertfile", "tlskeyfile",
}
#: Options Spark itself passes through (a streaming sink sees checkpointLocation and queryName).
_SPARK_KEYS = {"path", "checkpointlocation", "queryname"}
#: Largest pull the broker serves (services.broker.pull.MAX_PULL_COUNT / MAX_PULL_BYTES).
MAX_PULL_COUNT = 4096
MAX_PULL_BYTES = 16 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class OffsetSpec:
    """Where reading starts or ends: a keyword, or per-queue offsets (-2 earliest, -1 latest;
    queues not listed: earliest for a start, latest for an end)."""

    kind: StartKind
    offsets: Offsets = dataclasses.field(default_factory=dict)


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _check_keys(opts: Mapping[str, str], known: set[str], what: str) -> None:
    unknown = sorted(set(opts) - known - _SPARK_KEYS)
    if unknown:
        names = ", ".join(sorted(known))
        raise InvalidArgumentError(
            f"unknown pocketmq {what} option(s): {', '.join(unknown)} (known: {names})")


def _bool(opts: Mapping[str, str], key: str, name: str, default: bool) -> bool:
    value = opts.get(key)
    if value is None or value == "":
        return default
    text = value.strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise InvalidArgumentError(f"option {name}: expected true or false, got {value!r}")


def _int(opts: Mapping[str, str], key: str, name: str, default: int, lo: int = 1,
         hi: int | None = None) -> int:
    value = opts.get(key)
    if value is None or value.strip() == "":
        return default
    try:
        number = int(value.strip())
    except ValueError:
        raise InvalidArgumentError(f"option {name}: expected an integer, got {value!r}") from None
    if number < lo or (hi is not None and number > hi):
        bounds = f">= {lo}" if hi is None else f"between {lo} and {hi}"
        raise InvalidArgumentError(f"option {name}: must be {bounds}, got {number}")
    return number


def _namesrv(opts: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(namesrv_from_env(opts.get("namesrv") or None))


def _tls(opts: Mapping[str, str]) -> ClientTls | None:
    ca, cert, key = (opts.get(k, "").strip() for k in ("tlscafile", "tlscertfile", "tlskeyfile"))
    if not (_bool(opts, "tls", "tls", False) or ca or cert):
        return None
    try:
        return ClientTls(ca_file=ca, cert_file=cert, key_file=key)
    except TlsFileError as exc:
        raise InvalidArgumentError(f"options tlsCertFile/tlsKeyFile: {exc}") from None


def _topics(opts: Mapping[str, str], required: bool) -> tuple[str, ...]:
    text = opts.get("topic") or opts.get("path") or ""
    topics = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    if required and not topics:
        raise InvalidArgumentError("option topic is required (a topic or a comma-separated list)")
    return topics


def _offset_spec(value: str | None, name: str, default: StartKind, allowed: tuple[str, ...]) -> OffsetSpec:
    if value is None or not value.strip():
        return OffsetSpec(default)
    text = value.strip()
    if text.lower() in allowed:
        return OffsetSpec(text.lower())  # type: ignore[arg-type]
    if not text.startswith("{"):
        raise InvalidArgumentError(f"option {name}: expected {' | '.join(allowed)} or JSON "
                                   f"{{topic: {{broker: {{queue: offset}}}}}}, got {value!r}")
    return OffsetSpec("json", parse_json(text, f"option {name}"))


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    namesrv: tuple[str, ...]
    topics: tuple[str, ...]
    starting: OffsetSpec
    ending: OffsetSpec
    max_messages_per_trigger: int | None
    tags: str
    group: str
    commit_offsets: bool
    read_from_slave: ReadFromSlave
    fail_on_data_loss: bool
    pull_batch_size: int
    pull_max_bytes: int
    pull_timeout: float
    request_timeout: float
    read_timeout: float
    max_messages_per_partition: int
    check_crc: bool
    tls: ClientTls | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
        opts = _lower(options)
        _check_keys(opts, _READ_KEYS, "read")
        topics = _topics(opts, required=True)
        group = opts.get("group", "").strip()
        starting = _offset_spec(opts.get("startingoffsets"), "startingOffsets",
                                "latest" if streaming else "earliest", ("earliest", "latest", "group"))
        if starting.kind == "group" and not group:
            raise InvalidArgumentError("option startingOffsets=group needs the group option")
        if streaming and opts.get("endingoffsets"):
            raise InvalidArgumentError("option endingOffsets is for batch queries only (a stream has no end)")
        ending = _offset_spec(opts.get("endingoffsets"), "endingOffsets", "latest", ("latest",))
        if ending.kind == "json" and any(v == -2 for v in ending.offsets.values()):
            raise InvalidArgumentError("option endingOffsets: -2 (earliest) is not a valid end offset")
        if not streaming and starting.kind == "latest":
            raise InvalidArgumentError("option startingOffsets=latest reads nothing in a batch query; use "
                                       "earliest, group or JSON offsets")
        max_per_trigger: int | None = None
        if opts.get("maxmessagespertrigger"):
            if not streaming:
                raise InvalidArgumentError("option maxMessagesPerTrigger is for streaming queries only")
            max_per_trigger = _int(opts, "maxmessagespertrigger", "maxMessagesPerTrigger", 0)
        tags = opts.get("tags", "").strip() or "*"
        parse_subscription(tags)  # raises for an expression the broker would refuse
        commit = _bool(opts, "commitoffsets", "commitOffsets", bool(group) and streaming)
        if commit and not group:
            raise InvalidArgumentError("option commitOffsets=true needs the group option")
        if commit and not streaming:
            raise InvalidArgumentError("option commitOffsets is for streaming queries (offsets are committed "
                                       "when Spark commits a micro-batch)")
        slave = opts.get("readfromslave", "fallback").strip().lower()
        if slave not in ("never", "preferred", "fallback"):
            raise InvalidArgumentError(
                f"option readFromSlave: expected never | preferred | fallback, got {slave!r}")
        return cls(
            namesrv=_namesrv(opts), topics=topics, starting=starting, ending=ending,
            max_messages_per_trigger=max_per_trigger, tags=tags, group=group, commit_offsets=commit,
            read_from_slave=slave,  # type: ignore[arg-type]
            fail_on_data_loss=_bool(opts, "failondataloss", "failOnDataLoss", True),
            pull_batch_size=_int(opts, "pullbatchsize", "pullBatchSize", MAX_PULL_COUNT, 1, MAX_PULL_COUNT),
            pull_max_bytes=_int(opts, "pullmaxbytes", "pullMaxBytes", MAX_PULL_BYTES, 1, MAX_PULL_BYTES),
            pull_timeout=_int(opts, "pulltimeoutms", "pullTimeoutMs", 10_000) / 1000,
            request_timeout=_int(opts, "requesttimeoutms", "requestTimeoutMs", 5_000) / 1000,
            read_timeout=_int(opts, "readtimeoutms", "readTimeoutMs", 30_000) / 1000,
            max_messages_per_partition=_int(opts, "maxmessagesperpartition", "maxMessagesPerPartition", 0, 0),
            check_crc=_bool(opts, "checkcrc", "checkCrc", True),
            tls=_tls(opts),
        )

    @property
    def filtered(self) -> bool:
        return self.tags != "*"


@dataclasses.dataclass(frozen=True)
class WriteOptions:
    namesrv: tuple[str, ...]
    topic: str
    producer_group: str
    batch_size: int
    batch_bytes: int
    send_timeout: float
    retries: int
    max_inflight: int
    tls: ClientTls | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        opts = _lower(options)
        _check_keys(opts, _WRITE_KEYS, "write")
        topics = _topics(opts, required=False)
        if len(topics) > 1:
            raise InvalidArgumentError("option topic: the writer takes one default topic (use a topic column "
                                       "to write to several)")
        return cls(
            namesrv=_namesrv(opts), topic=topics[0] if topics else "",
            producer_group=opts.get("producergroup", "").strip(),
            batch_size=_int(opts, "sendbatchsize", "sendBatchSize", 256, 1, 4096),
            batch_bytes=_int(opts, "sendbatchbytes", "sendBatchBytes", 1024 * 1024, 1, 32 * 1024 * 1024),
            send_timeout=_int(opts, "sendtimeoutms", "sendTimeoutMs", 10_000) / 1000,
            retries=_int(opts, "sendretries", "sendRetries", 2, 0, 100),
            max_inflight=_int(opts, "maxinflightbatches", "maxInflightBatches", 4, 1, 64),
            tls=_tls(opts),
        )
