"""Helpers every benchmark script shares (imported as ``benchlib``: the scripts run as
``python benchmarks/bench_<area>.py``, which puts this directory on ``sys.path``)."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from pathlib import Path
from typing import Any

from pocketmq.broker.v1 import broker_pb2 as pb
from pocketmq.wire.tls import ClientTls, aio_channel

ROOT = Path(__file__).resolve().parents[1]
SEND_STREAM = "/pocketmq.broker.v1.Broker/SendMessageStream"


def free_port() -> int:
    """A loopback TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_port(port: int, timeout: float = 30.0) -> None:
    """Wait until something accepts connections on ``127.0.0.1:port``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} after {timeout}s")


def wait_redis_replica(replica: Any, timeout: float = 20.0) -> None:
    """Wait until the ``redis.Redis`` client's server reports its link to its master up."""
    deadline = time.monotonic() + timeout
    while replica.info("replication").get("master_link_status") != "up":
        if time.monotonic() > deadline:
            raise RuntimeError("redis replica did not connect")
        time.sleep(0.05)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc; 0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def identity(data: bytes) -> bytes:
    """Pass-through serializer: requests are sent pre-serialized."""
    return data


async def send_batch_stream(addr: str, request: bytes, calls: int, window: int, tls: ClientTls | None = None,
                            ) -> tuple[float, list[pb.SendMessageBatchResponse], list[float]]:
    """Write the serialized ``SendMessageBatchRequest`` ``calls`` times on one SendMessageStream with
    at most ``window`` unacknowledged; (elapsed s, every reply, every batch's latency s). ``tls``:
    over TLS."""
    async with aio_channel(addr, [], tls) as channel:
        call = channel.stream_stream(SEND_STREAM, request_serializer=identity,
                                     response_deserializer=pb.SendMessageBatchResponse.FromString)()
        slots = asyncio.Semaphore(window)
        sent_at: list[float] = []
        replies: list[pb.SendMessageBatchResponse] = []
        latencies: list[float] = []

        async def reader() -> None:
            async for reply in call:
                latencies.append(time.perf_counter() - sent_at[len(latencies)])
                replies.append(reply)
                slots.release()

        start = time.perf_counter()
        reading = asyncio.create_task(reader())
        for _ in range(calls):
            await slots.acquire()
            sent_at.append(time.perf_counter())
            await call.write(request)
        await call.done_writing()
        await reading
        return time.perf_counter() - start, replies, latencies
