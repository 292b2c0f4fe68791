"""Shared by the timer/transaction suites: a cluster of real processes (module scope) and a
consumer that collects what a topic received."""

from __future__ import annotations

import asyncio

import grpc

from pocketmq import AsyncConsumer, ReceivedMessage
from pocketmq.broker.v1 import broker_pb2, broker_pb2_grpc
from tests.integration.client.cluster import Broker

#: Broker flags of these suites: quick transaction checks, a 1 h timer limit.
BROKER_FLAGS = ("--transaction-time-out", "1000", "--transaction-check-interval", "500",
                "--timer-max-delay-sec", "3600", "--timer-flush-interval-ms", "500")


def status(broker: Broker) -> broker_pb2.BrokerStatus:
    with grpc.insecure_channel(broker.addr) as channel:
        reply: broker_pb2.BrokerStatus = broker_pb2_grpc.BrokerStub(channel).GetBrokerStatus(
            broker_pb2.GetBrokerStatusRequest(), timeout=5)
        return reply


def knows_topic(broker: Broker, topic: str) -> bool:
    with grpc.insecure_channel(broker.addr) as channel:
        try:
            broker_pb2_grpc.BrokerStub(channel).GetTopic(broker_pb2.GetTopicRequest(topic=topic), timeout=5)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:  # type: ignore[attr-defined]
                return False
            raise
    return True


def max_offsets(broker: Broker, topic: str, queues: int) -> int:
    """Messages stored in the topic's queues on ``broker``."""
    total = 0
    with grpc.insecure_channel(broker.addr) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        for qid in range(queues):
            reply = stub.GetMaxOffset(broker_pb2.QueueRequest(topic=topic, queue_id=qid), timeout=5)
            total += reply.offset
    return total


async def collect(namesrv: str, group: str, topic: str, expect: int, within: float,
                  quiet: float = 0.0) -> list[ReceivedMessage]:
    """Consume ``topic`` from its first offset until ``expect`` messages arrived (or
    ``within`` seconds), then ``quiet`` seconds more to catch anything extra."""
    consumer = AsyncConsumer(group, namesrv, consume_from="first", rebalance_interval=0.5,
                             heartbeat_interval=0.5, long_poll_timeout=1.0, pull_batch_size=256)
    consumer.subscribe(topic)
    await consumer.start()
    got: list[ReceivedMessage] = []
    loop = asyncio.get_running_loop()
    try:
        deadline = loop.time() + within
        while len(got) < expect and loop.time() < deadline:
            msg = await consumer.receive(timeout=max(0.05, deadline - loop.time()))
            if msg is not None:
                got.append(msg)
        deadline = loop.time() + quiet
        while loop.time() < deadline:
            msg = await consumer.receive(timeout=max(0.05, deadline - loop.time()))
            if msg is not None:
                got.append(msg)
    finally:
        await consumer.close()
    return got
