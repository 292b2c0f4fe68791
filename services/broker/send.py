"""The produce path: validate, pick a queue, rewrite delayed messages, append to the store, and
wait for the durability the broker is configured for (SYNC_FLUSH: the group-commit flush;
SYNC_MASTER: a slave's acknowledgement).

Everything runs on the event loop. The store's append is non-blocking; waiting for a flush or a
slave is an ``await`` with a real deadline, so one slow disk or slave never blocks other
requests.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple

from pocketmq.broker.v1 import broker_pb2
from services.broker import validation as v
from services.broker.config import BrokerConfig, BrokerRole
from services.broker.longpoll import QueueNotifier
from services.broker.metadata import TopicConfig, TopicConfigManager
from services.broker.metrics import BrokerMetrics
from services.broker.rewrite import is_special, rewrite_special
from services.broker.storage import bulk, record
from services.broker.storage.config import FlushDiskType, StoreConfig
from services.broker.storage.status import PutMessageStatus, PutResult
from services.broker.storage.store import MessageStore, refused
from services.common.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
)

log = logging.getLogger(__name__)

_NO_PROPERTIES: Mapping[str, str] = MappingProxyType({})

#: Waits for a slave acknowledgement of everything up to an end offset (SYNC_MASTER).
ReplicationWait = Callable[[int], Awaitable[PutMessageStatus]]


class SendOutcome(NamedTuple):
    status: PutMessageStatus
    msg_ids: list[str]
    queue_id: int
    queue_offset: int
    remark: str = ""

    def to_single(self) -> broker_pb2.SendMessageResponse:
        return broker_pb2.SendMessageResponse(
            status=PUT_STATUS_TO_PB[self.status], msg_id=self.msg_ids[0] if self.msg_ids else "",
            queue_id=self.queue_id, queue_offset=self.queue_offset, remark=self.remark)

    def to_batch(self, request_id: int = 0) -> broker_pb2.SendMessageBatchResponse:
        return broker_pb2.SendMessageBatchResponse(
            status=PUT_STATUS_TO_PB[self.status], msg_ids=self.msg_ids, queue_id=self.queue_id,
            queue_offset=self.queue_offset, remark=self.remark, request_id=request_id)


PUT_STATUS_TO_PB: Mapping[PutMessageStatus, broker_pb2.PutStatus] = {
    s: getattr(broker_pb2, s.name) for s in PutMessageStatus
}

_REMARKS = {
    PutMessageStatus.FLUSH_DISK_TIMEOUT:
        "stored, but not flushed to disk within syncFlushTimeout ({timeout} ms)",
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT:
        "stored on the master, but no slave acknowledged it within slaveTimeout ({timeout} ms)",
    PutMessageStatus.SLAVE_NOT_AVAILABLE:
        "stored on the master, but no slave is connected or in sync, so it is not replicated yet",
}


def offset_msg_ids(prefix: str, physical_offsets: Sequence[int]) -> list[str]:
    """The offset message ids of records at ``physical_offsets`` of a store whose ids start
    with ``prefix`` (the store host's 16 hex digits; see
    :func:`~pocketmq.wire.msgid.offset_msg_id`): every offset in hex at once, a space between
    them, the prefix put before each and the whole cut at the spaces (no step per message)."""
    packed = struct.pack(f">{len(physical_offsets)}Q", *physical_offsets)
    return (prefix + packed.hex(" ", 8).upper().replace(" ", " " + prefix)).split()


def _varint_size(value: int) -> int:
    """Bytes of ``value`` as a protobuf varint (negative int32/int64 values take 10)."""
    return 10 if value < 0 else max(1, (value.bit_length() + 6) // 7)


def _string_field_size(text: str) -> int:
    """Bytes of a set string field numbered below 16 (0 when empty: proto3 leaves it out)."""
    if not text:
        return 0
    n = len(text.encode())
    return 1 + _varint_size(n) + n


def _body_message_size(body_length: int) -> int:
    """Bytes of one ``messages`` entry of a SendMessageBatchRequest that has a body of
    ``body_length`` (> 0) bytes and no other field."""
    inner = 1 + _varint_size(body_length) + body_length
    return 1 + _varint_size(inner) + inner


def bodies_only(request: broker_pb2.SendMessageBatchRequest, lengths: Sequence[int]) -> bool:
    """Whether every message of ``request`` (of these body lengths, each > 0) has a body and no
    other field (no topic, tags, keys, properties, delay level, flag, nor a field this broker
    does not know): true exactly when the request's encoded size is that of its own fields plus
    body-only messages (every field present adds bytes; proto3 leaves unset ones out). One size
    computation for the batch instead of reading each message's fields."""
    first = lengths[0]
    if min(lengths) == max(lengths):
        messages = _body_message_size(first) * len(lengths)
    else:
        messages = sum(map(_body_message_size, lengths))
    own = (_string_field_size(request.topic) + _string_field_size(request.producer_group)
           + sum(1 + _varint_size(v) for v in (request.queue_id, request.born_timestamp, request.request_id)
                 if v))
    return bool(request.ByteSize() == own + messages)


class SendService:
    def __init__(
        self,
        broker_config: BrokerConfig,
        store_config: StoreConfig,
        store: MessageStore,
        notifier: QueueNotifier,
        topics: TopicConfigManager,
        metrics: BrokerMetrics,
        *,
        store_host: record.Host,
        master_addr: Callable[[], str],
        replication_wait: ReplicationWait | None = None,
    ) -> None:
        self.config = broker_config
        self.store_config = store_config
        self.store = store
        self.notifier = notifier
        self.topics = topics
        self.metrics = metrics
        self.store_host = store_host
        self.master_addr = master_addr
        self.replication_wait = replication_wait
        self.max_delay_level = len(broker_config.delay_levels_ms)
        self._sync_flush = store_config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self._sync_flush_timeout_s = store_config.sync_flush_timeout / 1000
        self._sync_master = broker_config.broker_role is BrokerRole.SYNC_MASTER
        self._round_robin: dict[str, itertools.count[int]] = {}
        # Offset message ids share the store host prefix: format only the offset per message.
        self._msg_id_prefix = record.offset_msg_id(store_host, 0)[:16]

    @property
    def waits_for_durability(self) -> bool:
        """True when replies wait for a flush or a slave (SYNC_FLUSH or SYNC_MASTER)."""
        return self._sync_flush or self._sync_master

    def msg_ids(self, physical_offsets: Sequence[int]) -> list[str]:
        prefix = self._msg_id_prefix
        n = len(physical_offsets)
        if n < 4:
            return [f"{prefix}{offset:016X}" for offset in physical_offsets]
        return offset_msg_ids(prefix, physical_offsets)

    # -- checks -----------------------------------------------------------------------------

    def check_writable_broker(self) -> None:
        if not self.config.broker_permission & v.PERM_WRITE:
            raise PermissionDeniedError(
                f"broker {self.config.broker_name} is drained of writes (brokerPermission="
                f"{self.config.broker_permission}); send to another broker group")
        if not self.config.is_master:
            master = self.master_addr() or "unknown yet (not learned from the NameServer)"
            raise FailedPreconditionError(
                f"broker {self.config.broker_name} (brokerId={self.config.broker_id}) is a SLAVE and "
                f"refuses writes; send to the master of {self.config.broker_name} at {master}"
            )

    def resolve_topic(self, topic: str) -> TopicConfig:
        v.validate_send_topic(topic)
        tc = self.topics.get(topic)
        if tc is None:
            if not self.config.auto_create_topic_enable:
                raise NotFoundError(
                    f"topic {topic!r} does not exist on broker {self.config.broker_name} and "
                    "autoCreateTopicEnable is false; create it first"
                )
            tc = self.topics.auto_create(topic)
            log.info("topic auto-created", extra={"topic": topic, "queues": tc.write_queue_nums})
        if not tc.writable:
            raise PermissionDeniedError(
                f"topic {topic!r} is not writable on broker {self.config.broker_name} "
                f"(perm {v.perm_to_string(tc.perm)})"
            )
        return tc

    def select_queue(self, tc: TopicConfig, queue_id: int) -> int:
        if queue_id < 0:
            counter = self._round_robin.get(tc.topic_name)
            if counter is None:
                counter = self._round_robin[tc.topic_name] = itertools.count()
            return next(counter) % tc.write_queue_nums
        if queue_id >= tc.write_queue_nums:
            raise InvalidArgumentError(
                f"queue id {queue_id} is out of range: topic {tc.topic_name!r} has "
                f"{tc.write_queue_nums} write queues (0..{tc.write_queue_nums - 1})"
            )
        return queue_id

    def _illegal(self, body: bytes, props: Mapping[str, str]) -> str:
        """Why a message must be refused with MESSAGE_ILLEGAL, or ""."""
        size = len(body)
        if size == 0:
            return "message body is empty"
        if size > self.store_config.max_message_size:
            return (f"message body is {size} bytes, more than maxMessageSize "
                    f"({self.store_config.max_message_size} bytes)")
        for key in props:
            if key in v.RESERVED_PROPERTIES:
                return f"property {key!r} is reserved for the broker"
        return ""

    # -- building store messages ------------------------------------------------------------

    def _properties(self, msg: broker_pb2.Message, producer_group: str) -> dict[str, str]:
        props = dict(msg.properties) if msg.properties else {}
        if msg.tags:
            props[record.PROPERTY_TAGS] = msg.tags
        if msg.keys:
            props[record.PROPERTY_KEYS] = msg.keys
        if producer_group:
            props[record.PROPERTY_PRODUCER_GROUP] = producer_group
        return props

    def _refused(self, status: PutMessageStatus, queue_id: int, remark: str,
                 started: float, count: int) -> SendOutcome:
        self.metrics.put(status.name, count, 0, time.perf_counter() - started)
        log.debug("send refused", extra={"status": status.name, "remark": remark})
        return SendOutcome(status, [], queue_id, -1, remark)

    # -- sending ----------------------------------------------------------------------------

    async def send_one(self, request: broker_pb2.SendMessageRequest, born_host: record.Host) -> SendOutcome:
        msg = request.message
        return await self.send_message(
            msg.topic, msg.body, self._properties(msg, ""), born_host, queue_id=request.queue_id,
            flag=msg.flag, delay_level=msg.delay_level, born_timestamp=request.born_timestamp,
            producer_group=request.producer_group)

    async def send_message(
        self, topic: str, body: bytes, props: dict[str, str], born_host: record.Host, *,
        queue_id: int = -1, flag: int = 0, delay_level: int = 0, born_timestamp: int = 0,
        producer_group: str = "", topic_config: TopicConfig | None = None,
    ) -> SendOutcome:
        """Send one message: the produce path of every API (``props`` becomes the message's).
        ``topic_config``: what :meth:`resolve_topic` answered for ``topic`` just before, if the
        caller asked already (it is not looked up again)."""
        started = time.perf_counter()
        self.check_writable_broker()
        tc = topic_config if topic_config is not None else self.resolve_topic(topic)
        queue_id = self.select_queue(tc, queue_id)
        if producer_group:
            props[record.PROPERTY_PRODUCER_GROUP] = producer_group
        reason = self._illegal(body, props)
        if not reason:
            try:
                level = v.effective_delay_level(delay_level, self.max_delay_level)
            except InvalidArgumentError as exc:
                reason = str(exc)
        if reason:
            return self._refused(PutMessageStatus.MESSAGE_ILLEGAL, queue_id, reason, started, 1)
        born = born_timestamp or int(time.time() * 1000)
        special = rewrite_special(
            props, tc.topic_name, queue_id, delay_level=level, max_delay_sec=self.config.timer_max_delay_sec,
            now_ms=int(time.time() * 1000)) if is_special(props) else None
        if special is not None:
            # Timer or half (transaction) message: parked in a system topic until due/committed.
            stored = record.Message(special[0], body, special[1], flag, props, born, born_host)
            outcome = await self._append([stored], queue_id, started, len(body))
            return outcome._replace(queue_offset=-1) if outcome.msg_ids else outcome
        if level:
            # RocketMQ's scheduled delivery: park in SCHEDULE_TOPIC_XXXX, queue = level - 1.
            props[record.PROPERTY_REAL_TOPIC] = tc.topic_name
            props[record.PROPERTY_REAL_QUEUE_ID] = str(queue_id)
            props[record.PROPERTY_DELAY_TIME_LEVEL] = str(level)
            stored = record.Message(v.SCHEDULE_TOPIC, body, level - 1, flag, props, born, born_host)
        else:
            stored = record.Message(tc.topic_name, body, queue_id, flag, props, born, born_host)
        outcome = await self._append([stored], queue_id, started, len(body))
        if level and outcome.msg_ids:
            # The client sees the queue it asked for; the offset is assigned on delivery.
            outcome = outcome._replace(queue_id=queue_id, queue_offset=-1)
        return outcome

    async def send_batch(
        self, request: broker_pb2.SendMessageBatchRequest, born_host: record.Host
    ) -> SendOutcome:
        started = time.perf_counter()
        self.check_writable_broker()
        topic = request.topic
        tc = self.resolve_topic(topic)
        queue_id = self.select_queue(tc, request.queue_id)
        messages = request.messages
        if not messages:
            raise InvalidArgumentError("a batch needs at least one message")
        count = len(messages)
        born = request.born_timestamp or int(time.time() * 1000)
        producer_group = request.producer_group
        max_size = self.store_config.max_message_size
        try:
            plain_tail, plain_code = record.encode_tail(
                topic, {record.PROPERTY_PRODUCER_GROUP: producer_group} if producer_group else _NO_PROPERTIES)
        except record.RecordError as exc:
            return await self._finish(refused(exc), queue_id, started, count, 0)
        bodies = [msg.body for msg in messages]
        lengths = list(map(len, bodies))
        if min(lengths) > 0 and max(lengths) <= max_size and bodies_only(request, lengths):
            # Messages with a body and nothing else (the usual batch): one record encode for
            # the whole batch (services/broker/storage/bulk.py), no object per message.
            try:
                batch = bulk.uniform_batch(topic, queue_id, bodies, plain_tail, plain_code, 0, born,
                                           born_host, lengths)
            except record.RecordError as exc:
                return await self._finish(refused(exc), queue_id, started, count, 0)
            return await self._finish(self.append_uniform(batch), queue_id, started, count,
                                      sum(lengths))
        # One topic, queue and born host per batch: encode the topic (and the producer group, the
        # only property most batches carry) once, and build each record's store form straight
        # from the request (no Message, no per-message property dict when it has none).
        prepared: list[record.PreparedRecord] = []
        append = prepared.append
        #: Messages with properties of their own, by position (the key index reads them).
        with_props: dict[int, Mapping[str, str]] = {}
        make = record.prepared_record
        encode_tail = record.encode_tail
        total = 0
        try:
            born_ip = record.host_bytes(born_host[0])
            for msg in messages:
                body = msg.body
                size = len(body)
                total += size
                if msg.topic and msg.topic != topic:
                    raise InvalidArgumentError(
                        f"every message of a batch must have the batch's topic {topic!r} (or none), "
                        f"got {msg.topic!r}")
                if msg.delay_level:
                    return self._refused(PutMessageStatus.MESSAGE_ILLEGAL, queue_id,
                                         "delay levels are not supported in batches", started, count)
                if msg.properties or msg.tags or msg.keys:
                    props = self._properties(msg, producer_group)
                    reason = self._illegal(body, props)
                    if not reason and is_special(props):
                        reason = ("timer and transaction messages are not supported in batches; "
                                  "send them one by one")
                    if not reason:
                        tail, code = encode_tail(topic, props)
                        with_props[len(prepared)] = props
                else:
                    tail, code = plain_tail, plain_code
                    reason = "" if 0 < size <= max_size else self._illegal(body, _NO_PROPERTIES)
                if reason:
                    return self._refused(PutMessageStatus.MESSAGE_ILLEGAL, queue_id,
                                         f"message {len(prepared)} of the batch: {reason}", started, count)
                append(make(topic, queue_id, body, tail, code, msg.flag, born, born_ip, born_host[1]))
        except record.RecordError as exc:
            return await self._finish(refused(exc), queue_id, started, count, total)
        # What the key index reads of each record: its topic and properties (keys, UNIQ_KEY).
        indexed = [record.Message(topic, b"", queue_id)] * count
        for i, own in with_props.items():
            indexed[i] = record.Message(topic, b"", queue_id, properties=own)
        return await self._finish(self.append_prepared(prepared, indexed), queue_id, started, count, total)

    async def _append(self, msgs: list[record.Message], queue_id: int, started: float,
                      body_bytes: int) -> SendOutcome:
        return await self._finish(self.append(msgs), queue_id, started, len(msgs), body_bytes)

    async def _finish(self, result: PutResult, queue_id: int, started: float, count: int,
                      body_bytes: int) -> SendOutcome:
        """Wait for the durability the broker is configured for and answer."""
        status = result.status
        if not result.stored:
            remark = result.error or f"not stored: {status.name}"
            return self._refused(status, queue_id, remark, started, count)
        if self._sync_flush and status is PutMessageStatus.PUT_OK:
            status = await self._wait_flush(result.end_offset)
        if self._sync_master and status is PutMessageStatus.PUT_OK:
            status = await self._wait_replication(result.end_offset)
        remark = ""
        if status is not PutMessageStatus.PUT_OK:
            timeout = (self.store_config.sync_flush_timeout if status is PutMessageStatus.FLUSH_DISK_TIMEOUT
                       else self.config.slave_timeout)
            remark = _REMARKS.get(status, status.name).format(timeout=timeout)
        self.metrics.put(status.name, count, body_bytes, time.perf_counter() - started)
        ids = self.msg_ids(result.physical_offsets)
        return SendOutcome(status, ids, queue_id, result.queue_offsets[0], remark)

    async def _wait_flush(self, end_offset: int) -> PutMessageStatus:
        future = self.store.flush_future(end_offset)
        try:
            status = await asyncio.wait_for(asyncio.wrap_future(future), self._sync_flush_timeout_s)
        except TimeoutError:
            status = PutMessageStatus.FLUSH_DISK_TIMEOUT
        if status is not PutMessageStatus.PUT_OK:
            log.warning("sync flush failed", extra={"end_offset": end_offset, "status": status.name})
        return status

    async def _wait_replication(self, end_offset: int) -> PutMessageStatus:
        """The one place a SYNC_MASTER write waits for its slaves."""
        if self.replication_wait is None:
            return PutMessageStatus.SLAVE_NOT_AVAILABLE
        return await self.replication_wait(end_offset)

    def append(self, msgs: Sequence[record.Message]) -> PutResult:
        """Append to the store and wake the pulls waiting on the queue(s) written. Also used for
        messages the broker produces itself (delayed delivery): no validation, no waiting."""
        if len(msgs) == 1:
            first = msgs[0]
            result = self.store.append_message(first)  # the store's one-record fast path
            if result.stored:
                self.notifier.notify(first.topic, first.queue_id)
            return result
        result = self.store.append_messages(msgs)
        if result.stored and msgs:
            notify = self.notifier.notify
            first = msgs[0]
            notify(first.topic, first.queue_id)
            for msg in msgs:
                if msg.queue_id != first.queue_id or msg.topic != first.topic:
                    notify(msg.topic, msg.queue_id)
        return result

    def append_prepared(self, prepared: Sequence[record.PreparedRecord],
                        messages: Sequence[record.Message]) -> PutResult:
        """:meth:`append` for records of one topic and queue built by
        :func:`~services.broker.storage.record.prepared_record` (``messages``: see
        :meth:`MessageStore.append_prepared`)."""
        result = self.store.append_prepared(prepared, messages)
        if result.stored and prepared:
            first = prepared[0]
            self.notifier.notify(first.topic, first.queue_id)
        return result

    def append_uniform(self, batch: bulk.UniformBatch) -> PutResult:
        """:meth:`append_prepared` for a body-only batch made by
        :func:`~services.broker.storage.bulk.uniform_batch` (its shared tail holds no index key)."""
        result = self.store.append_uniform(batch)
        if result.stored:
            self.notifier.notify(batch.topic, batch.queue_id)
        return result

    async def deliver(self, msgs: list[record.Message]) -> PutResult:
        """Delayed delivery's put (see :meth:`append`)."""
        return self.append(msgs)
