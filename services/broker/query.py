# ruff: noqa: N802  (method names are the RPC names)
"""``pocketmq.broker.v1.MessageQuery``: find messages for operators - by commit log offset (what
an offset message id decodes to), by key or unique id through the message index, and a page of
one queue. Reads run in a worker thread (they touch the files); masters and slaves answer alike.

A unique message id asked for without a topic is probed in the index once per topic of the
store (one hash-slot probe each; see docs/message-index.md), bounded below by the time a
RocketMQ 5 SDK id carries.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, TypeAlias

import grpc

from pocketmq.broker.v1 import broker_pb2 as pb
from pocketmq.broker.v1 import broker_pb2_grpc
from pocketmq.wire.msgid import uniq_id_time_ms
from pocketmq.wire.names import SYSTEM_TOPICS
from services.broker import validation as v
from services.broker.pull import to_message_ext
from services.broker.storage.consumequeue import FILLER_SIZE
from services.broker.storage.record import MessageRecord
from services.common.errors import InvalidArgumentError, NotFoundError, grpc_method

if TYPE_CHECKING:
    from services.broker.app import BrokerApp

Ctx: TypeAlias = grpc.aio.ServicerContext

#: QueryMessage answers at most this many messages ...
MAX_QUERY_NUM = 1000
#: ... and this many when the request does not say (RocketMQ's defaultQueryMaxNum).
DEFAULT_QUERY_NUM = 64
#: BrowseMessages: at most / by default.
MAX_BROWSE_NUM = 256
DEFAULT_BROWSE_NUM = 32
#: Consume queue entries a browse looks at to fill one page (filler / deleted entries skipped).
BROWSE_SCAN = 4096
#: A message is stored after its SDK made its id: index files older than the id's time less a
#: day (the Java SDK's zone, clock skew) are skipped. No upper bound (timer messages are
#: stored again when due, with the same id).
UNIQ_TIME_SLACK_MS = 24 * 3600 * 1000
#: Prefixes of broker-made topics (retries, dead letters, revive log, timer): a message found by
#: its unique id there is listed after the one in its own topic.
_INTERNAL_PREFIXES = ("%RETRY%", "%DLQ%", "rmq_sys_", "RMQ_SYS_")


def _internal(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(_INTERNAL_PREFIXES)


class MessageQueryServicer(broker_pb2_grpc.MessageQueryServicer):  # type: ignore[misc]
    def __init__(self, app: BrokerApp) -> None:
        self.app = app

    @grpc_method
    async def ViewMessage(self, request: pb.ViewMessageRequest, context: Ctx) -> pb.ViewMessageResponse:
        offset = request.commit_log_offset
        if offset < 0:
            raise InvalidArgumentError(f"commit_log_offset must be >= 0, got {offset}")
        store = self.app.store
        rec = await asyncio.to_thread(store.read_message, offset) if offset < store.max_offset else None
        if rec is not None and rec.physical_offset != offset:
            rec = None  # bytes inside another record that happen to look like one
        if rec is None:
            where = (f"below the oldest retained offset {store.min_offset} (deleted)"
                     if offset < store.min_offset
                     else f"not the start of a message (commit log {store.min_offset}..{store.max_offset})")
            raise NotFoundError(f"no message at commit log offset {offset} on broker "
                                f"{self.app.broker_config.broker_name}: {where}")
        return pb.ViewMessageResponse(message=to_message_ext(rec))

    @grpc_method
    async def QueryMessage(self, request: pb.QueryMessageRequest, context: Ctx) -> pb.QueryMessageResponse:
        if request.topic or not request.unique_key:
            v.validate_topic(request.topic)
        if not request.key:
            raise InvalidArgumentError("key must not be empty")
        begin = request.begin_timestamp_ms
        end = request.end_timestamp_ms or 2**62
        if begin < 0 or end < begin:
            raise InvalidArgumentError(f"bad time range [{begin}, {request.end_timestamp_ms}]")
        limit = request.max_num or DEFAULT_QUERY_NUM
        if not 0 < limit <= MAX_QUERY_NUM:
            raise InvalidArgumentError(f"max_num must be 1..{MAX_QUERY_NUM}, got {limit}")
        store = self.app.store
        index = store.index
        if index is None:
            return pb.QueryMessageResponse(max_offset=store.max_offset, index_enabled=False)
        if request.topic:
            records = await asyncio.to_thread(store.query_by_key, request.topic, request.key, begin, end,
                                              limit, request.unique_key)
        else:
            born = uniq_id_time_ms(request.key)
            if born is not None and not request.begin_timestamp_ms:
                begin = max(0, born - UNIQ_TIME_SLACK_MS)
            records = await asyncio.to_thread(self._find_unique, request.key, begin, end, limit)
        return pb.QueryMessageResponse(messages=[to_message_ext(r) for r in records],
                                       indexed_offset=index.indexed_offset, max_offset=store.max_offset,
                                       index_enabled=True)

    def _find_unique(self, key: str, begin: int, end: int, limit: int) -> list[MessageRecord]:
        """Messages whose unique id is ``key`` in any topic of the store: one index probe per
        topic, candidates read and checked; messages of user topics first, newest first."""
        store = self.app.store
        index = store.index
        assert index is not None
        candidates: dict[int, None] = {}
        for topic in store.topics():
            candidates.update(dict.fromkeys(index.lookup(topic, key, begin, end, limit + 16)))
        found = [r for r in store.read_messages(candidates)
                 if r is not None and r.uniq_key == key and begin <= r.store_timestamp <= end]
        found.sort(key=lambda r: (_internal(r.topic), -r.store_timestamp, r.physical_offset))
        return found[:limit]

    @grpc_method
    async def BrowseMessages(self, request: pb.BrowseMessagesRequest,
                             context: Ctx) -> pb.BrowseMessagesResponse:
        topic, queue_id = request.topic, request.queue_id
        v.validate_topic(topic)
        if self.app.topics.get(topic) is None and topic not in self.app.store.topics():
            raise NotFoundError(
                f"topic {topic!r} does not exist on broker {self.app.broker_config.broker_name}")
        if queue_id < 0:
            raise InvalidArgumentError(f"queue_id must be >= 0, got {queue_id}")
        if request.queue_offset < 0 or request.from_timestamp_ms < 0:
            raise InvalidArgumentError("queue_offset and from_timestamp_ms must be >= 0")
        limit = request.max_num or DEFAULT_BROWSE_NUM
        if not 0 < limit <= MAX_BROWSE_NUM:
            raise InvalidArgumentError(f"max_num must be 1..{MAX_BROWSE_NUM}, got {limit}")
        return await asyncio.to_thread(self._browse, topic, queue_id, request.queue_offset,
                                       request.from_timestamp_ms, limit)

    def _browse(self, topic: str, queue_id: int, offset: int, from_ms: int,
                limit: int) -> pb.BrowseMessagesResponse:
        store = self.app.store
        if from_ms > 0:
            offset = store.queue_offset_by_time(topic, queue_id, from_ms)
        lo, hi = store.min_queue_offset(topic, queue_id), store.max_queue_offset(topic, queue_id)
        offset = max(offset, lo)
        picked: list[int] = []
        log_min = store.min_offset
        scanned = 0
        while offset < hi and len(picked) < limit and scanned < BROWSE_SCAN:
            entries = store.queue_entries(topic, queue_id, offset, min(limit - len(picked), hi - offset))
            if not entries:
                break
            for physical, size, _tags in entries:
                offset += 1
                scanned += 1
                if size != FILLER_SIZE and physical >= log_min:
                    picked.append(physical)
                    if len(picked) >= limit:
                        break
        records = [r for r in store.read_messages(picked) if r is not None]
        return pb.BrowseMessagesResponse(messages=[to_message_ext(r) for r in records],
                                         next_queue_offset=offset,
                                         min_offset=lo, max_offset=hi)

