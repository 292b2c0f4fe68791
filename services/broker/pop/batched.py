"""PocketMQ's own batched POP calls (``Broker.PopMessages``, ``AckMessages``,
``ChangeInvisibleTime``, and the first two pipelined on ``PopStream``): request validation and
replies over :class:`PopService`. A pop hands out whole checkpoints with the records as stored;
an ack names (checkpoint, offsets), so neither side builds an object per message."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from pocketmq.broker.v1 import broker_pb2 as pb
from services.broker import validation as v
from services.broker.pop.model import PopRequest
from services.broker.pop.service import PopService
from services.broker.pop.state import AckBatch
from services.broker.pull import to_message_ext
from services.common.errors import InvalidArgumentError, PermissionDeniedError, ServiceError

log = logging.getLogger(__name__)

#: Bounds of a batched pop: messages per call, invisible time, long polling.
MAX_POP_BATCH = 4096
MIN_INVISIBLE_MS = 1_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000
MAX_POLL_MS = 60_000


def _receipts(receipts: Sequence[pb.PopReceipt]) -> list[AckBatch]:
    if not receipts:
        raise InvalidArgumentError("no receipts given")
    return [(r.topic, r.queue_id, r.checkpoint_id, r.queue_offsets) for r in receipts]


def _failed(reply_failed: Any, failed: Sequence[AckBatch]) -> None:
    for topic, qid, ck_id, offsets in failed:
        reply_failed.add(topic=topic, queue_id=qid, checkpoint_id=ck_id, queue_offsets=offsets)


def _group(service: PopService, group: str) -> str:
    v.validate_group(group)
    if not service.group_config(group).consume_enable:
        raise PermissionDeniedError(f"subscription group {group!r} may not consume (consumeEnable=false)")
    return group


async def pop(service: PopService, request: pb.PopMessagesRequest,
              stopping: Callable[[], bool]) -> pb.PopMessagesResponse:
    group = _group(service, request.consumer_group)
    topic = v.validate_topic(request.topic)
    if not 0 < request.max_msg_nums <= MAX_POP_BATCH:
        raise InvalidArgumentError(f"max_msg_nums {request.max_msg_nums} is outside [1, {MAX_POP_BATCH}]")
    if not MIN_INVISIBLE_MS <= request.invisible_time_ms <= MAX_INVISIBLE_MS:
        raise InvalidArgumentError(f"invisible_time_ms {request.invisible_time_ms} is outside "
                                   f"[{MIN_INVISIBLE_MS}, {MAX_INVISIBLE_MS}]")
    if not 0 <= request.poll_time_ms <= MAX_POLL_MS:
        raise InvalidArgumentError(f"poll_time_ms {request.poll_time_ms} is outside [0, {MAX_POLL_MS}]")
    req = PopRequest(group, topic, request.queue_id, request.max_msg_nums, request.invisible_time_ms,
                     v.parse_tag_expression(request.subscription), request.poll_time_ms / 1000,
                     request.client_id)
    reply = pb.PopMessagesResponse(broker_name=service.broker_name)
    for b in await service.pop_batches(req, stopping):
        out = reply.batches.add(topic=b.topic, queue_id=b.queue_id, checkpoint_id=b.ck_id,
                                pop_time_ms=b.pop_ms, deadline_ms=b.deadline_ms, queue_offsets=b.offsets,
                                attempts=b.attempts, records=b.records)
        if b.recs:
            out.messages.extend([to_message_ext(r) for r in b.recs])
    return reply


def ack(service: PopService, request: pb.AckMessagesRequest) -> pb.AckMessagesResponse:
    group = _group(service, request.consumer_group)
    acked, failed = service.ack_batches(group, _receipts(request.receipts))
    reply = pb.AckMessagesResponse(acked=acked)
    _failed(reply.failed, failed)
    return reply


def change_invisible(service: PopService,
                     request: pb.ChangeInvisibleTimeRequest) -> pb.ChangeInvisibleTimeResponse:
    group = _group(service, request.consumer_group)
    if not 0 <= request.invisible_time_ms <= MAX_INVISIBLE_MS:
        raise InvalidArgumentError(f"invisible_time_ms {request.invisible_time_ms} is outside "
                                   f"[0, {MAX_INVISIBLE_MS}]")
    cks, failed = service.change_batches(group, _receipts(request.receipts), request.invisible_time_ms)
    reply = pb.ChangeInvisibleTimeResponse()
    for ck in cks:
        reply.batches.add(topic=ck.topic, queue_id=ck.queue_id, checkpoint_id=ck.ck_id, pop_time_ms=ck.pop_ms,
                          deadline_ms=ck.deadline_ms, queue_offsets=list(ck.pending))
    _failed(reply.failed, failed)
    return reply


async def stream_one(service: PopService, request: pb.PopStreamRequest,
                     stopping: Callable[[], bool]) -> pb.PopStreamResponse:
    """One request of a PopStream: its ack, then its pop; a failure is answered, not raised."""
    reply = pb.PopStreamResponse(request_id=request.request_id)
    try:
        if request.HasField("ack"):
            reply.ack.CopyFrom(ack(service, request.ack))
        if request.HasField("pop"):
            reply.pop.CopyFrom(await pop(service, request.pop, stopping))
    except ServiceError as exc:
        reply.error_code, reply.error = exc.code.name, str(exc)
    except Exception as exc:  # answered like a unary call's INTERNAL; the stream goes on
        log.exception("pop stream request failed")
        reply.error_code, reply.error = "INTERNAL", f"{type(exc).__name__}: {exc}"
    return reply


async def serve_stream(service: PopService, requests: AsyncIterator[pb.PopStreamRequest],
                       stopping: Callable[[], bool]) -> AsyncIterator[pb.PopStreamResponse]:
    """Answer a PopStream's requests as they complete: acks inline, pops (which may long-poll)
    each in a task of their own."""
    out: asyncio.Queue[pb.PopStreamResponse | None] = asyncio.Queue()
    tasks: set[asyncio.Task[None]] = set()

    async def answer(request: pb.PopStreamRequest) -> None:
        out.put_nowait(await stream_one(service, request, stopping))

    async def read() -> None:
        try:
            async for request in requests:
                if request.HasField("pop"):
                    task = asyncio.create_task(answer(request))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                else:
                    await answer(request)
            if tasks:
                await asyncio.gather(*tasks)
        finally:
            out.put_nowait(None)

    reader = asyncio.create_task(read())
    try:
        while (reply := await out.get()) is not None:
            yield reply
        await reader  # (a failed read, e.g. a request refused by access control: its error)
    finally:
        reader.cancel()
        for task in list(tasks):
            task.cancel()
