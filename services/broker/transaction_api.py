# ruff: noqa: N802  (method names are the RPC names)
"""``pocketmq.broker.v1.Transactions``: PocketMQ's own clients end transactions and receive
transaction checks (a server stream per producer, registered as a checker with the app's
:class:`~services.broker.transaction.TransactionService`)."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, TypeAlias

import grpc

from pocketmq.broker.v1 import broker_pb2 as pb
from pocketmq.broker.v1 import broker_pb2_grpc
from services.broker import validation as v
from services.broker.transaction import HalfMessage
from services.common.errors import ServiceError, grpc_method

if TYPE_CHECKING:
    from services.broker.app import BrokerApp

log = logging.getLogger(__name__)
Ctx: TypeAlias = grpc.aio.ServicerContext
#: Checks queued for one producer stream before further ones go to another producer.
STREAM_QUEUE_MAX = 1024


def check_to_proto(half: HalfMessage) -> pb.TransactionCheck:
    return pb.TransactionCheck(
        transaction_id=half.transaction_id, msg_id=half.message_id, topic=half.topic,
        queue_id=half.queue_id, body=half.body, properties=dict(half.properties),
        born_timestamp=half.born_timestamp_ms, store_timestamp=half.store_timestamp_ms,
        check_times=half.check_times, producer_group=half.producer_group)


class TransactionsServicer(broker_pb2_grpc.TransactionsServicer):  # type: ignore[misc]
    def __init__(self, app: BrokerApp) -> None:
        self.app = app
        self._streams: dict[str, list[asyncio.Queue[HalfMessage]]] = {}
        self._round_robin = itertools.count()
        app.transactions.register_checker(self.check)

    @property
    def connected(self) -> int:
        return sum(len(s) for s in self._streams.values())

    async def check(self, half: HalfMessage) -> bool:
        """The checker: hand the check to one open stream of the group (round-robin)."""
        streams = [q for q in self._streams.get(half.producer_group, ()) if not q.full()]
        if not streams:
            return False
        streams[next(self._round_robin) % len(streams)].put_nowait(half)
        return True

    @grpc_method
    async def EndTransaction(self, request: pb.EndTransactionRequest,
                             context: Ctx) -> pb.EndTransactionResponse:
        v.validate_group(request.producer_group)
        await self.app.transactions.end_transaction(
            producer_group=request.producer_group, transaction_id=request.transaction_id,
            message_id=request.msg_id, commit=request.commit, from_check=request.from_check)
        return pb.EndTransactionResponse()

    async def TransactionChecks(self, request: pb.TransactionChecksRequest,
                                context: Ctx) -> AsyncIterator[pb.TransactionCheck]:
        try:
            group = v.validate_group(request.producer_group)
        except ServiceError as exc:
            await context.abort(exc.code, str(exc))
        queue: asyncio.Queue[HalfMessage] = asyncio.Queue(STREAM_QUEUE_MAX)
        self._streams.setdefault(group, []).append(queue)
        log.info("transaction check stream opened", extra={"group": group, "client": request.client_id})
        try:
            while not self.app.stopping():
                half = await queue.get()
                yield check_to_proto(half)
        finally:
            streams = self._streams.get(group, [])
            if queue in streams:
                streams.remove(queue)
            if not streams:
                self._streams.pop(group, None)
            log.info("transaction check stream closed", extra={"group": group, "client": request.client_id})
