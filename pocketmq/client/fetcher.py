"""The fetcher: pulls the messages of a consumer's owned queues and hands them on.

Each owned queue is followed with a ``PullMessageStream`` (``raw_records``: batch after batch
as they are stored, the broker waiting at the end of the queue) from the master of its broker
group, or long-polled with ``PullMessage`` when broker calls are relayed by a NameServer or the
broker has no stream; when the master cannot be reached the queue is read from a slave
(:mod:`pocketmq.client.failover`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import operator
from collections.abc import Awaitable, Callable

from pocketmq.broker.v1 import broker_pb2
from pocketmq.client.failover import UNREACHABLE, Failover
from pocketmq.client.message import (
    ReceivedMessage,
    decode_pending_records,
    decode_records,
    from_message_ext,
)
from pocketmq.client.offsets import OffsetTracker
from pocketmq.client.routes import BrokerGroup, RouteCache
from pocketmq.client.subscription import Batch, ConsumerSettings, ProcessQueue, SubscriptionState
from pocketmq.client.tags import TagFilter
from pocketmq.client.transport import BrokerCaller
from pocketmq.errors import NoRouteError, PocketMQError, RequestTimeoutError, UnimplementedError
from pocketmq.wire.protoscan import Span

log = logging.getLogger("pocketmq.client")

__all__ = ["Fetcher"]

#: Pull statuses whose reply accept() applies.
_ACCEPTED = frozenset({broker_pb2.FOUND, broker_pb2.NO_NEW_MSG, broker_pb2.NO_MATCHED_MSG})
_QUEUE_OFFSET = operator.attrgetter("queue_offset")

Deliver = Callable[[ProcessQueue, Batch], Awaitable[None]]
Offer = Callable[[ProcessQueue, Batch], bool]
Room = Callable[[ProcessQueue], Awaitable[None] | None]


class Fetcher:
    """Pull loops of owned queues; ``offer(pq, messages)`` takes what they find if the
    consumer's buffer has room (False if not), ``deliver(pq, messages)`` waits for room;
    ``room(pq)`` is None when there is room, else something to await until there may be: a reply
    is decoded only then (what waits for the application is a few decoded batches, the rest
    stays raw)."""

    def __init__(self, settings: ConsumerSettings, state: SubscriptionState, routes: RouteCache,
                 caller: BrokerCaller, failover: Failover, offsets: OffsetTracker, deliver: Deliver,
                 offer: Offer, room: Room | None = None, *, stream_pulls: bool = True) -> None:
        self.settings = settings
        self.state = state
        self.routes = routes
        self.caller = caller
        self.failover = failover
        self.offsets = offsets
        self.deliver = deliver
        self.offer = offer
        self.room = room
        #: Pull with PullMessageStream (direct connections); PullMessage when relayed, or after
        #: a broker answered UNIMPLEMENTED.
        self.stream_pulls = stream_pulls

    async def pull_loop(self, pq: ProcessQueue) -> None:
        q = pq.queue
        backoff = 0.2
        while not pq.dropped:
            try:
                if not pq.initialized:
                    pq.next_offset = await self.offsets.initial_offset(pq)
                    pq.initialized = True
                    pq.started.set()
                    log.debug("queue starts", extra={"queue": str(q), "offset": pq.next_offset})
                if self.stream_pulls and self.caller.mode == "direct":
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
                if not isinstance(exc, UNREACHABLE):
                    with contextlib.suppress(PocketMQError):
                        await self.routes.get(q.topic, refresh=True)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 3.0)
            except Exception:
                log.exception("pull loop error", extra={"queue": str(q)})
                await asyncio.sleep(1.0)

    def _pull_request(self, pq: ProcessQueue, filt: TagFilter) -> broker_pb2.PullMessageRequest:
        """A pull from ``pq.next_offset`` that also commits the queue's offset when it moved."""
        q, s = pq.queue, self.settings
        return broker_pb2.PullMessageRequest(
            consumer_group=s.group, topic=q.topic, queue_id=q.queue_id, queue_offset=pq.next_offset,
            max_msg_nums=s.pull_batch_size, subscription=filt.expression,
            suspend_timeout_ms=int(s.long_poll_timeout * 1000), raw_records=True,
            commit_offset=self.offsets.pull_commit(pq),
            reset_generation=self.state.reset_generations.get(q.topic, 0))

    async def _apply_reply(self, pq: ProcessQueue, filt: TagFilter, reply: broker_pb2.PullMessageResponse,
                           timer: asyncio.Timeout | None = None, records: Span | None = None) -> bool:
        """Deliver what a pull reply (unary or streamed) found; False when its offset was
        illegal (the queue's offset was corrected: pull again from there). ``timer``, the
        stream's read timeout, is disarmed before anything here waits (a full buffer, a commit,
        a back-off): that is not the broker being silent. ``records``: the reply's records when
        they are not in its field (see :class:`~pocketmq.client.transport.PullStream`)."""
        status = reply.status
        if reply.reset_generation > self.state.reset_generations.get(pq.queue.topic, 0):
            self.state.learn_reset(pq.queue.topic, reply.reset_generation)  # restarts this queue
            return False
        if status in _ACCEPTED:
            if status == broker_pb2.FOUND and self.room is not None and (wait := self.room(pq)) is not None:
                if timer is not None:
                    timer.reschedule(None)
                await wait
                if pq.dropped:  # (its next owner reads these again)
                    return True
            messages = self.accept(pq, filt, reply, records)
            if messages and not self.offer(pq, messages):
                if timer is not None:
                    timer.reschedule(None)
                await self.deliver(pq, messages)
            return True
        if timer is not None:
            timer.reschedule(None)
        if status == broker_pb2.OFFSET_ILLEGAL:
            await self._offset_illegal(pq, reply)
            return False
        await asyncio.sleep(0.2)
        return True

    @staticmethod
    def accept(pq: ProcessQueue, filt: TagFilter, reply: broker_pb2.PullMessageResponse,
               records: Span | None = None) -> Batch:
        """Apply a FOUND / NO_NEW_MSG / NO_MATCHED_MSG reply to ``pq``: advance its next offset
        and return the messages to deliver (now in flight). Records of a subscription to every
        tag are checked now and built into messages when first asked for (see
        :class:`~pocketmq.wire.fast.Pending`); ``records`` are the reply's when not in its
        field."""
        if reply.status != broker_pb2.FOUND:
            if reply.next_begin_offset > pq.next_offset:
                pq.next_offset = reply.next_begin_offset
            return []
        data: bytes | Span = reply.records if records is None else records
        next_offset = pq.next_offset
        if data and filt.matches_all:
            pending = decode_pending_records(data, pq.queue.broker_name, pq.decode_hint)
            offsets = pending.queue_offsets
            if not offsets or offsets[0] >= next_offset:  # ascending: only a re-read repeats
                pq.next_offset = max(next_offset, reply.next_begin_offset)
                if offsets:
                    first, last = offsets[0], offsets[-1]
                    pq.add_inflight(range(first, last + 1) if last - first + 1 == len(offsets) else offsets)
                return pending
            messages: list[ReceivedMessage] = pending.messages()
        elif data:
            messages = decode_records(data.tobytes() if isinstance(data, Span) else data,
                                      pq.queue.broker_name, pq.decode_hint)
        else:
            messages = [from_message_ext(m, pq.queue.broker_name) for m in reply.messages]
        if not filt.matches_all:
            messages = [m for m in messages if filt.matches(m.tags)]
        if messages and messages[0].queue_offset < next_offset:  # ascending: only a re-read repeats
            messages = [m for m in messages if m.queue_offset >= next_offset]
        pq.next_offset = max(next_offset, reply.next_begin_offset)
        if messages:
            first, last = messages[0].queue_offset, messages[-1].queue_offset
            pq.add_inflight(range(first, last + 1) if last - first + 1 == len(messages)
                            else list(map(_QUEUE_OFFSET, messages)))
        return messages

    async def _offset_illegal(self, pq: ProcessQueue, reply: broker_pb2.PullMessageResponse) -> None:
        log.warning("offset illegal; moving on", extra={
            "queue": str(pq.queue), "offset": pq.next_offset, "next": reply.next_begin_offset,
            "remark": reply.remark})
        pq.next_offset = reply.next_begin_offset
        await self.offsets.commit(pq, force=True)

    async def _pull_once(self, pq: ProcessQueue) -> None:
        """One PullMessage call (long polling): relayed brokers, and brokers without
        PullMessageStream."""
        q, s, caller = pq.queue, self.settings, self.caller
        filt = self.state.subs.get(q.topic)
        if filt is None:
            await asyncio.sleep(0.1)
            return
        request = self._pull_request(pq, filt)
        commit = request.commit_offset
        timeout = s.long_poll_timeout + s.request_timeout
        reply, addr = await self.failover.call_group(pq, lambda a: caller.pull(a, request, timeout))
        route = self.routes.cached(q.topic)
        from_master = route is not None and route.master_addr(q.broker_name) == addr
        self.offsets.pull_committed(pq, commit, from_master)
        if pq.dropped:
            return
        pq.last_addr = addr
        pq.suggested_id = int(reply.suggest_which_broker_id)
        await self._apply_reply(pq, filt, reply)

    async def _pull_stream(self, pq: ProcessQueue) -> None:
        """Follow the queue with PullMessageStream calls: the broker sends batch after batch
        without waiting for a request each time (the cost of a unary call per batch is what
        limits a consumer), and waits at the end of the queue as a long poll does. The broker is
        chosen as for PullMessage (a suggested slave, the master, then the slaves); an
        unreachable one is left for the next at once."""
        q = pq.queue
        filt = self.state.subs.get(q.topic)
        if filt is None:
            await asyncio.sleep(0.1)
            return
        route = await self.routes.get(q.topic)
        await self.failover.maybe_restore_master(route, q.broker_name)
        addrs = self.failover.ordered_addrs(route, q.broker_name, pq.suggested_id)
        group = route.group(q.broker_name)
        if not addrs or group is None:
            await self.routes.get(q.topic, refresh=True)
            raise NoRouteError(f"broker group {q.broker_name!r} of topic {q.topic!r} is not in the route")
        last: PocketMQError | None = None
        for addr in addrs:
            try:
                await self._follow(pq, filt, addr, group)
                return
            except UnimplementedError:
                log.info("broker has no PullMessageStream; using PullMessage", extra={"broker": addr})
                self.stream_pulls = False
                return
            except UNREACHABLE as exc:
                if pq.dropped:
                    return
                last = exc
                self.failover.mark_master_down(route, q.broker_name, addr)
                pq.suggested_id = 0
        assert last is not None
        raise last

    async def _follow(self, pq: ProcessQueue, filt: TagFilter, addr: str, group: BrokerGroup) -> None:
        """One PullMessageStream from ``addr``, until the queue is dropped, its subscription
        changes, the master suggests a slave, a slave has answered and been read for
        master_retry_interval (then the broker is chosen again: the master may be back; as with
        PullMessage, where an idle slave's long poll holds the next choice back until it ends) or
        the broker ends the stream. No reply for long_poll_timeout + request_timeout (the broker
        sends an empty one every long_poll_timeout) counts as a timeout."""
        q, s = pq.queue, self.settings
        request = self._pull_request(pq, filt)
        commit = request.commit_offset
        from_master = addr == group.master_addr
        stream = self.caller.pull_stream(addr, request)
        loop = asyncio.get_running_loop()
        idle_limit = s.long_poll_timeout + s.request_timeout
        end_at = None if from_master else loop.time() + s.master_retry_interval
        answered = False
        # The read timeout moves on with each reply, but its timer is re-armed only once the
        # deadline has moved by a quarter of request_timeout (or when it was disarmed): not once
        # per reply. The broker is never given less than long_poll_timeout + 3/4 request_timeout.
        slack = s.request_timeout / 4
        try:
            async with asyncio.timeout(None) as timer:
                while True:
                    deadline = loop.time() + idle_limit
                    if end_at is not None and answered and end_at < deadline:
                        deadline = end_at
                    when = timer.when()
                    if when is None or deadline < when or deadline - when > slack:
                        timer.reschedule(deadline)
                    reply = await stream.read()
                    if reply is None:
                        if not answered:  # ended at once (a broker shutting down): not in a loop
                            timer.reschedule(None)
                            await asyncio.sleep(0.2)
                        return
                    if not answered:  # the broker committed it when the stream started
                        self.offsets.pull_committed(pq, commit, from_master)
                    if pq.dropped:
                        return
                    answered = True
                    pq.last_addr = addr
                    if not await self._apply_reply(pq, filt, reply, timer, stream.records):
                        return
                    suggested = int(reply.suggest_which_broker_id)
                    if from_master and suggested and suggested in group.addrs:
                        pq.suggested_id = suggested  # the master suggests reading from a slave
                        return
                    if self.state.subs.get(q.topic) is not filt or pq.dropped:
                        return
        except TimeoutError:
            if end_at is not None and answered and loop.time() >= end_at:
                pq.suggested_id = 0  # ask the master again
                return
            raise RequestTimeoutError(f"PullMessageStream: no reply within {idle_limit:g} s",
                                      address=addr) from None
        finally:
            stream.cancel()
