"""EndTransaction and the transaction check sent on a producer's Telemetry stream.

Half messages belong to the producer group named after their topic (v2 producers have no group;
RocketMQ's proxy registers them per topic the same way). A check goes to a live producer that
publishes to the topic: ``TelemetryCommand{recover_orphaned_transaction_command}``; its answer
comes back as ``EndTransaction(source=SOURCE_SERVER_CHECK)``. The broker's transaction service
(``app.transactions``) stores the outcome.
"""

from __future__ import annotations

import logging
import zlib
from typing import TYPE_CHECKING

from google.protobuf import timestamp_pb2

from apache.rocketmq.v2 import definition_pb2, service_pb2
from services.broker.storage import record
from services.broker.transaction import HalfMessage
from services.broker.v2.clients import ClientRegistry
from services.broker.v2.produce import SYSTEM_PROPERTY_KEYS
from services.broker.v2.resources import RequestMeta, client_resource, topic_name
from services.broker.v2.status import Code, V2Error, from_service_error, ok
from services.common.errors import ServiceError

if TYPE_CHECKING:
    from services.broker.app import BrokerApp

log = logging.getLogger(__name__)

Resolution = definition_pb2.TransactionResolution
Source = definition_pb2.TransactionSource
MAX_TRANSACTION_ID_LENGTH = 128


def _timestamp(ms: int) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromMilliseconds(ms)
    return ts


def half_to_v2(half: HalfMessage, namespace: str) -> definition_pb2.Message:
    """A half message (the store's ``HalfMessage``) as the v2 Message a checker receives."""
    props: dict[str, str] = dict(half.properties)
    rec = half.record
    sp = definition_pb2.SystemProperties(
        message_id=half.message_id, message_type=definition_pb2.MessageType.TRANSACTION,
        body_digest=definition_pb2.Digest(type=definition_pb2.DigestType.CRC32,
                                          checksum=format(zlib.crc32(half.body), "08X")),
        body_encoding=definition_pb2.Encoding.IDENTITY,
        born_timestamp=_timestamp(half.born_timestamp_ms),
        store_timestamp=_timestamp(half.store_timestamp_ms),
        born_host=rec.born_host[0] if rec is not None else "", queue_id=half.queue_id)
    tag = props.get(record.PROPERTY_TAGS)
    if tag:
        sp.tag = tag
    keys = props.get(record.PROPERTY_KEYS)
    if keys:
        sp.keys.extend(k for k in keys.split(record.KEY_SEPARATOR) if k)
    user = {k: v for k, v in props.items() if k not in SYSTEM_PROPERTY_KEYS}
    return definition_pb2.Message(topic=client_resource(namespace, half.topic), user_properties=user,
                                  system_properties=sp, body=half.body)


class Transactions:
    def __init__(self, app: BrokerApp, clients: ClientRegistry) -> None:
        self.app = app
        self.clients = clients


    async def end(self, request: service_pb2.EndTransactionRequest,
                  meta: RequestMeta) -> service_pb2.EndTransactionResponse:
        topic = topic_name(request.topic, meta)
        tid = request.transaction_id
        if not tid or len(tid) > MAX_TRANSACTION_ID_LENGTH:
            raise V2Error(Code.INVALID_TRANSACTION_ID,
                          f"transaction id {tid[:80]!r} must be 1..{MAX_TRANSACTION_ID_LENGTH} characters")
        if not request.message_id:
            raise V2Error(Code.ILLEGAL_MESSAGE_ID, "message_id is required")
        if request.resolution not in (Resolution.COMMIT, Resolution.ROLLBACK):
            # No decision yet (RocketMQ's UNKNOWN): the half message stays open and is checked again.
            log.debug("transaction left open", extra={"topic": topic, "transaction_id": tid})
            return service_pb2.EndTransactionResponse(status=ok())
        commit = request.resolution == Resolution.COMMIT
        from_check = request.source == Source.SOURCE_SERVER_CHECK
        try:
            await self.app.transactions.end_transaction(producer_group=topic, transaction_id=tid,
                                          message_id=request.message_id, commit=commit, from_check=from_check)
        except ServiceError as exc:
            raise from_service_error(exc, not_found=Code.INVALID_TRANSACTION_ID,
                                     invalid=Code.INVALID_TRANSACTION_ID) from None
        log.debug("transaction ended", extra={"topic": topic, "transaction_id": tid, "commit": commit,
                                              "from_check": from_check})
        return service_pb2.EndTransactionResponse(status=ok())

    async def check(self, half: HalfMessage) -> bool:
        """The TransactionChecker registered with the transaction service: ask one live producer
        of the half message's group (= topic) to resolve it."""
        for client in self.clients.producers_of(half.producer_group):
            command = service_pb2.TelemetryCommand(
                recover_orphaned_transaction_command=service_pb2.RecoverOrphanedTransactionCommand(
                    message=half_to_v2(half, client.namespace), transaction_id=half.transaction_id))
            for stream in client.streams:
                if stream.send(command):
                    log.info("transaction check sent", extra={
                        "client_id": client.client_id, "topic": half.topic,
                        "transaction_id": half.transaction_id, "check_times": half.check_times})
                    return True
        return False
