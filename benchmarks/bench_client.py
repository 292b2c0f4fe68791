"""The user-facing benchmark: ``pocketmq bench produce`` and ``pocketmq bench consume`` (the real
CLI entry point, the real client) against a NameServer and a broker started here on loopback.

Runs, each as a separate CLI process:

1. produce, one message per request (``--batch 1``), 8 requests in flight;
2. produce, batches of 32, 8 requests in flight (the throughput figure);
3. consume the backlog of (2) with a new group (drain rate; ``--rounds`` times, a new group each);
4. produce and consume at the same time (end-to-end latency under load: born -> received).

As a reference for (3), the same backlog is also read here with bare ``PullMessageStream`` calls
(raw records, every queue at once, nothing decoded), after each consume round: what the broker and
gRPC deliver, which the client's decoding and bookkeeping bring down to the consume rate. Each
round prints both rates with the CPU per message of the reading process and of the broker (the
machine may be shared: CPU per message is the steadier figure).

Prints every round, the load before and after, one table row per run (the consume row and the
reference row are the medians), a line ``consume/raw_pull=<median of the rounds' ratios>`` and a
last line ``client_produce_msgs_per_s=<n> client_consume_msgs_per_s=<m> client_e2e_p99_ms=<l>
client_consume_cpu_us_per_msg=<c> raw_pull_cpu_us_per_msg=<r>``.

    python benchmarks/bench_client.py [--messages 200000] [--size 1024] [--slave] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
from benchlib import ROOT, cpu_seconds, free_port, wait_healthy

from pocketmq.broker.v1 import broker_pb2, broker_pb2_grpc
from pocketmq.cli.bench import CPU_SAMPLE_S


def cli() -> list[str]:
    script = shutil.which("pocketmq", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "pocketmq.cli"]


def bench(namesrv: str, *args: str) -> dict[str, Any]:
    proc = subprocess.run([*cli(), "bench", *args, "--namesrv", namesrv, "--output", "json"],
                          capture_output=True, text=True, check=False, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"pocketmq bench {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


async def raw_pull(broker: str, topic: str, messages: int) -> dict[str, Any]:
    """Read ``messages`` of ``topic`` from offset 0 of every queue with PullMessageStream
    (raw records, not decoded); msgs/s from the first reply to the last, as ``bench consume``."""
    options = [("grpc.max_receive_message_length", 64 << 20)]
    async with grpc.aio.insecure_channel(broker, options=options) as ch:
        stub = broker_pb2_grpc.BrokerStub(ch)
        config = (await stub.GetTopic(broker_pb2.GetTopicRequest(topic=topic), timeout=10)).topic_config
        got = nbytes = 0
        first: float | None = None
        last = 0.0
        first_cpu = last_cpu = cpu_at = 0.0

        async def follow(queue_id: int) -> None:
            nonlocal got, nbytes, first, last, first_cpu, last_cpu, cpu_at
            call = stub.PullMessageStream(broker_pb2.PullMessageRequest(
                consumer_group="bench-raw-pull", topic=topic, queue_id=queue_id, queue_offset=0,
                max_msg_nums=256, subscription="*", raw_records=True, suspend_timeout_ms=2000))
            offset = 0
            try:
                while got < messages:
                    reply = await call.read()
                    if reply is grpc.aio.EOF or reply.status != broker_pb2.FOUND:
                        return
                    last = time.perf_counter()
                    got += reply.next_begin_offset - offset
                    if first is None:
                        first, first_cpu = last, time.process_time()
                        last_cpu, cpu_at = first_cpu, last
                    elif last - cpu_at >= CPU_SAMPLE_S or got >= messages:
                        last_cpu, cpu_at = time.process_time(), last  # as bench consume samples it
                    nbytes += len(reply.records)
                    offset = reply.next_begin_offset
            finally:
                call.cancel()

        await asyncio.gather(*(follow(q) for q in range(config.read_queue_nums)))
    seconds = max(1e-9, last - (first or last))
    return {"messages": got, "msgs_per_s": got / seconds, "mb_per_s": nbytes / seconds / 1e6,
            "latency": "-", "p50_ms": 0.0, "p99_ms": 0.0, "errors": 0,
            "cpu_us_per_msg": (last_cpu - first_cpu) / max(1, got) * 1e6}


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000, help="messages of the batched runs")
    parser.add_argument("--size", type=int, default=1024, help="body bytes")
    parser.add_argument("--slave", action="store_true", help="also run a slave replicating from the master")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of consume backlog + raw pull")
    args = parser.parse_args()

    procs: list[subprocess.Popen[bytes]] = []
    drains: list[dict[str, Any]] = []
    references: list[dict[str, Any]] = []
    print(f"bench-client: {args.messages} messages of {args.size} bytes, {args.rounds} rounds, "
          f"load before {load()}", flush=True)
    master = ""
    tmp = Path(tempfile.mkdtemp(prefix="pocketmq-bench-client-"))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("POCKETMQ_") or k.startswith("POCKETMQ_LOG")}

    def start(module: str, argv: list[str], addr: str, name: str) -> None:
        log = open(tmp / f"{name}.log", "wb")  # noqa: SIM115 - lives as long as the process
        proc = subprocess.Popen([sys.executable, "-m", module, *argv], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
        procs.append(proc)
        wait_healthy(addr, proc)

    try:
        namesrv = f"127.0.0.1:{free_port()}"
        start("services.namesrv", ["--listen", namesrv, "--metrics-port", "0"], namesrv, "namesrv")
        brokers = [(0, "ASYNC_MASTER")] + ([(1, "SLAVE")] if args.slave else [])
        for broker_id, role in brokers:
            port = free_port()
            addr = f"127.0.0.1:{port}"
            start("services.broker", [
                "--broker-name", "broker-a", "--broker-id", str(broker_id), "--broker-role", role,
                "--namesrv-addr", namesrv, "--broker-ip1", "127.0.0.1", "--listen-host", "127.0.0.1",
                "--listen-port", str(port), "--ha-listen-port", str(free_port()), "--metrics-port", "0",
                "--store-path-root-dir", str(tmp / f"store-{broker_id}"),
            ], addr, f"broker-{broker_id}")
            master = master or addr
        time.sleep(1.0)  # first registration
        size = str(args.size)
        runs = [
            ("produce batch=1", bench(namesrv, "produce", "--topic", "bench-single", "--messages",
                                      str(max(1000, args.messages // 10)), "--size", size, "--batch", "1",
                                      "--concurrency", "8")),
            ("produce batch=32", bench(namesrv, "produce", "--topic", "bench-batch", "--messages",
                                       str(args.messages), "--size", size, "--batch", "32",
                                       "--concurrency", "8")),
        ]
        # The backlog, read by a new consumer group each round, then by bare pulls; the broker's
        # CPU per message next to each (the machine is shared: CPU per message is the steadier
        # figure).
        broker_pid = procs[1].pid
        for r in range(args.rounds):
            cpu0 = cpu_seconds(broker_pid)
            d = bench(namesrv, "consume", "--topic", "bench-batch", "--messages", str(args.messages),
                      "--idle", "10")
            d["broker_cpu_us_per_msg"] = (cpu_seconds(broker_pid) - cpu0) / max(1, d["messages"]) * 1e6
            cpu0 = cpu_seconds(broker_pid)
            ref = asyncio.run(raw_pull(master, "bench-batch", args.messages))
            ref["broker_cpu_us_per_msg"] = (cpu_seconds(broker_pid) - cpu0) / max(1, ref["messages"]) * 1e6
            drains.append(d)
            references.append(ref)
            print(f"round {r + 1}: consume {d['msgs_per_s']:,.0f} msgs/s (client CPU "
                  f"{d['cpu_us_per_msg']:.2f} us/msg, broker {d['broker_cpu_us_per_msg']:.2f}), raw pull "
                  f"{ref['msgs_per_s']:,.0f} msgs/s (CPU {ref['cpu_us_per_msg']:.2f} us/msg, broker "
                  f"{ref['broker_cpu_us_per_msg']:.2f}), ratio {d['msgs_per_s'] / ref['msgs_per_s']:.2f}, "
                  f"load {load()}", flush=True)
        # Produce and consume together: the consumer joins first, reads only new messages.
        consumer = subprocess.Popen(
            [*cli(), "bench", "consume", "--topic", "bench-live", "--from", "last", "--messages",
             str(args.messages // 2), "--idle", "15", "--namesrv", namesrv, "--output", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        bench(namesrv, "produce", "--topic", "bench-live", "--messages", "1", "--size", size)  # create it
        time.sleep(3.0)  # the consumer owns the queues
        live_produce = bench(namesrv, "produce", "--topic", "bench-live", "--messages",
                             str(args.messages // 2), "--size", size, "--batch", "32", "--concurrency", "4")
        out, err = consumer.communicate(timeout=600)
        if consumer.returncode != 0:
            raise SystemExit(f"live consume failed:\n{err}")
        runs += [("produce while consuming", live_produce), ("consume live (e2e)", json.loads(out))]
        print(f"load after {load()}")
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in reversed(procs):
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)

    def median_of(rows: list[dict[str, Any]], key: str) -> float:
        return statistics.median(row[key] for row in rows)

    drain = dict(drains[0], msgs_per_s=median_of(drains, "msgs_per_s"),
                 mb_per_s=median_of(drains, "mb_per_s"), p50_ms=median_of(drains, "p50_ms"),
                 p99_ms=median_of(drains, "p99_ms"))
    r = dict(references[0], msgs_per_s=median_of(references, "msgs_per_s"),
             mb_per_s=median_of(references, "mb_per_s"))
    runs.insert(2, ("consume backlog (median)", drain))
    print(f"{'run':<26}{'messages':>10}{'msgs/s':>11}{'MB/s':>8}{'latency':>9}{'p50 ms':>9}{'p99 ms':>9}"
          f"{'errors':>8}")
    for name, row in runs:
        print(f"{name:<26}{row['messages']:>10}{row['msgs_per_s']:>11,.0f}{row['mb_per_s']:>8.1f}"
              f"{row['latency']:>9}{row['p50_ms']:>9.2f}{row['p99_ms']:>9.2f}{row['errors']:>8}")
    print(f"{'raw pull (ref., median)':<26}{r['messages']:>10}{r['msgs_per_s']:>11,.0f}{r['mb_per_s']:>8.1f}"
          f"{r['latency']:>9}{'':>9}{'':>9}{r['errors']:>8}")
    ratios = [d["msgs_per_s"] / max(1e-9, ref["msgs_per_s"])
              for d, ref in zip(drains, references, strict=True)]
    print(f"consume/raw_pull rounds: {' '.join(f'{x:.2f}' for x in ratios)}")
    client_cpu = median_of(drains, "cpu_us_per_msg")
    raw_cpu = median_of(references, "cpu_us_per_msg")
    print(f"CPU per message (median): client consume {client_cpu:.2f} us, raw pull {raw_cpu:.2f} us; broker "
          f"{median_of(drains, 'broker_cpu_us_per_msg'):.2f} us (consume) vs "
          f"{median_of(references, 'broker_cpu_us_per_msg'):.2f} us (raw pull)")
    produce = runs[1][1]
    live = runs[-1][1]
    print(f"consume/raw_pull={statistics.median(ratios):.2f}")
    print(f"client_produce_msgs_per_s={produce['msgs_per_s']:.0f} "
          f"client_consume_msgs_per_s={drain['msgs_per_s']:.0f} client_e2e_p99_ms={live['p99_ms']:.1f} "
          f"client_consume_cpu_us_per_msg={client_cpu:.2f} raw_pull_cpu_us_per_msg={raw_cpu:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
