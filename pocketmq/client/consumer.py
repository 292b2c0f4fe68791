"""Consumers (clustering mode): :class:`AsyncConsumer` (asyncio) and :class:`Consumer` (blocking,
a thin wrapper).

The members of a consumer group share the queues of the topics they subscribe to:

* every member heartbeats to every broker of those topics (masters and slaves) with its
  subscriptions, and every ``rebalance_interval`` takes its share of the topics' readable
  queues (:mod:`pocketmq.client.coordinator`);
* each owned queue is followed with a ``PullMessageStream`` from the master of its broker
  group, or long-polled with ``PullMessage`` when broker calls are relayed by a NameServer;
  when the master cannot be reached the queue is read from a slave, and the master is probed
  every ``master_retry_interval`` and used again when it answers (:mod:`pocketmq.client.fetcher`,
  :mod:`pocketmq.client.failover`);
* a queue's consumer offset is the offset of its first message not yet processed: a message
  counts as processed when the handler returned for it (or, with the iterator, when the next
  message is requested or :meth:`AsyncConsumer.commit` is called). Offsets are committed to the
  broker every ``commit_interval``, when a queue moves to another member and on close, so a
  crash re-delivers at most what was not committed: at-least-once delivery
  (:mod:`pocketmq.client.offsets`).

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
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from types import TracebackType
from typing import Any

from pocketmq.client import loop as _loop
from pocketmq.client.coordinator import GroupCoordinator
from pocketmq.client.core import ClientCore
from pocketmq.client.failover import Failover
from pocketmq.client.fetcher import Fetcher
from pocketmq.client.message import MessageQueue, ReceivedMessage
from pocketmq.client.offsets import OffsetTracker
from pocketmq.client.producer import namesrv_from_env
from pocketmq.client.redelivery import DLQ_PREFIX, MessageHandler, Redelivery, retry_topic
from pocketmq.client.routes import TopicRoute
from pocketmq.client.subscription import (
    Batch,
    BatchQueue,
    ConsumeFrom,
    ConsumerSettings,
    ProcessQueue,
    SubscriptionState,
    built,
)
from pocketmq.client.tags import parse_subscription
from pocketmq.client.transport import RelayMode
from pocketmq.errors import ClientClosedError, InvalidArgumentError
from pocketmq.wire.auth import Credentials
from pocketmq.wire.tls import ClientTls
from pocketmq.wire.tls import resolve as resolve_tls

log = logging.getLogger("pocketmq.client")

__all__ = ["DLQ_PREFIX", "AsyncConsumer", "ConsumeFrom", "Consumer", "MessageHandler"]


#: Messages of a pull reply the iterator's buffer is sized for: a reply once held at most 32
#: (maxTransferCountOnMessageInMemory); raw-record replies now hold up to ``pull_batch_size``.
_SIZED_FOR = 32


def ready_capacity(buffer_batches: int, pull_batch_size: int) -> int:
    """Pulled batches the iterator's buffer holds: ``4 * buffer_batches`` batches of 32 messages'
    worth, in batches of ``pull_batch_size`` (at least 2: one being read, one arriving). Counted
    in messages, not replies: more decoded messages waiting only fall out of the CPU caches
    before they are read."""
    return max(2, -(-4 * buffer_batches * _SIZED_FOR // pull_batch_size))


def default_client_id() -> str:
    return f"{socket.gethostname()}@{os.getpid()}@{uuid.uuid4().hex[:8]}"


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
        buffer_batches: pulled batches buffered per queue (per consumer with the iterator: about
            ``4 * buffer_batches`` batches of 32 messages, see :func:`ready_capacity`).
        max_reconsume_times: handler attempts per message before it goes to ``%DLQ%<group>``.
        master_retry_interval: while reading from a slave, how often to try the master again.
        relay: ``"relay"`` makes every broker call through a NameServer (see AsyncProducer).
        send_back: send failed messages to ``%RETRY%<group>`` with backoff (default) instead of
            retrying them in place, which holds up their queue.
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
        tls: ClientTls | bool | None = None,
        credentials: Credentials | None = None,
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
        self.tls = resolve_tls(tls)
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
        self._credentials = credentials
        self._state = SubscriptionState()
        self._subs = self._state.subs
        self._pqs = self._state.pqs
        self._handler: MessageHandler | None = None
        #: Iterator mode: pulled batches of every owned queue, each with its queue's state.
        self._ready: BatchQueue[tuple[ProcessQueue, Batch] | None] | None = None
        #: A receive() waiting for ``_ready`` to fill (woken by whoever fills it), the time it
        #: gives up and the timer that checks that time. The timer is not set again per wait: it
        #: is moved only to an earlier time, and when it fires late waits are re-armed (a wait per
        #: pulled batch is the common case; a timer per wait cost more than the wait itself).
        self._waiter: asyncio.Future[None] | None = None
        self._wait_until = 0.0
        self._wait_timer: asyncio.TimerHandle | None = None
        #: The rest of the batch receive() is handing out, and its queue.
        self._current: collections.deque[ReceivedMessage] = collections.deque()
        self._current_pq: ProcessQueue | None = None
        #: The pulled batch ``_current`` came from, kept while its messages are handed out: the
        #: fields the decoder deferred are then decoded for the whole batch at once when first read
        #: (:mod:`pocketmq.wire.fast`).
        self._current_batch: list[ReceivedMessage] = []
        #: The message receive() returned last (processed once receive() is called again) and its
        #: queue.
        self._last_yielded: ReceivedMessage | None = None
        self._last_pq: ProcessQueue | None = None
        self._tasks: list[asyncio.Task[None]] = []
        #: Pull with PullMessageStream where the broker has it (see Fetcher.stream_pulls).
        self._stream_pulls = True
        self._started = False
        self._closed = False
        #: Messages receive() handed out (the handler's are counted by Redelivery).
        self._consumed = 0
        self._redelivery: Redelivery | None = None
        self._send_back = send_back
        # Built in start() (they bind to the running loop).
        self._core: ClientCore
        self._offsets: OffsetTracker
        self._fetcher: Fetcher
        self._coordinator: GroupCoordinator

    @property
    def consumed(self) -> int:
        """Messages processed (handler mode) or handed out (iterator mode) so far."""
        return self._consumed + (self._redelivery.consumed if self._redelivery is not None else 0)

    # -- subscriptions --------------------------------------------------------------------------

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Consume ``topic``'s messages whose tag matches ``expression`` (``"*"`` or
        ``"a || b"``). May be called before or after :meth:`start`."""
        if not topic:
            raise InvalidArgumentError("topic must not be empty")
        self._subs[topic] = parse_subscription(expression)
        if self._started:
            self._coordinator.wake()

    def unsubscribe(self, topic: str) -> None:
        self._subs.pop(topic, None)
        if self._started:
            self._coordinator.wake()

    @property
    def subscriptions(self) -> dict[str, str]:
        return {t: f.expression for t, f in self._subs.items()}

    def assignment(self) -> frozenset[MessageQueue]:
        """The queues this member owns right now."""
        return self._state.assignment()

    # -- lifecycle ------------------------------------------------------------------------------

    def _settings(self) -> ConsumerSettings:
        return ConsumerSettings(
            group=self.group, client_id=self.client_id, consume_from=self.consume_from,
            consume_timestamp_ms=self.consume_timestamp_ms, pull_batch_size=self.pull_batch_size,
            long_poll_timeout=self.long_poll_timeout, heartbeat_interval=self.heartbeat_interval,
            rebalance_interval=self.rebalance_interval, commit_interval=self.commit_interval,
            buffer_batches=self.buffer_batches, max_reconsume_times=self.max_reconsume_times,
            master_retry_interval=self.master_retry_interval, request_timeout=self.request_timeout)

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
            self._ready = BatchQueue(ready_capacity(self.buffer_batches, self.pull_batch_size))
        else:
            self._redelivery = Redelivery(self.group, self.max_reconsume_times, self.namesrv_addrs,
                                          self._relay, send_back=self._send_back, tls=self.tls,
                                          credentials=self._credentials)
            if self._send_back and retry_topic(self.group) not in self._subs:
                self.subscribe(retry_topic(self.group))
        settings = self._settings()
        core = self._core = ClientCore(self.namesrv_addrs, timeout=self.request_timeout,
                                       route_refresh_interval=self._route_refresh_interval, relay=self._relay,
                                       tls=self.tls or False, credentials=self._credentials)
        failover = Failover(core.routes, core.caller, self.master_retry_interval, self.request_timeout)
        self._offsets = OffsetTracker(settings, core.caller, failover, self._state.reset_generations)
        self._fetcher = Fetcher(settings, self._state, core.routes, core.caller, failover, self._offsets,
                                self._deliver, self._offer, self._room, stream_pulls=self._stream_pulls)
        self._coordinator = GroupCoordinator(settings, self._state, core.routes, core.caller, failover,
                                             self._add, self._drop)
        self._state.on_reset = self._on_reset
        self._started = True
        core.start_route_refresh()
        await self._coordinator.heartbeat_all()
        await self._coordinator.rebalance()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._coordinator.heartbeat_loop(), name="pocketmq-heartbeat"),
            loop.create_task(self._coordinator.rebalance_loop(), name="pocketmq-rebalance"),
            loop.create_task(self._offsets.commit_loop(self._pqs), name="pocketmq-commit"),
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
            self._wake()
        if self._wait_timer is not None:
            self._wait_timer.cancel()
            self._wait_timer = None
        await self._coordinator.unregister_all()
        if self._redelivery is not None:
            await self._redelivery.close()
        await self._core.close()
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
                acked.ack(last.queue_offset)
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
                    self._consumed += 1
                    return msg
                current.clear()  # the queue moved to another member: it re-delivers these
            item = await self._next_batch(ready, timeout, deadline)
            if item is None:
                return None
            deadline = item[2]
            self._current_pq = item[0]
            self._current_batch = item[1]
            current.extend(item[1])

    async def receive_batch(self, max_messages: int | None = None,
                            timeout: float | None = None) -> list[ReceivedMessage]:  # noqa: ASYNC109
        """The next messages of one queue, in order, as they were pulled (at most
        ``max_messages``; all of one pull when None), or ``[]`` after ``timeout`` seconds / on
        close (iterator mode, like :meth:`receive`, with which it may be mixed). The messages
        returned before count as processed from now on. One call per pulled batch: what a
        consumer that handles messages in batches saves over a call per message."""
        if max_messages is not None and max_messages < 1:
            raise InvalidArgumentError("max_messages must be >= 1")
        if self._closed:
            return []
        ready = self._ready
        if ready is None:
            self._check_started()
            raise InvalidArgumentError("receive_batch() is for consumers started without a handler")
        self._ack_last()
        current = self._current
        deadline: float | None = None
        while True:
            if current:
                pq = self._current_pq
                assert pq is not None
                if not pq.dropped:
                    if max_messages is None or max_messages >= len(current):
                        batch = list(current)
                        current.clear()
                    else:
                        batch = [current.popleft() for _ in range(max_messages)]
                    return self._hand_out(pq, batch)
                current.clear()  # the queue moved to another member: it re-delivers these
            item = await self._next_batch(ready, timeout, deadline)
            if item is None:
                return []
            pq, batch, deadline = item
            if pq.dropped or not batch:
                continue
            if max_messages is None or max_messages >= len(batch):
                return self._hand_out(pq, batch)
            self._current_pq = pq
            self._current_batch = batch
            current.extend(batch[max_messages:])
            return self._hand_out(pq, batch[:max_messages])

    def _hand_out(self, pq: ProcessQueue, batch: list[ReceivedMessage]) -> list[ReceivedMessage]:
        """``batch`` (not empty) of ``pq`` goes to the application: its last message is the one
        acked (with all before it) at the next receive."""
        self._last_yielded = batch[-1]
        self._last_pq = pq
        self._consumed += len(batch)
        return batch

    async def _next_batch(self, ready: BatchQueue[tuple[ProcessQueue, Batch] | None],
                          timeout: float | None, deadline: float | None,  # noqa: ASYNC109
                          ) -> tuple[ProcessQueue, list[ReceivedMessage], float | None] | None:
        """The next pulled batch (waiting up to the deadline set from ``timeout`` on the first
        wait), with the deadline; None on timeout or close."""
        while ready.empty():
            if self._closed:
                return None
            loop = asyncio.get_running_loop()
            if deadline is None and timeout is not None:
                deadline = loop.time() + timeout
            if deadline is not None and deadline <= loop.time():
                return None
            if self._waiter is not None:  # another receive() waits: wait as the queue's getter
                try:
                    async with asyncio.timeout_at(deadline):
                        item = await ready.get()
                except TimeoutError:
                    return None
                return None if item is None else (item[0], built(item[1]), deadline)
            waiter = self._waiter = loop.create_future()
            if deadline is not None:
                self._wait_until = deadline
                timer = self._wait_timer
                if timer is None or timer.when() > deadline:
                    if timer is not None:
                        timer.cancel()
                    self._wait_timer = loop.call_at(deadline, self._wait_timer_fired)
            try:
                await waiter
            finally:
                if self._waiter is waiter:
                    self._waiter = None
            if deadline is not None and ready.empty() and loop.time() >= deadline:
                return None
        if self._closed:
            return None
        item = ready.get_nowait()
        if item is None:
            return None
        return item[0], built(item[1]), deadline

    def _wake(self) -> None:
        """``_ready`` has something (or the consumer closed): the waiting receive() goes on."""
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def _wait_timer_fired(self) -> None:
        self._wait_timer = None
        if self._waiter is None:
            return
        loop = asyncio.get_running_loop()
        if loop.time() >= self._wait_until:
            self._wake()
        else:
            self._wait_timer = loop.call_at(self._wait_until, self._wait_timer_fired)

    def _ack_last(self) -> None:
        msg, pq = self._last_yielded, self._last_pq
        self._last_yielded = self._last_pq = None
        if msg is not None and pq is not None:
            pq.ack(msg.queue_offset)

    async def commit(self) -> None:
        """Count every message received so far as processed and commit offsets now."""
        self._check_started()
        self._ack_last()
        await self._offsets.commit_all(self._pqs.values())

    # -- membership and owned queues -------------------------------------------------------------

    async def members(self, topic: str, route: TopicRoute | None = None) -> list[str]:
        """The group's members as a broker of ``topic`` reports them (the first broker group by
        name that answers, master first), sorted."""
        self._check_started()
        return await self._coordinator.members(topic, route)

    async def rebalance(self) -> None:
        """Recompute this member's queues now (also runs every ``rebalance_interval``)."""
        self._check_started()
        await self._coordinator.rebalance()

    def _add(self, queue: MessageQueue) -> None:
        pq = ProcessQueue(queue, self.buffer_batches)
        self._pqs[queue] = pq
        loop = asyncio.get_running_loop()
        pq.pull_task = loop.create_task(self._fetcher.pull_loop(pq), name=f"pocketmq-pull-{queue}")
        if self._handler is not None:
            assert self._redelivery is not None
            pq.consume_task = loop.create_task(self._redelivery.consume_loop(pq, self._handler),
                                               name=f"pocketmq-consume-{queue}")

    def _on_reset(self, topic: str) -> None:
        """An operator reset the group's offsets of ``topic``: re-read its owned queues."""
        if self._closed:
            return
        # Kept with the consumer's tasks (close() cancels them); resets are rare, finished ones
        # are dropped here.
        self._tasks = [t for t in self._tasks if not t.done()]
        self._tasks.append(asyncio.get_running_loop().create_task(
            self._coordinator.restart_topic(topic), name=f"pocketmq-reset-{topic}"))

    async def _drop(self, pq: ProcessQueue, timeout: float, commit: bool = True) -> None:  # noqa: ASYNC109
        """Stop a queue: no more pulls, the handler finishes its current message, offsets are
        committed (unless ``commit`` is False: the group's offsets were reset)."""
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
        if pq.initialized and commit:
            await self._offsets.commit(pq)

    def _room(self, pq: ProcessQueue) -> asyncio.Future[None] | None:
        """None if pulled messages of ``pq`` can be handed on now, else a future done when
        there may be room (see BatchQueue)."""
        if self._handler is not None:
            return pq.buffer.room()
        assert self._ready is not None
        return self._ready.room()

    def _offer(self, pq: ProcessQueue, messages: Batch) -> bool:
        """Hand pulled messages on as :meth:`_deliver` does if their buffer has room (False if
        not): no coroutine per pulled batch."""
        try:
            if self._handler is not None:  # (built by the handler's loop)
                pq.buffer.put_nowait(messages)
            else:
                assert self._ready is not None
                self._ready.put_nowait((pq, messages))
                self._wake()
        except asyncio.QueueFull:
            return False
        return True

    async def _deliver(self, pq: ProcessQueue, messages: Batch) -> None:
        """Hand pulled messages to the handler task of the queue or to receive() (waits while
        their buffer is full)."""
        if self._handler is not None:
            await pq.buffer.put(messages)
        else:
            assert self._ready is not None
            await self._ready.put((pq, messages))
            self._wake()

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
        tls: ClientTls | bool | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        self._async = AsyncConsumer(
            group, namesrv, client_id=client_id, consume_from=consume_from,
            consume_timestamp=consume_timestamp, pull_batch_size=pull_batch_size,
            long_poll_timeout=long_poll_timeout, heartbeat_interval=heartbeat_interval,
            rebalance_interval=rebalance_interval, commit_interval=commit_interval,
            buffer_batches=buffer_batches, max_reconsume_times=max_reconsume_times,
            master_retry_interval=master_retry_interval, request_timeout=request_timeout,
            route_refresh_interval=route_refresh_interval, relay=relay, tls=tls, credentials=credentials)

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

    def receive_batch(self, max_messages: int | None = None, timeout: float | None = None,
                      ) -> list[ReceivedMessage]:
        """See :meth:`AsyncConsumer.receive_batch`."""
        if not self._async._started:
            self.start()
        return _loop.run(self._async.receive_batch(max_messages, timeout))

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
