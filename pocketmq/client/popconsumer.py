"""POP consumption for PocketMQ's own client: a SimpleConsumer-like API (RocketMQ 5 semantics).

``receive`` pops messages from the masters of the subscribed topics; each stays invisible to
the group until it is acked or its invisible time runs out, then the broker hands it out again
(from the group's retry topic, with the next delivery attempt) and after the group's maximum
attempts moves it to ``%DLQ%<group>``. Consumers of one group share the messages without
rebalancing. Calls are batched: one ``PopMessages`` per broker round, one ``AckMessages`` per
broker for any number of messages (see docs/pop.md).

    async with PopConsumer("my-group", "127.0.0.1:9876") as consumer:
        consumer.subscribe("orders")
        messages = await consumer.receive(32, invisible_time=30)
        await consumer.ack(messages)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

import grpc

from pocketmq.broker.v1 import broker_pb2
from pocketmq.client.core import ClientCore
from pocketmq.client.message import ReceivedMessage, decode_records, from_message_ext
from pocketmq.client.producer import namesrv_from_env
from pocketmq.client.redelivery import RETRY_PREFIX, retry_topic
from pocketmq.client.tags import parse_subscription
from pocketmq.client.transport import RelayMode
from pocketmq.errors import (
    ClientClosedError,
    ConnectionFailedError,
    InvalidArgumentError,
    NoRouteError,
    PocketMQError,
    RequestTimeoutError,
    UnimplementedError,
    from_rpc_error,
    from_status_name,
)
from pocketmq.wire.auth import Credentials
from pocketmq.wire.fast import DecodeHint
from pocketmq.wire.record import PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RETRY_TOPIC
from pocketmq.wire.tls import ClientTls
from pocketmq.wire.tls import resolve as resolve_tls

__all__ = ["PopConsumer", "PopReceipt", "PoppedMessage"]

MIN_INVISIBLE_S = 1.0
MAX_INVISIBLE_S = 12 * 3600.0
MAX_BATCH = 4096


@dataclasses.dataclass(frozen=True)
class PopReceipt:
    """Where a popped message is in flight: its broker, the topic and queue it was read from
    (the group's retry topic for a retry), the pop's checkpoint id and the queue offset."""

    broker_addr: str
    topic: str
    queue_id: int
    checkpoint_id: int
    queue_offset: int
    deadline_ms: int


@dataclasses.dataclass(frozen=True)
class PoppedMessage:
    message: ReceivedMessage
    receipt: PopReceipt
    #: 1 on the first delivery, +1 on every redelivery.
    delivery_attempt: int

    @property
    def topic(self) -> str:
        """The topic the message was sent to (also for a retry)."""
        topic = self.message.topic
        if topic.startswith(RETRY_PREFIX):
            return self.message.properties.get(PROPERTY_RETRY_TOPIC) or topic
        return topic

    @property
    def body(self) -> bytes:
        return self.message.body

    @property
    def msg_id(self) -> str:
        """The message id of the message as first stored (the same on every delivery)."""
        if self.message.topic.startswith(RETRY_PREFIX):
            return self.message.properties.get(PROPERTY_ORIGIN_MESSAGE_ID) or self.message.msg_id
        return self.message.msg_id


def _by_checkpoint(messages: Iterable[PoppedMessage]) -> dict[str, dict[tuple[str, int, int], list[int]]]:
    out: dict[str, dict[tuple[str, int, int], list[int]]] = {}
    for m in messages:
        r = m.receipt
        out.setdefault(r.broker_addr, {}).setdefault((r.topic, r.queue_id, r.checkpoint_id), []).append(
            r.queue_offset)
    return out


#: (broker addr, topic, queue id, checkpoint id, queue offset): one popped message's receipt.
_Key = tuple[str, str, int, int, int]


class _PopStream:
    """One ``PopStream`` to a broker: requests written as they come (one write at a time),
    replies matched to them by request id."""

    def __init__(self, call: Any, addr: str) -> None:
        self.call = call
        self.addr = addr
        self._pending: dict[int, asyncio.Future[broker_pb2.PopStreamResponse]] = {}
        self._next = 0
        self._write_lock = asyncio.Lock()
        self._failure: PocketMQError | None = None
        self._reader = asyncio.create_task(self._read(), name=f"pop-stream {addr}")

    @property
    def broken(self) -> bool:
        return self._failure is not None

    async def request(self, timeout: float, *, ack: broker_pb2.AckMessagesRequest | None = None,  # noqa: ASYNC109
                      pop: broker_pb2.PopMessagesRequest | None = None) -> broker_pb2.PopStreamResponse:
        if self._failure is not None:
            raise self._failure
        self._next += 1
        rid = self._next
        future: asyncio.Future[broker_pb2.PopStreamResponse] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        try:
            async with self._write_lock:
                await self.call.write(broker_pb2.PopStreamRequest(request_id=rid, ack=ack, pop=pop))
            reply = await asyncio.wait_for(future, timeout)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, self.addr, "PopStream") from None
        except TimeoutError:
            raise RequestTimeoutError(f"PopStream: no reply within {timeout:g} s",
                                      address=self.addr) from None
        finally:
            self._pending.pop(rid, None)
        if reply.error_code:
            raise from_status_name(reply.error_code, reply.error, self.addr, "PopStream")
        return reply

    async def _read(self) -> None:
        failure: PocketMQError = ConnectionFailedError("PopStream ended", address=self.addr)
        try:
            while True:
                reply = await self.call.read()
                if reply is grpc.aio.EOF:
                    break
                future = self._pending.get(reply.request_id)
                if future is not None and not future.done():
                    future.set_result(reply)
        except grpc.RpcError as exc:
            failure = from_rpc_error(exc, self.addr, "PopStream")
        finally:
            self._failure = failure
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(failure)

    async def close(self) -> None:
        self.call.cancel()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


def _receipts(batches: Mapping[tuple[str, int, int], list[int]]) -> list[broker_pb2.PopReceipt]:
    return [broker_pb2.PopReceipt(topic=t, queue_id=q, checkpoint_id=c, queue_offsets=offs)
            for (t, q, c), offs in batches.items()]


class PopConsumer:
    """Asyncio POP consumer of one group (build and use it on one event loop)."""

    def __init__(self, group: str, namesrv: str | Sequence[str] | None = None, *,
                 client_id: str | None = None, invisible_time: float = 30.0, long_poll_timeout: float = 5.0,
                 request_timeout: float = 5.0, relay: RelayMode = "direct",
                 tls: ClientTls | bool | None = None, credentials: Credentials | None = None) -> None:
        """``tls``, ``credentials``: see :class:`~pocketmq.client.producer.AsyncProducer`."""
        if not group:
            raise InvalidArgumentError("a consumer group name is required")
        self._check_invisible(invisible_time)
        if not 0 <= long_poll_timeout <= 60:
            raise InvalidArgumentError("long_poll_timeout must be 0..60 s")
        self.group = group
        self.namesrv_addrs = namesrv_from_env(namesrv)
        self.client_id = client_id or f"{socket.gethostname()}@{os.getpid()}@pop"
        self.invisible_time = invisible_time
        self.long_poll_timeout = long_poll_timeout
        self.request_timeout = request_timeout
        self.relay: RelayMode = relay
        self.tls = resolve_tls(tls)
        self._credentials = credentials
        self._subscriptions: dict[str, str] = {}
        self._core: ClientCore | None = None
        self._closed = False
        self._turn = 0
        #: One PopStream per broker (direct connections); brokers without one get unary calls.
        self._streams: dict[str, _PopStream] = {}
        self._no_stream: set[str] = set()
        #: Whether the application reads the fields the decoder defers (then popped batches are
        #: decoded whole at once).
        self._decode_hint = DecodeHint()

    @staticmethod
    def _check_invisible(seconds: float) -> None:
        if not MIN_INVISIBLE_S <= seconds <= MAX_INVISIBLE_S:
            raise InvalidArgumentError(f"invisible time must be {MIN_INVISIBLE_S:g}..{MAX_INVISIBLE_S:g} s")

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Receive ``topic``'s messages whose tag matches ``expression`` ("*", "a || b")."""
        parse_subscription(expression)
        self._subscriptions[topic] = expression

    async def start(self) -> None:
        if self._closed:
            raise ClientClosedError("the consumer is closed")
        if self._core is None:
            self._core = ClientCore(self.namesrv_addrs, timeout=self.request_timeout, relay=self.relay,
                                    tls=self.tls or False, credentials=self._credentials)
            self._core.start_route_refresh()

    async def close(self) -> None:
        self._closed = True
        streams, self._streams = list(self._streams.values()), {}
        for stream in streams:
            await stream.close()
        if self._core is not None:
            await self._core.close()
            self._core = None

    async def __aenter__(self) -> PopConsumer:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    def _live_core(self) -> ClientCore:
        if self._core is None:
            raise ClientClosedError("the consumer is not started (or closed)")
        return self._core

    async def _targets(self) -> list[tuple[str, str]]:
        """(topic, master address) of every subscribed topic's readable broker groups."""
        core = self._live_core()
        out: list[tuple[str, str]] = []
        for topic in self._subscriptions:
            route = await core.routes.get(topic)
            masters = {q.broker_name for q in route.read_queues()}
            out.extend((topic, addr) for name in sorted(masters)
                       if (addr := route.master_addr(name)) is not None)
        if not out:
            raise NoRouteError(f"no readable master for {sorted(self._subscriptions)}")
        return out

    async def receive(self, max_messages: int = 32, invisible_time: float | None = None,
                      wait: float | None = None) -> list[PoppedMessage]:
        """Pop up to ``max_messages``, invisible to the group for ``invisible_time`` seconds
        (default: the consumer's). Waits up to ``wait`` s (default: ``long_poll_timeout``) when
        nothing is there; returns [] then."""
        return (await self.ack_and_receive((), max_messages, invisible_time, wait))[1]

    async def ack_and_receive(self, done: Iterable[PoppedMessage], max_messages: int = 32,
                              invisible_time: float | None = None,
                              wait: float | None = None) -> tuple[list[PoppedMessage], list[PoppedMessage]]:
        """:meth:`ack` ``done``, then :meth:`receive`, the ack riding on the pop request to the
        same broker (one round trip instead of two). Returns (messages that could not be acked,
        messages received); the acks are done (durably) when this returns."""
        if not 1 <= max_messages <= MAX_BATCH:
            raise InvalidArgumentError(f"max_messages must be 1..{MAX_BATCH}")
        invisible = self.invisible_time if invisible_time is None else invisible_time
        self._check_invisible(invisible)
        wait_s = self.long_poll_timeout if wait is None else wait
        if not self._subscriptions:
            raise InvalidArgumentError("subscribe to a topic first")
        done = list(done)
        acks = {addr: broker_pb2.AckMessagesRequest(consumer_group=self.group, receipts=_receipts(batches))
                for addr, batches in _by_checkpoint(done).items()}
        failed: set[_Key] = set()
        targets = await self._targets()
        self._turn += 1
        start = self._turn % len(targets)
        order = targets[start:] + targets[:start]
        out: list[PoppedMessage] = []
        for i, (topic, addr) in enumerate(order):
            # Only the last broker asked long-polls, so a busy one is never kept waiting for.
            poll = wait_s if i == len(order) - 1 and not out else 0.0
            out.extend(await self._pop(addr, topic, max_messages - len(out), invisible, poll,
                                       acks.pop(addr, None), failed))
            if len(out) >= max_messages:
                break
        for addr, request in acks.items():  # brokers not asked for messages this time
            self._failed(addr, (await self._call(addr, self.request_timeout, ack=request)).ack, failed)
        return self._match(done, failed), out

    @staticmethod
    def _failed(addr: str, reply: broker_pb2.AckMessagesResponse, into: set[_Key]) -> None:
        for f in reply.failed:
            into.update((addr, f.topic, f.queue_id, f.checkpoint_id, o) for o in f.queue_offsets)

    @staticmethod
    def _match(messages: list[PoppedMessage], failed: set[_Key]) -> list[PoppedMessage]:
        if not failed:
            return []
        return [m for m in messages if (m.receipt.broker_addr, m.receipt.topic, m.receipt.queue_id,
                                        m.receipt.checkpoint_id, m.receipt.queue_offset) in failed]

    def _stream(self, addr: str) -> _PopStream | None:
        core = self._live_core()
        if core.caller.relayed or addr in self._no_stream:
            return None
        stream = self._streams.get(addr)
        if stream is None or stream.broken:
            stream = self._streams[addr] = _PopStream(core.pool.broker_stub(addr, "Broker").PopStream(), addr)
        return stream

    async def _call(self, addr: str, timeout: float, *, ack: broker_pb2.AckMessagesRequest | None = None,  # noqa: ASYNC109
                    pop: broker_pb2.PopMessagesRequest | None = None) -> broker_pb2.PopStreamResponse:
        """An ack and/or a pop on the broker's PopStream, else (relayed, or a broker without
        it) as unary calls."""
        stream = self._stream(addr)
        if stream is not None:
            try:
                return await stream.request(timeout, ack=ack, pop=pop)
            except UnimplementedError:
                self._no_stream.add(addr)
        core = self._live_core()
        reply = broker_pb2.PopStreamResponse()
        if ack is not None:
            reply.ack.CopyFrom(await core.caller.call(addr, "AckMessages", ack, timeout))
        if pop is not None:
            reply.pop.CopyFrom(await core.caller.call(addr, "PopMessages", pop, timeout))
        return reply

    async def _pop(self, addr: str, topic: str, n: int, invisible: float, poll: float,
                   ack: broker_pb2.AckMessagesRequest | None = None,
                   failed: set[_Key] | None = None) -> list[PoppedMessage]:
        request = broker_pb2.PopMessagesRequest(
            consumer_group=self.group, topic=topic, queue_id=-1, max_msg_nums=n,
            subscription=self._subscriptions[topic], invisible_time_ms=int(invisible * 1000),
            poll_time_ms=int(poll * 1000), client_id=self.client_id)
        both = await self._call(addr, self.request_timeout + poll, ack=ack, pop=request)
        if ack is not None and failed is not None:
            self._failed(addr, both.ack, failed)
        reply = both.pop
        out: list[PoppedMessage] = []
        for b in reply.batches:
            if b.records:
                messages = decode_records(b.records, reply.broker_name, self._decode_hint)
            else:
                messages = [from_message_ext(m, reply.broker_name) for m in b.messages]
            attempts = list(b.attempts) or [m.reconsume_times + 1 for m in messages]
            if not len(messages) == len(attempts) == len(b.queue_offsets):
                raise PocketMQError(f"PopMessages reply from {addr}: {len(messages)} messages for "
                                    f"{len(b.queue_offsets)} offsets")
            out.extend(PoppedMessage(m, PopReceipt(addr, b.topic, b.queue_id, b.checkpoint_id, offset,
                                                   b.deadline_ms), attempt)
                       for m, offset, attempt in zip(messages, b.queue_offsets, attempts, strict=True))
        return out

    async def ack(self, messages: Iterable[PoppedMessage]) -> list[PoppedMessage]:
        """Ack messages (one call per broker); returns those that could not be acked any more
        (their invisible time ran out and they were handed out again, or were acked before)."""
        messages = list(messages)
        failed: set[_Key] = set()
        for addr, batches in _by_checkpoint(messages).items():
            request = broker_pb2.AckMessagesRequest(consumer_group=self.group, receipts=_receipts(batches))
            self._failed(addr, (await self._call(addr, self.request_timeout, ack=request)).ack, failed)
        return self._match(messages, failed)

    async def change_invisible_time(self, messages: Iterable[PoppedMessage],
                                    invisible_time: float) -> list[PoppedMessage]:
        """Make messages invisible for ``invisible_time`` s from now (0: visible again at once);
        returns them with their new receipts (the old ones no longer ack), leaving out those no
        longer in flight."""
        if not 0 <= invisible_time <= MAX_INVISIBLE_S:
            raise InvalidArgumentError(f"invisible time must be 0..{MAX_INVISIBLE_S:g} s")
        core = self._live_core()
        messages = list(messages)
        renewed: dict[tuple[str, str, int, int], tuple[int, int]] = {}
        for addr, batches in _by_checkpoint(messages).items():
            reply: broker_pb2.ChangeInvisibleTimeResponse = await core.caller.call(
                addr, "ChangeInvisibleTime", broker_pb2.ChangeInvisibleTimeRequest(
                    consumer_group=self.group, receipts=_receipts(batches),
                    invisible_time_ms=int(invisible_time * 1000)), self.request_timeout)
            # A message is in flight under one checkpoint at a time: its offset names it.
            for b in reply.batches:
                for o in b.queue_offsets:
                    renewed[(addr, b.topic, b.queue_id, o)] = (b.checkpoint_id, b.deadline_ms)
        out = []
        for m in messages:
            r = m.receipt
            new = renewed.get((r.broker_addr, r.topic, r.queue_id, r.queue_offset))
            if new is not None:
                out.append(dataclasses.replace(m, receipt=dataclasses.replace(
                    r, checkpoint_id=new[0], deadline_ms=new[1])))
        return out

    @property
    def retry_topic(self) -> str:
        return retry_topic(self.group)
