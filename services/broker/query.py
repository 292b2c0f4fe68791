# ruff: noqa: N802  (method names are the RPC names)
"""``pocketmq.broker.v1.MessageQuery``: find messages for operators - by commit log offset (what
an offset message id decodes to), by key or unique id through the message index, and a page of
one queue. Reads run in a worker thread (they touch the files); masters and slaves answer alike.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, TypeAlias

import grpc

from pocketmq.broker.v1 import broker_pb2 as pb
from pocketmq.broker.v1 import broker_pb2_grpc
from services.broker import validation as v
from services.broker.pull import to_message_ext
from services.broker.storage.consumequeue import FILLER_SIZE
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
        records = await asyncio.to_thread(store.query_by_key, request.topic, request.key, begin, end, limit,
                                          request.unique_key)
        return pb.QueryMessageResponse(messages=[to_message_ext(r) for r in records],
                                       indexed_offset=index.indexed_offset, max_offset=store.max_offset,
                                       index_enabled=True)

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

