"""Message lookup for operators, part of :class:`pocketmq.client.admin.AsyncAdmin`: a message by
its id, messages by business key or unique id, and pages of a queue (``mqadmin queryMsgById`` /
``queryMsgByKey`` / ``queryMsgByUniqueKey`` and a queue browser).

Every call is a unary broker call, so it travels through the NameServer relay like the other
admin calls. A lookup by key asks every broker group of the topic and merges the answers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pocketmq.broker.v1 import broker_pb2
from pocketmq.client.message import MessageQueue, from_message_ext
from pocketmq.client.routes import MASTER_ID
from pocketmq.errors import InvalidArgumentError, NotFoundError, PocketMQError
from pocketmq.wire.errors import RecordError
from pocketmq.wire.messages import ReceivedMessage
from pocketmq.wire.msgid import parse_offset_msg_id

if TYPE_CHECKING:
    from pocketmq.client.admin import BrokerTarget
    from pocketmq.client.routes import TopicRoute

__all__ = ["BrowsePage", "KeyQueryResult", "MessageLookup", "Since", "to_epoch_ms"]

#: A point in time: epoch milliseconds, or a datetime (naive = UTC).
Since = int | float | dt.datetime


def to_epoch_ms(when: Since | None, default: int) -> int:
    if when is None:
        return default
    if isinstance(when, dt.datetime):
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        return int(when.timestamp() * 1000)
    return int(when)


@dataclasses.dataclass(frozen=True)
class BrowsePage:
    """One page of a queue (:meth:`MessageLookup.browse`); continue from ``next_offset``."""

    queue: MessageQueue
    messages: list[ReceivedMessage]
    next_offset: int
    min_offset: int
    max_offset: int

    @property
    def at_end(self) -> bool:
        return self.next_offset >= self.max_offset

    def to_dict(self, body: str = "text") -> dict[str, Any]:
        return {"topic": self.queue.topic, "broker_name": self.queue.broker_name,
                "queue_id": self.queue.queue_id,
                "next_offset": self.next_offset, "min_offset": self.min_offset, "max_offset": self.max_offset,
                "messages": [m.to_dict(body) for m in self.messages]}


@dataclasses.dataclass(frozen=True)
class KeyQueryResult:
    """Messages found by key over the topic's broker groups, newest first, and the groups
    that could not answer (``errors``: broker name -> error)."""

    messages: list[ReceivedMessage]
    errors: dict[str, PocketMQError]

    def to_dict(self, body: str = "text") -> dict[str, Any]:
        return {"messages": [m.to_dict(body) for m in self.messages],
                "errors": {name: e.to_dict() for name, e in sorted(self.errors.items())}}


class MessageLookup:
    """The lookup methods of the admin client (mixed into ``AsyncAdmin``)."""

    if TYPE_CHECKING:  # what AsyncAdmin provides
        async def call(self, addr: str, method: str, request: Any,
                       timeout: float | None = None) -> Any: ...  # noqa: ASYNC109

        async def brokers(self, cluster: str | None = None,
                          masters_only: bool = False) -> list[BrokerTarget]: ...

        async def route(self, topic: str) -> TopicRoute: ...

    async def _group_members(self, broker_name: str) -> list[BrokerTarget]:
        """The broker group's members, master first."""
        members = [t for t in await self.brokers() if t.broker_name == broker_name]
        return sorted(members, key=lambda t: (t.broker_id != MASTER_ID, t.broker_id))

    async def _ask_group(self, broker_name: str, method: str, request: Any,
                         broker_id: int | None = None) -> Any:
        """``method`` on the group's master, else on each slave in turn (or only on member
        ``broker_id``). NotFound from a member that answered is final."""
        members = await self._group_members(broker_name)
        if broker_id is not None:
            members = [t for t in members if t.broker_id == broker_id]
        if not members:
            member = f" id {broker_id}" if broker_id is not None else ""
            raise NotFoundError(f"broker {broker_name!r}{member}"
                                + " is not registered with the NameServer")
        last: PocketMQError | None = None
        for target in members:
            try:
                return await self.call(target.addr, method, request)
            except (NotFoundError, InvalidArgumentError):
                raise
            except PocketMQError as exc:
                last = exc
        assert last is not None
        raise last

    async def get_message(self, msg_id: str, *, topic: str | None = None,
                          broker_id: int | None = None) -> ReceivedMessage:
        """The message with ``msg_id``: an offset message id (store host + commit log offset,
        read directly from that broker group: its master, else a slave; ``broker_id`` picks the
        member) or a unique client message id, looked up in the index of ``topic``, or without
        it in every topic of every broker group."""
        msg_id = msg_id.strip()
        target: BrokerTarget | None = None
        offset = -1
        try:
            (ip, port), offset = parse_offset_msg_id(msg_id)
        except RecordError:
            pass
        else:
            addr = f"{ip}:{port}"
            target = next((t for t in await self.brokers() if t.addr == addr), None)
        if target is not None:
            try:
                reply = await self._ask_group(
                    target.broker_name, "MessageQuery/ViewMessage",
                    broker_pb2.ViewMessageRequest(commit_log_offset=offset), broker_id)
                return from_message_ext(reply.message, target.broker_name)
            except NotFoundError:
                if topic is None:
                    raise
        elif offset >= 0:
            # Its master is not registered (down, or being replaced): a slave holds the same
            # record, which names the master that stored it.
            orphan = await self._view_on_orphans(addr, offset, broker_id)
            if orphan is not None:
                return orphan
        if topic is None:
            found = await self._find_unique_anywhere(msg_id, broker_id)
            if not found.messages:
                detail = "".join(f"; {name}: {e}" for name, e in sorted(found.errors.items()))
                raise NotFoundError(f"no message with id {msg_id!r}: not the offset message id of a "
                                    f"registered broker, nor a unique message id in any topic{detail}")
            return found.messages[0]
        found = await self.find_messages(topic, msg_id, limit=1, unique=True)
        if not found.messages:
            detail = "".join(f"; {name}: {e}" for name, e in sorted(found.errors.items()))
            raise NotFoundError(f"no message with id {msg_id!r} in topic {topic!r}{detail}")
        return found.messages[0]

    async def _find_unique_anywhere(self, msg_id: str, broker_id: int | None) -> KeyQueryResult:
        """The messages with unique id ``msg_id`` in any topic: every broker group is asked (its
        master, else a slave, or member ``broker_id``) to probe its index once per topic."""
        request = broker_pb2.QueryMessageRequest(key=msg_id, unique_key=True, max_num=1)
        names = sorted({t.broker_name for t in await self.brokers()})

        messages, errors = await self._query_groups(names, request, broker_id)
        messages.sort(key=lambda m: (m.queue.topic.startswith(("%RETRY%", "%DLQ%")), -m.store_timestamp))
        return KeyQueryResult(messages, errors)

    async def _query_groups(self, names: list[str], request: broker_pb2.QueryMessageRequest,
                            broker_id: int | None = None,
                            ) -> tuple[list[ReceivedMessage], dict[str, PocketMQError]]:
        """``request`` asked of every broker group in ``names`` at once: the messages found, and
        the groups that failed with their errors (other failures are raised)."""

        async def one(name: str) -> list[ReceivedMessage]:
            reply = await self._ask_group(name, "MessageQuery/QueryMessage", request, broker_id)
            return [from_message_ext(m, name) for m in reply.messages]

        results = await asyncio.gather(*(one(n) for n in names), return_exceptions=True)
        messages: list[ReceivedMessage] = []
        errors: dict[str, PocketMQError] = {}
        for name, r in zip(names, results, strict=True):
            if isinstance(r, PocketMQError):
                errors[name] = r
            elif isinstance(r, BaseException):
                raise r
            else:
                messages.extend(r)
        return messages, errors

    async def _view_on_orphans(self, store_addr: str, offset: int,
                               broker_id: int | None) -> ReceivedMessage | None:
        """The record at ``offset`` stored by ``store_addr``, read from the broker groups that
        have no registered master (each asked through one of its members)."""
        targets = await self.brokers()
        with_master = {t.broker_name for t in targets if t.is_master}
        names = sorted({t.broker_name for t in targets} - with_master)
        request = broker_pb2.ViewMessageRequest(commit_log_offset=offset)

        async def one(name: str) -> ReceivedMessage | None:
            try:
                reply = await self._ask_group(name, "MessageQuery/ViewMessage", request, broker_id)
            except PocketMQError:
                return None
            return from_message_ext(reply.message, name) if reply.message.store_host == store_addr else None

        return next((m for m in await asyncio.gather(*(one(n) for n in names)) if m is not None), None)

    async def find_messages(self, topic: str, key: str, since: Since | None = None,
                            until: Since | None = None, limit: int = 64, *,
                            unique: bool = False) -> KeyQueryResult:
        """Messages of ``topic`` whose business key (KEYS) or unique message id is ``key``
        (``unique=True``: only the unique id), stored within ``[since, until]``; every broker
        group of the topic is asked (master, else a slave), answers merged newest first, at
        most ``limit``."""
        if not key:
            raise InvalidArgumentError("key must not be empty")
        if not 0 < limit <= 1000:
            raise InvalidArgumentError(f"limit must be 1..1000, got {limit}")
        begin, end = to_epoch_ms(since, 0), to_epoch_ms(until, 0)
        if end and end < begin:
            raise InvalidArgumentError("until is before since")
        route = await self.route(topic)
        request = broker_pb2.QueryMessageRequest(topic=topic, key=key, begin_timestamp_ms=begin,
                                                 end_timestamp_ms=end, max_num=limit, unique_key=unique)
        messages, errors = await self._query_groups(sorted(route.brokers), request)
        messages.sort(key=lambda m: (m.store_timestamp, m.queue.broker_name, m.commit_log_offset),
                      reverse=True)
        return KeyQueryResult(messages[:limit], errors)

    async def browse(self, topic: str, queue: int = 0, *, broker_name: str | None = None,
                     from_offset: int | None = None, from_time: Since | None = None,
                     limit: int = 32) -> BrowsePage:
        """One page of queue ``queue`` of ``topic`` on ``broker_name`` (default: the topic's
        only or first broker group): from ``from_offset`` (default: the oldest retained) or
        from the first message stored at or after ``from_time``. Page on with
        ``from_offset=page.next_offset``."""
        if from_offset is not None and from_time is not None:
            raise InvalidArgumentError("give from_offset or from_time, not both")
        if not 0 < limit <= 256:
            raise InvalidArgumentError(f"limit must be 1..256, got {limit}")
        route = await self.route(topic)
        names = sorted(route.brokers)
        if broker_name is None:
            broker_name = names[0]
        elif broker_name not in route.brokers:
            raise NotFoundError(f"topic {topic!r} has no queues on broker {broker_name!r} "
                                f"(it has: {', '.join(names)})")
        request = broker_pb2.BrowseMessagesRequest(
            topic=topic, queue_id=queue, queue_offset=from_offset or 0,
            from_timestamp_ms=to_epoch_ms(from_time, 0) if from_time is not None else 0, max_num=limit)
        reply = await self._ask_group(broker_name, "MessageQuery/BrowseMessages", request)
        return BrowsePage(MessageQueue(topic, broker_name, queue),
                          [from_message_ext(m, broker_name) for m in reply.messages],
                          int(reply.next_queue_offset), int(reply.min_offset), int(reply.max_offset))

    async def browse_queues(self, topic: str) -> Sequence[MessageQueue]:
        """The readable queues of ``topic`` (what :meth:`browse` can page through)."""
        route = await self.route(topic)
        return route.read_queues()
