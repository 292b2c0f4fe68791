"""Reading topics: the batch reader, the streaming reader and the read of one queue range.

Planning (routes, queue offsets, group offsets) runs on the driver; every partition is one
queue range ``[start, end)`` of one broker group, read by :func:`read_range` on an executor with
large raw pulls (one pull in flight while the previous reply is decoded). ``read`` keeps no
state between calls and partitions are plain picklable values.

Streaming offsets are ``{topic: {broker: {queue: next offset}}}`` (:mod:`pocketmq.spark.offsets`):
Spark checkpoints the end of every planned micro-batch, so a query restarted from its
checkpoint re-reads exactly the ranges it had not committed, with no gaps and no duplicates
within the source. Queues that appear later (a new broker group, more queues) start at 0.

With ``group`` (and ``commitOffsets``, its default) the end offsets of every micro-batch Spark
has committed are written to the brokers as that consumer group's offsets, so ``pocketmq
consumer progress <group>`` shows the query's lag. They are informational: the checkpoint, not
the group, decides where a restarted query continues (``startingOffsets=group`` starts a *new*
query from them).

``readFromSlave``: ``fallback`` (default) reads from the master and moves to a slave when the
master cannot be reached (planning and reads alike); ``preferred`` reads from slaves first;
``never`` only from masters. A slave serves what it has replicated; a read that needs more waits
up to ``readTimeoutMs`` and then fails (Spark retries the task).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from pocketmq.errors import InvalidArgumentError, PocketMQError
from pocketmq.spark import _broker
from pocketmq.spark.columnar import decode, tag_mask
from pocketmq.spark.offsets import (
    EARLIEST,
    LATEST,
    Offsets,
    QueueKey,
    describe,
    from_json,
    limit_end,
    to_json,
)
from pocketmq.spark.options import OffsetSpec, ReadOptions

__all__ = [
    "DataLossError",
    "PocketMQBatchReader",
    "PocketMQStreamReader",
    "QueueRange",
    "ReadStalledError",
    "read_range",
]

log = logging.getLogger("pocketmq.spark")

#: Long-poll wait of a pull that found nothing although its range says messages exist.
STALL_POLL_MS = 1000


class DataLossError(PocketMQError):
    """Messages the query asked for were deleted (retention) before they were read. Raised
    when ``failOnDataLoss`` is true (the default)."""


class ReadStalledError(PocketMQError):
    """No broker of the group delivered messages a range needs within ``readTimeoutMs``
    (e.g. the master is down and the slave has not replicated them)."""

    retriable = True


@dataclasses.dataclass(frozen=True)
class QueueRange(InputPartition):  # type: ignore[misc]
    """One partition: queue positions ``[start, end)`` of one queue; ``addrs`` are the group's
    broker addresses in the order to read from them."""

    topic: str
    broker_name: str
    queue_id: int
    start: int
    end: int
    addrs: tuple[str, ...]

    @property
    def key(self) -> QueueKey:
        return QueueKey(self.topic, self.broker_name, self.queue_id)


class Topology(NamedTuple):
    """Readable queues of the topics with their addresses (read order), and each broker
    group's master."""

    addrs: dict[QueueKey, tuple[str, ...]]
    masters: dict[str, str]


def topology(opts: ReadOptions, *, missing_ok: bool = False) -> Topology:
    cluster = _broker.cluster(opts.namesrv, opts.request_timeout, opts.tls)
    routes = cluster.routes(opts.topics, missing_ok=missing_ok)
    addrs: dict[QueueKey, tuple[str, ...]] = {}
    masters: dict[str, str] = {}
    for topic in opts.topics:
        route = routes.get(topic)
        if route is None:
            continue
        for q in route.read_queues():
            group = route.group(q.broker_name)
            if group is None:
                continue
            order = tuple(_broker.read_order(group.addrs, opts.read_from_slave))
            if not order:
                log.warning("broker group has no address to read from (readFromSlave=%s)",
                            opts.read_from_slave, extra={"topic": topic, "broker": q.broker_name})
                continue
            addrs[QueueKey(topic, q.broker_name, q.queue_id)] = order
            if group.master_addr:
                masters[q.broker_name] = group.master_addr
    return Topology(addrs, masters)


def _offsets_or_raise(opts: ReadOptions, topo: Topology, which: str) -> dict[QueueKey, int]:
    cluster = _broker.cluster(opts.namesrv, opts.request_timeout, opts.tls)
    found, errors = cluster.queue_offsets(topo.addrs, which)
    if errors:
        key, err = sorted(errors.items())[0]
        raise type(err)(f"cannot get the {which} offset of {len(errors)} queue(s), e.g. {key}: {err.message}",
                        address=err.address)
    return found


def _lost(key: QueueKey, offset: int, earliest: int, why: str) -> str:
    return (f"{key}: offset {offset} {why}, but the earliest retained offset is {earliest} (messages "
            f"{offset}..{earliest - 1} were deleted by retention). Set failOnDataLoss=false to skip them.")


def resolve_start(opts: ReadOptions, spec: OffsetSpec, topo: Topology, *, batch: bool) -> Offsets:
    """Start offsets of every queue of ``topo`` for ``spec``. Offsets below a queue's earliest
    retained one raise DataLossError (failOnDataLoss) or move up to it."""
    cluster = _broker.cluster(opts.namesrv, opts.request_timeout, opts.tls)
    mins = _offsets_or_raise(opts, topo, "min")
    if spec.kind == "earliest":
        return dict(mins)
    if spec.kind == "latest":
        return _offsets_or_raise(opts, topo, "max")
    if spec.kind == "group":
        committed, errors = cluster.group_offsets(opts.group, topo.addrs)
        if errors:
            key, err = sorted(errors.items())[0]
            raise type(err)(f"cannot read group {opts.group!r} offsets, e.g. of {key}: {err.message}",
                            address=err.address)
        wanted = {k: committed.get(k, EARLIEST) for k in topo.addrs}
        why = f"committed by group {opts.group!r}"
    else:
        unknown = sorted(set(spec.offsets) - set(topo.addrs))
        if unknown:
            raise InvalidArgumentError(f"option startingOffsets names queues that are not readable in the "
                                       f"route: {', '.join(map(str, unknown))}")
        wanted = {k: spec.offsets.get(k, EARLIEST) for k in topo.addrs}
        why = "was requested (startingOffsets)"
    maxes = _offsets_or_raise(opts, topo, "max") if LATEST in wanted.values() or batch else {}
    out: Offsets = {}
    for key, offset in wanted.items():
        earliest = mins[key]
        if offset == EARLIEST:
            out[key] = earliest
        elif offset == LATEST:
            out[key] = maxes[key]
        elif offset < earliest:
            if opts.fail_on_data_loss:
                raise DataLossError(_lost(key, offset, earliest, why))
            log.warning("requested offset was deleted; starting at the earliest retained one",
                        extra={"queue": str(key), "offset": offset, "earliest": earliest})
            out[key] = earliest
        elif batch and offset > maxes[key]:
            raise InvalidArgumentError(f"{key}: starting offset {offset} is beyond the end of the queue "
                                       f"({maxes[key]})")
        else:
            out[key] = offset
    return out


def split_ranges(topo: Topology, start: Mapping[QueueKey, int], end: Mapping[QueueKey, int],
                 max_per_partition: int) -> list[QueueRange]:
    """One partition per queue with ``start < end`` (several when ``max_per_partition`` > 0)."""
    parts: list[QueueRange] = []
    for key in sorted(end):
        lo, hi = start.get(key, 0), end[key]
        if hi <= lo:
            continue
        addrs = topo.addrs.get(key, ())
        step = max_per_partition if max_per_partition > 0 else hi - lo
        for s in range(lo, hi, step):
            parts.append(QueueRange(key.topic, key.broker_name, key.queue_id, s, min(hi, s + step), addrs))
    return parts


# -- reading one range (executors) -----------------------------------------------------------------------


def read_range(opts: ReadOptions, part: QueueRange) -> Iterator[pa.RecordBatch]:
    """The messages of ``part`` as Arrow batches (one per pull, possibly filtered by tags)."""
    key = part.key
    cluster = _broker.cluster(opts.namesrv, opts.request_timeout, opts.tls)
    addrs = part.addrs
    if not addrs:  # a queue that appeared after planning: find its group now
        group = cluster.routes([key.topic])[key.topic].group(key.broker_name)
        addrs = tuple(_broker.read_order(group.addrs, opts.read_from_slave)) if group else ()
    puller = cluster.puller(key, addrs, opts.read_from_slave, opts.pull_timeout)
    offset, end = part.start, part.end
    wait = opts.pull_timeout + opts.request_timeout * 3 + STALL_POLL_MS / 1000 + 5

    def submit(at: int, suspend_ms: int = 0) -> concurrent.futures.Future[_broker.PullReply]:
        count = min(opts.pull_batch_size, end - at) if not opts.filtered else opts.pull_batch_size
        return puller.submit(at, max(1, count), opts.pull_max_bytes, opts.tags, suspend_ms)

    future: concurrent.futures.Future[_broker.PullReply] | None = submit(offset)
    stalled_since: float | None = None
    while offset < end:
        assert future is not None
        reply = future.result(wait)
        future = None
        status = reply.status
        if status == "FOUND":
            stalled_since = None
            nxt = reply.next_begin_offset
            if nxt <= offset:
                raise PocketMQError(f"{key}: {reply.addr} answered FOUND at offset {offset} without moving "
                                    f"on (next offset {nxt})", address=reply.addr)
            if nxt < end:
                future = submit(nxt)  # the next pull travels while this one is decoded
            decoded = decode(reply.records, key.topic, key.broker_name, check_crc=opts.check_crc)
            qo = decoded.queue_offsets
            if len(qo) and not opts.filtered and int(qo[0]) > offset and offset < reply.min_offset:
                _data_loss(opts, key, offset, min(int(qo[0]), reply.min_offset))
            lo, hi = np.searchsorted(qo, [offset, end])
            batch = decoded.batch.slice(int(lo), int(hi - lo))
            if opts.filtered and batch.num_rows:
                batch = batch.filter(tag_mask(batch, opts.tags))
            if batch.num_rows:
                yield batch
            offset = nxt
            continue
        if status == "NO_MATCHED_MSG" and reply.next_begin_offset > offset:
            offset = reply.next_begin_offset  # the broker skipped messages of other tags
            stalled_since = None
        elif status == "OFFSET_ILLEGAL" and offset < reply.min_offset:
            lost_to = min(max(reply.min_offset, reply.next_begin_offset), end)
            _data_loss(opts, key, offset, reply.min_offset)
            offset = lost_to
            stalled_since = None
        elif status == "OFFSET_ILLEGAL" and reply.next_begin_offset > offset and reply.max_offset > offset:
            # Entries whose commit-log records were just removed (retention running).
            _data_loss(opts, key, offset, reply.next_begin_offset)
            offset = reply.next_begin_offset
        elif status in ("NO_NEW_MSG", "NO_MATCHED_MSG", "OFFSET_ILLEGAL"):
            # The address has fewer messages than the range needs (a slave still catching up).
            now = time.monotonic()
            if stalled_since is None:
                stalled_since = now
            elif now - stalled_since > opts.read_timeout:
                raise ReadStalledError(
                    f"{key}: {reply.addr} has the queue only up to offset {reply.max_offset} but this read "
                    f"needs [{offset}, {end}); nothing arrived for {opts.read_timeout:g}s (readTimeoutMs). "
                    f"Is the master down and its slave behind?", address=reply.addr)
            puller.restart_order()  # the preferred broker (the master) may be back
            future = submit(offset, STALL_POLL_MS)
            continue
        else:
            raise PocketMQError(f"{key}: unexpected pull status {status} at offset {offset} from "
                                f"{reply.addr}: {reply.remark}", address=reply.addr)
        if offset < end:
            future = submit(offset)


def _data_loss(opts: ReadOptions, key: QueueKey, offset: int, earliest: int) -> None:
    if opts.fail_on_data_loss:
        raise DataLossError(_lost(key, offset, earliest, "was to be read"))
    log.warning("messages were deleted before they were read; skipping them", extra={
        "queue": str(key), "from": offset, "to": earliest})


def _partition(partition: InputPartition) -> QueueRange | None:
    return partition if isinstance(partition, QueueRange) else None


# -- batch -------------------------------------------------------------------------------------------------


class PocketMQBatchReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        topo = topology(opts)
        start = resolve_start(opts, opts.starting, topo, batch=True)
        maxes = _offsets_or_raise(opts, topo, "max")
        if opts.ending.kind == "json":
            unknown = sorted(set(opts.ending.offsets) - set(topo.addrs))
            if unknown:
                raise InvalidArgumentError(f"option endingOffsets names queues that are not readable in the "
                                           f"route: {', '.join(map(str, unknown))}")
            end = {}
            for key in topo.addrs:
                wanted = opts.ending.offsets.get(key, LATEST)
                end[key] = maxes[key] if wanted == LATEST else min(wanted, maxes[key])
                if end[key] < start[key]:
                    raise InvalidArgumentError(f"{key}: ending offset {end[key]} is before the starting "
                                               f"offset {start[key]}")
        else:
            end = maxes
        parts = split_ranges(topo, start, end, opts.max_messages_per_partition)
        log.info("batch read planned", extra={"partitions": len(parts), "topics": ",".join(opts.topics),
                                              "messages": sum(p.end - p.start for p in parts)})
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        part = _partition(partition)
        if part is None:
            return iter(())
        return read_range(self.opts, part)


# -- streaming ---------------------------------------------------------------------------------------------


class PocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """Micro-batches of queue ranges. Lives in one long-running Python process on the driver
    (planning, commits); ``read`` runs on the executors."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._target: Offsets | None = None
        self._latest: Offsets | None = None
        self._topology: Topology | None = None
        self._committed: Offsets | None = None

    # planning ------------------------------------------------------------------------------------

    def _topology_now(self) -> Topology:
        self._topology = topology(self.opts, missing_ok=True)
        return self._topology

    def _max_offsets(self) -> Offsets:
        topo = self._topology_now()
        cluster = _broker.cluster(self.opts.namesrv, self.opts.request_timeout, self.opts.tls)
        found, errors = cluster.queue_offsets(topo.addrs, "max")
        for key, err in sorted(errors.items()):
            log.warning("no broker of the group answered; the queue waits for the next trigger",
                        extra={"queue": str(key), "error": str(err)})
        return found

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802
        topo = self._topology_now()
        start = resolve_start(self.opts, self.opts.starting, topo, batch=False)
        log.info("stream starts", extra={"offsets": describe(start)})
        return to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        n = self.opts.max_messages_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self._target = self._max_offsets()
        log.info("available-now target", extra={"offsets": describe(self._target)})

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        begin = from_json(start, "start offset")
        # Spark asks for new data only once the micro-batch that ended at ``start`` is committed
        # (or, first, with the initial offsets). Its own commit() of that batch comes only after
        # the next batch is planned, i.e. never for the last batch of an AvailableNow run or of
        # an idle stream: commit here so the group's lag is current.
        self._commit_group(begin)
        latest = self._max_offsets()
        self._latest = dict(latest)
        if self._target is not None:
            target = self._target
            latest = {k: min(v, target[k]) for k, v in latest.items() if k in target}
        if isinstance(limit, ReadMaxRows):
            max_rows: int | None = int(limit.max_rows)
        else:
            if not isinstance(limit, ReadAllAvailable):
                log.warning("read limit %r is not supported; reading all available", limit)
            max_rows = None
        return to_json(limit_end(begin, latest, max_rows))

    def reportLatestOffset(self) -> dict[str, Any] | None:  # noqa: N802
        return to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin = from_json(start, "start offset")
        stop = from_json(end, "end offset")
        topo = self._topology
        if topo is None or any(k not in topo.addrs for k in stop if stop[k] > begin.get(k, 0)):
            topo = self._topology_now()
        return split_ranges(topo, begin, stop, self.opts.max_messages_per_partition)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        part = _partition(partition)
        if part is None:
            return iter(())
        return read_range(self.opts, part)

    def commit(self, end: dict[str, Any]) -> None:
        self._commit_group(from_json(end, "end offset"))

    def _commit_group(self, offsets: Offsets) -> None:
        """Commit the group's offsets (``commitOffsets``): best effort, the checkpoint is what
        restarts the query; a failure is logged and retried with the next batch."""
        if not self.opts.commit_offsets or not offsets or offsets == self._committed:
            return
        topo = self._topology or self._topology_now()
        cluster = _broker.cluster(self.opts.namesrv, self.opts.request_timeout, self.opts.tls)
        errors = cluster.commit_offsets(self.opts.group, offsets, topo.masters)
        if errors:  # a master may have moved: try once more with fresh routes
            topo = self._topology_now()
            errors = cluster.commit_offsets(self.opts.group, {k: offsets[k] for k in errors}, topo.masters)
        for key, err in sorted(errors.items()):
            log.warning("could not commit the group offset (the checkpoint still has it)", extra={
                "group": self.opts.group, "queue": str(key), "offset": offsets[key], "error": str(err)})
        if not errors:
            self._committed = dict(offsets)

    def stop(self) -> None:
        self._topology = None
