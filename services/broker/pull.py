"""The consume path: read a queue from an offset with an optional tag filter, long-polling at the
end of the queue.

A pull that finds nothing new (``OFFSET_OVERFLOW_ONE``) parks on the :class:`QueueNotifier`
until the store reports newly dispatched data for that queue or the suspend timeout
passes; a filter that skipped everything new moves the offset forward and keeps waiting. Pulls
work the same on slaves: replicated data is dispatched to the slave's consume queues, which
fires the same listener.

``raw_records`` replies carry the records as stored (the commit log format): contiguous records
are sliced from the commit log in one piece, and the client decodes them. A stream's reply holds
up to the pull's count within the byte caps, more than one selection's worth (see
:meth:`PullService.get_raw`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

from pocketmq.broker.v1 import broker_pb2
from services.broker import validation as v
from services.broker.config import BrokerConfig
from services.broker.consumers import ConsumerManager
from services.broker.longpoll import QueueNotifier
from services.broker.metadata import (
    ConsumerOffsetManager,
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
    TopicConfigManager,
)
from services.broker.metrics import BrokerMetrics
from services.broker.storage import record
from services.broker.storage.config import StoreConfig
from services.broker.storage.status import GetMessageStatus, GetResult
from services.broker.storage.store import MessageStore
from services.common.errors import InvalidArgumentError, NotFoundError, PermissionDeniedError

log = logging.getLogger(__name__)

#: Largest batch one pull may ask for (a reply must stay well under the gRPC message limit).
MAX_PULL_COUNT = 4096
MAX_PULL_BYTES = 16 * 1024 * 1024


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30


#: RocketMQ's accessMessageInMemoryMaxRatio (40 % of RAM): consumers further behind are told
#: to read from a slave (``suggest_which_broker_id``).
SLOW_CONSUMER_BYTES = _memory_bytes() * 40 // 100

GET_TO_PULL_STATUS: Mapping[GetMessageStatus, broker_pb2.PullStatus] = {
    GetMessageStatus.FOUND: broker_pb2.FOUND,
    GetMessageStatus.NO_MATCHED_MESSAGE: broker_pb2.NO_MATCHED_MSG,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: broker_pb2.NO_NEW_MSG,
    GetMessageStatus.NO_MESSAGE_IN_QUEUE: broker_pb2.NO_NEW_MSG,
    GetMessageStatus.NO_MATCHED_LOGIC_QUEUE: broker_pb2.NO_NEW_MSG,
    GetMessageStatus.MESSAGE_WAS_REMOVING: broker_pb2.OFFSET_ILLEGAL,
    GetMessageStatus.OFFSET_FOUND_NULL: broker_pb2.OFFSET_ILLEGAL,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: broker_pb2.OFFSET_ILLEGAL,
    GetMessageStatus.OFFSET_TOO_SMALL: broker_pb2.OFFSET_ILLEGAL,
}
EnsureGroup = Callable[[str], SubscriptionGroupConfig]
StopFlag = Callable[[], bool]

_WAITABLE = frozenset({GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.NO_MESSAGE_IN_QUEUE,
                       GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, GetMessageStatus.NO_MATCHED_MESSAGE})


class RawResult(NamedTuple):
    """A pull's records as stored (``raw_records``)."""

    status: GetMessageStatus
    records: bytes
    found: int
    next_begin_offset: int
    min_offset: int
    max_offset: int
    #: Commit log offset just past the last record returned (0 if none).
    end_physical: int = 0


@dataclasses.dataclass(frozen=True)
class PullQuery:
    group: str
    topic: str
    queue_id: int
    offset: int
    max_count: int
    max_bytes: int
    tag_filter: v.TagFilter
    raw: bool
    #: A stream's raw pull: its replies run past one selection (see PullService.get_raw).
    stream: bool = False

    def at(self, offset: int) -> PullQuery:
        return dataclasses.replace(self, offset=offset)


def to_message_ext(rec: record.MessageRecord) -> broker_pb2.MessageExt:
    props = rec.properties
    return broker_pb2.MessageExt(
        topic=rec.topic, queue_id=rec.queue_id, queue_offset=rec.queue_offset,
        commit_log_offset=rec.physical_offset, msg_id=rec.msg_id, body=rec.body,
        tags=props.get(record.PROPERTY_TAGS, ""), keys=props.get(record.PROPERTY_KEYS, ""),
        properties=props, born_timestamp=rec.born_timestamp, store_timestamp=rec.store_timestamp,
        born_host=f"{rec.born_host[0]}:{rec.born_host[1]}",
        store_host=f"{rec.store_host[0]}:{rec.store_host[1]}", reconsume_times=rec.reconsume_times,
        store_size=rec.store_size, flag=rec.flag, sys_flag=rec.sys_flag,
    )


class PullService:
    def __init__(
        self,
        broker_config: BrokerConfig,
        store_config: StoreConfig,
        store: MessageStore,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager,
        notifier: QueueNotifier,
        metrics: BrokerMetrics,
        ensure_group: EnsureGroup,
        resets: ConsumerManager | None = None,
    ) -> None:
        self.config = broker_config
        self.store_config = store_config
        self.store = store
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.notifier = notifier
        self.metrics = metrics
        self.ensure_group = ensure_group
        #: Offset-reset generations of (group, topic) (see services.broker.consumers).
        self.resets = resets
        #: Pulls parked on the notifier right now (the ``pulls_suspended`` gauge).
        self.parked = 0

    def query(self, request: broker_pb2.PullMessageRequest, *, stream: bool = False) -> PullQuery:
        """Validate a pull request (errors name the bad field) and commit its offset; ``stream``:
        for PullMessageStream."""
        topic = v.validate_topic(request.topic)
        tc = self.topics.get(topic)
        if tc is None:
            raise NotFoundError(f"topic {topic!r} does not exist on broker {self.config.broker_name}")
        if not tc.readable:
            raise PermissionDeniedError(
                f"topic {topic!r} is not readable on broker {self.config.broker_name} "
                f"(perm {v.perm_to_string(tc.perm)})")
        if not 0 <= request.queue_id < max(tc.read_queue_nums, tc.write_queue_nums):
            raise InvalidArgumentError(
                f"queue id {request.queue_id} is out of range: topic {topic!r} has "
                f"{tc.read_queue_nums} read queues")
        v.validate_offset(request.queue_offset)
        group = request.consumer_group
        if group:
            config = self.ensure_group(group)
            if not config.consume_enable:
                raise PermissionDeniedError(
                    f"subscription group {group!r} may not consume (consumeEnable=false)")
        tag_filter = v.parse_tag_expression(request.subscription)
        if request.commit_offset > 0 and group and self.config.is_master:
            # A pull's commit only moves the offset forward: a pull still in flight when its
            # consumer committed further (or closed) must not take the group back. Moving back is
            # UpdateConsumerOffset's job (offset resets).
            stored = self.offsets.query(group, topic, request.queue_id)
            stale = self.resets is not None and request.HasField("reset_generation") and \
                self.resets.stale_commit(group, topic, request.reset_generation)
            if not stale and (stored is None or request.commit_offset > stored):
                self.offsets.commit(group, topic, request.queue_id, request.commit_offset)
        max_count = request.max_msg_nums if request.max_msg_nums > 0 else \
            self.store_config.max_transfer_count_on_message_in_memory
        max_bytes = request.max_bytes if request.max_bytes > 0 else \
            self.store_config.max_transfer_bytes_on_message_in_memory
        return PullQuery(group, topic, request.queue_id, request.queue_offset,
                         min(max_count, MAX_PULL_COUNT), min(max_bytes, MAX_PULL_BYTES), tag_filter,
                         request.raw_records, stream)

    def _get(self, q: PullQuery, offset: int) -> GetResult | RawResult:
        if q.raw:
            return self.get_raw(q, offset)
        return self.store.get_messages(q.topic, q.queue_id, offset, q.max_count, max_bytes=q.max_bytes,
                                       tag_hashes=q.tag_filter.hash_codes)

    def get_raw(self, q: PullQuery, queue_offset: int) -> RawResult:
        """:meth:`MessageStore.select_entries` without decoding: the same records and statuses,
        contiguous runs copied from the commit log in one piece. A stream's reply is not held to
        ``maxTransferCountOnMessageInMemory`` records, only to the pull's own count within the
        byte caps (the pull's ``max_bytes`` and ``maxTransferBytesOnMessageInMemory``): what a
        reply costs the broker, gRPC and the consumer is then paid per reply of up to 256 KiB,
        not per 32 messages. Unary pulls keep RocketMQ's caps (a reader such as Spark's sizes
        its pulls by them)."""
        sel = self.store.select_entries(q.topic, q.queue_id, queue_offset, q.max_count, q.max_bytes,
                                        q.tag_filter.hash_codes, count_cap=not q.stream)
        if not sel.offsets:
            return RawResult(sel.status, b"", 0, sel.next_begin_offset, sel.min_offset, sel.max_offset)
        parts: list[bytes] = []
        for start, end in sel.runs:
            self._copy(start, end, parts)
        data = b"".join(parts)
        if len(data) != sel.total:  # a segment vanished under us: report what is left to read again
            return RawResult(GetMessageStatus.OFFSET_FOUND_NULL, b"", 0, queue_offset, sel.min_offset,
                             sel.max_offset)
        return RawResult(GetMessageStatus.FOUND, data, len(sel.offsets), sel.next_begin_offset,
                         sel.min_offset, sel.max_offset, sel.runs[-1][1])

    async def pull(
        self, q: PullQuery, suspend_s: float, stopping: StopFlag
    ) -> broker_pb2.PullMessageResponse:
        started = time.perf_counter()
        deadline = time.monotonic() + suspend_s
        offset = q.offset
        long_poll = self.config.long_polling_enable and suspend_s > 0
        resets = self.resets
        generation = resets.reset_generation(q.group, q.topic) if resets is not None and q.group else 0
        while True:
            result = self._get(q, offset)
            if result.status is GetMessageStatus.FOUND or not long_poll or result.status not in _WAITABLE:
                break
            if result.status is GetMessageStatus.NO_MATCHED_MESSAGE and result.next_begin_offset > offset:
                offset = result.next_begin_offset  # skipped unmatched messages; keep waiting from here
                if result.next_begin_offset < result.max_offset:
                    continue
            remaining = deadline - time.monotonic()
            if remaining <= 0 or stopping():
                break
            self.parked += 1
            try:
                await self.notifier.wait(q.topic, q.queue_id, offset, remaining)
            finally:
                self.parked -= 1
            if generation != (resets.reset_generation(q.group, q.topic) if resets is not None else 0):
                break  # the group was reset: answer now, so the consumer learns it
        reply = self.reply(q, result)
        self.metrics.get(broker_pb2.PullStatus.Name(reply.status), _count(result),
                         time.perf_counter() - started)
        return reply

    def reply(self, q: PullQuery, result: GetResult | RawResult) -> broker_pb2.PullMessageResponse:
        status = GET_TO_PULL_STATUS.get(result.status, broker_pb2.OFFSET_ILLEGAL)
        reply = broker_pb2.PullMessageResponse(
            status=status, next_begin_offset=result.next_begin_offset, min_offset=result.min_offset,
            max_offset=result.max_offset)
        if isinstance(result, RawResult):
            if result.found:
                reply.records = result.records
        elif result.messages:
            reply.messages.extend([to_message_ext(rec) for rec in result.messages])
        if status == broker_pb2.OFFSET_ILLEGAL:
            reply.remark = (f"queue offset {q.offset} is outside [{result.min_offset}, {result.max_offset}] "
                            f"({result.status.name}); continue from {result.next_begin_offset}")
        elif status == broker_pb2.FOUND and self.config.is_master and q.group:
            reply.suggest_which_broker_id = self._suggest_broker(q.group, result)
        if self.resets is not None and q.group:
            reply.reset_generation = self.resets.reset_generation(q.group, q.topic)
        return reply

    def _suggest_broker(self, group: str, result: GetResult | RawResult) -> int:
        """RocketMQ's rule: a consumer whose position is further behind the commit log end than
        the page cache is likely to hold (40 % of RAM) should read from a slave (the group's
        ``whichBrokerWhenConsumeSlowly``) to spare the master's disk."""
        if isinstance(result, RawResult):
            end = result.end_physical
        else:
            last = result.messages[-1]
            end = last.physical_offset + last.store_size
        if self.store.max_offset - end <= SLOW_CONSUMER_BYTES:
            return 0
        config = self.groups.get(group)
        return config.which_broker_when_consume_slowly if config is not None else 1

    def _copy(self, start: int, end: int, parts: list[bytes]) -> None:
        while start < end:
            chunk = self.store.get_data(start, end - start)
            if chunk is None:  # the segment went away under us (expired): stop here
                return
            try:
                parts.append(bytes(chunk.data))
                start += chunk.size
            finally:
                chunk.release()


def _count(result: GetResult | RawResult) -> int:
    return result.found if isinstance(result, RawResult) else len(result.messages)
