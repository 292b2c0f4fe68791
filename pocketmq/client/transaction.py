"""Transactional sends of PocketMQ's own producer (RocketMQ's TransactionMQProducer).

``send_in_transaction`` stores a half message (invisible to consumers), runs the local
transaction and commits or rolls the message back. A half message left unresolved (the local
transaction answered UNKNOWN, or the producer died) is checked by the broker later: every
producer with a ``transaction_checker`` keeps a ``Transactions.TransactionChecks`` stream open
to the brokers it sent transactions to, answers each check with the checker's verdict and
reconnects when a broker restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import inspect
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeAlias

import grpc

from pocketmq.broker.v1 import broker_pb2
from pocketmq.client.message import Message, SendResult
from pocketmq.client.transport import ChannelPool
from pocketmq.wire.record import (
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TRANSACTION_PREPARED,
)

log = logging.getLogger("pocketmq.client")

#: Wait before reopening a check stream that failed.
RECONNECT_DELAY_S = 1.0


class TransactionState(enum.Enum):
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    #: Not decided yet: the broker asks the group's checker later.
    UNKNOWN = "UNKNOWN"


@dataclasses.dataclass(frozen=True, slots=True)
class TransactionCheck:
    """An unresolved half message the broker asks about."""

    transaction_id: str
    msg_id: str
    topic: str
    queue_id: int
    body: bytes
    properties: Mapping[str, str]
    born_timestamp: int
    store_timestamp: int
    check_times: int
    broker_addr: str

    @property
    def keys(self) -> str:
        return self.properties.get("KEYS", "")


@dataclasses.dataclass(frozen=True, slots=True)
class TransactionSendResult:
    send: SendResult
    state: TransactionState

    @property
    def transaction_id(self) -> str:
        return self.send.msg_id


_StateOrAwaitable: TypeAlias = "TransactionState | Awaitable[TransactionState]"
LocalTransaction: TypeAlias = Callable[[Message, SendResult], _StateOrAwaitable]
TransactionChecker: TypeAlias = Callable[[TransactionCheck], _StateOrAwaitable]
#: (broker address, transaction id, msg id, state, from_check) -> None
EndTransaction = Callable[[str, str, str, TransactionState, bool], Awaitable[None]]


def half_message(message: Message, group: str) -> Message:
    props = dict(message.properties)
    props[PROPERTY_TRANSACTION_PREPARED] = "true"
    props[PROPERTY_PRODUCER_GROUP] = group
    return Message(message.topic, message.body, tags=message.tags, keys=message.keys, properties=props,
                   flag=message.flag)


async def call_back(func: Callable[..., Any], *args: Any) -> TransactionState:
    """Run a user callback (a coroutine function, or a blocking one in a thread); an exception
    or a non-state result counts as UNKNOWN (the broker checks later), as in RocketMQ."""
    try:
        if inspect.iscoroutinefunction(func):
            result = await func(*args)
        else:
            result = await asyncio.to_thread(func, *args)
            if inspect.isawaitable(result):
                result = await result
    except Exception:
        log.exception("transaction callback failed; the state stays UNKNOWN")
        return TransactionState.UNKNOWN
    if not isinstance(result, TransactionState):
        log.error("transaction callback returned %r, not a TransactionState; UNKNOWN", result)
        return TransactionState.UNKNOWN
    return result


def default_client_id() -> str:
    return f"{socket.gethostname()}@{os.getpid()}"


class CheckListener:
    """Keeps one TransactionChecks stream per broker address open and answers its checks."""

    def __init__(self, pool: ChannelPool, group: str, checker: TransactionChecker, end: EndTransaction,
                 client_id: str = "") -> None:
        self.pool = pool
        self.group = group
        self.checker = checker
        self.end = end
        self.client_id = client_id or default_client_id()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._closed = False
        #: Open streams (for tests and diagnostics).
        self.connected: set[str] = set()
        self.answered = 0

    def watch(self, address: str) -> None:
        if self._closed or address in self._tasks:
            return
        self._tasks[address] = asyncio.get_running_loop().create_task(
            self._run(address), name=f"transaction-checks-{address}")

    async def close(self) -> None:
        self._closed = True
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    async def _run(self, address: str) -> None:
        request = broker_pb2.TransactionChecksRequest(producer_group=self.group, client_id=self.client_id)
        while not self._closed:
            call = None
            try:
                call = self.pool.broker_stub(address, "Transactions").TransactionChecks(request)
                await call.wait_for_connection()
                self.connected.add(address)
                log.debug("transaction check stream open", extra={"broker": address, "group": self.group})
                async for check in call:
                    await self._answer(address, check)
            except asyncio.CancelledError:
                if call is not None:
                    call.cancel()
                raise
            except grpc.aio.AioRpcError as exc:
                log.debug("transaction check stream ended",
                          extra={"broker": address, "code": exc.code().name})
            except Exception:
                log.exception("transaction check stream failed", extra={"broker": address})
            finally:
                self.connected.discard(address)
            await asyncio.sleep(RECONNECT_DELAY_S)

    async def _answer(self, address: str, check: broker_pb2.TransactionCheck) -> None:
        request = TransactionCheck(
            transaction_id=check.transaction_id, msg_id=check.msg_id, topic=check.topic,
            queue_id=check.queue_id, body=check.body, properties=dict(check.properties),
            born_timestamp=check.born_timestamp, store_timestamp=check.store_timestamp,
            check_times=check.check_times, broker_addr=address)
        state = await call_back(self.checker, request)
        if state is TransactionState.UNKNOWN:
            return
        try:
            await self.end(address, check.transaction_id, check.msg_id, state, True)
            self.answered += 1
        except Exception as exc:
            log.warning("could not answer a transaction check", extra={
                "broker": address, "transaction_id": check.transaction_id, "error": str(exc)})
