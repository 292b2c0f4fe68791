"""Spark batch-read throughput of the ``pocketmq`` data source next to the Python consumer reading
the same data in the same run.

Set-up (real processes on loopback, fresh store, removed afterwards): a NameServer and one broker
group (``broker-a``, ASYNC_MASTER, ASYNC_FLUSH) whose pulls may carry up to 4096 messages /
16 MiB (``maxTransferCountOnMessageInMemory`` / ``maxTransferBytesOnMessageInMemory``; the
RocketMQ defaults of 32 / 256 KiB throttle every reader alike). ``--messages`` 1 KiB messages
(default 1 million, ~1.1 GiB of records) are produced with SendMessageBatch into ``--queues``
queues of the topic (default 8).

Each round (``--repeat``, default 2; the best of each side counts) reads everything twice:

* Python consumer: the client's ``AsyncConsumer`` (one process, one event loop; raw-record
  pulls of up to 4096 messages, a pull loop per queue), iterated with ``async for`` and the body
  length summed - the fastest way a Python application consumes a topic;
* Spark: ``spark.read.format("pocketmq")`` on ``local[*]``, ``count(*)`` and
  ``sum(length(body))`` (every body reaches the JVM); planning included. Not counted: session
  start and one warm-up read of up to 200 000 messages (starts the Python workers and lets the
  JVM compile its Arrow ingest path - a long-running Spark application pays this once).

The last line is ``spark_read_ratio=<x> spark_read_msgs=<n>``: x = Spark msgs/s / consumer
msgs/s, n = Spark msgs/s. Other work on the machine skews both figures (the load average is
printed); the ratio compares figures of the same run.

    python benchmarks/bench_spark.py [--messages 1000000] [--queues 8] [--repeat 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
from benchlib import ROOT, free_port, wait_healthy

from pocketmq.broker.v1 import broker_pb2 as pb
from pocketmq.broker.v1 import broker_pb2_grpc
from pocketmq.common.v1 import common_pb2
from pocketmq.namesrv.v1 import namesrv_pb2, namesrv_pb2_grpc

BODY_SIZE = 1024
SEND_BATCH = 256
TOPIC = "bench-spark"
BROKER = "broker-a"


class Processes:
    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.log_dir / f"{name}.log", "wb")  # noqa: SIM115 - lives as long as the process
        proc = subprocess.Popen([sys.executable, "-m", *args], cwd=ROOT, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def create_topic(broker: str, namesrv: str, queues: int) -> None:
    config = common_pb2.TopicConfig(topic_name=TOPIC, read_queue_nums=queues, write_queue_nums=queues,
                                    perm=6)
    with grpc.insecure_channel(broker) as channel:
        broker_pb2_grpc.BrokerStub(channel).CreateTopic(pb.CreateTopicRequest(topic_config=config),
                                                        timeout=10)
    deadline = time.monotonic() + 60
    with grpc.insecure_channel(namesrv) as channel:
        stub = namesrv_pb2_grpc.NameServerStub(channel)
        while True:
            try:
                route = stub.GetRouteInfoByTopic(namesrv_pb2.GetRouteInfoByTopicRequest(topic=TOPIC),
                                                 timeout=5)
                if route.queue_datas:
                    return
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the topic never appeared in the NameServer's routes")
            time.sleep(0.2)


def _identity(data: bytes) -> bytes:
    return data


async def produce(broker: str, messages: int, queues: int, inflight: int = 8) -> float:
    """SendMessageBatch requests of 256 x 1 KiB, spread over the queues; returns msgs/s."""
    bodies = [(b"%08d:" % i) + os.urandom(BODY_SIZE - 9) for i in range(SEND_BATCH)]
    messages_pb = [pb.Message(body=b) for b in bodies]
    requests = [pb.SendMessageBatchRequest(topic=TOPIC, queue_id=q, messages=messages_pb).SerializeToString()
                for q in range(queues)]
    batches = [SEND_BATCH] * (messages // SEND_BATCH)
    if messages % SEND_BATCH:
        batches.append(messages % SEND_BATCH)
    options = [("grpc.max_send_message_length", 64 << 20)]
    async with grpc.aio.insecure_channel(broker, options=options) as ch:
        call = ch.unary_unary("/pocketmq.broker.v1.Broker/SendMessageBatch", request_serializer=_identity,
                              response_deserializer=pb.SendMessageBatchResponse.FromString)
        next_batch = 0

        async def worker() -> None:
            nonlocal next_batch
            while next_batch < len(batches):
                i = next_batch
                next_batch += 1
                request = requests[i % queues]
                if batches[i] != SEND_BATCH:
                    msg = pb.SendMessageBatchRequest.FromString(request)
                    del msg.messages[batches[i]:]
                    request = msg.SerializeToString()
                reply = await call(request, timeout=60)
                if reply.status != pb.PUT_OK:
                    raise RuntimeError(f"send failed: {reply}")

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(inflight)))
        return messages / (time.perf_counter() - start)


async def consume(namesrv: str, messages: int, round_no: int) -> tuple[float, int]:
    """The client's AsyncConsumer reads everything; returns (msgs/s, body bytes)."""
    from pocketmq.client.consumer import AsyncConsumer

    consumer = AsyncConsumer(f"bench-consumer-{round_no}-{os.getpid()}", namesrv,
                             consume_from="first", pull_batch_size=4096, buffer_batches=4,
                             long_poll_timeout=2.0)
    consumer.subscribe(TOPIC)
    count = total = 0
    start = time.perf_counter()
    await consumer.start()
    try:
        async for msg in consumer:
            count += 1
            total += len(msg.body)
            if count >= messages:
                break
        elapsed = time.perf_counter() - start
    finally:
        await consumer.close()
    return count / elapsed, total


def spark_read(spark: Any, namesrv: str, messages: int) -> tuple[float, int]:
    start = time.perf_counter()
    df = spark.read.format("pocketmq").option("namesrv", namesrv).option("topic", TOPIC).load()
    row = df.selectExpr("count(*) AS n", "sum(length(body)) AS bytes").collect()[0]
    elapsed = time.perf_counter() - start
    if row["n"] != messages:
        raise RuntimeError(f"Spark read {row['n']} messages, expected {messages}")
    return messages / elapsed, int(row["bytes"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--queues", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=2, help="rounds; the best of each side counts")
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    tmp = Path(tempfile.mkdtemp(prefix="pocketmq-bench-spark-"))
    procs = Processes(tmp)
    spark = None
    try:
        ns_port, broker_port = free_port(), free_port()
        namesrv, broker = f"127.0.0.1:{ns_port}", f"127.0.0.1:{broker_port}"
        proc = procs.start("namesrv", "services.namesrv", "--listen", namesrv, "--metrics-port", "0")
        wait_healthy(namesrv, proc)
        proc = procs.start(
            "broker", "services.broker", "--broker-name", BROKER, "--broker-id", "0",
            "--broker-role", "ASYNC_MASTER", "--flush-disk-type", "ASYNC_FLUSH", "--namesrv-addr", namesrv,
            "--broker-ip1", "127.0.0.1", "--listen-host", "127.0.0.1", "--listen-port", str(broker_port),
            "--ha-listen-port", str(free_port()), "--metrics-port", "0",
            "--store-path-root-dir", str(tmp / "store"),
            "--max-transfer-count-on-message-in-memory", "4096",
            "--max-transfer-bytes-on-message-in-memory", str(16 * 1024 * 1024))
        wait_healthy(broker, proc)
        create_topic(broker, namesrv, args.queues)
        produce_rate = asyncio.run(produce(broker, args.messages, args.queues))
        cores = os.cpu_count() or 1
        print(f"bench-spark: {args.messages:,} messages of {BODY_SIZE} B in {args.queues} queues of one "
              f"broker (ASYNC_FLUSH); Spark {args.master} on {cores} cores", flush=True)
        print(f"  produced with SendMessageBatch x{SEND_BATCH}: {produce_rate:,.0f} msgs/s", flush=True)

        import pocketmq.spark

        t = time.perf_counter()
        spark = pocketmq.spark.local_session("bench-spark", args.master, {
            "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": str(cores)})
        spark.sparkContext.setLogLevel("ERROR")
        per_queue = max(1, min(args.messages, 200_000) // args.queues)
        warm = json.dumps({TOPIC: {BROKER: {str(q): per_queue for q in range(args.queues)}}})
        (spark.read.format("pocketmq").option("namesrv", namesrv).option("topic", TOPIC)
         .option("endingOffsets", warm).load().selectExpr("sum(length(body))").collect())
        print(f"  Spark session and warm-up: {time.perf_counter() - t:.1f} s (not counted)", flush=True)

        expected_bytes = args.messages * BODY_SIZE
        consumer_best = spark_best = 0.0
        print(f"\n{'round':<6} {'Python consumer':>18} {'Spark':>14} {'ratio':>7}", flush=True)
        for round_no in range(1, args.repeat + 1):
            c_rate, c_bytes = asyncio.run(consume(namesrv, args.messages, round_no))
            s_rate, s_bytes = spark_read(spark, namesrv, args.messages)
            if c_bytes != expected_bytes or s_bytes != expected_bytes:
                raise RuntimeError(f"body bytes: consumer {c_bytes}, Spark {s_bytes}, "
                                   f"expected {expected_bytes}")
            consumer_best, spark_best = max(consumer_best, c_rate), max(spark_best, s_rate)
            print(f"{round_no:<6} {c_rate:>12,.0f} msg/s {s_rate:>8,.0f} msg/s {s_rate / c_rate:>7.2f}",
                  flush=True)
        mib = BODY_SIZE / (1024 * 1024)
        print(f"best   {consumer_best:>12,.0f} msg/s {spark_best:>8,.0f} msg/s   "
              f"({consumer_best * mib:,.0f} vs {spark_best * mib:,.0f} MiB/s of bodies)")
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        print(f"spark_read_ratio={spark_best / consumer_best:.2f} spark_read_msgs={spark_best:.0f}")
        return 0
    finally:
        if spark is not None:
            spark.stop()
        procs.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
