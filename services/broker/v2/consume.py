"""ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue and
QueryAssignment of the RocketMQ 5 API on top of the broker's POP service."""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from google.protobuf import duration_pb2, timestamp_pb2

from apache.rocketmq.v2 import definition_pb2, service_pb2
from pocketmq.namesrv.v1 import namesrv_pb2
from services.broker import validation as v
from services.broker.pop.handle import BadHandleError, ReceiptHandle
from services.broker.pop.model import Popped, PopRequest
from services.broker.pop.service import PopService
from services.broker.storage import record
from services.broker.v2 import route as r
from services.broker.v2.clients import ClientRegistry
from services.broker.v2.produce import SYSTEM_PROPERTY_KEYS
from services.broker.v2.resources import RequestMeta, client_resource, group_name, topic_name
from services.broker.v2.settings import LONG_POLLING_TIMEOUT_MS
from services.broker.v2.status import Code, V2Error, from_service_error, ok, status
from services.common.errors import InvalidArgumentError, ServiceError

if TYPE_CHECKING:
    from services.broker.app import BrokerApp

#: RocketMQ's bounds on the invisible time a SimpleConsumer asks for, and on ChangeInvisibleDuration.
MIN_INVISIBLE_MS = 10_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000
MAX_BATCH = 1024
MAX_POLL_MS = 60_000
MessageType = definition_pb2.MessageType


def _timestamp(ms: int) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromMilliseconds(ms)
    return ts


def _ms(d: duration_pb2.Duration) -> int:
    return d.seconds * 1000 + d.nanos // 1_000_000


def to_v2(p: Popped, namespace: str) -> definition_pb2.Message:
    """A popped record as the v2 Message of a ReceiveMessage stream."""
    rec = p.rec
    props = rec.properties
    group = props.get(record.PROPERTY_SHARDING_KEY)
    msg_type = MessageType.FIFO if group else (
        MessageType.TRANSACTION if record.PROPERTY_PRODUCER_GROUP in props and "TRAN_MSG" in props
        else MessageType.NORMAL)
    invisible = duration_pb2.Duration()
    invisible.FromMilliseconds(max(0, p.entry.deadline_ms - p.entry.pop_ms))
    sp = definition_pb2.SystemProperties(
        message_id=props.get(record.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or rec.msg_id,
        message_type=msg_type,  # type: ignore[arg-type]
        body_digest=definition_pb2.Digest(type=definition_pb2.DigestType.CRC32,
                                          checksum=format(zlib.crc32(rec.body), "08X")),
        body_encoding=definition_pb2.Encoding.IDENTITY,
        born_timestamp=_timestamp(rec.born_timestamp), born_host=rec.born_host[0],
        store_timestamp=_timestamp(rec.store_timestamp),
        store_host=f"{rec.store_host[0]}:{rec.store_host[1]}",
        queue_id=rec.queue_id, queue_offset=rec.queue_offset, receipt_handle=p.handle.encode(),
        delivery_attempt=p.entry.attempt, invisible_duration=invisible)
    tag = props.get(record.PROPERTY_TAGS)
    if tag:
        sp.tag = tag
    keys = props.get(record.PROPERTY_KEYS)
    if keys:
        sp.keys.extend(k for k in keys.split(record.KEY_SEPARATOR) if k)
    if group:
        sp.message_group = group
    user = {k: val for k, val in props.items() if k not in SYSTEM_PROPERTY_KEYS and k != "POP_OP"}
    return definition_pb2.Message(topic=client_resource(namespace, p.topic), user_properties=user,
                                  system_properties=sp, body=rec.body)


def _handle(text: str) -> ReceiptHandle:
    try:
        return ReceiptHandle.decode(text)
    except BadHandleError as exc:
        raise V2Error(Code.INVALID_RECEIPT_HANDLE, str(exc)) from None


class Consumer:
    def __init__(self, app: BrokerApp, pop: PopService, clients: ClientRegistry) -> None:
        self.app = app
        self.pop = pop
        self.clients = clients

    def _check_master(self) -> None:
        cfg = self.app.broker_config
        if not cfg.is_master:
            raise V2Error(Code.FORBIDDEN, f"broker {cfg.broker_name} (brokerId={cfg.broker_id}) is a slave: "
                          "receive from the master of the broker group")

    def _group(self, resource: definition_pb2.Resource, meta: RequestMeta) -> str:
        group = group_name(resource, meta)
        try:
            config = self.app.ensure_group(group)
        except ServiceError as exc:
            raise from_service_error(exc, not_found=Code.CONSUMER_GROUP_NOT_FOUND,
                                     invalid=Code.ILLEGAL_CONSUMER_GROUP) from None
        if not config.consume_enable:
            raise V2Error(Code.FORBIDDEN, f"group {group!r} may not consume (consumeEnable=false)")
        return group

    async def receive(self, request: service_pb2.ReceiveMessageRequest, meta: RequestMeta,
                      stopping: Callable[[], bool]) -> list[service_pb2.ReceiveMessageResponse]:
        self._check_master()
        group = self._group(request.group, meta)
        topic = topic_name(request.message_queue.topic, meta)
        expr = request.filter_expression
        if expr.type == definition_pb2.FilterType.SQL:
            raise V2Error(Code.ILLEGAL_FILTER_EXPRESSION, "SQL92 filters are not supported; filter by tag")
        try:
            tag_filter = v.parse_tag_expression(expr.expression or "*")
        except InvalidArgumentError as exc:
            raise V2Error(Code.ILLEGAL_FILTER_EXPRESSION, str(exc)) from None
        if request.auto_renew and not request.HasField("invisible_duration"):
            invisible = self.pop.auto_renew_ms
        else:
            invisible = _ms(request.invisible_duration)
            if not MIN_INVISIBLE_MS <= invisible <= MAX_INVISIBLE_MS:
                raise V2Error(Code.ILLEGAL_INVISIBLE_TIME,
                              f"invisible duration {invisible} ms is outside [{MIN_INVISIBLE_MS}, "
                              f"{MAX_INVISIBLE_MS}] ms")
        poll = _ms(request.long_polling_timeout) if request.HasField("long_polling_timeout") \
            else LONG_POLLING_TIMEOUT_MS
        if not 0 <= poll <= MAX_POLL_MS:
            raise V2Error(Code.ILLEGAL_POLLING_TIME,
                          f"long polling timeout {poll} ms is outside [0, {MAX_POLL_MS}] ms")
        batch = request.batch_size or 32
        if not 0 < batch <= MAX_BATCH:
            raise V2Error(Code.BAD_REQUEST, f"batch size {batch} is outside [1, {MAX_BATCH}]")
        if self.app.topics.get(topic) is None:
            raise V2Error(Code.TOPIC_NOT_FOUND, f"topic {topic!r} does not exist on broker "
                          f"{self.app.broker_config.broker_name}")
        req = PopRequest(group, topic, request.message_queue.id, batch, invisible, tag_filter,
                         poll / 1000 * 0.9, meta.client_id, request.auto_renew)
        try:
            popped = await self.pop.pop(req, stopping)
        except ServiceError as exc:
            raise from_service_error(exc) from None
        if not popped:
            return [service_pb2.ReceiveMessageResponse(
                status=status(Code.MESSAGE_NOT_FOUND, "no new message"))]
        namespace = meta.namespace
        # The SDKs measure their receive latency from the delivery timestamp (the Python
        # PushConsumer fails without one).
        out = [service_pb2.ReceiveMessageResponse(status=ok()),
               service_pb2.ReceiveMessageResponse(delivery_timestamp=_timestamp(int(time.time() * 1000)))]
        out.extend(service_pb2.ReceiveMessageResponse(message=to_v2(p, namespace)) for p in popped)
        return out

    def ack(self, request: service_pb2.AckMessageRequest,
            meta: RequestMeta) -> service_pb2.AckMessageResponse:
        self._check_master()
        group = self._group(request.group, meta)
        topic_name(request.topic, meta)
        handles: list[ReceiptHandle | None] = []
        errors: list[str] = []
        for entry in request.entries:
            try:
                handles.append(_handle(entry.receipt_handle))
                errors.append("")
            except V2Error as exc:
                handles.append(None)
                errors.append(exc.message)
        valid = [h for h in handles if h is not None]
        results = iter(self.pop.ack(group, valid))
        response = service_pb2.AckMessageResponse()
        failed = 0
        for entry, handle, error in zip(request.entries, handles, errors, strict=True):
            why = error if handle is None else next(results)
            if why:
                failed += 1
            response.entries.add(message_id=entry.message_id, receipt_handle=entry.receipt_handle,
                                 status=status(Code.INVALID_RECEIPT_HANDLE, why) if why else ok())
        if failed == 0:
            response.status.CopyFrom(ok())
        elif failed == len(request.entries):
            response.status.CopyFrom(status(Code.INVALID_RECEIPT_HANDLE, response.entries[0].status.message))
        else:
            response.status.CopyFrom(status(Code.MULTIPLE_RESULTS, f"{failed} of {len(request.entries)} "
                                            "entries were not acked"))
        return response

    def change_invisible(self, request: service_pb2.ChangeInvisibleDurationRequest,
                         meta: RequestMeta) -> service_pb2.ChangeInvisibleDurationResponse:
        self._check_master()
        group = self._group(request.group, meta)
        topic_name(request.topic, meta)
        handle = _handle(request.receipt_handle)
        invisible = _ms(request.invisible_duration)
        if not 0 <= invisible <= MAX_INVISIBLE_MS:
            raise V2Error(Code.ILLEGAL_INVISIBLE_TIME,
                          f"invisible duration {invisible} ms is outside [0, {MAX_INVISIBLE_MS}] ms")
        try:
            new = self.pop.change_invisible(group, handle, invisible)
        except ServiceError as exc:
            raise V2Error(Code.INVALID_RECEIPT_HANDLE, str(exc)) from None
        return service_pb2.ChangeInvisibleDurationResponse(status=ok(), receipt_handle=new.encode())

    def forward_to_dlq(self, request: service_pb2.ForwardMessageToDeadLetterQueueRequest,
                       meta: RequestMeta) -> service_pb2.ForwardMessageToDeadLetterQueueResponse:
        self._check_master()
        group = self._group(request.group, meta)
        topic_name(request.topic, meta)
        handle = _handle(request.receipt_handle)
        try:
            self.pop.forward_to_dlq(group, handle)
        except ServiceError as exc:
            raise V2Error(Code.INVALID_RECEIPT_HANDLE, str(exc)) from None
        return service_pb2.ForwardMessageToDeadLetterQueueResponse(status=ok())

    def assignments(self, request: service_pb2.QueryAssignmentRequest, meta: RequestMeta,
                    route: namesrv_pb2.TopicRouteData | None) -> service_pb2.QueryAssignmentResponse:
        group = self._group(request.group, meta)
        if route is None:
            raise V2Error(Code.TOPIC_NOT_FOUND, f"topic {topic_name(request.topic, meta)!r} does not exist")
        fifo = self.app.ensure_group(group).consume_message_orderly
        queues = [q for q in r.message_queues(request.topic, route)
                  if q.broker.id == 0 and q.permission in (definition_pb2.Permission.READ,
                                                           definition_pb2.Permission.READ_WRITE)]
        out = service_pb2.QueryAssignmentResponse(status=ok())
        seen: set[str] = set()
        for q in queues:
            if fifo:
                out.assignments.add(message_queue=q)
            elif q.broker.name not in seen:
                seen.add(q.broker.name)
                mq = definition_pb2.MessageQueue()
                mq.CopyFrom(q)
                mq.id = -1
                out.assignments.add(message_queue=mq)
        return out

    def client_connected(self, client_id: str) -> bool:
        client = self.clients.get(client_id)
        return client is not None and bool(client.streams)
