"""Helpers every benchmark script shares (imported as ``benchlib``: the scripts run as
``python benchmarks/bench_<area>.py``, which puts this directory on ``sys.path``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pocketmq.broker.v1 import broker_pb2 as pb

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


def wait_healthy(addr: str, proc: subprocess.Popen[bytes], timeout: float = 30.0,
                 log: Path | None = None) -> None:
    """Wait until the gRPC health service at ``addr`` (served by ``proc``) says SERVING; fail
    at once if ``proc`` exits (with ``log``'s text, when given)."""
    def failed(why: str) -> RuntimeError:
        return RuntimeError(why + (f":\n{log.read_text()}" if log is not None else ""))

    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(addr) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise failed(f"the process serving {addr} exited with {proc.returncode}")
            try:
                if stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status == \
                        health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.05)
    raise failed(f"{addr} not healthy within {timeout:g} s")


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


def pin(pid: int, cpus: set[int]) -> None:
    """Run every thread of process ``pid`` on ``cpus`` (Linux); a thread started later inherits
    the set of the thread that starts it. Threads are listed again until none is left out (one
    may start while they are being moved)."""
    moved: set[int] = set()
    while True:
        try:
            threads = {int(t) for t in os.listdir(f"/proc/{pid}/task")} - moved
        except FileNotFoundError:
            return  # (the process is gone)
        if not threads:
            return
        for tid in threads:
            with contextlib.suppress(ProcessLookupError):  # (the thread ended)
                os.sched_setaffinity(tid, cpus)
        moved |= threads


def context_switches() -> int:
    """This process's context switches so far: voluntary + involuntary, of every thread it had
    (how often one of its threads slept and was woken)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw + usage.ru_nivcsw


#: Channel factories of addresses that need more than a plaintext channel (TLS, signed
#: requests): ``address -> factory``; :func:`open_channel` consults it.
CHANNELS: dict[str, Callable[[], grpc.aio.Channel]] = {}


def open_channel(addr: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.aio.Channel:
    """The registered channel of ``addr`` (see :data:`CHANNELS`), else a plaintext one."""
    factory = CHANNELS.get(addr)
    return factory() if factory is not None else grpc.aio.insecure_channel(addr, options=list(options))


def identity(data: bytes) -> bytes:
    """Pass-through serializer: requests are sent pre-serialized."""
    return data


async def send_batch_stream(addr: str, request: bytes, calls: int, window: int,
                            ) -> tuple[float, list[pb.SendMessageBatchResponse], list[float]]:
    """Write the serialized ``SendMessageBatchRequest`` ``calls`` times on one SendMessageStream with
    at most ``window`` unacknowledged; (elapsed s, every reply, every batch's latency s). The
    channel is :func:`open_channel`'s (TLS and signing for addresses registered in CHANNELS)."""
    async with open_channel(addr) as channel:
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
