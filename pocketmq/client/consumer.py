"""Consumers (clustering mode): :class:`AsyncConsumer` (asyncio) and :class:`Consumer` (blocking,
a thin wrapper).

The members of a consumer group share the queues of the topics they subscribe to:

* every member heartbeats to every broker of those topics (masters and slaves) with its
  subscriptions; a broker drops a member silent for longer than its channel expiry, and a
  member that closes unregisters at once;
* every ``rebalance_interval`` each member reads the group's member list from a broker and
  takes its share of the topic's readable queues (:func:`~pocketmq.client.allocate.allocate_averagely`:
  sorted members, sorted queues, contiguous blocks differing by at most one), so members agree
  without talking to each other;
* each owned queue is followed with a ``PullMessageStream`` (``raw_records``: batch after batch
  as they are stored, the broker waiting at the end of the queue) from the master of its broker
  group, or long-polled with ``PullMessage`` when broker calls are relayed by a NameServer;
  when the master cannot be reached the queue is read from a slave, and the master is probed
  every ``master_retry_interval`` and used again when it answers;
* a queue's consumer offset is the offset of its first message not yet processed: a message
  counts as processed when the handler returned for it (or, with the iterator, when the next
  message is requested or :meth:`AsyncConsumer.commit` is called). Offsets are committed to the
  broker every ``commit_interval``, when a queue moves to another member and on close, so a
  crash re-delivers at most what was not committed: at-least-once delivery.

A handler that raises for a message does not hold up its queue: the message is sent back to the
group's retry topic ``%RETRY%<group>`` (which the consumer subscribes to) with the delay level of
its reconsume count, and after ``max_reconsume_times`` to ``%DLQ%<group>``
(:mod:`pocketmq.client.redelivery`). With ``send_back=False``, or when the send-back fails, the
handler gets the message again in place (backing off up to 5 s) up to ``max_reconsume_times``
times before it is dead-lettered. Messages of one queue are handled one at a time and
in order; different queues are handled concurrently.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import inspect
import logging
import operator
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from types import TracebackType
from typing import Any

import grpc

from pocketmq.broker.v1 import broker_pb2
from pocketmq.client import loop as _loop
from pocketmq.client.allocate import allocate_averagely
from pocketmq.client.message import Message, MessageQueue, ReceivedMessage, decode_records, from_message_ext
from pocketmq.client.producer import AsyncProducer, namesrv_from_env
from pocketmq.client.redelivery import Redelivery, retry_topic
from pocketmq.client.routes import BrokerGroup, RouteCache, TopicRoute
from pocketmq.client.tags import TagFilter, parse_subscription
from pocketmq.client.transport import BrokerCaller, ChannelPool, NamesrvClient, RelayMode
from pocketmq.errors import (
    ClientClosedError,
    ConnectionFailedError,
    InvalidArgumentError,
    NoRouteError,
    NotFoundError,
    PocketMQError,
    RequestCancelledError,
    RequestTimeoutError,
    UnimplementedError,
    from_rpc_error,
)

log = logging.getLogger("pocketmq.client")

__all__ = ["AsyncConsumer", "ConsumeFrom", "Consumer", "MessageHandler"]

#: Errors after which a pull moves to another broker of the group.
_UNREACHABLE = (ConnectionFailedError, RequestTimeoutError, RequestCancelledError)
MessageHandler = Callable[[ReceivedMessage], "Awaitable[object] | object"]
DLQ_PREFIX = "%DLQ%"
#: Pull statuses whose reply _accept() applies.
_ACCEPTED = frozenset({broker_pb2.FOUND, broker_pb2.NO_NEW_MSG, broker_pb2.NO_MATCHED_MSG})
_QUEUE_OFFSET = operator.attrgetter("queue_offset")


class ConsumeFrom(enum.Enum):
    """Where a group starts reading a queue it has no committed offset for."""

    #: New messages only (the queue's max offset when the group first reads it).
    LAST_OFFSET = "last"
    #: Everything still stored (the queue's min offset).
    FIRST_OFFSET = "first"
    #: Messages stored at or after ``consume_timestamp``.
    TIMESTAMP = "timestamp"


def default_client_id() -> str:
    return f"{socket.gethostname()}@{os.getpid()}@{uuid.uuid4().hex[:8]}"


class _ProcessQueue:
    """State of one owned queue: where to pull next, what is delivered but not yet processed,
    what was committed."""

    __slots__ = ("buffer", "committed", "consume_task", "dropped", "inflight", "initialized", "last_addr",
                 "next_offset", "pull_task", "queue", "started", "suggested_id")

    def __init__(self, queue: MessageQueue, buffer_batches: int) -> None:
        self.queue = queue
        self.next_offset = -1
        self.committed = -1
        self.initialized = False
        #: Set once the starting offset is decided and recorded on the broker.
        self.started = asyncio.Event()
        self.dropped = False
        #: Offsets delivered to the application and not processed yet, ascending.
        self.inflight: collections.deque[int] = collections.deque()
        self.buffer: asyncio.Queue[list[ReceivedMessage] | None] = asyncio.Queue(buffer_batches)
        self.pull_task: asyncio.Task[None] | None = None
        self.consume_task: asyncio.Task[None] | None = None
        #: A slave the master suggested reading from (0 = the master).
        self.suggested_id = 0
        #: The broker the last pull answered from.
        self.last_addr = ""

    def commit_offset(self) -> int:
        """The offset to commit: the first unprocessed message, or where the next pull starts."""
        return self.inflight[0] if self.inflight else self.next_offset

    def ack(self, offset: int) -> None:
        inflight = self.inflight
        while inflight and inflight[0] <= offset:
            inflight.popleft()


class AsyncConsumer:
    """A member of a consumer group (asyncio).

    Either give a handler::

        consumer = AsyncConsumer("my-group", "ns:9876")
        consumer.subscribe("orders", "created || paid")
        await consumer.start(handler)       # async def handler(msg: ReceivedMessage) -> None
        ...
        await consumer.close()

    or iterate::

        async with AsyncConsumer("my-group", "ns:9876") as consumer:
            consumer.subscribe("orders")
            async for msg in consumer:
                ...

    Args:
        group: consumer group name.
        namesrv: NameServer address(es); default ``$POCKETMQ_NAMESRV`` or 127.0.0.1:9876.
        client_id: this member's id (default ``host@pid@random``); ids order the allocation.
        consume_from / consume_timestamp: where to start a queue the group never committed
            (``consume_timestamp`` in seconds since the epoch; default half an hour ago).
        pull_batch_size: messages per pull.
        long_poll_timeout: how long a pull waits at the broker for new messages (seconds).
        heartbeat_interval / rebalance_interval / commit_interval: periods in seconds.
        buffer_batches: pulled batches buffered per queue (per consumer with the iterator).
        max_reconsume_times: handler attempts per message before it goes to ``%DLQ%<group>``.
        master_retry_interval: while reading from a slave, how often to try the master again.
        relay: ``"relay"`` makes every broker call through a NameServer (see AsyncProducer).
        send_back: send failed messages to ``%RETRY%<group>`` with backoff (default) instead of
            retrying them in place.
    """

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        *,
        client_id: str | None = None,
        consume_from: ConsumeFrom | str = ConsumeFrom.LAST_OFFSET,
        consume_timestamp: float | None = None,
        pull_batch_size: int = 32,
        long_poll_timeout: float = 15.0,
        heartbeat_interval: float = 10.0,
        rebalance_interval: float = 5.0,
        commit_interval: float = 5.0,
        buffer_batches: int = 4,
        max_reconsume_times: int = 16,
        master_retry_interval: float = 5.0,
        request_timeout: float = 5.0,
        route_refresh_interval: float = 30.0,
        relay: RelayMode = "direct",
        send_back: bool = True,
    ) -> None:
        if not group:
            raise InvalidArgumentError("a consumer group name is required")
        if not 1 <= pull_batch_size <= 4096:
            raise InvalidArgumentError("pull_batch_size must be 1..4096")
        for name, value in (("long_poll_timeout", long_poll_timeout),
                            ("heartbeat_interval", heartbeat_interval),
                            ("rebalance_interval", rebalance_interval), ("commit_interval", commit_interval),
                            ("request_timeout", request_timeout)):
            if value <= 0:
                raise InvalidArgumentError(f"{name} must be > 0")
        self.group = group
        self.namesrv_addrs = namesrv_from_env(namesrv)
        self.client_id = client_id or default_client_id()
        self.consume_from = ConsumeFrom(consume_from)
        self.consume_timestamp_ms = int(
            (consume_timestamp if consume_timestamp is not None else time.time() - 1800) * 1000)
        self.pull_batch_size = pull_batch_size
        self.long_poll_timeout = long_poll_timeout
        self.heartbeat_interval = heartbeat_interval
        self.rebalance_interval = rebalance_interval
        self.commit_interval = commit_interval
        self.buffer_batches = max(1, buffer_batches)
        self.max_reconsume_times = max_reconsume_times
        self.master_retry_interval = master_retry_interval
        self.request_timeout = request_timeout
        self._route_refresh_interval = route_refresh_interval
        self._relay: RelayMode = relay
        self._subs: dict[str, TagFilter] = {}
        self._pqs: dict[MessageQueue, _ProcessQueue] = {}
        self._master_down: dict[str, float] = {}
        self._handler: MessageHandler | None = None
        #: Iterator mode: pulled batches of every owned queue, each with its queue's state.
        self._ready: asyncio.Queue[tuple[_ProcessQueue, list[ReceivedMessage]] | None] | None = None
        #: The rest of the batch receive() is handing out, and its queue.
        self._current: collections.deque[ReceivedMessage] = collections.deque()
        self._current_pq: _ProcessQueue | None = None
        #: The message receive() returned last (processed once receive() is called again) and its
        #: queue.
        self._last_yielded: ReceivedMessage | None = None
        self._last_pq: _ProcessQueue | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._rebalance_lock: asyncio.Lock | None = None
        self._rebalance_wakeup: asyncio.Event | None = None
        self._dlq: AsyncProducer | None = None
        #: Handler mode: failed messages go to %RETRY%<group> with backoff (send_back=False:
        #: retried in place, blocking their queue).
        self._redelivery = Redelivery(self.namesrv_addrs, group, max_reconsume_times, relay=relay) \
            if send_back else None
        #: Pull with PullMessageStream (direct connections); PullMessage when relayed, or after
        #: a broker answered UNIMPLEMENTED.
        self._stream_pulls = True
        self._started = False
        self._closed = False
        self.consumed = 0
        self._pool: ChannelPool
        self._namesrv: NamesrvClient
        self._routes: RouteCache
        self._caller: BrokerCaller

    # -- subscriptions --------------------------------------------------------------------------

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Consume ``topic``'s messages whose tag matches ``expression`` (``"*"`` or
        ``"a || b"``). May be called before or after :meth:`start`."""
        if not topic:
            raise InvalidArgumentError("topic must not be empty")
        self._subs[topic] = parse_subscription(expression)
        if self._rebalance_wakeup is not None:
            self._rebalance_wakeup.set()

    def unsubscribe(self, topic: str) -> None:
        self._subs.pop(topic, None)
        if self._rebalance_wakeup is not None:
            self._rebalance_wakeup.set()

    @property
    def subscriptions(self) -> dict[str, str]:
        return {t: f.expression for t, f in self._subs.items()}

    def assignment(self) -> frozenset[MessageQueue]:
        """The queues this member owns right now."""
        return frozenset(q for q, pq in self._pqs.items() if not pq.dropped)

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self, handler: MessageHandler | None = None) -> None:
        """Join the group. With ``handler`` every message is passed to it (awaited when it returns
        an awaitable); without, read messages by iterating (``async for``) or :meth:`receive`."""
        if self._closed:
            raise ClientClosedError("consumer is closed")
        if self._started:
            raise ClientClosedError("consumer is already started")
        if not self._subs:
            raise InvalidArgumentError("subscribe to at least one topic before start()")
        self._handler = handler
        if handler is None:
            self._ready = asyncio.Queue(self.buffer_batches * 4)
        elif self._redelivery is not None and retry_topic(self.group) not in self._subs:
            self.subscribe(retry_topic(self.group))
        self._pool = ChannelPool()
        self._namesrv = NamesrvClient(self.namesrv_addrs, self._pool, timeout=self.request_timeout)
        self._routes = RouteCache(self._namesrv, self._route_refresh_interval)
        self._caller = BrokerCaller(self._pool, self._namesrv, self._relay)
        self._rebalance_lock = asyncio.Lock()
        self._rebalance_wakeup = asyncio.Event()
        self._routes.add_listener(lambda _topic, _route: self._wake_rebalance())
        self._started = True
        self._routes.start()
        await self._heartbeat_all()
        await self.rebalance()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._heartbeat_loop(), name="pocketmq-heartbeat"),
            loop.create_task(self._rebalance_loop(), name="pocketmq-rebalance"),
            loop.create_task(self._commit_loop(), name="pocketmq-commit"),
        ]
        log.info("consumer started", extra={"group": self.group, "client_id": self.client_id,
                                            "topics": ",".join(sorted(self._subs))})

    async def close(self, timeout: float = 10.0) -> None:  # noqa: ASYNC109
        """Leave the group: stop pulling, let handlers finish the message they are on (up to
        ``timeout``), commit offsets, unregister from the brokers."""
        if self._closed:
            return
        self._closed = True
        if not self._started:
            return
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        pqs = list(self._pqs.values())
        self._pqs.clear()
        await asyncio.gather(*(self._drop(pq, timeout) for pq in pqs))
        if self._ready is not None:
            with contextlib.suppress(asyncio.QueueFull):
                self._ready.put_nowait(None)
        await self._unregister_all()
        if self._dlq is not None:
            await self._dlq.close()
        if self._redelivery is not None:
            await self._redelivery.close()
        await self._routes.close()
        await self._pool.close()
        log.info("consumer closed", extra={"group": self.group, "client_id": self.client_id})

    async def __aenter__(self) -> AsyncConsumer:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    def _check_started(self) -> None:
        if self._closed:
            raise ClientClosedError("consumer is closed")
        if not self._started:
            raise ClientClosedError("consumer is not started")

    # -- iterator face --------------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[ReceivedMessage]:
        return self

    async def __anext__(self) -> ReceivedMessage:
        if not self._started and not self._closed:
            await self.start()
        msg = await self.receive(None)
        if msg is None:
            raise StopAsyncIteration
        return msg

    async def receive(self, timeout: float | None = None) -> ReceivedMessage | None:  # noqa: ASYNC109
        """The next message (iterator mode), or None after ``timeout`` seconds / on close. The
        message returned before counts as processed from now on."""
        if self._closed:
            return None
        ready = self._ready
        if ready is None:
            self._check_started()
            raise InvalidArgumentError("receive() is for consumers started without a handler")
        last = self._last_yielded
        if last is not None:  # _ack_last(), inlined: once per message
            self._last_yielded = None
            acked = self._last_pq
            self._last_pq = None
            if acked is not None:
                inflight, offset = acked.inflight, last.queue_offset
                while inflight and inflight[0] <= offset:
                    inflight.popleft()
        current = self._current
        deadline: float | None = None
        while True:
            if current:
                pq = self._current_pq
                assert pq is not None
                if not pq.dropped:
                    msg = current.popleft()
                    self._last_yielded = msg
                    self._last_pq = pq
                    self.consumed += 1
                    return msg
                current.clear()  # the queue moved to another member: it re-delivers these
            if self._closed:
                return None
            if ready.empty():
                if deadline is None and timeout is not None:
                    deadline = time.monotonic() + timeout
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                try:
                    item = await asyncio.wait_for(ready.get(), remaining)
                except TimeoutError:
                    return None
            else:
                item = ready.get_nowait()
            if item is None:
                return None
            self._current_pq, batch = item
            current.extend(batch)

    def _ack_last(self) -> None:
        msg, pq = self._last_yielded, self._last_pq
        self._last_yielded = self._last_pq = None
        if msg is not None and pq is not None:
            pq.ack(msg.queue_offset)

    async def commit(self) -> None:
        """Count every message received so far as processed and commit offsets now."""
        self._check_started()
        self._ack_last()
        await self._commit_all()

    # -- membership -----------------------------------------------------------------------------

    def _heartbeat_request(self) -> broker_pb2.ConsumerHeartbeatRequest:
        return broker_pb2.ConsumerHeartbeatRequest(
            consumer_group=self.group, client_id=self.client_id,
            subscriptions=[broker_pb2.Subscription(topic=t, expression=f.expression)
                           for t, f in sorted(self._subs.items())])

    async def _broker_addrs(self) -> set[str]:
        addrs: set[str] = set()
        for topic in list(self._subs):
            try:
                route = await self._routes.get(topic)
            except PocketMQError as exc:
                log.debug("no route for heartbeat", extra={"topic": topic, "error": str(exc)})
                continue
            addrs.update(route.all_addrs())
        return addrs

    async def _heartbeat_all(self) -> None:
        request = self._heartbeat_request()

        async def one(addr: str) -> None:
            try:
                await self._caller.call(addr, "ConsumerHeartbeat", request, self.request_timeout)
            except PocketMQError as exc:
                log.debug("heartbeat failed", extra={"broker": addr, "error": str(exc)})

        await asyncio.gather(*(one(a) for a in await self._broker_addrs()))

    async def _unregister_all(self) -> None:
        request = broker_pb2.UnregisterConsumerRequest(consumer_group=self.group, client_id=self.client_id)

        async def one(addr: str) -> None:
            with contextlib.suppress(PocketMQError):
                await self._caller.call(addr, "UnregisterConsumer", request, min(2.0, self.request_timeout))

        addrs: set[str] = set()
        for topic in self._routes.topics():
            route = self._routes.cached(topic)
            if route is not None:
                addrs.update(route.all_addrs())
        await asyncio.gather(*(one(a) for a in addrs))

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            await self._heartbeat_all()

    async def members(self, topic: str, route: TopicRoute | None = None) -> list[str]:
        """The group's members as a broker of ``topic`` reports them (the first broker group by
        name that answers, master first), sorted."""
        route = route or await self._routes.get(topic)
        request = broker_pb2.GetConsumerListRequest(consumer_group=self.group)
        last: PocketMQError | None = None
        for name in sorted(route.brokers):
            for addr in self._ordered_addrs(route, name):
                try:
                    reply = await self._caller.call(addr, "GetConsumerList", request, self.request_timeout)
                except NotFoundError:
                    return []
                except PocketMQError as exc:
                    last = exc
                    if isinstance(exc, _UNREACHABLE):
                        self._mark_master_down(route, name, addr)
                    continue
                return sorted(reply.client_ids)
        raise last or NoRouteError(f"topic {topic!r} has no broker to ask for members")

    # -- rebalance ------------------------------------------------------------------------------

    def _wake_rebalance(self) -> None:
        if self._rebalance_wakeup is not None:
            self._rebalance_wakeup.set()

    async def _rebalance_loop(self) -> None:
        assert self._rebalance_wakeup is not None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._rebalance_wakeup.wait(), self.rebalance_interval)
            self._rebalance_wakeup.clear()
            try:
                await self.rebalance()
            except Exception:
                log.exception("rebalance failed", extra={"group": self.group})

    async def rebalance(self) -> None:
        """Recompute this member's queues now (also runs every ``rebalance_interval``)."""
        self._check_started()
        assert self._rebalance_lock is not None
        async with self._rebalance_lock:
            await self._rebalance()

    async def _rebalance(self) -> None:
        keep_topics: set[str] = set()
        desired: set[MessageQueue] = set()
        for topic in list(self._subs):
            try:
                route = await self._routes.get(topic)
                queues = route.read_queues()
                members = await self.members(topic, route)
            except NoRouteError as exc:
                log.warning("topic has no route; releasing its queues",
                            extra={"topic": topic, "error": str(exc)})
                continue
            except PocketMQError as exc:
                log.warning("rebalance: cannot read the group's members; keeping the current queues",
                            extra={"topic": topic, "error": str(exc)})
                keep_topics.add(topic)
                continue
            if self.client_id not in members:
                # The broker has not seen our heartbeat yet: announce ourselves, decide next round.
                await self._heartbeat_all()
                keep_topics.add(topic)
                continue
            desired.update(allocate_averagely(self.client_id, members, queues))
        current = set(self._pqs)
        removed = [q for q in current if q not in desired and q.topic not in keep_topics]
        added = sorted(q for q in desired if q not in current)
        if not removed and not added:
            return
        drops = []
        for queue in removed:
            pq = self._pqs.pop(queue)
            drops.append(self._drop(pq, timeout=10.0))
        await asyncio.gather(*drops)
        for queue in added:
            self._add(queue)
        log.info("rebalanced", extra={
            "group": self.group, "client_id": self.client_id, "added": ",".join(map(str, added)),
            "removed": ",".join(map(str, sorted(removed))), "owned": len(self._pqs)})

    def _add(self, queue: MessageQueue) -> None:
        pq = _ProcessQueue(queue, self.buffer_batches)
        self._pqs[queue] = pq
        loop = asyncio.get_running_loop()
        pq.pull_task = loop.create_task(self._pull_loop(pq), name=f"pocketmq-pull-{queue}")
        if self._handler is not None:
            pq.consume_task = loop.create_task(self._consume_loop(pq, self._handler),
                                               name=f"pocketmq-consume-{queue}")

    async def _drop(self, pq: _ProcessQueue, timeout: float) -> None:  # noqa: ASYNC109
        """Stop a queue: no more pulls, the handler finishes its current message, offsets are
        committed."""
        pq.dropped = True
        if pq.pull_task is not None:
            if not pq.started.is_set():
                # Let a starting offset being decided right now reach the broker, so the next
                # owner starts where this member would have (bounded: the broker may be away).
                started = asyncio.ensure_future(pq.started.wait())
                await asyncio.wait((started, pq.pull_task), timeout=min(timeout, self.request_timeout),
                                   return_when=asyncio.FIRST_COMPLETED)
                started.cancel()
            pq.pull_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pq.pull_task
        if pq.consume_task is not None:
            with contextlib.suppress(asyncio.QueueFull):
                pq.buffer.put_nowait(None)
            try:
                await asyncio.wait_for(asyncio.shield(pq.consume_task), timeout)
            except TimeoutError:
                log.warning("handler still busy after the queue was released", extra={"queue": str(pq.queue)})
                pq.consume_task.cancel()
            except asyncio.CancelledError:
                pq.consume_task.cancel()
                raise
        if self._last_pq is pq:
            # Not processed for sure: the next owner re-delivers it.
            self._last_yielded = self._last_pq = None
        if pq.initialized:
            await self._commit(pq)

    # -- pulling --------------------------------------------------------------------------------

    def _mark_master_down(self, route: TopicRoute, broker_name: str, addr: str) -> None:
        if route.master_addr(broker_name) == addr and broker_name not in self._master_down:
            log.warning("master unreachable; reading from slaves",
                        extra={"broker": broker_name, "addr": addr})
            self._master_down[broker_name] = time.monotonic() + self.master_retry_interval

    def _ordered_addrs(self, route: TopicRoute, broker_name: str, suggested_id: int = 0) -> list[str]:
        """Addresses of a broker group to read from, best first: a suggested slave, the master
        unless it failed recently, the slaves, and the master last."""
        group = route.group(broker_name)
        if group is None:
            return []
        master = group.master_addr
        slaves = group.slave_addrs
        order: list[str] = []
        if suggested_id and suggested_id in group.addrs:
            order.append(group.addrs[suggested_id])
        master_ok = broker_name not in self._master_down
        if master is not None and master_ok:
            order.append(master)
        order.extend(slaves)
        if master is not None and not master_ok:
            order.append(master)
        return list(dict.fromkeys(order))

    async def _maybe_restore_master(self, route: TopicRoute, broker_name: str) -> None:
        """While reading from a slave: probe the master every master_retry_interval."""
        until = self._master_down.get(broker_name)
        if until is None or time.monotonic() < until:
            return
        master = route.master_addr(broker_name)
        if master is None:
            self._master_down[broker_name] = time.monotonic() + self.master_retry_interval
            return
        try:
            await self._caller.call(master, "GetBrokerStatus", broker_pb2.GetBrokerStatusRequest(),
                                    min(1.0, self.request_timeout))
        except PocketMQError:
            self._master_down[broker_name] = time.monotonic() + self.master_retry_interval
            return
        if self._master_down.pop(broker_name, None) is not None:
            log.info("master reachable again; reading from it", extra={"broker": broker_name, "addr": master})

    async def _call_group(self, pq: _ProcessQueue, method: str, request: Any, timeout: float,  # noqa: ASYNC109
                          master_only: bool = False) -> tuple[Any, str]:
        """Call the broker group of ``pq``: the best address first, the next one when it cannot
        be reached. Returns (reply, address)."""
        topic, broker_name = pq.queue.topic, pq.queue.broker_name
        route = await self._routes.get(topic)
        await self._maybe_restore_master(route, broker_name)
        addrs = self._ordered_addrs(route, broker_name, 0 if master_only else pq.suggested_id)
        if master_only:
            master = route.master_addr(broker_name)
            addrs = [a for a in addrs if a == master] + [a for a in addrs if a != master]
        if not addrs:
            await self._routes.get(topic, refresh=True)
            raise NoRouteError(f"broker group {broker_name!r} of topic {topic!r} is not in the route")
        last: PocketMQError | None = None
        for addr in addrs:
            try:
                return await self._caller.call(addr, method, request, timeout), addr
            except _UNREACHABLE as exc:
                last = exc
                self._mark_master_down(route, broker_name, addr)
                if pq.suggested_id:
                    pq.suggested_id = 0
        assert last is not None
        raise last

    async def _initial_offset(self, pq: _ProcessQueue) -> int:
        q = pq.queue
        try:
            reply, _ = await self._call_group(
                pq, "QueryConsumerOffset",
                broker_pb2.QueryConsumerOffsetRequest(consumer_group=self.group, topic=q.topic,
                                                      queue_id=q.queue_id),
                self.request_timeout, master_only=True)
            pq.committed = int(reply.offset)
            return int(reply.offset)
        except NotFoundError:
            pass
        request = broker_pb2.QueueRequest(topic=q.topic, queue_id=q.queue_id)
        if self.consume_from is ConsumeFrom.FIRST_OFFSET:
            reply, _ = await self._call_group(pq, "GetMinOffset", request, self.request_timeout)
        elif self.consume_from is ConsumeFrom.LAST_OFFSET:
            reply, _ = await self._call_group(pq, "GetMaxOffset", request, self.request_timeout)
        else:
            reply, _ = await self._call_group(
                pq, "SearchOffset", broker_pb2.SearchOffsetRequest(
                    topic=q.topic, queue_id=q.queue_id, timestamp_ms=self.consume_timestamp_ms),
                self.request_timeout)
        offset = int(reply.offset)
        pq.next_offset = offset
        pq.initialized = True
        # Remember the decision, so a member taking the queue over starts here too.
        await self._commit(pq, force=True)
        return offset

    async def _pull_loop(self, pq: _ProcessQueue) -> None:
        q = pq.queue
        backoff = 0.2
        while not pq.dropped:
            try:
                if not pq.initialized:
                    pq.next_offset = await self._initial_offset(pq)
                    pq.initialized = True
                    pq.started.set()
                    log.debug("queue starts", extra={"queue": str(q), "offset": pq.next_offset})
                if self._stream_pulls and self._caller.mode == "direct":
                    await self._pull_stream(pq)
                else:
                    await self._pull_once(pq)
                backoff = 0.2
            except asyncio.CancelledError:
                raise
            except PocketMQError as exc:
                if pq.dropped:
                    return
                log.warning("pull failed", extra={"queue": str(q), "error": str(exc), "retry_s": backoff})
                if not isinstance(exc, _UNREACHABLE):
                    with contextlib.suppress(PocketMQError):
                        await self._routes.get(q.topic, refresh=True)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 3.0)
            except Exception:
                log.exception("pull loop error", extra={"queue": str(q)})
                await asyncio.sleep(1.0)

    def _pull_request(self, pq: _ProcessQueue, filt: TagFilter) -> broker_pb2.PullMessageRequest:
        """A pull from ``pq.next_offset`` that also commits the queue's offset when it moved."""
        q = pq.queue
        commit = pq.commit_offset()
        return broker_pb2.PullMessageRequest(
            consumer_group=self.group, topic=q.topic, queue_id=q.queue_id, queue_offset=pq.next_offset,
            max_msg_nums=self.pull_batch_size, subscription=filt.expression,
            suspend_timeout_ms=int(self.long_poll_timeout * 1000), raw_records=True,
            commit_offset=commit if commit > pq.committed else -1)

    async def _apply_reply(self, pq: _ProcessQueue, filt: TagFilter,
                           reply: broker_pb2.PullMessageResponse) -> bool:
        """Deliver what a pull reply (unary or streamed) found; False when its offset was
        illegal (the queue's offset was corrected: pull again from there)."""
        status = reply.status
        if status in _ACCEPTED:
            messages = self._accept(pq, filt, reply)
            if messages:
                await self._deliver(pq, messages)
        elif status == broker_pb2.OFFSET_ILLEGAL:
            await self._offset_illegal(pq, reply)
            return False
        else:
            await asyncio.sleep(0.2)
        return True

    def _accept(self, pq: _ProcessQueue, filt: TagFilter, reply: broker_pb2.PullMessageResponse
                ) -> list[ReceivedMessage]:
        """Apply a FOUND / NO_NEW_MSG / NO_MATCHED_MSG reply to ``pq``: advance its next offset
        and return the messages to deliver (now in flight)."""
        if reply.status != broker_pb2.FOUND:
            if reply.next_begin_offset > pq.next_offset:
                pq.next_offset = reply.next_begin_offset
            return []
        records = reply.records  # one copy out of the reply
        if records:
            messages = decode_records(records, pq.queue.broker_name)
        else:
            messages = [from_message_ext(m, pq.queue.broker_name) for m in reply.messages]
        if not filt.matches_all:
            messages = [m for m in messages if filt.matches(m.tags)]
        next_offset = pq.next_offset
        messages = [m for m in messages if m.queue_offset >= next_offset]
        pq.next_offset = max(next_offset, reply.next_begin_offset)
        if messages:
            pq.inflight.extend(map(_QUEUE_OFFSET, messages))
        return messages

    async def _deliver(self, pq: _ProcessQueue, messages: list[ReceivedMessage]) -> None:
        """Hand pulled messages to the handler task of the queue or to receive() (waits while
        their buffer is full)."""
        if self._handler is not None:
            await pq.buffer.put(messages)
        else:
            assert self._ready is not None
            await self._ready.put((pq, messages))

    async def _offset_illegal(self, pq: _ProcessQueue, reply: broker_pb2.PullMessageResponse) -> None:
        log.warning("offset illegal; moving on", extra={
            "queue": str(pq.queue), "offset": pq.next_offset, "next": reply.next_begin_offset,
            "remark": reply.remark})
        pq.next_offset = reply.next_begin_offset
        await self._commit(pq, force=True)

    async def _pull_once(self, pq: _ProcessQueue) -> None:
        """One PullMessage call (long polling): relayed brokers, and brokers without
        PullMessageStream."""
        q = pq.queue
        filt = self._subs.get(q.topic)
        if filt is None:
            await asyncio.sleep(0.1)
            return
        request = self._pull_request(pq, filt)
        commit = request.commit_offset
        reply, addr = await self._call_group(pq, "PullMessage", request,
                                             self.long_poll_timeout + self.request_timeout)
        if pq.dropped:
            return
        pq.last_addr = addr
        route = self._routes.cached(q.topic)
        if commit > pq.committed and route is not None and route.master_addr(q.broker_name) == addr:
            pq.committed = commit
        pq.suggested_id = int(reply.suggest_which_broker_id)
        await self._apply_reply(pq, filt, reply)

    async def _pull_stream(self, pq: _ProcessQueue) -> None:
        """Follow the queue with PullMessageStream calls: the broker sends batch after batch
        without waiting for a request each time (the cost of a unary call per batch is what
        limits a consumer), and waits at the end of the queue as a long poll does. The broker is
        chosen as for PullMessage (a suggested slave, the master, then the slaves); an
        unreachable one is left for the next at once."""
        q = pq.queue
        filt = self._subs.get(q.topic)
        if filt is None:
            await asyncio.sleep(0.1)
            return
        route = await self._routes.get(q.topic)
        await self._maybe_restore_master(route, q.broker_name)
        addrs = self._ordered_addrs(route, q.broker_name, pq.suggested_id)
        group = route.group(q.broker_name)
        if not addrs or group is None:
            await self._routes.get(q.topic, refresh=True)
            raise NoRouteError(f"broker group {q.broker_name!r} of topic {q.topic!r} is not in the route")
        last: PocketMQError | None = None
        for addr in addrs:
            try:
                await self._follow(pq, filt, addr, group)
                return
            except UnimplementedError:
                log.info("broker has no PullMessageStream; using PullMessage", extra={"broker": addr})
                self._stream_pulls = False
                return
            except _UNREACHABLE as exc:
                if pq.dropped:
                    return
                last = exc
                self._mark_master_down(route, q.broker_name, addr)
                pq.suggested_id = 0
        assert last is not None
        raise last

    async def _follow(self, pq: _ProcessQueue, filt: TagFilter, addr: str, group: BrokerGroup) -> None:
        """One PullMessageStream from ``addr``, until the queue is dropped, its subscription
        changes, the master suggests a slave, a slave has answered and been read for
        master_retry_interval (then the broker is chosen again: the master may be back; as with
        PullMessage, where an idle slave's long poll holds the next choice back until it ends) or
        the broker ends the stream. No reply for long_poll_timeout + request_timeout (the broker
        sends an empty one every long_poll_timeout) counts as a timeout."""
        q = pq.queue
        request = self._pull_request(pq, filt)
        commit = request.commit_offset
        from_master = addr == group.master_addr
        call = self._caller.stream(addr, "PullMessageStream", request)
        loop = asyncio.get_running_loop()
        idle_limit = self.long_poll_timeout + self.request_timeout
        end_at = None if from_master else loop.time() + self.master_retry_interval
        answered = False
        try:
            async with asyncio.timeout(None) as timer:
                while True:
                    deadline = loop.time() + idle_limit
                    timer.reschedule(deadline if end_at is None or not answered else min(deadline, end_at))
                    try:
                        reply = await call.read()
                    except grpc.aio.AioRpcError as exc:
                        raise from_rpc_error(exc, addr, "PullMessageStream") from None
                    except grpc.aio.UsageError as exc:  # the channel was closed under the call
                        raise ClientClosedError(f"PullMessageStream: {exc}", address=addr) from None
                    timer.reschedule(None)
                    if reply is grpc.aio.EOF:
                        if not answered:  # ended at once (a broker shutting down): not in a loop
                            await asyncio.sleep(0.2)
                        return
                    if pq.dropped:
                        return
                    answered = True
                    pq.last_addr = addr
                    if commit > pq.committed and from_master:
                        pq.committed = commit  # the broker committed it when the stream started
                    if not await self._apply_reply(pq, filt, reply):
                        return
                        return
                    suggested = int(reply.suggest_which_broker_id)
                    if from_master and suggested and suggested in group.addrs:
                        pq.suggested_id = suggested  # the master suggests reading from a slave
                        return
                    if self._subs.get(q.topic) is not filt or pq.dropped:
                        return
        except TimeoutError:
            if end_at is not None and answered and loop.time() >= end_at:
                pq.suggested_id = 0  # ask the master again
                return
            raise RequestTimeoutError(f"PullMessageStream: no reply within {idle_limit:g} s",
                                      address=addr) from None
        finally:
            call.cancel()

    # -- handling -------------------------------------------------------------------------------

    async def _consume_loop(self, pq: _ProcessQueue, handler: MessageHandler) -> None:
        isawaitable = inspect.isawaitable
        while True:
            batch = await pq.buffer.get()
            if batch is None or pq.dropped:
                return
            for msg in batch:
                if pq.dropped:
                    return
                try:
                    result = handler(msg)
                    if result is not None and isawaitable(result):
                        await result
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    if self._redelivery is not None and await self._redelivery.send_back(msg):
                        log.warning("handler failed; message sent back", extra={
                            "queue": str(pq.queue), "offset": msg.queue_offset, "error": repr(exc)})
                    elif not await self._retry(pq, handler, msg, exc):
                        return
                pq.ack(msg.queue_offset)
                self.consumed += 1

    async def _retry(self, pq: _ProcessQueue, handler: MessageHandler, msg: ReceivedMessage,
                     exc: Exception) -> bool:
        """The handler raised ``exc`` for ``msg``: run it again (backing off) until it succeeds
        or the message is dead-lettered (True); False when the queue was dropped meanwhile."""
        attempt = 0
        while True:
            attempt += 1
            log.warning("handler failed", extra={"queue": str(pq.queue), "offset": msg.queue_offset,
                                                 "attempt": attempt, "error": repr(exc)})
            if attempt > self.max_reconsume_times and await self._dead_letter(msg):
                return True
            await asyncio.sleep(min(5.0, 0.1 * 2 ** min(attempt, 6)))
            if pq.dropped:
                return False
            try:
                result = handler(msg)
                if inspect.isawaitable(result):
                    await result
                return True
            except asyncio.CancelledError:
                raise
            except Exception as again:
                exc = again

    async def _dead_letter(self, msg: ReceivedMessage) -> bool:
        topic = DLQ_PREFIX + self.group
        try:
            if self._dlq is None:
                self._dlq = AsyncProducer(self.namesrv_addrs, group=self.group, relay=self._relay)
                await self._dlq.start()
            props = dict(msg.properties)
            props.update({"ORIGIN_TOPIC": msg.topic, "ORIGIN_MESSAGE_ID": msg.msg_id,
                          "RECONSUME_TIME": str(self.max_reconsume_times)})
            for key in ("TAGS", "KEYS", "REAL_TOPIC", "REAL_QID", "DELAY", "PGROUP"):
                props.pop(key, None)
            result = await self._dlq.send(Message(topic, msg.body, tags=msg.tags, keys=msg.keys,
                                                  properties=props))
        except PocketMQError as exc:
            log.error("cannot send to the dead-letter topic; retrying the handler", extra={
                "topic": topic, "msg_id": msg.msg_id, "error": str(exc)})
            return False
        log.warning("message sent to the dead-letter topic", extra={
            "topic": topic, "msg_id": msg.msg_id, "dlq_msg_id": result.msg_id})
        return True

    # -- offsets --------------------------------------------------------------------------------

    async def _commit(self, pq: _ProcessQueue, force: bool = False) -> None:
        offset = pq.commit_offset()
        if offset < 0 or (offset == pq.committed and not force):
            return
        q = pq.queue
        request = broker_pb2.UpdateConsumerOffsetRequest(
            consumer_group=self.group, topic=q.topic, queue_id=q.queue_id, offset=offset)
        try:
            await self._call_group(pq, "UpdateConsumerOffset", request, self.request_timeout,
                                   master_only=True)
        except PocketMQError as exc:
            log.warning("offset commit failed", extra={"queue": str(q), "offset": offset, "error": str(exc)})
            return
        pq.committed = max(pq.committed, offset) if not force else offset

    async def _commit_all(self) -> None:
        await asyncio.gather(*(self._commit(pq) for pq in list(self._pqs.values()) if pq.initialized))

    async def _commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self.commit_interval)
            await self._commit_all()

    def pull_sources(self) -> dict[MessageQueue, str]:
        """The broker address each owned queue was last read from (master, or a slave)."""
        return {q: pq.last_addr for q, pq in self._pqs.items() if pq.last_addr}

    def offsets(self) -> dict[MessageQueue, int]:
        """The offset each owned queue would commit now."""
        return {q: pq.commit_offset() for q, pq in self._pqs.items() if pq.initialized}


class Consumer:
    """Blocking face of :class:`AsyncConsumer` (same arguments). Iterate::

        with Consumer("my-group", "ns:9876") as consumer:
            consumer.subscribe("orders", "created || paid")
            for msg in consumer:       # blocks; a message counts as processed when the next is asked for
                ...

    or ``consumer.start(handler)`` with a plain function, run in worker threads (one message
    of a queue at a time)."""

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        *,
        client_id: str | None = None,
        consume_from: ConsumeFrom | str = ConsumeFrom.LAST_OFFSET,
        consume_timestamp: float | None = None,
        pull_batch_size: int = 32,
        long_poll_timeout: float = 15.0,
        heartbeat_interval: float = 10.0,
        rebalance_interval: float = 5.0,
        commit_interval: float = 5.0,
        buffer_batches: int = 4,
        max_reconsume_times: int = 16,
        master_retry_interval: float = 5.0,
        request_timeout: float = 5.0,
        route_refresh_interval: float = 30.0,
        relay: RelayMode = "direct",
    ) -> None:
        self._async = AsyncConsumer(
            group, namesrv, client_id=client_id, consume_from=consume_from,
            consume_timestamp=consume_timestamp, pull_batch_size=pull_batch_size,
            long_poll_timeout=long_poll_timeout, heartbeat_interval=heartbeat_interval,
            rebalance_interval=rebalance_interval, commit_interval=commit_interval,
            buffer_batches=buffer_batches, max_reconsume_times=max_reconsume_times,
            master_retry_interval=master_retry_interval, request_timeout=request_timeout,
            route_refresh_interval=route_refresh_interval, relay=relay)

    @property
    def async_consumer(self) -> AsyncConsumer:
        return self._async

    @property
    def client_id(self) -> str:
        return self._async.client_id

    def subscribe(self, topic: str, expression: str = "*") -> None:
        _loop.run(_call(self._async.subscribe, topic, expression))

    def start(self, handler: Callable[[ReceivedMessage], object] | None = None) -> Consumer:
        wrapped: MessageHandler | None = None
        if handler is not None:
            def wrapped(msg: ReceivedMessage) -> Awaitable[object]:
                return asyncio.to_thread(handler, msg)
        _loop.run(self._async.start(wrapped))
        return self

    def close(self, timeout: float = 10.0) -> None:
        _loop.run(self._async.close(timeout))

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def receive(self, timeout: float | None = None) -> ReceivedMessage | None:
        if not self._async._started:
            self.start()
        return _loop.run(self._async.receive(timeout))

    def __iter__(self) -> Iterator[ReceivedMessage]:
        while True:
            msg = self.receive(None)
            if msg is None:
                return
            yield msg

    def commit(self) -> None:
        _loop.run(self._async.commit())

    def assignment(self) -> frozenset[MessageQueue]:
        return _loop.run(_call(self._async.assignment))

    def rebalance(self) -> None:
        _loop.run(self._async.rebalance())


async def _call(func: Callable[..., Any], *args: Any) -> Any:
    """Run a plain method on the client loop (the async objects are not thread-safe)."""
    return func(*args)
