"""RelayBrokerCall: a NameServer in this process forwarding calls to a stand-in broker (a real
grpc.aio server on loopback implementing a few Broker methods)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import grpc
import pytest
import pytest_asyncio

from pocketmq.broker.v1 import broker_pb2, broker_pb2_grpc
from pocketmq.namesrv.v1 import namesrv_pb2 as pb
from pocketmq.namesrv.v1 import namesrv_pb2_grpc
from services.namesrv.app import NamesrvApp
from services.namesrv.config import NamesrvConfig
from services.namesrv.relay import relayable_methods

STATUS = "/pocketmq.broker.v1.Broker/GetBrokerStatus"


class FakeBroker(broker_pb2_grpc.BrokerServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        self.calls = 0

    async def GetBrokerStatus(  # noqa: N802
        self, request: broker_pb2.GetBrokerStatusRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.BrokerStatus:
        self.calls += 1
        return broker_pb2.BrokerStatus(broker_name="broker-a", broker_role="ASYNC_MASTER", put_total=42)

    async def GetTopic(  # noqa: N802
        self, request: broker_pb2.GetTopicRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.TopicResponse:
        await context.abort(grpc.StatusCode.NOT_FOUND, f"topic {request.topic!r} does not exist")
        raise AssertionError

    async def GetHAStatus(  # noqa: N802
        self, request: broker_pb2.GetHAStatusRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.HAStatus:
        await asyncio.sleep(5)
        return broker_pb2.HAStatus()


class Env:
    def __init__(self, app: NamesrvApp, stub: namesrv_pb2_grpc.NameServerStub, broker: FakeBroker,
                 broker_addr: str) -> None:
        self.app, self.stub, self.broker, self.broker_addr = app, stub, broker, broker_addr

    async def register(self) -> None:
        await self.stub.RegisterBroker(pb.RegisterBrokerRequest(
            cluster_name="c1", broker_name="broker-a", broker_id=0, broker_addr=self.broker_addr,
            ha_server_addr="127.0.0.1:1"))

    async def relay(self, method: str, request: bytes = b"", addr: str | None = None,
                    timeout_ms: int = 0) -> bytes:
        reply = await self.stub.RelayBrokerCall(pb.RelayBrokerCallRequest(
            broker_addr=addr or self.broker_addr, method=method, request=request, timeout_ms=timeout_ms),
            timeout=5)
        return bytes(reply.response)


@pytest_asyncio.fixture
async def env(request: pytest.FixtureRequest) -> AsyncIterator[Env]:
    overrides = getattr(request, "param", {})
    broker = FakeBroker()
    server = grpc.aio.server()
    broker_pb2_grpc.add_BrokerServicer_to_server(broker, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    app = NamesrvApp(NamesrvConfig(listen="127.0.0.1:0", metrics_port=0, **overrides))
    await app.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{app.port}")
    try:
        yield Env(app, namesrv_pb2_grpc.NameServerStub(channel), broker, f"127.0.0.1:{port}")
    finally:
        await channel.close()
        await app.stop()
        await server.stop(0)


@pytest.mark.asyncio
async def test_relays_to_a_registered_broker(env: Env) -> None:
    await env.register()
    data = await env.relay(STATUS, broker_pb2.GetBrokerStatusRequest().SerializeToString())
    status = broker_pb2.BrokerStatus.FromString(data)
    assert (status.broker_name, status.put_total) == ("broker-a", 42)
    assert env.broker.calls == 1


@pytest.mark.asyncio
async def test_refuses_unregistered_addresses_and_other_methods(env: Env) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await env.relay(STATUS)  # not registered yet
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    await env.register()
    for method in ("/pocketmq.namesrv.v1.NameServer/GetAllTopicList",
                   "/pocketmq.broker.v1.Broker/PullMessageStream", "GetBrokerStatus", ""):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await env.relay(method)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await env.relay(STATUS, addr="not an address")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert env.broker.calls == 0


@pytest.mark.asyncio
async def test_broker_status_codes_come_back_with_the_broker_named(env: Env) -> None:
    await env.register()
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await env.relay("/pocketmq.broker.v1.Broker/GetTopic",
                        broker_pb2.GetTopicRequest(topic="nope").SerializeToString())
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert info.value.details() == f"broker {env.broker_addr}: topic 'nope' does not exist"
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await env.relay("/pocketmq.broker.v1.Broker/GetHAStatus", timeout_ms=200)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


@pytest.mark.asyncio
async def test_unreachable_broker_is_unavailable_and_channels_follow_the_table(env: Env) -> None:
    # Registered, but nothing listens there.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    await env.stub.RegisterBroker(pb.RegisterBrokerRequest(
        cluster_name="c1", broker_name="broker-b", broker_id=0, broker_addr=dead,
        ha_server_addr="127.0.0.1:1"))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await env.relay(STATUS, addr=dead, timeout_ms=2000)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert dead in (info.value.details() or "")
    await env.stub.UnregisterBroker(pb.UnregisterBrokerRequest(
        cluster_name="c1", broker_name="broker-b", broker_id=0, broker_addr=dead))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await env.relay(STATUS, addr=dead)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert dead not in env.app.servicer.relay._channels


@pytest.mark.asyncio
@pytest.mark.parametrize("env", [{"relay_enable": False}], indirect=True)
async def test_relay_can_be_disabled(env: Env) -> None:
    await env.register()
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await env.relay(STATUS)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_only_unary_broker_methods_are_relayable() -> None:
    methods = relayable_methods()
    assert STATUS in methods
    assert "/pocketmq.broker.v1.BrokerMetadata/GetAllConsumerOffsets" in methods
    assert "/pocketmq.broker.v1.Broker/SendMessageStream" not in methods
    assert "/pocketmq.broker.v1.Broker/PullMessageStream" not in methods
