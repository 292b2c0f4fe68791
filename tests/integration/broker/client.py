"""A thin synchronous test client over the generated broker stubs (the user-facing client has
its own package); raw-records replies decode with :func:`pocketmq.wire.record.decode_records`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import grpc

from pocketmq.broker.v1 import broker_pb2 as pb
from pocketmq.broker.v1 import broker_pb2_grpc
from pocketmq.common.v1 import common_pb2

TIMEOUT = 10.0


def rpc_error(call: object) -> grpc.RpcError:
    """The RpcError a call raised (for ``pytest.raises``-free assertions)."""
    assert isinstance(call, grpc.RpcError)
    return call


class BrokerClient:
    def __init__(self, addr: str) -> None:
        self.addr = addr
        self.channel = grpc.insecure_channel(addr)
        self.stub = broker_pb2_grpc.BrokerStub(self.channel)
        self.meta = broker_pb2_grpc.BrokerMetadataStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def send(self, topic: str, body: bytes, queue_id: int = -1, *, tags: str = "", keys: str = "",
             delay_level: int = 0, properties: dict[str, str] | None = None) -> pb.SendMessageResponse:
        msg = pb.Message(topic=topic, body=body, tags=tags, keys=keys, delay_level=delay_level,
                         properties=properties or {})
        return self.stub.SendMessage(pb.SendMessageRequest(message=msg, queue_id=queue_id), timeout=TIMEOUT)

    def send_batch(self, topic: str, bodies: Sequence[bytes],
                   queue_id: int = -1) -> pb.SendMessageBatchResponse:
        return self.stub.SendMessageBatch(pb.SendMessageBatchRequest(
            topic=topic, queue_id=queue_id, messages=[pb.Message(body=b) for b in bodies]), timeout=TIMEOUT)

    def pull(self, topic: str, queue_id: int, offset: int, max_nums: int = 32, *, group: str = "g",
             subscription: str = "*", suspend_ms: int = 0, raw: bool = False,
             timeout: float = TIMEOUT) -> pb.PullMessageResponse:
        return self.stub.PullMessage(pb.PullMessageRequest(
            consumer_group=group, topic=topic, queue_id=queue_id, queue_offset=offset, max_msg_nums=max_nums,
            subscription=subscription, suspend_timeout_ms=suspend_ms, raw_records=raw), timeout=timeout)

    def pull_all(self, topic: str, queue_id: int, offset: int = 0, group: str = "g") -> list[pb.MessageExt]:
        out: list[pb.MessageExt] = []
        while True:
            r = self.pull(topic, queue_id, offset, 256, group=group)
            if r.status != pb.FOUND:
                return out
            out.extend(r.messages)
            offset = r.next_begin_offset

    def max_offset(self, topic: str, queue_id: int) -> int:
        request = pb.QueueRequest(topic=topic, queue_id=queue_id)
        return int(self.stub.GetMaxOffset(request, timeout=TIMEOUT).offset)

    def min_offset(self, topic: str, queue_id: int) -> int:
        request = pb.QueueRequest(topic=topic, queue_id=queue_id)
        return int(self.stub.GetMinOffset(request, timeout=TIMEOUT).offset)

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.stub.UpdateConsumerOffset(pb.UpdateConsumerOffsetRequest(
            consumer_group=group, topic=topic, queue_id=queue_id, offset=offset), timeout=TIMEOUT)

    def committed(self, group: str, topic: str, queue_id: int) -> int:
        return int(self.stub.QueryConsumerOffset(pb.QueryConsumerOffsetRequest(
            consumer_group=group, topic=topic, queue_id=queue_id), timeout=TIMEOUT).offset)

    def create_topic(self, topic: str, read: int = 4, write: int = 4,
                     perm: int = 6) -> common_pb2.TopicConfig:
        return self.stub.CreateTopic(pb.CreateTopicRequest(topic_config=common_pb2.TopicConfig(
            topic_name=topic, read_queue_nums=read, write_queue_nums=write, perm=perm)),
            timeout=TIMEOUT).topic_config

    def topics(self) -> dict[str, common_pb2.TopicConfig]:
        reply = self.stub.ListTopics(pb.ListTopicsRequest(), timeout=TIMEOUT)
        return {t.topic_name: t for t in reply.topic_configs}

    def create_group(self, group: str, **fields: object) -> pb.SubscriptionGroupConfig:
        config = pb.SubscriptionGroupConfig(group_name=group, consume_enable=True, **fields)  # type: ignore[arg-type]
        return self.stub.CreateSubscriptionGroup(pb.CreateSubscriptionGroupRequest(config=config),
                                                 timeout=TIMEOUT).config

    def groups(self) -> list[str]:
        reply = self.stub.ListSubscriptionGroups(pb.ListSubscriptionGroupsRequest(), timeout=TIMEOUT)
        return [g.group_name for g in reply.configs]

    def heartbeat(self, group: str, client_id: str, topic: str, expression: str = "*") -> None:
        self.stub.ConsumerHeartbeat(pb.ConsumerHeartbeatRequest(
            consumer_group=group, client_id=client_id,
            subscriptions=[pb.Subscription(topic=topic, expression=expression)]), timeout=TIMEOUT)

    def consumers(self, group: str) -> list[str]:
        return list(self.stub.GetConsumerList(pb.GetConsumerListRequest(consumer_group=group),
                                              timeout=TIMEOUT).client_ids)

    def status(self) -> pb.BrokerStatus:
        return self.stub.GetBrokerStatus(pb.GetBrokerStatusRequest(), timeout=TIMEOUT)

    def offsets_table(self) -> dict[tuple[str, str, int], int]:
        table = self.meta.GetAllConsumerOffsets(pb.GetAllConsumerOffsetsRequest(), timeout=TIMEOUT)
        return {(e.consumer_group, e.topic, e.queue_id): e.offset for e in table.offsets}

    def stream_pull(self, topic: str, queue_id: int, offset: int, max_nums: int = 64,
                    keepalive_ms: int = 0) -> Iterator[pb.PullMessageResponse]:
        return iter(self.stub.PullMessageStream(pb.PullMessageRequest(
            consumer_group="g", topic=topic, queue_id=queue_id, queue_offset=offset, max_msg_nums=max_nums,
            suspend_timeout_ms=keepalive_ms, raw_records=True)))
