"""Broker produce/consume throughput for 1 KiB messages, next to the transport's own ceiling and a
real peer, all measured in the same run.

Three servers, each its own process on loopback, driven by one Python client process (this one):

* PocketMQ: ``python -m services.broker`` (ASYNC_MASTER, ASYNC_FLUSH, fresh store, no
  NameServer), one topic with one queue.
* echo: a minimal grpc.aio service with the broker's RPC shapes that stores nothing and answers
  with replies of the same size (pull replies carry pre-encoded records of the same messages):
  what Python gRPC alone can move with the same payloads and the same client code.
* Redis Streams: Debian's ``redis-server`` as primary + replica, ``appendonly yes``,
  ``appendfsync everysec``; XADD pipelined in batches of 32 from one redis-py client, read back
  with XRANGE batches.

Phases (the same client code for PocketMQ and echo):

* single: SendMessage, one message per call, 16 calls in flight;
* batch: SendMessageBatch of 32 messages, 8 calls in flight ("unary");
* stream: SendMessageStream, batches of 32, 16 batches in flight (the bulk producer's path) -
  the ``broker_batch_produce_msgs`` headline;
* consume: PullMessageStream with raw records (what RocketMQ-style consumers get), every record
  decoded on the client with the storage record codec.

A second broker with ``tlsEnable=true`` (TLS only, a CA made for the run) takes the same stream
phase over TLS ("pocketmq stream TLS").

The last line is ``broker_produce_ratio=<x> broker_batch_produce_msgs=<n> broker_consume_msgs=<m>
vs_redis_produce=<p> vs_redis_consume=<q> tls_vs_plain=<t>``: ratio = PocketMQ stream produce /
echo stream produce, vs_redis_* = PocketMQ msgs/s / Redis msgs/s, tls_vs_plain = stream produce
over TLS / plaintext. Every phase runs ``--repeat`` times (default 2) and
the best run counts; other work on the machine still skews every figure (the load average is
printed).

    python benchmarks/bench_broker.py [--messages 200000] [--single-seconds 3] [--pull-batch 512]
                                      [--repeat 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
from benchlib import ROOT, cpu_seconds, free_port, identity, send_batch_stream, wait_port, wait_redis_replica

from pocketmq.broker.v1 import broker_pb2 as pb
from pocketmq.wire.tls import ClientTls, aio_channel
from services.broker.storage.record import Message, decode_record, encode_record

BODY_SIZE = 1024
BATCH = 32
TOPIC = "bench"
SERVICE = "/pocketmq.broker.v1.Broker/"
ECHO_SERVICE = "pocketmq.broker.v1.Broker"








# ----------------------------------------------------------------------------- echo server


def run_echo_server(port: int, pull_batch: int) -> None:
    """The transport ceiling: same RPCs and reply sizes, no storage."""
    body = os.urandom(BODY_SIZE)
    records = b"".join(
        encode_record(Message(TOPIC, body, 0, born_host=("127.0.0.1", 1)), queue_offset=i,
                      physical_offset=i * 1200, store_timestamp=1, store_host=("127.0.0.1", 10911))
        for i in range(pull_batch))
    msg_id = "7F00000100002A9F0000000000000000"

    async def send(request: pb.SendMessageRequest, context: object) -> pb.SendMessageResponse:
        return pb.SendMessageResponse(status=pb.PUT_OK, msg_id=msg_id, queue_id=0, queue_offset=1)

    def batch_reply(request: pb.SendMessageBatchRequest) -> pb.SendMessageBatchResponse:
        return pb.SendMessageBatchResponse(status=pb.PUT_OK, msg_ids=[msg_id] * len(request.messages),
                                           queue_id=0, queue_offset=1, request_id=request.request_id)

    async def send_batch(request: pb.SendMessageBatchRequest, context: object) -> pb.SendMessageBatchResponse:
        return batch_reply(request)

    async def send_stream(requests: AsyncIterator[pb.SendMessageBatchRequest],
                          context: object) -> AsyncIterator[pb.SendMessageBatchResponse]:
        async for request in requests:
            yield batch_reply(request)

    async def pull_stream(request: pb.PullMessageRequest,
                          context: object) -> AsyncIterator[pb.PullMessageResponse]:
        offset = request.queue_offset
        while True:
            offset += pull_batch
            yield pb.PullMessageResponse(status=pb.FOUND, next_begin_offset=offset, max_offset=1 << 40,
                                         records=records)

    async def serve() -> None:
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 << 20),
                                          ("grpc.max_send_message_length", 64 << 20)])
        batch_in = pb.SendMessageBatchRequest.FromString
        batch_out = pb.SendMessageBatchResponse.SerializeToString
        handlers = {
            "SendMessage": grpc.unary_unary_rpc_method_handler(
                send, pb.SendMessageRequest.FromString, pb.SendMessageResponse.SerializeToString),
            "SendMessageBatch": grpc.unary_unary_rpc_method_handler(
                send_batch, batch_in, batch_out),
            "SendMessageStream": grpc.stream_stream_rpc_method_handler(
                send_stream, batch_in, batch_out),
            "PullMessageStream": grpc.unary_stream_rpc_method_handler(
                pull_stream, pb.PullMessageRequest.FromString, pb.PullMessageResponse.SerializeToString),
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(ECHO_SERVICE, handlers),))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()

    asyncio.run(serve())


# ----------------------------------------------------------------------------- gRPC client phases


async def produce_single(addr: str, seconds: float, inflight: int = 16) -> float:
    body = os.urandom(BODY_SIZE)
    message = pb.Message(topic=TOPIC, body=body)
    request = pb.SendMessageRequest(message=message, queue_id=0).SerializeToString()
    async with grpc.aio.insecure_channel(addr) as channel:
        call = channel.unary_unary(SERVICE + "SendMessage", request_serializer=identity,
                                   response_deserializer=pb.SendMessageResponse.FromString)
        await call(request)  # warm up
        count = 0
        end = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal count
            while time.perf_counter() < end:
                reply = await call(request)
                if reply.status != pb.PUT_OK:
                    raise RuntimeError(f"send failed: {reply}")
                count += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(inflight)))
        return count / (time.perf_counter() - start)


def batch_request(request_id: int = 0) -> bytes:
    body = os.urandom(BODY_SIZE)
    messages = [pb.Message(body=body) for _ in range(BATCH)]
    request = pb.SendMessageBatchRequest(topic=TOPIC, queue_id=0, request_id=request_id, messages=messages)
    return request.SerializeToString()


async def produce_batch_unary(addr: str, messages: int, inflight: int = 8) -> float:
    request = batch_request()
    async with grpc.aio.insecure_channel(addr) as channel:
        call = channel.unary_unary(SERVICE + "SendMessageBatch", request_serializer=identity,
                                   response_deserializer=pb.SendMessageBatchResponse.FromString)
        await call(request)
        calls = messages // BATCH
        issued = 0

        async def worker() -> None:
            nonlocal issued
            while issued < calls:
                issued += 1
                reply = await call(request)
                if reply.status != pb.PUT_OK:
                    raise RuntimeError(f"send failed: {reply.status} {reply.remark}")

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(inflight)))
        return calls * BATCH / (time.perf_counter() - start)


async def produce_batch_stream(addr: str, messages: int, window: int = 16,
                               tls: ClientTls | None = None) -> float:
    calls = messages // BATCH
    elapsed, replies, _ = await send_batch_stream(addr, batch_request(), calls, window, tls)
    for reply in replies:
        if reply.status != pb.PUT_OK:
            raise RuntimeError(f"send failed: {reply.status} {reply.remark}")
    if len(replies) != calls:
        raise RuntimeError(f"{len(replies)} of {calls} batches acknowledged")
    return calls * BATCH / elapsed


async def consume_stream(addr: str, messages: int, pull_batch: int) -> float:
    """Follow the queue from offset 0 until ``messages`` records were received and decoded."""
    request = pb.PullMessageRequest(consumer_group="bench", topic=TOPIC, queue_id=0, queue_offset=0,
                                    max_msg_nums=pull_batch, max_bytes=pull_batch * 2 * BODY_SIZE,
                                    raw_records=True)
    async with grpc.aio.insecure_channel(addr, options=[("grpc.max_receive_message_length", 64 << 20)]) as ch:
        call = ch.unary_stream(SERVICE + "PullMessageStream",
                               request_serializer=pb.PullMessageRequest.SerializeToString,
                               response_deserializer=pb.PullMessageResponse.FromString)(request)
        received = 0
        start = time.perf_counter()
        async for reply in call:
            data = reply.records
            pos = 0
            end = len(data)
            while pos < end:
                rec = decode_record(data, pos, check_crc=False)
                pos += rec.store_size
                received += 1
            if received >= messages:
                break
        elapsed = time.perf_counter() - start
        call.cancel()
        return received / elapsed


# ----------------------------------------------------------------------------- Redis Streams


class Redis:
    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.replica_port = free_port()
        self.procs: list[subprocess.Popen[bytes]] = []
        replica_of = ["--replicaof", "127.0.0.1", str(self.port)]
        for name, port, extra in (("primary", self.port, []), ("replica", self.replica_port, replica_of)):
            d = workdir / f"redis-{name}"
            d.mkdir()
            self.procs.append(subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(d), "--save", "",
                 "--appendonly", "yes", "--appendfsync", "everysec", "--protected-mode", "no", *extra],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            wait_port(port)
        import redis

        self.client = redis.Redis(port=self.port)
        replica = redis.Redis(port=self.replica_port)
        wait_redis_replica(replica)

    def produce(self, messages: int) -> float:
        body = os.urandom(BODY_SIZE)
        client = self.client
        start = time.perf_counter()
        for _ in range(messages // BATCH):
            pipe = client.pipeline(transaction=False)
            for _ in range(BATCH):
                pipe.xadd(TOPIC, {"body": body})
            pipe.execute()
        return (messages // BATCH) * BATCH / (time.perf_counter() - start)

    def consume(self, messages: int, batch: int) -> float:
        client = self.client
        received = 0
        last = "-"
        start = time.perf_counter()
        while received < messages:
            entries: list[tuple[bytes, dict[bytes, bytes]]] = client.xrange(  # type: ignore[assignment]
                TOPIC, min=last, max="+", count=batch)
            if not entries:
                break
            for _entry_id, fields in entries:
                if len(fields[b"body"]) != BODY_SIZE:
                    raise RuntimeError("short body read back from redis")
                received += 1
            last = "(" + entries[-1][0].decode()
        return received / (time.perf_counter() - start)

    def stop(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


# ----------------------------------------------------------------------------- main


def start_broker(workdir: Path, pull_batch: int, name: str = "broker",
                 extra: tuple[str, ...] = ()) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log = open(workdir / f"{name}.log", "wb")  # noqa: SIM115 - lives as long as the process
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.broker", "--namesrv-addr", "", "--broker-ip1", "127.0.0.1",
         "--listen-host", "127.0.0.1", "--listen-port", str(port), "--ha-listen-port", str(free_port()),
         "--metrics-port", "0", "--store-path-root-dir", str(workdir / f"{name}-store"),
         "--broker-role", "ASYNC_MASTER", "--flush-disk-type", "ASYNC_FLUSH",
         "--max-transfer-count-on-message-in-memory", str(pull_batch),
         "--max-transfer-bytes-on-message-in-memory", str(pull_batch * 2 * BODY_SIZE), *extra],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    wait_port(port)
    return proc, f"127.0.0.1:{port}"


def tls_broker_flags(workdir: Path) -> tuple[tuple[str, ...], ClientTls]:
    """tlsEnable (TLS only on the gRPC port) with a CA and certificate made for this run."""
    from services.common.tls import generate_ca, issue_certificate

    pki = workdir / "pki"
    generate_ca(pki / "ca.crt", pki / "ca.key")
    issue_certificate(pki / "ca.crt", pki / "ca.key", pki / "tls.crt", pki / "tls.key", ("127.0.0.1",))
    return (("--tls-enable", "true", "--tls-server-cert-path", str(pki / "tls.crt"),
             "--tls-server-key-path", str(pki / "tls.key")), ClientTls(ca_file=str(pki / "ca.crt")))


async def create_topic(addr: str, tls: ClientTls | None = None) -> None:
    from pocketmq.broker.v1 import broker_pb2_grpc
    from pocketmq.common.v1 import common_pb2

    async with aio_channel(addr, [], tls) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        await stub.CreateTopic(pb.CreateTopicRequest(topic_config=common_pb2.TopicConfig(
            topic_name=TOPIC, read_queue_nums=1, write_queue_nums=1, perm=6)), timeout=10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000,
                        help="messages per batch/stream/consume phase")
    parser.add_argument("--single-seconds", type=float, default=3.0)
    parser.add_argument("--repeat", type=int, default=2,
                        help="runs of every phase; the best counts (other work skews single runs)")
    parser.add_argument("--pull-batch", type=int, default=512, help="messages per pull reply / XRANGE")
    parser.add_argument("--echo-server", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.echo_server:
        run_echo_server(args.echo_server, args.pull_batch)
        return 0

    workdir = Path(tempfile.mkdtemp(prefix="bench-broker-"))
    procs: list[subprocess.Popen[bytes]] = []
    redis: Redis | None = None
    try:
        echo_port = free_port()
        procs.append(subprocess.Popen([sys.executable, __file__, "--echo-server", str(echo_port),
                                       "--pull-batch", str(args.pull_batch)], cwd=ROOT))
        wait_port(echo_port)
        echo = f"127.0.0.1:{echo_port}"
        broker_proc, broker = start_broker(workdir, args.pull_batch)
        procs.append(broker_proc)
        asyncio.run(create_topic(broker))
        tls_flags, client_tls = tls_broker_flags(workdir)
        tls_proc, tls_broker = start_broker(workdir, args.pull_batch, "broker-tls", tls_flags)
        procs.append(tls_proc)
        asyncio.run(create_topic(tls_broker, client_tls))
        redis = Redis(workdir)

        n = args.messages
        results: dict[str, float] = {}

        server_us: dict[str, float] = {}

        def run(name: str, pids: list[int], fn: Callable[[], float]) -> None:
            attempts: list[tuple[float, float]] = []
            for _ in range(args.repeat):
                cpu = sum(cpu_seconds(pid) for pid in pids)
                start = time.perf_counter()
                rate = fn()
                wall = time.perf_counter() - start
                used = sum(cpu_seconds(pid) for pid in pids) - cpu
                attempts.append((rate, used / max(rate * wall, 1) * 1e6))
            results[name], server_us[name] = max(attempts)
            shown = "  ".join(f"{rate:>10,.0f}" for rate, _ in attempts)
            print(f"  {name:<22} {shown} msgs/s   (server CPU {server_us[name]:.1f} us/msg)", flush=True)

        print(f"bench-broker: {BODY_SIZE} B messages, {n} per phase, batch {BATCH}, "
              f"pull batch {args.pull_batch}; {os.cpu_count()} CPUs, "
              f"load average {os.getloadavg()[0]:.2f}", flush=True)
        echo_pid, broker_pid = [procs[0].pid], [procs[1].pid]
        redis_pid = [p.pid for p in redis.procs]  # primary + replica
        run("echo single", echo_pid, lambda: asyncio.run(produce_single(echo, args.single_seconds)))
        run("pocketmq single", broker_pid, lambda: asyncio.run(produce_single(broker, args.single_seconds)))
        run("echo batch unary", echo_pid, lambda: asyncio.run(produce_batch_unary(echo, n // 2)))
        run("pocketmq batch unary", broker_pid, lambda: asyncio.run(produce_batch_unary(broker, n // 2)))
        run("echo batch stream", echo_pid, lambda: asyncio.run(produce_batch_stream(echo, n)))
        run("pocketmq batch stream", broker_pid, lambda: asyncio.run(produce_batch_stream(broker, n)))
        run("pocketmq stream TLS", [tls_proc.pid],
            lambda: asyncio.run(produce_batch_stream(tls_broker, n, tls=client_tls)))
        run("redis xadd pipelined", redis_pid, lambda: redis.produce(n) if redis else 0.0)
        run("echo consume", echo_pid, lambda: asyncio.run(consume_stream(echo, n, args.pull_batch)))
        run("pocketmq consume", broker_pid, lambda: asyncio.run(consume_stream(broker, n, args.pull_batch)))
        run("redis xrange", redis_pid, lambda: redis.consume(n, args.pull_batch) if redis else 0.0)

        print()
        print(f"{'phase':<14} {'PocketMQ':>12} {'echo (gRPC)':>12} {'of echo':>8} {'Redis':>12}   "
              "server CPU us/msg PocketMQ / echo / Redis")
        for phase, ours, ceiling, peer in (
            ("single", "pocketmq single", "echo single", ""),
            ("batch unary", "pocketmq batch unary", "echo batch unary", ""),
            ("batch stream", "pocketmq batch stream", "echo batch stream", "redis xadd pipelined"),
            ("consume", "pocketmq consume", "echo consume", "redis xrange"),
        ):
            peer_text = f"{results[peer]:>12,.0f}" if peer else f"{'':>12}"
            cpu_text = f"{server_us[ours]:.1f} / {server_us[ceiling]:.1f}"
            if peer:
                cpu_text += f" / {server_us[peer]:.1f}"
            print(f"{phase:<14} {results[ours]:>12,.0f} {results[ceiling]:>12,.0f} "
                  f"{results[ours] / results[ceiling]:>7.0%} {peer_text}   {cpu_text}")
        tls_ratio = results["pocketmq stream TLS"] / results["pocketmq batch stream"]
        print(f"batch stream over TLS {results['pocketmq stream TLS']:,.0f} msgs/s = {tls_ratio:.2f} of "
              f"plaintext (server CPU {server_us['pocketmq stream TLS']:.1f} us/msg)")
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        ratio = results["pocketmq batch stream"] / results["echo batch stream"]
        batch_msgs = results["pocketmq batch stream"]
        print(f"broker_produce_ratio={ratio:.2f} broker_batch_produce_msgs={batch_msgs:.0f} "
              f"broker_consume_msgs={results['pocketmq consume']:.0f} "
              f"vs_redis_produce={results['pocketmq batch stream'] / results['redis xadd pipelined']:.2f} "
              f"vs_redis_consume={results['pocketmq consume'] / results['redis xrange']:.2f} "
              f"tls_vs_plain={tls_ratio:.2f}")
        return 0
    finally:
        if redis is not None:
            redis.stop()
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
