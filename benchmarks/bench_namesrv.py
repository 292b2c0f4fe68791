"""How many registrations and route queries per second one NameServer process sustains.

Starts a real ``python -m services.namesrv`` on loopback, registers 100 simulated brokers (all
masters of one cluster) carrying 100 topics each (1000 distinct topics, each served by about ten
broker groups), then drives it from client processes running grpc.aio with many calls in flight:

1. heartbeats: RegisterBroker with the full 100-topic table and an unchanged DataVersion (what a
   NameServer receives every 30 s from every broker),
2. topic-table changes: RegisterBroker with a new DataVersion each time (the table is re-read),
3. route queries: GetRouteInfoByTopic over the 1000 topics (what clients do).

Requests are serialised once up front and responses are not parsed in the timed loop, so the
clients stay cheap; the server's CPU use is printed next to each figure. The last line is
``namesrv_route_qps=<n> namesrv_register_ps=<m>`` (register = the heartbeat figure).

    python benchmarks/bench_namesrv.py [--seconds 7] [--clients 2] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from benchlib import ROOT, cpu_seconds, free_port, wait_healthy

from pocketmq.common.v1 import common_pb2
from pocketmq.namesrv.v1 import namesrv_pb2 as pb

BROKERS = 100
TOPICS_PER_BROKER = 100
TOPICS = 1000
CLUSTER = "bench"
SERVICE = "/pocketmq.namesrv.v1.NameServer/"


def broker_topics(i: int) -> list[str]:
    """Broker i serves 100 consecutive topics starting at 10*i (mod 1000): ~10 brokers per topic."""
    return [f"topic-{(10 * i + k) % TOPICS:04d}" for k in range(TOPICS_PER_BROKER)]


def register_request(i: int, counter: int) -> bytes:
    return pb.RegisterBrokerRequest(
        cluster_name=CLUSTER, broker_name=f"broker-{i:03d}", broker_id=0,
        broker_addr=f"10.1.{i // 250}.{i % 250}:10911", ha_server_addr=f"10.1.{i // 250}.{i % 250}:10912",
        topic_config_version=common_pb2.DataVersion(timestamp=1_700_000_000_000, counter=counter),
        topic_configs=[
            common_pb2.TopicConfig(topic_name=t, read_queue_nums=8, write_queue_nums=8, perm=6)
            for t in broker_topics(i)
        ],
        broker_role="ASYNC_MASTER",
    ).SerializeToString()


def route_request(j: int) -> bytes:
    return pb.GetRouteInfoByTopicRequest(topic=f"topic-{j:04d}").SerializeToString()


# ---------------------------------------------------------------- client processes


def build_requests(phase: str, seed: int) -> list[bytes]:
    if phase == "heartbeat":
        return [register_request(i, 1) for i in range(BROKERS)]
    if phase == "changed":
        # Distinct, ever-growing versions per client process: every call carries a new version.
        return [register_request(i, 1000 * (seed + 1) + n) for n in range(1, 6) for i in range(BROKERS)]
    return [route_request(j) for j in range(TOPICS)]


async def drive(addr: str, phase: str, start_at: float, seconds: float, concurrency: int, seed: int
                ) -> tuple[int, int, list[float]]:
    method = SERVICE + ("GetRouteInfoByTopic" if phase == "route" else "RegisterBroker")
    requests = build_requests(phase, seed)
    rng = random.Random(seed)
    channels = [grpc.aio.insecure_channel(addr) for _ in range(2)]
    calls = [ch.unary_unary(method) for ch in channels]  # bytes in, bytes out
    for ch in channels:
        await ch.channel_ready()
    ok = errors = 0
    latencies: list[float] = []
    await asyncio.sleep(max(0.0, start_at - time.time()))
    deadline = time.monotonic() + seconds

    async def worker(w: int) -> None:
        nonlocal ok, errors
        call = calls[w % len(calls)]
        k = rng.randrange(len(requests))
        while time.monotonic() < deadline:
            k = (k + 1) % len(requests) if phase != "route" else rng.randrange(len(requests))
            t = time.perf_counter()
            try:
                await call(requests[k], timeout=10)
                ok += 1
            except grpc.aio.AioRpcError:
                errors += 1
            if ok % 16 == 0:
                latencies.append(time.perf_counter() - t)

    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    for ch in channels:
        await ch.close()
    return ok, errors, latencies


def client_main(addr: str, phase: str, start_at: float, seconds: float, concurrency: int, seed: int
                ) -> tuple[int, int, list[float]]:
    return asyncio.run(drive(addr, phase, start_at, seconds, concurrency, seed))


# ---------------------------------------------------------------- server process


def run_phase(pool: concurrent.futures.ProcessPoolExecutor, args: argparse.Namespace, addr: str, pid: int,
              phase: str, seconds: float) -> tuple[float, str]:
    start_at = time.time() + 1.5  # clients import grpc and connect before the clock starts
    futures = [pool.submit(client_main, addr, phase, start_at, seconds, args.concurrency, seed)
               for seed in range(args.clients)]
    time.sleep(max(0.0, start_at - time.time()))
    cpu0 = cpu_seconds(pid)
    results = [f.result() for f in futures]
    cpu = (cpu_seconds(pid) - cpu0) / seconds
    ok = sum(r[0] for r in results)
    errors = sum(r[1] for r in results)
    lat = sorted(x for r in results for x in r[2])
    rate = ok / seconds
    p50 = statistics.median(lat) * 1000 if lat else 0.0
    p99 = lat[int(len(lat) * 0.99)] * 1000 if lat else 0.0
    detail = (f"{ok} calls in {seconds:g} s = {rate:,.0f}/s  (errors {errors}, latency p50 {p50:.1f} ms "
              f"p99 {p99:.1f} ms, server CPU {cpu:.2f} cores)")
    return rate, detail


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=7.0, help="duration of each timed phase")
    parser.add_argument("--clients", type=int, default=2, help="client processes")
    parser.add_argument("--concurrency", type=int, default=64, help="calls in flight per client process")
    args = parser.parse_args()

    port = free_port()
    addr = f"127.0.0.1:{port}"
    log = Path(tempfile.mkdtemp(prefix="bench-namesrv-")) / "namesrv.log"
    env = {**os.environ, "POCKETMQ_LOG_LEVEL": "WARNING"}
    with open(log, "wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "services.namesrv", "--listen", addr, "--metrics-port", "0",
             "--broker-channel-expired-time", "600000"],
            cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT,
        )
    try:
        wait_healthy(addr, proc, log=log)
        print(f"namesrv bench: {BROKERS} brokers x {TOPICS_PER_BROKER} topics ({TOPICS} topics, "
              f"~{BROKERS * TOPICS_PER_BROKER // TOPICS} brokers per topic); "
              f"{args.clients} client processes x {args.concurrency} calls in flight; "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} (other work skews the figures)",
              flush=True)

        with grpc.insecure_channel(addr) as ch:
            register = ch.unary_unary(SERVICE + "RegisterBroker")
            t = time.perf_counter()
            for i in range(BROKERS):
                register(register_request(i, 1), timeout=10)
            first = time.perf_counter() - t
            info = pb.ClusterInfo.FromString(
                ch.unary_unary(SERVICE + "GetBrokerClusterInfo")(b"", timeout=10)
            )
            route = pb.TopicRouteData.FromString(
                ch.unary_unary(SERVICE + "GetRouteInfoByTopic")(route_request(0), timeout=10)
            )
        assert len(info.broker_live_table) == BROKERS, "not every broker registered"
        print(f"initial registration: {BROKERS} brokers one by one in {first:.2f} s; a route names "
              f"{len(route.queue_datas)} broker groups", flush=True)

        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(args.clients, mp_context=ctx) as pool:
            register_ps, detail = run_phase(pool, args, addr, proc.pid, "heartbeat", args.seconds)
            print(f"register (heartbeat, 100-topic table, unchanged version): {detail}", flush=True)
            _, detail = run_phase(pool, args, addr, proc.pid, "changed", max(2.0, args.seconds / 3))
            print(f"register (topic table changed, re-read):                  {detail}", flush=True)
            route_qps, detail = run_phase(pool, args, addr, proc.pid, "route", args.seconds)
            print(f"route queries (GetRouteInfoByTopic, ~10 groups per route): {detail}", flush=True)
        if proc.poll() is not None:
            raise SystemExit(f"namesrv died during the benchmark:\n{log.read_text()}")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    print(f"namesrv_route_qps={route_qps:.0f} namesrv_register_ps={register_ps:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
