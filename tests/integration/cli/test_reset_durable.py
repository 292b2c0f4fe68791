"""An offset reset outlives the master: SIGKILL right after ``pocketmq consumer reset`` (through
the NameServer relay) and a slave promoted after a second reset. A commit from a member that was
running before the reset (it carries the older reset generation) is still ignored, and the POP
groups (the RocketMQ 5 wire API as the SDKs' SimpleConsumer pops, and PocketMQ's PopConsumer)
are served from the reset point at once, not from their pre-reset position after the invisible
time.

One cluster: NameServer on 127.0.0.1, broker-a master + slave on 127.0.0.2, flushing consumer
offsets only every 10 minutes: only the reset's own write can make it durable before the kill.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from pocketmq import Message, Producer
from pocketmq.broker.v1 import broker_pb2 as pb
from pocketmq.broker.v1 import broker_pb2_grpc
from pocketmq.client.popconsumer import PopConsumer
from tests.integration.cli.test_cli import BROKER_HOST, Cli
from tests.integration.client.cluster import Broker, Cluster
from tests.integration.procs import ProcessGroup
from tests.sdk.cluster import V2Client
from tests.support import free_port, wait_until

pytestmark = pytest.mark.slow

TOPIC = "durable-reset"
PULL_GROUP = "durable-reset-pull"
POP_GROUP = "durable-reset-pop"
OWN_POP_GROUP = "durable-reset-own-pop"
REVIVE_TOPIC = "rmq_sys_REVIVE_LOG_c1"
COUNT = 10
INVISIBLE_S = 120
SLOW_FLUSH = ("--flush-consumer-offset-interval", "600000")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("reset-durable")
    group = ProcessGroup(tmp / "logs")
    c = Cluster(group, tmp)
    try:
        c.start_namesrv()
        for broker_id in (0, 1):
            c.start_broker("broker-a", broker_id, *SLOW_FLUSH, host=BROKER_HOST)
        yield c
    finally:
        group.stop_all()


@pytest.fixture(scope="module")
def cli(cluster: Cluster) -> Cli:
    """A CLI that reaches the NameServer and nothing else (one port-forward)."""
    return Cli(cluster.namesrv,
               {"grpc_proxy": f"http://127.0.0.1:{free_port()}", "no_grpc_proxy": "127.0.0.1"})


def _stub(broker: Broker) -> tuple[grpc.Channel, broker_pb2_grpc.BrokerStub]:
    channel = grpc.insecure_channel(broker.addr)
    return channel, broker_pb2_grpc.BrokerStub(channel)


def _commit(broker: Broker, offset: int, generation: int) -> None:
    channel, stub = _stub(broker)
    with channel:
        stub.UpdateConsumerOffset(pb.UpdateConsumerOffsetRequest(
            consumer_group=PULL_GROUP, topic=TOPIC, queue_id=0, offset=offset, reset_generation=generation),
            timeout=5)


def _committed(broker: Broker) -> int:
    channel, stub = _stub(broker)
    with channel:
        reply = stub.QueryConsumerOffset(pb.QueryConsumerOffsetRequest(
            consumer_group=PULL_GROUP, topic=TOPIC, queue_id=0), timeout=5)
        return int(reply.offset)


def _generation(broker: Broker) -> int:
    """The broker's reset generation of (PULL_GROUP, TOPIC), as a member learns it."""
    channel, stub = _stub(broker)
    with channel:
        reply = stub.ConsumerHeartbeat(pb.ConsumerHeartbeatRequest(
            consumer_group=PULL_GROUP, client_id="probe", subscriptions=[pb.Subscription(topic=TOPIC)]),
            timeout=5)
        return int(reply.reset_generations.get(TOPIC, 0))


def _synced_generations(slave: Broker) -> dict[tuple[str, str], int]:
    with grpc.insecure_channel(slave.addr) as channel:
        table = broker_pb2_grpc.BrokerMetadataStub(channel).GetAllConsumerOffsets(
            pb.GetAllConsumerOffsetsRequest(), timeout=5)
    return {(e.consumer_group, e.topic): e.generation for e in table.reset_generations}


def _max_offset(broker: Broker, topic: str) -> int:
    channel, stub = _stub(broker)
    with channel:
        return int(stub.GetMaxOffset(pb.QueueRequest(topic=topic, queue_id=0), timeout=5).offset)


def _pop(broker: Broker, want: int, timeout: float) -> list[str]:
    """Bodies popped by POP_GROUP (not acked) until ``want`` or ``timeout`` seconds of polling."""
    client = V2Client(broker.addr, client_id="durable-reset-pop")
    bodies: list[str] = []
    try:
        request = s.ReceiveMessageRequest(
            group=d.Resource(name=POP_GROUP),
            message_queue=d.MessageQueue(topic=d.Resource(name=TOPIC), id=-1),
            batch_size=32, invisible_duration=Duration(seconds=INVISIBLE_S),
            long_polling_timeout=Duration(seconds=1))

        def more() -> bool:
            replies = list(client.stub.ReceiveMessage(request, metadata=client.metadata(), timeout=15))
            bodies.extend(r.message.body.decode() for r in replies if r.HasField("message"))
            return len(bodies) >= want

        wait_until(more, timeout, interval=0.0, message=f"{want} popped")
    finally:
        client.close()
    return bodies


def _own_pop(namesrv: str, want: int, timeout: float) -> list[str]:
    """Bodies popped by OWN_POP_GROUP with PocketMQ's PopConsumer (not acked)."""
    async def run() -> list[str]:
        bodies: list[str] = []
        async with PopConsumer(OWN_POP_GROUP, namesrv, invisible_time=INVISIBLE_S,
                               long_poll_timeout=1.0) as consumer:
            consumer.subscribe(TOPIC)
            deadline = time.monotonic() + timeout
            while len(bodies) < want and time.monotonic() < deadline:
                bodies.extend(m.body.decode() for m in await consumer.receive(32))
        return bodies

    return asyncio.run(run())


def _reset(cli: Cli, group: str) -> None:
    out = cli.json("consumer", "reset", "--group", group, "--topic", TOPIC, "--to-earliest")
    assert [q["new_offset"] for b in out["brokers"] for q in b["reset"]["queues"]] == [0], out


def test_reset_survives_a_master_sigkill_and_a_slave_promotion(cluster: Cluster, cli: Cli) -> None:
    master, slave = cluster.brokers[0], cluster.brokers[1]
    cluster.create_topic(TOPIC, queues=1, masters=[master])
    bodies = [f"m-{i}" for i in range(COUNT)]
    with Producer(cluster.namesrv) as producer:
        for body in bodies:
            producer.send(Message(TOPIC, body.encode()))

    # Before the reset: the pull group has committed everything, the POP group holds all ten
    # popped (not acked, invisible for two minutes).
    _commit(master, COUNT, 0)
    assert sorted(_pop(master, COUNT, 20)) == sorted(bodies)
    assert sorted(_own_pop(cluster.namesrv, COUNT, 20)) == sorted(bodies)

    # (POP resets last: the revive log's replay point on disk is then still before the popped
    # checkpoints, so the restart replays them and must meet the reset records after them.)
    _reset(cli, PULL_GROUP)
    _reset(cli, OWN_POP_GROUP)
    _reset(cli, POP_GROUP)
    first = _generation(master)
    assert first > 0
    master.proc.kill()  # right after the reset: nothing flushed by the periodic offset flush
    cluster.restart(master)

    assert _generation(master) == first
    _commit(master, COUNT, 0)  # a member from before the reset commits its old position
    assert _committed(master) == 0
    _commit(master, 3, first)  # one that applied the reset is heard
    assert _committed(master) == 3
    # The POP groups are served from the reset point now, not after the invisible time.
    assert sorted(_pop(master, COUNT, 15)) == sorted(bodies)
    assert sorted(_own_pop(cluster.namesrv, COUNT, 15)) == sorted(bodies)

    # A second reset, replicated; then the slave takes over the group's store as its master.
    _reset(cli, PULL_GROUP)
    _reset(cli, OWN_POP_GROUP)
    _reset(cli, POP_GROUP)
    second = _generation(master)
    assert second > first
    wait_until(lambda: _synced_generations(slave).get((PULL_GROUP, TOPIC)) == second, 15,
               message="the slave has the reset generation")
    wait_until(lambda: _max_offset(slave, REVIVE_TOPIC) == _max_offset(master, REVIVE_TOPIC), 15,
               message="the slave has the revive log")
    synced = json.loads((slave.store_dir / "config" / "consumerOffset.json").read_text())
    assert synced["resetGenerationTable"][f"{TOPIC}@{PULL_GROUP}"] == second
    master.proc.kill()
    slave.proc.kill()
    cluster.brokers.remove(master)
    cluster.brokers.remove(slave)
    promoted = cluster.start_broker("broker-a", 0, *SLOW_FLUSH, host=BROKER_HOST, port=slave.port,
                                    store_dir=slave.store_dir)

    assert _generation(promoted) == second
    _commit(promoted, COUNT, first)
    assert _committed(promoted) == 0
    assert sorted(_pop(promoted, COUNT, 15)) == sorted(bodies)
    assert sorted(_own_pop(cluster.namesrv, COUNT, 15)) == sorted(bodies)
