"""Per-message access checks of client streams, with the real interceptor on a real grpc.aio
server on loopback: a handler that reads its requests in a task of its own (as the broker's
SendMessageStream and PopStream do) answers what came before a refused request, then the call
ends PERMISSION_DENIED from the call's own task (no abort racing a reply being written)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from pocketmq.broker.v1 import broker_pb2
from pocketmq.wire.auth import Credentials
from pocketmq.wire.grpcauth import signing_interceptors
from services.common.acl.setup import build_interceptor

PUB = Credentials("pub-only", "pub-secret-0123")
METHOD = "SendMessageStream"
SERVICE = "pocketmq.broker.v1.Broker"


async def reading_in_a_task(requests: AsyncIterator[broker_pb2.SendMessageBatchRequest],
                            context: grpc.aio.ServicerContext,
                            ) -> AsyncIterator[broker_pb2.SendMessageBatchResponse]:
    queue: asyncio.Queue[broker_pb2.SendMessageBatchRequest | None] = asyncio.Queue()

    async def read() -> None:
        try:
            async for request in requests:
                await queue.put(request)
        finally:
            await queue.put(None)

    reader = asyncio.create_task(read())
    while (request := await queue.get()) is not None:
        await asyncio.sleep(0.05)  # a reply being produced while the reader goes on
        yield broker_pb2.SendMessageBatchResponse(request_id=request.request_id)
    await reader


@pytest.mark.asyncio
async def test_a_refused_request_read_in_another_task_ends_the_stream_after_earlier_replies(
        tmp_path: Path) -> None:
    acl = tmp_path / "acl.json"
    acl.write_text(json.dumps({"users": [{"accessKey": PUB.access_key, "secretKey": PUB.secret_key,
                                          "policies": [{"resource": "Topic:ok-*", "actions": ["Pub"],
                                                        "decision": "Allow"}]}]}))
    interceptor = build_interceptor(True, str(acl), 60_000, "c1")
    assert interceptor is not None
    server = grpc.aio.server(interceptors=[interceptor])
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, {
        METHOD: grpc.stream_stream_rpc_method_handler(
            reading_in_a_task, request_deserializer=broker_pb2.SendMessageBatchRequest.FromString,
            response_serializer=broker_pb2.SendMessageBatchResponse.SerializeToString)})])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}",
                                             interceptors=signing_interceptors(PUB)) as channel:
            call = channel.stream_stream(
                f"/{SERVICE}/{METHOD}",
                request_serializer=broker_pb2.SendMessageBatchRequest.SerializeToString,
                response_deserializer=broker_pb2.SendMessageBatchResponse.FromString)
            requests = [broker_pb2.SendMessageBatchRequest(topic=topic, request_id=i)
                        for i, topic in enumerate(["ok-a", "ok-b", "secret", "ok-c"])]
            got: list[int] = []
            stream = call(iter(requests), timeout=10)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                async for reply in stream:
                    got.append(reply.request_id)
            assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "secret" in (info.value.details() or "")
            assert got == [0, 1]
    finally:
        await server.stop(None)
