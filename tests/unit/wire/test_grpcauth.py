"""The client's signing interceptors sign calls of every shape (grpc.aio files an interceptor
under one shape only), checked with a real grpc.aio server on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from pocketmq.wire.auth import Credentials, parse_authorization, sign
from pocketmq.wire.grpcauth import signing_interceptors


@pytest.mark.asyncio
async def test_every_call_shape_is_signed() -> None:
    seen: list[dict[str, str]] = []

    def record(context: Any) -> None:
        seen.append({k: v for k, v in context.invocation_metadata() if isinstance(v, str)})

    async def uu(request: bytes, context: Any) -> bytes:
        record(context)
        return request

    async def us(request: bytes, context: Any) -> AsyncIterator[bytes]:
        record(context)
        yield request

    async def su(requests: AsyncIterator[bytes], context: Any) -> bytes:
        record(context)
        return b"".join([r async for r in requests])

    async def ss(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        record(context)
        async for r in requests:
            yield r

    server = grpc.aio.server()
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("t.S", {
        "UU": grpc.unary_unary_rpc_method_handler(uu), "US": grpc.unary_stream_rpc_method_handler(us),
        "SU": grpc.stream_unary_rpc_method_handler(su), "SS": grpc.stream_stream_rpc_method_handler(ss)})])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    credentials = Credentials("app", "app-secret-123")
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}",
                                             interceptors=signing_interceptors(credentials)) as channel:
            assert await channel.unary_unary("/t.S/UU")(b"a") == b"a"
            assert [r async for r in channel.unary_stream("/t.S/US")(b"b")] == [b"b"]
            assert await channel.stream_unary("/t.S/SU")(iter([b"c"])) == b"c"
            call = channel.stream_stream("/t.S/SS")()
            await call.write(b"d")
            await call.done_writing()
            assert [r async for r in call] == [b"d"]
    finally:
        await server.stop(None)
    assert len(seen) == 4
    for metadata in seen:
        access_key, signature = parse_authorization(metadata["authorization"])
        assert access_key == "app"
        assert signature == sign("app-secret-123", metadata["x-mq-date-time"])
    assert signing_interceptors(None) == []
