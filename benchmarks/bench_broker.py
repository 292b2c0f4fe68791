"""Broker produce/consume throughput for 1 KiB messages, next to the transport's own ceiling and a
real peer, all measured in the same run.

Three servers, each its own process on loopback, driven by one Python client process (this one):

* PocketMQ: ``python -m services.broker`` (ASYNC_MASTER, ASYNC_FLUSH, fresh store, no
  NameServer), one topic with one queue.
* echo: a minimal grpc.aio service with the broker's RPC shapes, built by the broker's own server
  construction (``start_grpc_server``), that stores nothing and answers with replies of the same
  size (pull replies carry pre-encoded records of the same messages): what Python gRPC alone can
  move with the same payloads and the same client code.
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

Two more brokers take the batched produce phases with the current TLS model (``tlsEnable=true``:
TLS only on the gRPC port, a CA made for the run): one with TLS alone (stream phase, "pocketmq
stream TLS") and one with TLS and access control (``aclEnable=true``, every request signed and
checked; "tls+acl batch unary/stream").

The last line is ``broker_produce_ratio=<x> broker_batch_produce_msgs=<n> broker_consume_msgs=<m>
vs_redis_produce=<p> vs_redis_consume=<q> tls_vs_plain=<t> tls_acl_vs_plain=<r>
tls_acl_vs_plain_unary=<u> tls_acl_cpu_vs_plain=<c> broker_single_ratio=<s>
broker_produce_cpu_us=<b> echo_produce_cpu_us=<e>``: ratio = PocketMQ stream produce / echo
stream produce, vs_redis_* = PocketMQ msgs/s / Redis msgs/s, tls_vs_plain = stream produce over
TLS / plaintext, tls_acl_vs_plain = stream produce over TLS with signed requests on a broker with
access control / plaintext (``_unary``: the same for SendMessageBatch; ``_cpu_``: plaintext broker
CPU per message / TLS+ACL broker CPU per message), single ratio = SendMessage / echo unary, and
the server CPU per message of the stream phase on PocketMQ and echo. The phases run in
``--rounds`` rounds (default 3), each round all of them in turn; every round is printed, each
figure is the median over the rounds and each ratio the median of the rounds' ratios (the two
phases of a round ran one after the other, under about the same load). Other work on the
machine still skews every figure: the load average is printed before every round and after.

    python benchmarks/bench_broker.py [--messages 200000] [--single-seconds 3] [--pull-batch 512]
                                      [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import grpc
from benchlib import (
    CHANNELS,
    ROOT,
    cpu_seconds,
    free_port,
    identity,
    open_channel,
    send_batch_stream,
    wait_port,
    wait_redis_replica,
)

from pocketmq.broker.v1 import broker_pb2 as pb
from pocketmq.broker.v1 import broker_pb2_grpc
from pocketmq.wire.auth import Credentials
from pocketmq.wire.grpcauth import signing_interceptors
from pocketmq.wire.tls import ClientTls, aio_channel
from services.broker.storage.record import Message, decode_record, encode_record
from services.common.grpcserver import start_grpc_server

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

    class EchoServicer(broker_pb2_grpc.BrokerServicer):  # type: ignore[misc]
        SendMessage = staticmethod(send)
        SendMessageBatch = staticmethod(send_batch)
        SendMessageStream = staticmethod(send_stream)
        PullMessageStream = staticmethod(pull_stream)

    async def serve() -> None:
        # Built exactly like the broker's server (options, registration, health, reflection).
        server = await start_grpc_server(
            f"127.0.0.1:{port}", lambda s: broker_pb2_grpc.add_BrokerServicer_to_server(EchoServicer(), s),
            [ECHO_SERVICE])
        await server.server.wait_for_termination()

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
    async with open_channel(addr) as channel:
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


async def produce_batch_stream(addr: str, messages: int, window: int = 16) -> float:
    calls = messages // BATCH
    elapsed, replies, _ = await send_batch_stream(addr, batch_request(), calls, window)
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
                 extra: Sequence[str] = ()) -> tuple[subprocess.Popen[bytes], str]:
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


def make_pki(workdir: Path) -> ClientTls:
    """A CA and a server certificate for 127.0.0.1 made for this run; the clients' TLS trusting it."""
    from services.common.tls import generate_ca, issue_certificate

    pki = workdir / "pki"
    generate_ca(pki / "ca.crt", pki / "ca.key")
    issue_certificate(pki / "ca.crt", pki / "ca.key", pki / "tls.crt", pki / "tls.key", ("127.0.0.1",))
    return ClientTls(ca_file=str(pki / "ca.crt"))


def tls_broker_flags(workdir: Path) -> tuple[str, ...]:
    """tlsEnable (TLS only on the gRPC port) with the certificate of :func:`make_pki`."""
    pki = workdir / "pki"
    return ("--tls-enable", "true", "--tls-server-cert-path", str(pki / "tls.crt"),
            "--tls-server-key-path", str(pki / "tls.key"))


#: The TLS + ACL broker's users: an admin (creates the topic) and a producer allowed Pub on it.
BENCH_ADMIN = Credentials("bench-admin", "bench-admin-secret-1")
BENCH_PRODUCER = Credentials("bench-producer", "bench-producer-secret-1")


def acl_broker_flags(workdir: Path) -> tuple[str, ...]:
    """aclEnable with an ACL file holding BENCH_ADMIN (Super) and BENCH_PRODUCER (Pub on the topic)."""
    acl_file = workdir / "acl.json"
    acl_file.write_text(json.dumps({"users": [
        {"accessKey": BENCH_ADMIN.access_key, "secretKey": BENCH_ADMIN.secret_key, "userType": "Super"},
        {"accessKey": BENCH_PRODUCER.access_key, "secretKey": BENCH_PRODUCER.secret_key,
         "policies": [{"resource": f"Topic:{TOPIC}", "actions": ["Pub", "Sub"]},
                      {"resource": "Group:bench", "actions": ["Sub"]}]}]}))
    return ("--acl-enable", "true", "--acl-config-file", str(acl_file))


async def create_topic(addr: str, tls: ClientTls | None = None,
                       credentials: Credentials | None = None) -> None:
    from pocketmq.broker.v1 import broker_pb2_grpc
    from pocketmq.common.v1 import common_pb2

    async with aio_channel(addr, [], tls, signing_interceptors(credentials)) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        await stub.CreateTopic(pb.CreateTopicRequest(topic_config=common_pb2.TopicConfig(
            topic_name=TOPIC, read_queue_nums=1, write_queue_nums=1, perm=6)), timeout=10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000,
                        help="messages per batch/stream/consume phase")
    parser.add_argument("--single-seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of all the phases; every figure is the median over the rounds")
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
        client_tls = make_pki(workdir)
        tls_proc, tls_broker = start_broker(workdir, args.pull_batch, "broker-tls", tls_broker_flags(workdir))
        procs.append(tls_proc)
        asyncio.run(create_topic(tls_broker, client_tls))
        CHANNELS[tls_broker] = lambda: aio_channel(tls_broker, [], client_tls)
        secure_proc, secure = start_broker(workdir, args.pull_batch, "broker-tls-acl",
                                           (*tls_broker_flags(workdir), *acl_broker_flags(workdir)))
        procs.append(secure_proc)
        asyncio.run(create_topic(secure, client_tls, BENCH_ADMIN))
        signer = signing_interceptors(BENCH_PRODUCER)
        CHANNELS[secure] = lambda: aio_channel(secure, [], client_tls, signer)
        redis = Redis(workdir)

        n = args.messages
        #: Every round's (msgs/s, server CPU us/msg) of each phase.
        rounds: dict[str, list[tuple[float, float]]] = {}

        def run(name: str, pids: list[int], fn: Callable[[], float]) -> None:
            cpu = sum(cpu_seconds(pid) for pid in pids)
            start = time.perf_counter()
            rate = fn()
            wall = time.perf_counter() - start
            used = sum(cpu_seconds(pid) for pid in pids) - cpu
            us = used / max(rate * wall, 1) * 1e6
            rounds.setdefault(name, []).append((rate, us))
            print(f"  {name:<22} {rate:>10,.0f} msgs/s   (server CPU {us:.1f} us/msg)", flush=True)

        print(f"bench-broker: {BODY_SIZE} B messages, {n} per phase, batch {BATCH}, "
              f"pull batch {args.pull_batch}, {args.rounds} rounds; {os.cpu_count()} CPUs, "
              f"load average {os.getloadavg()[0]:.2f}", flush=True)
        echo_pid, broker_pid, tls_pid, secure_pid = ([proc.pid] for proc in procs[:4])
        redis_pid = [p.pid for p in redis.procs]  # primary + replica
        phases: list[tuple[str, list[int], Callable[[], float]]] = [
            ("echo single", echo_pid, lambda: asyncio.run(produce_single(echo, args.single_seconds))),
            ("pocketmq single", broker_pid, lambda: asyncio.run(produce_single(broker, args.single_seconds))),
            ("echo batch unary", echo_pid, lambda: asyncio.run(produce_batch_unary(echo, n // 2))),
            ("pocketmq batch unary", broker_pid, lambda: asyncio.run(produce_batch_unary(broker, n // 2))),
            ("echo batch stream", echo_pid, lambda: asyncio.run(produce_batch_stream(echo, n))),
            ("pocketmq batch stream", broker_pid, lambda: asyncio.run(produce_batch_stream(broker, n))),
            ("pocketmq stream TLS", tls_pid, lambda: asyncio.run(produce_batch_stream(tls_broker, n))),
            # The same batched produce over TLS with access control (every request signed and checked).
            ("tls+acl batch unary", secure_pid, lambda: asyncio.run(produce_batch_unary(secure, n // 2))),
            ("tls+acl batch stream", secure_pid, lambda: asyncio.run(produce_batch_stream(secure, n))),
            ("redis xadd pipelined", redis_pid, lambda: redis.produce(n) if redis else 0.0),
            ("echo consume", echo_pid, lambda: asyncio.run(consume_stream(echo, n, args.pull_batch))),
            ("pocketmq consume", broker_pid, lambda: asyncio.run(consume_stream(broker, n, args.pull_batch))),
            ("redis xrange", redis_pid, lambda: redis.consume(n, args.pull_batch) if redis else 0.0),
        ]
        for number in range(1, args.rounds + 1):
            print(f"round {number} (load average {os.getloadavg()[0]:.2f})", flush=True)
            for name, pids, fn in phases:
                run(name, pids, fn)
        # The figures are medians over the rounds; a ratio is the median of each round's ratio
        # (the two phases of a round ran one after the other, under about the same load).
        results = {name: statistics.median(rate for rate, _ in got) for name, got in rounds.items()}
        server_us = {name: statistics.median(us for _, us in got) for name, got in rounds.items()}

        def by_round(ours: str, other: str, column: int = 0) -> list[float]:
            """``ours`` / ``other`` in each round (column 0: msgs/s, 1: server CPU us/msg)."""
            return [a[column] / b[column] for a, b in zip(rounds[ours], rounds[other], strict=True)]

        def ratio(ours: str, other: str) -> float:
            return statistics.median(by_round(ours, other))

        def cpu_ratio(ours: str, other: str) -> float:
            return statistics.median(by_round(ours, other, 1))

        for label, ours, other in (("single", "pocketmq single", "echo single"),
                                   ("batch stream", "pocketmq batch stream", "echo batch stream")):
            shown = "  ".join(f"{x:.2f}" for x in by_round(ours, other))
            print(f"  {label} PocketMQ / echo by round: {shown}")

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
                  f"{ratio(ours, ceiling):>7.0%} {peer_text}   {cpu_text}")
        print()
        print(f"{'secured phase':<14} {'plaintext':>12} {'TLS':>12} {'TLS+ACL':>12} {'of plain':>8}   "
              "server CPU us/msg plaintext / TLS / TLS+ACL")
        for phase, tls_phase in (("batch unary", ""), ("batch stream", "pocketmq stream TLS")):
            plain_rate, secure_rate = results[f"pocketmq {phase}"], results[f"tls+acl {phase}"]
            tls_text = f"{results[tls_phase]:>12,.0f}" if tls_phase else f"{'-':>12}"
            tls_cpu = f"{server_us[tls_phase]:.1f}" if tls_phase else "-"
            of_plain = ratio(f"tls+acl {phase}", f"pocketmq {phase}")
            print(f"{phase:<14} {plain_rate:>12,.0f} {tls_text} {secure_rate:>12,.0f} "
                  f"{of_plain:>7.0%}   {server_us[f'pocketmq {phase}']:.1f} / "
                  f"{tls_cpu} / {server_us[f'tls+acl {phase}']:.1f}")
        tls_ratio = ratio("pocketmq stream TLS", "pocketmq batch stream")
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        tls_acl_vs_plain = ratio("tls+acl batch stream", "pocketmq batch stream")
        tls_acl_unary = ratio("tls+acl batch unary", "pocketmq batch unary")
        # Less sensitive to other work on the machine than the rates: broker CPU per message.
        tls_acl_cpu = cpu_ratio("pocketmq batch stream", "tls+acl batch stream")
        produce_ratio = ratio("pocketmq batch stream", "echo batch stream")
        batch_msgs = results["pocketmq batch stream"]
        print(f"broker_produce_ratio={produce_ratio:.2f} broker_batch_produce_msgs={batch_msgs:.0f} "
              f"broker_consume_msgs={results['pocketmq consume']:.0f} "
              f"vs_redis_produce={results['pocketmq batch stream'] / results['redis xadd pipelined']:.2f} "
              f"vs_redis_consume={results['pocketmq consume'] / results['redis xrange']:.2f} "
              f"tls_vs_plain={tls_ratio:.2f} tls_acl_vs_plain={tls_acl_vs_plain:.2f} "
              f"tls_acl_vs_plain_unary={tls_acl_unary:.2f} tls_acl_cpu_vs_plain={tls_acl_cpu:.2f} "
              f"broker_single_ratio={ratio('pocketmq single', 'echo single'):.2f} "
              f"broker_produce_cpu_us={server_us['pocketmq batch stream']:.1f} "
              f"echo_produce_cpu_us={server_us['echo batch stream']:.1f}")
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
