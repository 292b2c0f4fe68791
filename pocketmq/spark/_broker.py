"""Every call the data source makes to NameServers and brokers, in one module.

Built on the client's core (:class:`~pocketmq.client.core.ClientCore`: channel pool, NameServer
fail-over, typed broker calls), :class:`~pocketmq.client.routes.TopicRoute`,
:class:`~pocketmq.client.producer.AsyncProducer` and the :mod:`pocketmq.errors` hierarchy, running
on the client's shared background event loop (:mod:`pocketmq.client.loop`), so Spark's synchronous
``read``/``write`` code calls them as plain functions or futures. One :class:`Cluster` per
NameServer list and process: a Python worker that Spark reuses for many tasks keeps its channels.

Nothing in here is pickled: readers and partitions carry options and addresses only.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, Literal, NamedTuple, TypeVar

from pocketmq.broker.v1 import broker_pb2
from pocketmq.client import loop as _loop
from pocketmq.client.core import ClientCore
from pocketmq.client.message import Message, SendResult
from pocketmq.client.producer import AsyncProducer
from pocketmq.client.routes import MASTER_ID, TopicRoute
from pocketmq.errors import (
    ConnectionFailedError,
    NoRouteError,
    NotFoundError,
    PocketMQError,
    RequestCancelledError,
    RequestTimeoutError,
)
from pocketmq.spark.offsets import QueueKey
from pocketmq.wire.tls import ClientTls

log = logging.getLogger("pocketmq.spark")

T = TypeVar("T")

#: Errors after which another address of the broker group is tried.
UNREACHABLE = (ConnectionFailedError, RequestTimeoutError, RequestCancelledError)

PULL_STATUS = {v: k for k, v in broker_pb2.PullStatus.items()}


class PullReply(NamedTuple):
    """One PullMessage answer (``records`` in the commit-log format) and who gave it."""

    status: str
    records: bytes
    next_begin_offset: int
    min_offset: int
    max_offset: int
    addr: str
    remark: str


def read_order(addrs: Mapping[int, str], mode: str) -> list[str]:
    """Addresses of a broker group in the order to try them: ``never`` = the master only,
    ``fallback`` = master then slaves, ``preferred`` = slaves then master."""
    master = addrs.get(MASTER_ID)
    slaves = [addrs[i] for i in sorted(addrs) if i != MASTER_ID]
    if mode == "never":
        return [master] if master else []
    if mode == "preferred":
        return slaves + ([master] if master else [])
    return ([master] if master else []) + slaves


def _run(coro: Coroutine[Any, Any, T], timeout: float) -> T:
    return _loop.run(coro, timeout)


class Cluster:
    """Routes, queue offsets, group offsets, pulls and sends for one NameServer list."""

    def __init__(self, namesrv: Sequence[str], request_timeout: float = 5.0,
                 tls: ClientTls | None = None) -> None:
        self.namesrv = tuple(namesrv)
        self.tls = tls
        self.request_timeout = request_timeout
        self._core: ClientCore | None = None
        self._producers: dict[tuple[str, float, int], AsyncProducer] = {}

    # -- plumbing (on the client loop) -------------------------------------------------------------

    @property
    def core(self) -> ClientCore:
        """The client core (built on the client loop at first use)."""
        if self._core is None:
            self._core = ClientCore(self.namesrv, timeout=self.request_timeout, tls=self.tls or False)
        return self._core

    async def call_first(self, addrs: Sequence[str], what: str, call: Callable[[str], Awaitable[T]]
                         ) -> tuple[T, str]:
        """``call(address)`` at the first address that can be reached; other errors are the
        answer."""
        last: PocketMQError | None = None
        for addr in addrs:
            try:
                return await call(addr), addr
            except UNREACHABLE as exc:
                last = exc
        if last is None:
            raise NoRouteError(f"{what}: no broker address to call")
        raise last

    async def route_async(self, topic: str) -> TopicRoute:
        try:
            data = await self.core.namesrv.route(topic)
        except NotFoundError as exc:
            raise NoRouteError(f"topic {topic!r} is unknown to the NameServer(s) "
                               f"{', '.join(self.namesrv)}: {exc.message}", address=exc.address) from None
        return TopicRoute.from_proto(topic, data)

    # -- driver side ------------------------------------------------------------------------------

    def routes(self, topics: Iterable[str], *, missing_ok: bool = False) -> dict[str, TopicRoute]:
        """Each topic's route. A topic no NameServer knows raises NoRouteError, or is left out
        with ``missing_ok``."""
        async def one(topic: str) -> TopicRoute | None:
            try:
                return await self.route_async(topic)
            except NoRouteError:
                if missing_ok:
                    log.warning("topic has no route (yet)", extra={"topic": topic})
                    return None
                raise

        async def all_routes() -> list[TopicRoute | None]:
            return list(await asyncio.gather(*(one(t) for t in topics)))

        routes = _run(all_routes(), self.request_timeout * 4 + 5)
        return {r.topic: r for r in routes if r is not None}

    def queue_offsets(self, queues: Mapping[QueueKey, Sequence[str]], which: str
                      ) -> tuple[dict[QueueKey, int], dict[QueueKey, PocketMQError]]:
        """``which`` = "min" | "max" offset of each queue, asked of its addresses in order.
        Returns (offsets, errors of the queues no address answered)."""
        side: Literal["min", "max"] = "min" if which == "min" else "max"
        caller, timeout = self.core.caller, self.request_timeout

        async def one(key: QueueKey, addrs: Sequence[str]) -> int:
            offset, _ = await self.call_first(addrs, f"{side} offset", lambda addr: caller.queue_offset(
                addr, side, key.topic, key.queue_id, timeout))
            return offset

        return self._each(queues, one)

    def group_offsets(self, group: str, queues: Mapping[QueueKey, Sequence[str]]
                      ) -> tuple[dict[QueueKey, int], dict[QueueKey, PocketMQError]]:
        """The group's committed offset of each queue; queues without one are left out."""
        caller, timeout = self.core.caller, self.request_timeout

        async def one(key: QueueKey, addrs: Sequence[str]) -> int | None:
            try:
                offset, _ = await self.call_first(
                    addrs, "QueryConsumerOffset", lambda addr: caller.query_consumer_offset(
                        addr, group, key.topic, key.queue_id, timeout))
            except NotFoundError:
                return None
            return offset

        found, errors = self._each(queues, one)
        return {k: v for k, v in found.items() if v is not None}, errors

    def commit_offsets(self, group: str, offsets: Mapping[QueueKey, int], masters: Mapping[str, str]
                       ) -> dict[QueueKey, PocketMQError]:
        """UpdateConsumerOffset at each queue's master (``masters``: broker name -> address).
        Returns the queues whose commit failed."""
        async def one(key: QueueKey, offset: int) -> None:
            addr = masters.get(key.broker_name)
            if addr is None:
                raise NoRouteError(f"broker group {key.broker_name!r} has no master in the route")
            await self.core.caller.update_consumer_offset(addr, group, key.topic, key.queue_id, offset,
                                                          self.request_timeout)

        async def every() -> list[BaseException | None]:
            calls = (one(k, v) for k, v in offsets.items())
            return list(await asyncio.gather(*calls, return_exceptions=True))

        results = _run(every(), self.request_timeout * 2 + 5)
        errors: dict[QueueKey, PocketMQError] = {}
        for key, result in zip(offsets, results, strict=True):
            if isinstance(result, PocketMQError):
                errors[key] = result
            elif isinstance(result, BaseException):
                raise result
        return errors

    def _each(self, queues: Mapping[QueueKey, Sequence[str]], fn: Any
              ) -> tuple[dict[QueueKey, Any], dict[QueueKey, PocketMQError]]:
        keys = list(queues)

        async def every() -> list[Any]:
            return list(await asyncio.gather(*(fn(k, queues[k]) for k in keys), return_exceptions=True))

        most_addrs = max((len(a) for a in queues.values()), default=1)
        results = _run(every(), self.request_timeout * (2 + most_addrs))
        found: dict[QueueKey, Any] = {}
        errors: dict[QueueKey, PocketMQError] = {}
        for key, result in zip(keys, results, strict=True):
            if isinstance(result, PocketMQError):
                errors[key] = result
            elif isinstance(result, BaseException):
                raise result
            else:
                found[key] = result
        return found, errors

    # -- executor side: pulls ------------------------------------------------------------------------

    def puller(self, key: QueueKey, addrs: Sequence[str], mode: str, timeout: float) -> QueuePuller:
        return QueuePuller(self, key, addrs, mode, timeout)

    # -- executor side: sends ------------------------------------------------------------------------

    async def _producer(self, group: str, send_timeout: float, retries: int) -> AsyncProducer:
        key = (group, send_timeout, retries)
        producer = self._producers.get(key)
        if producer is None:
            producer = AsyncProducer(list(self.namesrv), group=group, send_timeout=send_timeout,
                                     retries=retries, tls=self.tls or False)
            await producer.start()
            self._producers[key] = producer
        return producer

    def submit_send(self, messages: Sequence[Message], group: str, send_timeout: float, retries: int
                    ) -> concurrent.futures.Future[SendResult]:
        """Send one batch (one topic) in the background; the future raises a
        :class:`~pocketmq.errors.SendError` (status in the message) for anything but PUT_OK."""
        async def send() -> SendResult:
            producer = await self._producer(group, send_timeout, retries)
            return await producer.send_batch(messages, require_durable=True)

        return _loop.submit(send())


class QueuePuller:
    """Pulls of one queue: tries the group's addresses in ``mode`` order, stays on the one that
    answered, moves on when it cannot be reached and asks the NameServer for fresh addresses
    when none can."""

    def __init__(self, cluster: Cluster, key: QueueKey, addrs: Sequence[str], mode: str,
                 timeout: float) -> None:
        self.cluster = cluster
        self.key = key
        self.mode = mode
        self.timeout = timeout
        self.addrs = list(addrs)
        self._current = 0

    def restart_order(self) -> None:
        """Try the addresses from the preferred one again (e.g. the master may be back)."""
        self._current = 0

    def submit(self, offset: int, max_count: int, max_bytes: int, tags: str, suspend_ms: int = 0
               ) -> concurrent.futures.Future[PullReply]:
        request = broker_pb2.PullMessageRequest(
            topic=self.key.topic, queue_id=self.key.queue_id, queue_offset=offset, max_msg_nums=max_count,
            max_bytes=max_bytes, subscription=tags, suspend_timeout_ms=suspend_ms, raw_records=True)
        return _loop.submit(self._pull(request, suspend_ms / 1000))

    async def _pull(self, request: broker_pb2.PullMessageRequest, suspend: float) -> PullReply:
        deadline = time.monotonic() + self.timeout + suspend + self.cluster.request_timeout
        refreshed = False
        last: PocketMQError | None = None
        while True:
            n = len(self.addrs)
            for i in range(n):
                index = (self._current + i) % n
                addr = self.addrs[index]
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    reply = await self.cluster.core.caller.pull(
                        addr, request, min(left, self.timeout + suspend))
                except UNREACHABLE as exc:
                    last = exc
                    log.warning("pull failed; trying the next address", extra={
                        "queue": str(self.key), "addr": addr, "error": str(exc)})
                    continue
                if index != self._current:
                    log.warning("reading from another broker of the group", extra={
                        "queue": str(self.key), "addr": addr})
                    self._current = index
                return PullReply(PULL_STATUS.get(reply.status, "UNKNOWN"), reply.records,
                                 int(reply.next_begin_offset), int(reply.min_offset), int(reply.max_offset),
                                 addr, reply.remark)
            if refreshed or time.monotonic() >= deadline:
                break
            refreshed = True
            try:
                route = await self.cluster.route_async(self.key.topic)
            except PocketMQError as exc:
                last = last or exc
                break
            group = route.group(self.key.broker_name)
            fresh = read_order(group.addrs, self.mode) if group is not None else []
            if not fresh:
                break
            self.addrs = fresh
            self._current = 0
        where = ", ".join(self.addrs) or "no address"
        raise type(last or NoRouteError(""))(
            f"cannot pull {self.key} (readFromSlave={self.mode}; tried {where}): "
            f"{last.message if last else 'no broker of the group is in the route'}",
            address=last.address if last else "") from None


_clusters: dict[tuple[tuple[str, ...], float, ClientTls | None], Cluster] = {}
_clusters_lock = threading.Lock()


def cluster(namesrv: Sequence[str], request_timeout: float = 5.0, tls: ClientTls | None = None) -> Cluster:
    """The process's :class:`Cluster` for these NameServers (created on first use)."""
    key = (tuple(namesrv), request_timeout, tls)
    with _clusters_lock:
        found = _clusters.get(key)
        if found is None:
            found = _clusters[key] = Cluster(namesrv, request_timeout, tls)
        return found
