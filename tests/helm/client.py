"""Minimal synchronous gRPC calls the end-to-end tests make (the project's client library is
not used on purpose: these tests exercise the chart's wiring, not the client)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import grpc

from pocketmq.broker.v1 import broker_pb2 as bpb
from pocketmq.broker.v1 import broker_pb2_grpc
from pocketmq.common.v1 import common_pb2
from pocketmq.namesrv.v1 import namesrv_pb2 as npb
from pocketmq.namesrv.v1 import namesrv_pb2_grpc
from pocketmq.wire.auth import Credentials
from tests.support import signed_channel

TIMEOUT = 10.0
#: Credentials every call signs with (set while a chart with access control runs).
CREDENTIALS: Credentials | None = None


def channel(addr: str) -> grpc.Channel:
    """A channel to ``addr`` signing with :data:`CREDENTIALS` (when set)."""
    return signed_channel(addr, CREDENTIALS)
PERM_READ_WRITE = common_pb2.PERMISSION_READ | common_pb2.PERMISSION_WRITE


@contextmanager
def namesrv(addr: str) -> Iterator[namesrv_pb2_grpc.NameServerStub]:
    with channel(addr) as ch:
        yield namesrv_pb2_grpc.NameServerStub(ch)


@contextmanager
def broker(addr: str) -> Iterator[broker_pb2_grpc.BrokerStub]:
    with channel(addr) as ch:
        yield broker_pb2_grpc.BrokerStub(ch)


def cluster_info(addr: str) -> npb.ClusterInfo:
    with namesrv(addr) as stub:
        return stub.GetBrokerClusterInfo(npb.GetBrokerClusterInfoRequest(), timeout=TIMEOUT)


def route(addr: str, topic: str) -> npb.TopicRouteData:
    with namesrv(addr) as stub:
        return stub.GetRouteInfoByTopic(npb.GetRouteInfoByTopicRequest(topic=topic), timeout=TIMEOUT)


def status(addr: str) -> bpb.BrokerStatus:
    with broker(addr) as stub:
        return stub.GetBrokerStatus(bpb.GetBrokerStatusRequest(), timeout=TIMEOUT)


def ha_status(addr: str) -> bpb.HAStatus:
    with broker(addr) as stub:
        return stub.GetHAStatus(bpb.GetHAStatusRequest(), timeout=TIMEOUT)


def create_topic(addr: str, topic: str, queues: int) -> None:
    config = common_pb2.TopicConfig(topic_name=topic, read_queue_nums=queues, write_queue_nums=queues,
                                    perm=PERM_READ_WRITE)
    with broker(addr) as stub:
        stub.CreateTopic(bpb.CreateTopicRequest(topic_config=config), timeout=TIMEOUT)


def send(addr: str, topic: str, bodies: Sequence[bytes], queue_id: int = -1) -> bpb.SendMessageBatchResponse:
    request = bpb.SendMessageBatchRequest(topic=topic, queue_id=queue_id, producer_group="helm-e2e",
                                          messages=[bpb.Message(topic=topic, body=b) for b in bodies])
    with broker(addr) as stub:
        return stub.SendMessageBatch(request, timeout=TIMEOUT)


def pull_all(addr: str, topic: str, queue_id: int, group: str = "helm-e2e") -> list[bytes]:
    """Every message of one queue from offset 0 (no long polling)."""
    bodies: list[bytes] = []
    offset = 0
    with broker(addr) as stub:
        while True:
            reply = stub.PullMessage(bpb.PullMessageRequest(
                consumer_group=group, topic=topic, queue_id=queue_id, queue_offset=offset, max_msg_nums=64,
                subscription="*", suspend_timeout_ms=0, commit_offset=-1), timeout=TIMEOUT)
            if reply.status != bpb.FOUND or not reply.messages:
                return bodies
            bodies += [m.body for m in reply.messages]
            offset = reply.next_begin_offset
