"""Producers: :class:`AsyncProducer` (asyncio) and :class:`Producer` (blocking, a thin wrapper).

A send picks a writable queue of the topic (round-robin; or by sharding key / a selector for
ordered messages), calls the master of that queue's broker group and returns a
:class:`~pocketmq.SendResult`. Failures that leave nothing stored (broker unreachable, timeout,
SERVICE_NOT_AVAILABLE, a slave answering because the route is stale, ...) are retried, on
another broker group when there is one, within the call's timeout. Statuses that mean "stored
but not yet as durable as configured" (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT,
SLAVE_NOT_AVAILABLE) are never retried: the result reports them (or ``require_durable=True``
raises :class:`~pocketmq.errors.NotDurableError`).
"""

from __future__ import annotations

import datetime
import logging
import os
import time
from collections.abc import Iterable, Sequence
from types import TracebackType

from pocketmq.broker.v1 import broker_pb2
from pocketmq.client import loop as _loop
from pocketmq.client.core import ClientCore
from pocketmq.client.message import STORED_STATUSES, Message, MessageQueue, SendResult, SendStatus
from pocketmq.client.routes import AUTO_CREATE_TOPIC, RouteCache, TopicRoute
from pocketmq.client.selector import HashSelector, QueueSelector, RoundRobin
from pocketmq.client.transaction import (
    CheckListener,
    LocalTransaction,
    TransactionChecker,
    TransactionSendResult,
    TransactionState,
    call_back,
    half_message,
)
from pocketmq.client.transport import BrokerCaller, RelayMode, parse_addresses
from pocketmq.errors import (
    ClientClosedError,
    ConnectionFailedError,
    FailedPreconditionError,
    InvalidArgumentError,
    NoRouteError,
    NotFoundError,
    PermissionDeniedError,
    PocketMQError,
    RequestTimeoutError,
    from_put_status,
)
from pocketmq.wire.auth import Credentials
from pocketmq.wire.record import PROPERTY_TIMER_DELIVER_MS
from pocketmq.wire.tls import ClientTls
from pocketmq.wire.tls import resolve as resolve_tls

log = logging.getLogger("pocketmq.client")

__all__ = ["AsyncProducer", "Producer"]

_HASH = HashSelector()


def namesrv_from_env(namesrv: str | Sequence[str] | None) -> list[str]:
    """Explicit addresses, else ``$POCKETMQ_NAMESRV``, else 127.0.0.1:9876."""
    if namesrv is None:
        namesrv = os.environ.get("POCKETMQ_NAMESRV") or None
    return parse_addresses(namesrv)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


DeliverAt = float | datetime.datetime


def deliver_ms(deliver_at: DeliverAt) -> int:
    """Epoch milliseconds of a delivery time given as epoch seconds or an aware datetime."""
    if isinstance(deliver_at, datetime.datetime):
        if deliver_at.tzinfo is None:
            raise InvalidArgumentError("deliver_at must be a timezone-aware datetime (or epoch seconds)")
        return int(deliver_at.timestamp() * 1000)
    if deliver_at <= 0:
        raise InvalidArgumentError(f"deliver_at must be epoch seconds > 0, got {deliver_at}")
    return int(deliver_at * 1000)


class AsyncProducer:
    """Sends messages (asyncio). Use as ``async with AsyncProducer("ns:9876") as p:``.

    Args:
        namesrv: NameServer address(es), ``"h1:9876;h2:9876"`` or a list; default
            ``$POCKETMQ_NAMESRV`` or 127.0.0.1:9876.
        group: producer group name, stored with each message (PGROUP property).
        send_timeout: default time limit of one send, retries included (seconds).
        retries: extra attempts after a failure that left nothing stored.
        route_refresh_interval: how often used routes are fetched again (seconds).
        fault_backoff: how long a broker group that failed is avoided when others exist.
        relay: ``"direct"`` (default) calls brokers at their registered addresses; ``"relay"``
            sends through a NameServer's broker relay (slow; for operators behind one port).
        tls: :class:`~pocketmq.wire.tls.ClientTls` (CA file, client certificate), True (TLS
            trusting the system roots), False (plaintext); default: the ``POCKETMQ_TLS*``
            environment variables, else plaintext.
        credentials: an access key and secret key signing every request (access control);
            default: ``POCKETMQ_ACCESS_KEY``/``POCKETMQ_SECRET_KEY`` when set, else unsigned.
    """

    def __init__(
        self,
        namesrv: str | Sequence[str] | None = None,
        *,
        group: str = "",
        send_timeout: float = 3.0,
        retries: int = 2,
        route_refresh_interval: float = 30.0,
        fault_backoff: float = 3.0,
        relay: RelayMode = "direct",
        transaction_checker: TransactionChecker | None = None,
        client_id: str = "",
        tls: ClientTls | bool | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        if send_timeout <= 0:
            raise InvalidArgumentError("send_timeout must be > 0")
        if retries < 0:
            raise InvalidArgumentError("retries must be >= 0")
        self.namesrv_addrs = namesrv_from_env(namesrv)
        self.group = group
        self.send_timeout = send_timeout
        self.retries = retries
        self.fault_backoff = fault_backoff
        self._route_refresh_interval = route_refresh_interval
        self._relay: RelayMode = relay
        self._round_robin = RoundRobin()
        self._faults: dict[str, float] = {}
        self._started = False
        self._closed = False
        self._transaction_checker = transaction_checker
        self._client_id = client_id
        self._tls = resolve_tls(tls)
        self._credentials = credentials
        self._checks: CheckListener | None = None
        # Created in start() (it binds to the running loop).
        self._core: ClientCore
        self._routes: RouteCache
        self._caller: BrokerCaller

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._closed:
            raise ClientClosedError("producer is closed")
        if self._started:
            return
        self._core = ClientCore(self.namesrv_addrs, route_refresh_interval=self._route_refresh_interval,
                                relay=self._relay, tls=self._tls or False, credentials=self._credentials)
        self._routes = self._core.routes
        self._caller = self._core.caller
        self._core.start_route_refresh()
        if self._transaction_checker is not None:
            if not self.group:
                raise InvalidArgumentError("a transaction_checker needs a producer group (group=...)")
            self._checks = CheckListener(self._core.pool, self.group, self._transaction_checker,
                                         self._end_transaction, self._client_id)
        self._started = True

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._started:
            if self._checks is not None:
                await self._checks.close()
            await self._core.close()

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    def _check(self) -> None:
        if self._closed:
            raise ClientClosedError("producer is closed")
        if not self._started:
            raise ClientClosedError("producer is not started (call start() or use 'async with')")

    # -- routes -------------------------------------------------------------------------------

    async def route(self, topic: str, *, refresh: bool = False) -> TopicRoute:
        self._check()
        return await self._routes.get(topic, refresh=refresh)

    async def queues(self, topic: str) -> list[MessageQueue]:
        """The topic's writable queues, sorted (what selectors choose from)."""
        return (await self.route(topic)).write_queues()

    async def _send_route(self, topic: str, refresh: bool) -> TopicRoute:
        """The topic's route; for a topic no NameServer knows yet, the brokers that would
        auto-create it (the template topic's route, not cached for the topic)."""
        try:
            return await self._routes.get(topic, refresh=refresh)
        except NoRouteError as exc:
            try:
                template = await self._routes.get(AUTO_CREATE_TOPIC, refresh=refresh)
            except NoRouteError:
                raise exc from None
            route = template.for_new_topic(topic)
            if not route.write_queues():
                raise exc from None
            return route

    def _faulty(self) -> set[str]:
        now = time.monotonic()
        for name, until in list(self._faults.items()):
            if until <= now:
                del self._faults[name]
        return set(self._faults)

    # -- sending ------------------------------------------------------------------------------

    async def send(
        self,
        message: Message,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
        sharding_key: str | None = None,
        selector: QueueSelector | None = None,
        queue: MessageQueue | None = None,
        require_durable: bool = False,
        deliver_at: DeliverAt | None = None,
    ) -> SendResult:
        """Store one message.

        ``deliver_at`` (epoch seconds or an aware datetime) delivers it at that time instead of
        at once (a timer message, up to the broker's ``timerMaxDelaySec`` ahead: 3 days by
        default); its result's queue offset is -1.

        ``sharding_key`` sends every message with that key to the same queue (ordered messages;
        ``selector`` chooses the queue some other way, getting the key as its third argument);
        ``queue`` names the queue outright. Ordered sends are retried only on the same queue.
        """
        self._check()
        request = broker_pb2.SendMessageRequest(
            message=message.to_proto(), producer_group=self.group, born_timestamp=_now_ms())
        if deliver_at is not None:
            if message.delay_level:
                raise InvalidArgumentError("a message has either a delay level or deliver_at, not both")
            request.message.properties[PROPERTY_TIMER_DELIVER_MS] = str(deliver_ms(deliver_at))
        return await self._send(message.topic, message, request, timeout, sharding_key,
                                selector, queue, require_durable)

    async def send_batch(
        self,
        messages: Iterable[Message],
        *,
        timeout: float | None = None,  # noqa: ASYNC109
        sharding_key: str | None = None,
        selector: QueueSelector | None = None,
        queue: MessageQueue | None = None,
        require_durable: bool = False,
    ) -> SendResult:
        """Store several messages of one topic in one queue with one request (consecutive
        offsets from ``result.queue_offset``; one id per message in ``result.msg_ids``).
        Delay levels are not supported in batches."""
        self._check()
        batch = list(messages)
        if not batch:
            raise InvalidArgumentError("send_batch needs at least one message")
        topic = batch[0].topic
        for m in batch:
            if m.topic != topic:
                raise InvalidArgumentError(
                    f"every message of a batch must have the same topic ({topic!r} != {m.topic!r})")
            if m.delay_level:
                raise InvalidArgumentError("delay levels are not supported in batches; send them one by one")
        request = broker_pb2.SendMessageBatchRequest(
            topic=topic, messages=[m.to_proto(topic=False) for m in batch], producer_group=self.group,
            born_timestamp=_now_ms())
        return await self._send(topic, batch[0], request, timeout, sharding_key,
                                selector, queue, require_durable)

    async def _send(
        self,
        topic: str,
        first: Message,
        request: broker_pb2.SendMessageRequest | broker_pb2.SendMessageBatchRequest,
        timeout: float | None,  # noqa: ASYNC109
        sharding_key: str | None,
        selector: QueueSelector | None,
        fixed_queue: MessageQueue | None,
        require_durable: bool,
    ) -> SendResult:
        budget = self.send_timeout if timeout is None else timeout
        if budget <= 0:
            raise InvalidArgumentError("timeout must be > 0")
        if fixed_queue is not None and fixed_queue.topic != topic:
            raise InvalidArgumentError(f"queue {fixed_queue} is not a queue of topic {topic!r}")
        ordered = fixed_queue is not None or sharding_key is not None or selector is not None
        if selector is None and sharding_key is not None:
            selector = _HASH
        deadline = time.monotonic() + budget
        attempts = 1 + self.retries
        tried: set[str] = set()
        refresh = False
        last: PocketMQError | None = None
        for attempt in range(attempts):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            route = await self._send_route(topic, refresh)
            queues = route.write_queues()
            if not queues:
                raise NoRouteError(f"topic {topic!r} has no writable queue (no master, or write "
                                   "permission wiped)")
            if fixed_queue is not None:
                queue = fixed_queue
            elif selector is not None:
                queue = selector(queues, first, sharding_key)
            else:
                queue = self._round_robin.pick(topic, queues, tried | self._faulty())
            addr = route.master_addr(queue.broker_name)
            if addr is None:
                raise NoRouteError(f"broker group {queue.broker_name!r} of topic {topic!r} has no master")
            request.queue_id = queue.queue_id
            try:
                left = max(0.001, deadline - time.monotonic())
                reply: broker_pb2.SendMessageResponse | broker_pb2.SendMessageBatchResponse
                if isinstance(request, broker_pb2.SendMessageRequest):
                    reply = await self._caller.send_message(addr, request, left)
                else:
                    reply = await self._caller.send_batch(addr, request, left)
            except PocketMQError as exc:
                last = exc
                if not self._worth_retrying(exc):
                    raise
                refresh = True
                tried.add(queue.broker_name)
                if isinstance(exc, (ConnectionFailedError, RequestTimeoutError)):
                    self._faults[queue.broker_name] = time.monotonic() + self.fault_backoff
                log.debug("send failed, retrying", extra={
                    "topic": topic, "broker": queue.broker_name, "attempt": attempt + 1,
                    "ordered": ordered, "error": str(exc)})
                continue
            stored = STORED_STATUSES.get(reply.status)
            msg_ids = ((reply.msg_id,) if isinstance(reply, broker_pb2.SendMessageResponse)
                       else tuple(reply.msg_ids))
            if stored is not None:
                result = SendResult(stored, msg_ids, MessageQueue(topic, queue.broker_name, reply.queue_id),
                                    reply.queue_offset, addr, reply.remark)
                if stored is not SendStatus.SEND_OK:
                    log.warning("message stored but not durable as configured", extra={
                        "topic": topic, "broker": queue.broker_name, "status": stored.value,
                        "remark": reply.remark})
                    if require_durable:
                        raise from_put_status(stored.value, reply.remark, address=addr, result=result)
                return result
            error = from_put_status(broker_pb2.PutStatus.Name(reply.status), reply.remark, address=addr)
            if not error.retriable:
                raise error
            last = error
            tried.add(queue.broker_name)
            self._faults[queue.broker_name] = time.monotonic() + self.fault_backoff
        if last is None:
            raise RequestTimeoutError(f"send to topic {topic!r}: no time left for an attempt")
        if attempts > 1:
            last.message = f"{last.message} (gave up after {len(tried) or attempts} attempt(s))"
        raise last

    # -- transactions -------------------------------------------------------------------------

    async def send_in_transaction(
        self, message: Message, local_transaction: LocalTransaction, *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> TransactionSendResult:
        """Store ``message`` as a half message (invisible to consumers), run
        ``local_transaction(message, send_result)`` (a coroutine function, or a blocking one run
        in a thread) and commit or roll back by its answer. UNKNOWN (or an exception) leaves it
        to the broker's checks, answered by the producer's ``transaction_checker``."""
        self._check()
        if not self.group:
            raise InvalidArgumentError("transactional sends need a producer group (group=...)")
        if message.delay_level:
            raise InvalidArgumentError("a transaction message cannot be delayed")
        result = await self.send(half_message(message, self.group), timeout=timeout)
        if self._checks is not None:
            self._checks.watch(result.broker_addr)
        state = await call_back(local_transaction, message, result)
        if state is not TransactionState.UNKNOWN:
            await self._end_transaction(result.broker_addr, result.msg_id, result.msg_id, state, False)
        return TransactionSendResult(result, state)

    async def watch_transactions(self, topic: str) -> None:
        """Receive transaction checks from every master of ``topic`` (a restarted producer calls
        this to resolve what its predecessor left open); needs a ``transaction_checker``."""
        self._check()
        if self._checks is None:
            raise InvalidArgumentError("watch_transactions needs a transaction_checker")
        route = await self._send_route(topic, True)
        for queue in route.write_queues():
            addr = route.master_addr(queue.broker_name)
            if addr is not None:
                self._checks.watch(addr)

    async def _end_transaction(self, broker_addr: str, transaction_id: str, msg_id: str,
                               state: TransactionState, from_check: bool) -> None:
        request = broker_pb2.EndTransactionRequest(
            producer_group=self.group, transaction_id=transaction_id, msg_id=msg_id,
            commit=state is TransactionState.COMMIT, from_check=from_check)
        await self._caller.call(broker_addr, "Transactions/EndTransaction", request, self.send_timeout)

    @staticmethod
    def _worth_retrying(exc: PocketMQError) -> bool:
        # Stale routes show up as a slave refusing writes, a broker that lost the topic or its
        # write permission: another (refreshed) broker may take the message.
        return exc.retriable or isinstance(
            exc, (FailedPreconditionError, PermissionDeniedError, NotFoundError))


class Producer:
    """Blocking face of :class:`AsyncProducer` (same arguments). Use as a context manager::

        with Producer("127.0.0.1:9876") as producer:
            result = producer.send(Message("orders", b"hello", tags="created"))
    """

    def __init__(
        self,
        namesrv: str | Sequence[str] | None = None,
        *,
        group: str = "",
        send_timeout: float = 3.0,
        retries: int = 2,
        route_refresh_interval: float = 30.0,
        fault_backoff: float = 3.0,
        relay: RelayMode = "direct",
        transaction_checker: TransactionChecker | None = None,
        client_id: str = "",
        tls: ClientTls | bool | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        self._async = AsyncProducer(
            namesrv, group=group, send_timeout=send_timeout, retries=retries,
            route_refresh_interval=route_refresh_interval, fault_backoff=fault_backoff, relay=relay,
            transaction_checker=transaction_checker, client_id=client_id, tls=tls, credentials=credentials)

    @property
    def async_producer(self) -> AsyncProducer:
        return self._async

    def start(self) -> Producer:
        _loop.run(self._async.start())
        return self

    def close(self) -> None:
        _loop.run(self._async.close())

    def __enter__(self) -> Producer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def send(
        self,
        message: Message,
        *,
        timeout: float | None = None,
        sharding_key: str | None = None,
        selector: QueueSelector | None = None,
        queue: MessageQueue | None = None,
        require_durable: bool = False,
        deliver_at: DeliverAt | None = None,
    ) -> SendResult:
        """See :meth:`AsyncProducer.send`."""
        return _loop.run(self._async.send(
            message, timeout=timeout, sharding_key=sharding_key, selector=selector, queue=queue,
            require_durable=require_durable, deliver_at=deliver_at))

    def send_in_transaction(self, message: Message, local_transaction: LocalTransaction, *,
                            timeout: float | None = None) -> TransactionSendResult:
        """See :meth:`AsyncProducer.send_in_transaction` (a blocking ``local_transaction`` runs in
        a worker thread)."""
        return _loop.run(self._async.send_in_transaction(message, local_transaction, timeout=timeout))

    def watch_transactions(self, topic: str) -> None:
        """See :meth:`AsyncProducer.watch_transactions`."""
        _loop.run(self._async.watch_transactions(topic))

    def send_batch(
        self,
        messages: Iterable[Message],
        *,
        timeout: float | None = None,
        sharding_key: str | None = None,
        selector: QueueSelector | None = None,
        queue: MessageQueue | None = None,
        require_durable: bool = False,
    ) -> SendResult:
        """See :meth:`AsyncProducer.send_batch`."""
        return _loop.run(self._async.send_batch(
            list(messages), timeout=timeout, sharding_key=sharding_key, selector=selector, queue=queue,
            require_durable=require_durable))

    def queues(self, topic: str) -> list[MessageQueue]:
        return _loop.run(self._async.queues(topic))
