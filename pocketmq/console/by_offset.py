"""Finding a message by its offset message id without the broker's message index: the id names
the broker that stored it and the commit log offset; within one queue the consume queue's
entries grow with the commit log offset, so a binary search over queue offsets with one-message
``PullMessage`` calls (relayed like every admin call) finds it in each queue of the topic on that
broker group. Used by the console's lookup page when the admin client has no ``get_message``."""

from __future__ import annotations

from typing import Any

from pocketmq.broker.v1 import broker_pb2
from pocketmq.client.message import ReceivedMessage, from_message_ext
from pocketmq.errors import InvalidArgumentError, NotFoundError
from pocketmq.wire.errors import RecordError
from pocketmq.wire.msgid import parse_offset_msg_id

__all__ = ["find_by_offset_msg_id"]


async def _at(admin: Any, addr: str, topic: str, queue_id: int,
              offset: int) -> broker_pb2.MessageExt | None:
    reply = await admin.call(addr, "PullMessage", broker_pb2.PullMessageRequest(
        topic=topic, queue_id=queue_id, queue_offset=offset, max_msg_nums=1))
    if reply.status != broker_pb2.FOUND or not reply.messages:
        return None
    ext: broker_pb2.MessageExt = reply.messages[0]
    return ext


async def _search_queue(admin: Any, addr: str, topic: str, queue_id: int,
                        physical: int) -> broker_pb2.MessageExt | None:
    queue = broker_pb2.QueueRequest(topic=topic, queue_id=queue_id)
    lo = int((await admin.call(addr, "GetMinOffset", queue)).offset)
    hi = int((await admin.call(addr, "GetMaxOffset", queue)).offset) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        ext = await _at(admin, addr, topic, queue_id, mid)
        if ext is None:  # a hole (expired or filtered): look below it
            hi = mid - 1
            continue
        if ext.commit_log_offset == physical:
            return ext
        if ext.commit_log_offset < physical:
            lo = mid + 1
        else:
            hi = mid - 1
    return None


async def find_by_offset_msg_id(admin: Any, msg_id: str, topic: str) -> ReceivedMessage:
    """The message of ``topic`` whose offset message id is ``msg_id``."""
    try:
        (ip, port), physical = parse_offset_msg_id(msg_id.strip())
    except RecordError:
        raise InvalidArgumentError(
            f"{msg_id!r} is not an offset message id; a unique client message id can only be looked "
            "up through the message index") from None
    if not topic:
        raise InvalidArgumentError("give the topic: without the message index the message is searched "
                                   "for in the topic's queues on the broker that stored it")
    addr = f"{ip}:{port}"
    target = next((t for t in await admin.brokers() if t.addr == addr), None)
    if target is None:
        raise NotFoundError(f"{msg_id!r} was stored by {addr}, which is not a registered broker")
    route = await admin.route(topic)
    group = route.brokers.get(target.broker_name)
    if group is None:
        raise NotFoundError(f"topic {topic!r} has no queues on broker group {target.broker_name}")
    queues = next((max(q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas
                   if q.broker_name == target.broker_name), 0)
    for queue_id in range(queues):
        ext = await _search_queue(admin, addr, topic, queue_id, physical)
        if ext is not None:
            return from_message_ext(ext, target.broker_name)
    raise NotFoundError(f"no message of topic {topic!r} at commit log offset {physical} of {addr}")
