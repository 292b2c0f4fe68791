"""POP consumption against offset-based pulls on the same backlog, in the same run.

Starts a NameServer and one broker on loopback. Each round fills a fresh topic with ``--count``
messages, then drains it twice, with two groups:

* ``sdk pop``  - the official RocketMQ 5 Python SDK's SimpleConsumer (.venv-sdk, its own process):
  ``receive(32)`` + an ack per message, over the v2 API (ReceiveMessage / AckMessage);
* ``own pop``  - PocketMQ's own consumer in POP mode (``pocketmq.client.popconsumer.PopConsumer``):
  ``ack_and_receive(previous batch, --pop-batch)``: the batch's ack rides on the next pop, on the
  broker's ``PopStream``;
* ``own pull`` - PocketMQ's own consumer (``pocketmq.client.AsyncConsumer``), offset-based pulls
  of 32 with periodic offset commits.

Prints every round, the medians and the broker's CPU time per message of each (the server side
of pop + ack against pull). Last line:
``pop_msgs=<own POP median msgs/s> pop_vs_pull=<own POP / own pull msgs/s>
pop_broker_cpu_vs_pull=<broker CPU per message, pull / own POP> sdk_pop_msgs=<SDK msgs/s>
sdk_pop_vs_pull=<SDK / own pull msgs/s>`` (target: pop_broker_cpu_vs_pull >= 0.5, the broker side
of pop + ack within 0.5 of pull).

The SDK drains only the first ``--sdk-count`` messages of each backlog (it is ~50x slower); broker
CPU is read from /proc in clock ticks, so the own modes drain ``--count`` to keep it precise.

    python benchmarks/bench_pop.py [--rounds 3] [--count 20000] [--sdk-count 3000] [--size 1024]
        [--pop-batch 256]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import ROOT, cpu_seconds, free_port, wait_port

from pocketmq.client.consumer import AsyncConsumer
from pocketmq.client.message import Message
from pocketmq.client.popconsumer import PopConsumer, PoppedMessage
from pocketmq.client.producer import AsyncProducer

SDK_PYTHON = ROOT / ".venv-sdk" / "bin" / "python"


def start(args: list[str], log_path: str) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log:
        return subprocess.Popen([sys.executable, "-m", *args], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


async def fill(namesrv: str, topic: str, count: int, size: int) -> None:
    body = b"x" * size
    async with AsyncProducer(namesrv) as producer:
        for i in range(0, count, 100):
            await producer.send_batch([Message(topic, body) for _ in range(min(100, count - i))])


def sdk_pop(namesrv: str, topic: str, group: str, count: int) -> tuple[float, int]:
    proc = subprocess.run(
        [str(SDK_PYTHON), str(ROOT / "benchmarks" / "sdk_pop.py"), "--endpoint", namesrv, "--topic", topic,
         "--group", group, "--count", str(count)],
        capture_output=True, text=True, timeout=300,
    )
    docs = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if not docs or docs[0]["messages"] < count:
        raise SystemExit(f"SDK pop run failed (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr[-3000:]}")
    return docs[0]["messages"] / docs[0]["seconds"], docs[0]["messages"]


async def own_pop(namesrv: str, topic: str, group: str, count: int, batch: int) -> tuple[float, int]:
    async with PopConsumer(group, namesrv, invisible_time=60) as consumer:
        consumer.subscribe(topic)
        start = time.perf_counter()
        deadline = start + 120
        got = 0
        done: list[PoppedMessage] = []
        while got < count and time.perf_counter() < deadline:
            # The previous batch's ack rides on the next pop request.
            failed, done = await consumer.ack_and_receive(done, batch, wait=1.0)
            if failed:
                raise SystemExit("own POP: acks refused")
            got += len(done)
        if done and await consumer.ack(done):
            raise SystemExit("own POP: acks refused")
        if got < count:
            raise SystemExit(f"own POP consumer stalled after {got} of {count}")
        return got / (time.perf_counter() - start), got


async def own_pull(namesrv: str, topic: str, group: str, count: int) -> tuple[float, int]:
    consumer = AsyncConsumer(group, namesrv, consume_from="first", pull_batch_size=32)
    consumer.subscribe(topic)
    await consumer.start()
    try:
        start = time.perf_counter()
        got = 0
        while got < count:
            if await consumer.receive(30) is None:
                raise SystemExit(f"own consumer stalled after {got} of {count}")
            got += 1
        await consumer.commit()
        return got / (time.perf_counter() - start), got
    finally:
        await consumer.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--sdk-count", type=int, default=3000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--pop-batch", type=int, default=256, help="messages per own POP receive")
    args = parser.parse_args()
    if args.rounds < 1 or args.count < 1 or not 1 <= args.sdk_count <= args.count:
        raise SystemExit("--rounds and --count must be >= 1, --sdk-count 1..--count")
    if not SDK_PYTHON.exists():
        raise SystemExit("the SDK venv .venv-sdk is missing: run `make setup`")
    modes = ("sdk pop", "own pop", "own pull")
    rates: dict[str, list[float]] = {who: [] for who in modes}
    cpu_per_msg: dict[str, list[float]] = {who: [] for who in modes}
    with tempfile.TemporaryDirectory(prefix="bench-pop-") as tmp:
        ns_port, broker_port = free_port(), free_port()
        namesrv = f"127.0.0.1:{ns_port}"
        procs = [start(["services.namesrv", "--listen", namesrv, "--metrics-port", "0"],
                       f"{tmp}/namesrv.log")]
        try:
            wait_port(ns_port)
            procs.append(start(
                ["services.broker", "--namesrv-addr", namesrv, "--broker-ip1", "127.0.0.1", "--listen-host",
                 "127.0.0.1", "--listen-port", str(broker_port), "--ha-listen-port", str(free_port()),
                 "--metrics-port", "0", "--store-path-root-dir", f"{tmp}/store"],
                f"{tmp}/broker.log"))
            wait_port(broker_port)
            time.sleep(1.5)  # first registration at the NameServer
            broker_pid = procs[1].pid
            print(f"# {args.rounds} rounds, a backlog of {args.count} x {args.size}-byte messages each, "
                  f"drained by each mode (SDK receive 32 + ack each, own POP receive {args.pop_batch} + "
                  "one batched ack riding on the next pop, own pull 32); one broker, loopback", flush=True)
            for i in range(args.rounds):
                topic = f"bench-pop-{i}"
                asyncio.run(fill(namesrv, topic, args.count, args.size))
                time.sleep(1.0)  # the auto-created topic's route reaches the NameServer
                for who in modes:
                    cpu = cpu_seconds(broker_pid)
                    if who == "sdk pop":
                        rate, n = sdk_pop(namesrv, topic, f"bench-pop-sdk-{i}", args.sdk_count)
                    elif who == "own pop":
                        rate, n = asyncio.run(own_pop(namesrv, topic, f"bench-pop-pop-{i}", args.count,
                                                      args.pop_batch))
                    else:
                        rate, n = asyncio.run(own_pull(namesrv, topic, f"bench-pop-own-{i}", args.count))
                    per_msg = (cpu_seconds(broker_pid) - cpu) / n
                    rates[who].append(rate)
                    cpu_per_msg[who].append(per_msg)
                    print(f"{who:8s} round {i}: {rate:9.0f} msgs/s   (broker CPU {per_msg * 1e6:.0f} us/msg)",
                          flush=True)
        finally:
            for p in reversed(procs):
                p.terminate()
            for p in procs:
                p.wait(30)
    medians = {who: statistics.median(r) for who, r in rates.items()}
    cpu = {who: statistics.median(c) for who, c in cpu_per_msg.items()}
    for who in rates:
        print(f"{who:8s} median : {medians[who]:9.0f} msgs/s   (broker CPU {cpu[who] * 1e6:.0f} us/msg)")
    print(f"pop_msgs={medians['own pop']:.0f} pop_vs_pull={medians['own pop'] / medians['own pull']:.2f} "
          f"pop_broker_cpu_vs_pull={cpu['own pull'] / cpu['own pop']:.2f} "
          f"sdk_pop_msgs={medians['sdk pop']:.0f} "
          f"sdk_pop_vs_pull={medians['sdk pop'] / medians['own pull']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
