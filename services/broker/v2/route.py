"""QueryRoute answers: the MessageQueues of a topic, built from a route of the NameServer's table
(``pocketmq.namesrv.v1.TopicRouteData``). Pure; the broker and the NameServer both use it.

Per broker group: the master (``broker.id`` 0) at its client-reachable gRPC address; a group
without a live master is listed through its lowest slave, read-only. Queue ``i`` is readable
when ``i < read_queue_nums`` and the topic's perm allows reading, writable likewise, as
RocketMQ's proxy does. ``accept_message_types`` comes from the topic's ``message.type``
attribute; a topic without one accepts every type (the Python SDK refuses to send when the
list is empty).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from apache.rocketmq.v2 import definition_pb2
from pocketmq.namesrv.v1 import namesrv_pb2
from services.broker import validation as v
from services.common.config import parse_address

MessageType = definition_pb2.MessageType
ALL_TYPES = (MessageType.NORMAL, MessageType.FIFO, MessageType.DELAY, MessageType.TRANSACTION)
#: How a stored ``message.type`` reads as v2 types.
_TYPES: dict[str, tuple[definition_pb2.MessageType, ...]] = {
    "NORMAL": (MessageType.NORMAL,), "FIFO": (MessageType.FIFO,), "DELAY": (MessageType.DELAY,),
    "TRANSACTION": (MessageType.TRANSACTION,), "": ALL_TYPES}

#: Maps a broker's registered address to the address clients should use (TLS port, ...).
AddressMap = Callable[[str], str]


def accept_types(message_type: str) -> tuple[definition_pb2.MessageType, ...]:
    return _TYPES.get(message_type, ALL_TYPES)


def endpoints(addr: str) -> definition_pb2.Endpoints:
    host, port = parse_address(addr, "broker address", default_host="127.0.0.1")
    try:
        scheme = (definition_pb2.AddressScheme.IPv4 if ipaddress.ip_address(host).version == 4
                  else definition_pb2.AddressScheme.IPv6)
    except ValueError:
        scheme = definition_pb2.AddressScheme.DOMAIN_NAME
    return definition_pb2.Endpoints(scheme=scheme, addresses=[definition_pb2.Address(host=host, port=port)])


def _permission(readable: bool, writable: bool) -> int:
    if readable and writable:
        return definition_pb2.Permission.READ_WRITE
    if readable:
        return definition_pb2.Permission.READ
    if writable:
        return definition_pb2.Permission.WRITE
    return definition_pb2.Permission.NONE


def message_queues(topic: definition_pb2.Resource, route: namesrv_pb2.TopicRouteData,
                   address_map: AddressMap | None = None,
                   queue_nums: int = 0) -> list[definition_pb2.MessageQueue]:
    """The queues of ``route`` named ``topic``. ``queue_nums`` > 0 caps the queue counts (a
    route borrowed from the auto-create template topic)."""
    groups = {b.broker_name: b for b in route.broker_datas}
    out: list[definition_pb2.MessageQueue] = []
    for qd in route.queue_datas:
        group = groups.get(qd.broker_name)
        if group is None or not group.broker_addrs:
            continue
        broker_id = 0 if 0 in group.broker_addrs else min(group.broker_addrs)
        addr = group.broker_addrs[broker_id]
        if address_map is not None:
            addr = address_map(addr)
        broker = definition_pb2.Broker(name=qd.broker_name, id=broker_id, endpoints=endpoints(addr))
        reads, writes = qd.read_queue_nums, qd.write_queue_nums
        if queue_nums > 0:
            reads, writes = min(reads, queue_nums), min(writes, queue_nums)
        can_read = bool(qd.perm & v.PERM_READ)
        can_write = bool(qd.perm & v.PERM_WRITE) and broker_id == 0
        types = accept_types(qd.message_type)
        for queue_id in range(max(reads, writes)):
            out.append(definition_pb2.MessageQueue(
                topic=topic, id=queue_id, broker=broker, accept_message_types=types,
                permission=_permission(can_read and queue_id < reads,  # type: ignore[arg-type]
                                       can_write and queue_id < writes)))
    return out
