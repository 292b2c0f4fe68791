"""The official RocketMQ 5 Python SDK against PocketMQ's own client, producing to the same broker
in the same run.

Starts a NameServer and one broker on loopback, then for each mode runs ``--rounds`` rounds of
``--seconds`` each and prints every round and the median:

* ``sdk sync``     - rocketmq-python-client 5.1.2 (.venv-sdk, its own process), ``send`` one
  message at a time, through the NameServer access point (v2 API: one message per RPC);
* ``sdk async``    - the same SDK, ``send_async`` with ``--in-flight`` (64) outstanding;
* ``own sync``     - PocketMQ's client (``pocketmq.client.AsyncProducer``), one ``send`` at a
  time (also one message per RPC);
* ``own async``    - PocketMQ's client, ``--in-flight`` concurrent single sends.

Each median line also shows the broker's CPU time per message (the server's share of the cost:
the SDK spends more of its own CPU per message than PocketMQ's client, on the same 2 cores).
Last line: ``sdk_send_msgs=<SDK async median msgs/s> sdk_vs_own=<SDK async / own async>``,
plus the sync figures (``sdk_sync_msgs``, ``sdk_sync_vs_own``). Target: sdk_vs_own >= 0.8.

    python benchmarks/bench_sdk.py [--rounds 3] [--seconds 3] [--size 1024] [--in-flight 64]
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

from pocketmq.client.message import Message
from pocketmq.client.producer import AsyncProducer

SDK_PYTHON = ROOT / ".venv-sdk" / "bin" / "python"
TOPIC = "bench-sdk"


def start(args: list[str], log_path: str) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log:
        return subprocess.Popen([sys.executable, "-m", *args], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def sdk_rounds(endpoint: str, mode: str, args: argparse.Namespace) -> list[float]:
    proc = subprocess.run(
        [
            str(SDK_PYTHON),
            str(ROOT / "benchmarks" / "sdk_send.py"),
            "--endpoint",
            endpoint,
            "--topic",
            TOPIC,
            "--mode",
            mode,
            "--rounds",
            str(args.rounds),
            "--seconds",
            str(args.seconds),
            "--size",
            str(args.size),
            "--in-flight",
            str(args.in_flight),
        ],
        capture_output=True,
        text=True,
        timeout=args.rounds * args.seconds * 4 + 120,
    )
    rates = []
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            doc = json.loads(line)
            rates.append(doc["messages"] / doc["seconds"])
            print(f"sdk {mode:5s} round {doc['round']}: {rates[-1]:9.0f} msgs/s   "
                  f"(SDK process CPU {doc['cpu'] / max(doc['messages'], 1) * 1e6:.0f} us/msg)", flush=True)
    if len(rates) != args.rounds:
        raise SystemExit(
            f"SDK {mode} run failed (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr[-3000:]}"
        )
    return rates


async def own_rounds(namesrv: str, mode: str, args: argparse.Namespace) -> list[float]:
    body = b"x" * args.size
    rates = []
    async with AsyncProducer(namesrv) as producer:
        await producer.send(Message(TOPIC, body))  # warm-up: route, channels
        for i in range(args.rounds):
            end = time.perf_counter() + args.seconds
            start = time.perf_counter()
            cpu = time.process_time()
            count = 0

            async def loop(end: float) -> None:
                nonlocal count
                while time.perf_counter() < end:
                    await producer.send(Message(TOPIC, body))
                    count += 1

            await asyncio.gather(*(loop(end) for _ in range(1 if mode == "sync" else args.in_flight)))
            rates.append(count / (time.perf_counter() - start))
            print(f"own {mode:5s} round {i}: {rates[-1]:9.0f} msgs/s   "
                  f"(client process CPU {(time.process_time() - cpu) / max(count, 1) * 1e6:.0f} us/msg)",
                  flush=True)
    return rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--in-flight", type=int, default=64)
    args = parser.parse_args()
    if args.rounds < 1 or args.seconds <= 0:
        raise SystemExit("--rounds must be >= 1 and --seconds > 0")
    if not SDK_PYTHON.exists():
        raise SystemExit("the SDK venv .venv-sdk is missing: run `make setup`")
    with tempfile.TemporaryDirectory(prefix="bench-sdk-") as tmp:
        ns_port, broker_port = free_port(), free_port()
        namesrv = f"127.0.0.1:{ns_port}"
        procs = [
            start(["services.namesrv", "--listen", namesrv, "--metrics-port", "0"], f"{tmp}/namesrv.log")
        ]
        try:
            wait_port(ns_port)
            procs.append(
                start(
                    [
                        "services.broker",
                        "--namesrv-addr",
                        namesrv,
                        "--broker-ip1",
                        "127.0.0.1",
                        "--listen-host",
                        "127.0.0.1",
                        "--listen-port",
                        str(broker_port),
                        "--ha-listen-port",
                        str(free_port()),
                        "--metrics-port",
                        "0",
                        "--store-path-root-dir",
                        f"{tmp}/store",
                    ],
                    f"{tmp}/broker.log",
                )
            )
            wait_port(broker_port)
            time.sleep(1.5)  # first registration (topics) at the NameServer
            print(
                f"# {args.rounds} rounds x {args.seconds:g} s, {args.size}-byte messages, "
                f"{args.in_flight} in flight for async; one broker, loopback",
                flush=True,
            )
            medians = {}
            broker_pid = procs[1].pid
            for who, mode in (("sdk", "sync"), ("own", "sync"), ("sdk", "async"), ("own", "async")):
                cpu_before = cpu_seconds(broker_pid)
                if who == "sdk":
                    rates = sdk_rounds(namesrv, mode, args)
                else:
                    rates = asyncio.run(own_rounds(namesrv, mode, args))
                cpu = cpu_seconds(broker_pid) - cpu_before
                sent = sum(rates) * args.seconds
                medians[(who, mode)] = statistics.median(rates)
                print(f"{who} {mode:5s} median : {medians[(who, mode)]:9.0f} msgs/s   "
                      f"(broker CPU {cpu / sent * 1e6:.0f} us/msg)", flush=True)
        finally:
            for p in reversed(procs):
                p.terminate()
            for p in procs:
                p.wait(30)
    sync_ratio = medians[("sdk", "sync")] / medians[("own", "sync")]
    async_ratio = medians[("sdk", "async")] / medians[("own", "async")]
    print(
        f"sdk_send_msgs={medians[('sdk', 'async')]:.0f} sdk_vs_own={async_ratio:.2f} "
        f"sdk_sync_msgs={medians[('sdk', 'sync')]:.0f} sdk_sync_vs_own={sync_ratio:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
