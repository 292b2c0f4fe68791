"""The blocking face of :class:`~pocketmq.client.consumer.AsyncConsumer`: the same consumer,
run on the client's background event loop (:mod:`pocketmq.client.loop`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence
from types import TracebackType
from typing import Any

from pocketmq.client import loop as _loop
from pocketmq.client.consumer import AsyncConsumer
from pocketmq.client.message import MessageQueue, ReceivedMessage
from pocketmq.client.redelivery import MessageHandler
from pocketmq.client.subscription import ConsumeFrom
from pocketmq.client.transport import RelayMode
from pocketmq.wire.auth import Credentials
from pocketmq.wire.tls import ClientTls

__all__ = ["Consumer"]


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
