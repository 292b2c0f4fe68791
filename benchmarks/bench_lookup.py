"""Unique message id lookup without a topic: what probing the index once per topic costs.

A NameServer and one broker (real processes) with ``--topics`` topics (1,000), ``--per-topic``
messages each (RocketMQ 5 SDK message ids as UNIQ_KEY). Each round looks ``--lookups`` random
ids up four ways, side by side:
- ``relay_topicless``: ``Admin.get_message(id)`` through the NameServer relay, no topic (the
  broker probes every topic's hash slot);
- ``relay_topic``: the same with the id's topic (one probe: the reference);
- ``broker_topicless`` / ``broker_topic``: ``QueryMessage`` straight to the broker, without and
  with the topic (the broker's share of the cost, no relay hop).
Every round prints p50/p99 (ms) of each; the last line is ``key=value`` figures: medians over
the rounds of each p50/p99 and the topicless/topic ratio of the broker p50.

Run ``python benchmarks/bench_lookup.py`` (about a minute).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import grpc
from benchlib import ROOT, free_port, wait_healthy

from pocketmq import Admin, Message, Producer
from pocketmq.broker.v1 import broker_pb2 as pb
from pocketmq.broker.v1 import broker_pb2_grpc
from pocketmq.common.v1 import common_pb2
from pocketmq.namesrv.v1 import namesrv_pb2, namesrv_pb2_grpc

#: 2021-01-01T00:00:00Z, the RocketMQ 5 SDK id epoch.
SDK_EPOCH_S = 1_609_459_200


def sdk_id(seq: int) -> str:
    return f"01{0x0242AC110002:012X}{os.getpid() & 0xFFFF:04X}{int(time.time()) - SDK_EPOCH_S:08X}{seq:08X}"


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--per-topic", type=int, default=20)
    parser.add_argument("--lookups", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="pocketmq-bench-lookup-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("POCKETMQ_") and "proxy" not in k.lower()}
    procs: list[subprocess.Popen[bytes]] = []

    def start(module: str, argv: list[str], addr: str, name: str) -> None:
        log = open(tmp / f"{name}.log", "wb")  # noqa: SIM115 - lives as long as the process
        proc = subprocess.Popen([sys.executable, "-m", module, *argv], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
        procs.append(proc)
        wait_healthy(addr, proc)

    try:
        namesrv = f"127.0.0.1:{free_port()}"
        start("services.namesrv", ["--listen", namesrv, "--metrics-port", "0"], namesrv, "namesrv")
        port = free_port()
        broker = f"127.0.0.1:{port}"
        start("services.broker", [
            "--broker-name", "broker-a", "--namesrv-addr", namesrv, "--broker-ip1", "127.0.0.1",
            "--listen-host", "127.0.0.1", "--listen-port", str(port), "--ha-listen-port", str(free_port()),
            "--metrics-port", "0", "--store-path-root-dir", str(tmp / "broker"),
            "--register-name-server-period", "1000"], broker, "broker")
        topics = [f"lookup-{i:04d}" for i in range(args.topics)]
        with grpc.insecure_channel(broker) as channel:
            broker_pb2_grpc.BrokerStub(channel).CreateTopics(pb.CreateTopicsRequest(topic_configs=[
                common_pb2.TopicConfig(topic_name=t, read_queue_nums=1, write_queue_nums=1, perm=6)
                for t in topics]), timeout=60)
        with grpc.insecure_channel(namesrv) as channel:
            stub = namesrv_pb2_grpc.NameServerStub(channel)
            deadline = time.monotonic() + 30
            while True:
                try:
                    stub.GetRouteInfoByTopic(namesrv_pb2.GetRouteInfoByTopicRequest(topic=topics[-1]),
                                             timeout=5)
                    break
                except grpc.RpcError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        ids: list[tuple[str, str]] = []
        seq = 0
        started = time.monotonic()
        with Producer(namesrv) as producer:
            for n, topic in enumerate(topics):
                batch = []
                for _ in range(args.per_topic):
                    seq += 1
                    msg_id = sdk_id(seq)
                    ids.append((msg_id, topic))
                    batch.append(Message(topic, b"x" * 64, properties={"UNIQ_KEY": msg_id}))
                producer.send_batch(batch)
                if (n + 1) % 200 == 0:
                    print(f"loaded {n + 1}/{len(topics)} topics ({seq} messages, "
                          f"{time.monotonic() - started:.1f} s)", flush=True)
        rng = random.Random(7)
        figures: dict[str, list[float]] = {}
        with Admin(namesrv) as admin, grpc.insecure_channel(broker) as channel:
            query = broker_pb2_grpc.MessageQueryStub(channel)
            # Everything indexed (and a warm-up) before measuring.
            for msg_id, _topic in ids[-3:]:
                deadline = time.monotonic() + 30
                while not query.QueryMessage(pb.QueryMessageRequest(key=msg_id, unique_key=True),
                                             timeout=10).messages:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"{msg_id} not indexed within 30 s")
                    time.sleep(0.1)
            ways: dict[str, Callable[[str, str], object]] = {
                "relay_topicless": lambda m, _t: admin.get_message(m),
                "relay_topic": lambda m, t: admin.get_message(m, topic=t),
                "broker_topicless": lambda m, _t: query.QueryMessage(
                    pb.QueryMessageRequest(key=m, unique_key=True, max_num=1), timeout=10),
                "broker_topic": lambda m, t: query.QueryMessage(
                    pb.QueryMessageRequest(topic=t, key=m, unique_key=True, max_num=1), timeout=10),
            }
            for r in range(args.rounds):
                picks = rng.sample(ids, args.lookups)
                line = []
                for name, fn in ways.items():
                    samples = [timed(lambda m=m, t=t, fn=fn: fn(m, t)) for m, t in picks]
                    p50, p99 = percentiles(samples)
                    figures.setdefault(f"{name}_p50_ms", []).append(p50)
                    figures.setdefault(f"{name}_p99_ms", []).append(p99)
                    line.append(f"{name} p50 {p50:.2f} p99 {p99:.2f}")
                print(f"round {r + 1}: " + "; ".join(line), flush=True)
        medians = {k: statistics.median(v) for k, v in figures.items()}
        for k, v in medians.items():
            print(f"median {k} {v:.2f}")
        ratio = medians["broker_topicless_p50_ms"] / medians["broker_topic_p50_ms"]
        print(" ".join([f"{k}={v:.2f}" for k, v in medians.items()]
                       + [f"topicless_over_topic_broker_p50={ratio:.1f}", f"topics={args.topics}",
                          f"messages={seq}"]))
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
