"""The official RocketMQ 5 Python SDK against PocketMQ's own client, producing to the same broker
in the same run.

Starts a NameServer and one broker on loopback, then for each mode and each placement runs
``--rounds`` rounds of ``--seconds`` each of the SDK and of the own client, interleaved (SDK first
in even rounds, own first in odd ones, so that a change in the machine's load weighs on both sides
alike), and prints every round and the median. The placements (``--placement``, both by default):

* ``split``  - the sending processes on the first half of the CPUs, the broker and the NameServer
  on the other half (``sched_setaffinity`` of every thread, before every round), as in
  production, where a broker pod has CPUs of its own and its clients run elsewhere: a side's rate
  is then what the broker does per call, or its client's own cost if that is higher. Needs two
  CPUs or more; the bar reads this placement;
* ``shared`` - every process on every CPU: the clients and the broker compete for the cores, so
  a client that costs more CPU per send also takes it from the broker (the SDK hands every send
  between several threads of its own, each hand-off waiting for a core).

The modes:

* ``sdk sync``     - rocketmq-python-client 5.1.2 (.venv-sdk, its own process), ``send`` one
  message at a time, through the NameServer access point (v2 API: one message per RPC);
* ``sdk async``    - the same SDK, ``send_async`` with ``--in-flight`` (64) outstanding;
* ``own sync``     - PocketMQ's client (``pocketmq.client.AsyncProducer``), one ``send`` at a
  time (also one message per RPC);
* ``own async``    - PocketMQ's client, ``--in-flight`` concurrent single sends.

Every round and median line shows the CPU per message of the sending process and of the broker
(sampled over the round only), and the sending process's context switches per message (all its
threads: how often one slept and was woken; the SDK hands every send between several threads).
Last line, of the bar's placement (``split`` when it ran): ``sdk_send_msgs=<SDK async median
msgs/s> sdk_vs_own=<SDK async / own async>``, the sync figures (``sdk_sync_msgs``,
``sdk_sync_vs_own``), the async CPU per message of each side (``sdk_client_us``,
``own_client_us``, ``sdk_broker_us``, ``own_broker_us``), and the ratio CPU alone allows:
``cpu_ratio`` = own total / SDK total CPU per message (client and broker contending for the same
cores), ``core_ratio`` = the same with each side's busier process instead of the total (a free
core each), the async context switches per message of each sending process
(``sdk_client_switches``, ``own_client_switches``); then, when both placements ran, the other's
ratios (``sdk_vs_own_shared``, ``sdk_sync_vs_own_shared``). Target: sdk_vs_own >= 0.8.

    python benchmarks/bench_sdk.py [--rounds 3] [--seconds 3] [--size 1024] [--in-flight 64]
                                   [--placement both|split|shared]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import NamedTuple

from benchlib import ROOT, context_switches, cpu_seconds, free_port, pin, wait_port

from pocketmq.client.message import Message
from pocketmq.client.producer import AsyncProducer

SDK_PYTHON = ROOT / ".venv-sdk" / "bin" / "python"
TOPIC = "bench-sdk"


def start(args: list[str], log_path: str) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log:
        return subprocess.Popen([sys.executable, "-m", *args], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


class Round(NamedTuple):
    rate: float  # msgs/s
    client_us: float  # the sending process's CPU per message
    broker_us: float  # the broker's CPU per message, over the round only
    client_switches: float  # the sending process's context switches per message

    def show(self, label: str) -> None:
        print(f"{label}: {self.rate:9.0f} msgs/s   (CPU per message: client {self.client_us:.0f} us + "
              f"broker {self.broker_us:.0f} us = {self.client_us + self.broker_us:.0f} us; "
              f"client switches per message {self.client_switches:.1f})", flush=True)


class Placement(NamedTuple):
    """Which CPUs the sending processes and the servers run on."""

    name: str
    clients: set[int]
    servers: set[int]

    def apply(self, clients: list[int], servers: list[int]) -> None:
        for pid in clients:
            pin(pid, self.clients)
        for pid in servers:
            pin(pid, self.servers)


def placements(wanted: str) -> list[Placement]:
    """``--placement``: ``split`` (needs 2 CPUs or more), ``shared`` or both (shared first)."""
    cpus = sorted(os.sched_getaffinity(0))
    out = []
    if wanted in ("both", "shared"):
        out.append(Placement("shared", set(cpus), set(cpus)))
    if wanted in ("both", "split"):
        if len(cpus) < 2:
            print(f"# only {len(cpus)} CPU here: no split placement", flush=True)
        else:
            half = len(cpus) // 2
            out.append(Placement("split", set(cpus[:half]), set(cpus[half:])))
    if not out:
        raise SystemExit("no placement to run")
    return out


def report(who: str, mode: str, i: int, messages: int, seconds: float, client_cpu: float,
           broker_cpu: float, client_switches: int) -> Round:
    n = max(messages, 1)
    r = Round(messages / seconds, client_cpu / n * 1e6, broker_cpu / n * 1e6, client_switches / n)
    r.show(f"{who} {mode:5s} round {i}")
    return r


class SdkSender:
    """The SDK's send loop in its own process (``sdk_send.py --wait``), one round at a time."""

    def __init__(self, endpoint: str, mode: str, args: argparse.Namespace, broker_pid: int) -> None:
        cmd = [
            str(SDK_PYTHON), str(ROOT / "benchmarks" / "sdk_send.py"), "--endpoint", endpoint,
            "--topic", TOPIC, "--mode", mode, "--rounds", str(args.rounds), "--seconds", str(args.seconds),
            "--size", str(args.size), "--in-flight", str(args.in_flight), "--wait",
        ]
        self.mode = mode
        self.broker_pid = broker_pid
        self.lines: list[str] = []
        self.err = tempfile.TemporaryFile("w+")  # noqa: SIM115  (closed by close())
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
                                     text=True)
        self.timer = threading.Timer(args.rounds * args.seconds * 8 + 180, self.proc.kill)
        self.timer.start()

    def _next(self) -> dict[str, float]:
        """The SDK's next JSON line (its other lines are kept for the error report)."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith("{"):
                doc: dict[str, float] = json.loads(line)
                return doc
        self.proc.wait()
        self.err.seek(0)
        raise SystemExit(f"SDK {self.mode} run failed (rc {self.proc.returncode}):\n{''.join(self.lines)}\n"
                         f"{self.err.read()[-3000:]}")

    def round(self) -> Round:
        """Run one round; the broker's CPU is sampled at its start and end lines."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        self._next()  # {"start": i}
        broker_before = cpu_seconds(self.broker_pid)
        doc = self._next()
        broker_cpu = cpu_seconds(self.broker_pid) - broker_before
        return report("sdk", self.mode, int(doc["round"]), int(doc["messages"]), doc["seconds"], doc["cpu"],
                      broker_cpu, int(doc["switches"]))

    def close(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()  # EOF: the SDK shuts down
            self.proc.wait(60)
        finally:
            self.timer.cancel()
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.err.close()


async def own_round(producer: AsyncProducer, mode: str, i: int, args: argparse.Namespace,
                    broker_pid: int) -> Round:
    body = b"x" * args.size
    end = time.perf_counter() + args.seconds
    broker_before = cpu_seconds(broker_pid)
    start = time.perf_counter()
    cpu = time.process_time()
    switches = context_switches()
    count = 0

    async def loop(end: float) -> None:
        nonlocal count
        while time.perf_counter() < end:
            await producer.send(Message(TOPIC, body))
            count += 1

    await asyncio.gather(*(loop(end) for _ in range(1 if mode == "sync" else args.in_flight)))
    broker_cpu = cpu_seconds(broker_pid) - broker_before
    return report("own", mode, i, count, time.perf_counter() - start, time.process_time() - cpu, broker_cpu,
                  context_switches() - switches)


async def interleaved(namesrv: str, mode: str, args: argparse.Namespace, broker_pid: int,
                      placement: Placement, servers: list[int]) -> tuple[list[Round], list[Round]]:
    """``--rounds`` rounds of each side in ``mode``, alternating which goes first, every process
    placed as ``placement`` says before each (``servers``: the NameServer's and the broker's
    pids); (SDK, own)."""
    sdk: list[Round] = []
    own: list[Round] = []
    sender = SdkSender(namesrv, mode, args, broker_pid)
    try:
        async with AsyncProducer(namesrv) as producer:
            await producer.send(Message(TOPIC, b"x" * args.size))  # warm-up: route, channels
            for i in range(args.rounds):
                for who in ("sdk", "own") if i % 2 == 0 else ("own", "sdk"):
                    placement.apply([os.getpid(), sender.proc.pid], servers)
                    if who == "sdk":
                        # (in a thread, so the own producer's loop keeps serving its timers)
                        sdk.append(await asyncio.to_thread(sender.round))
                    else:
                        own.append(await own_round(producer, mode, i, args, broker_pid))
    finally:
        sender.close()
    return sdk, own


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--placement", choices=("both", "split", "shared"), default="both",
                        help="where the processes run (see the module doc)")
    args = parser.parse_args()
    if args.rounds < 1 or args.seconds <= 0:
        raise SystemExit("--rounds must be >= 1 and --seconds > 0")
    if not SDK_PYTHON.exists():
        raise SystemExit("the SDK venv .venv-sdk is missing: run `make setup`")
    runs = placements(args.placement)
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
            medians: dict[tuple[str, str, str], Round] = {}
            broker_pid = procs[1].pid
            servers = [p.pid for p in procs]
            for mode in ("sync", "async"):
                for placement in runs:
                    print(f"## {mode}, {placement.name} placement: senders on CPUs "
                          f"{sorted(placement.clients)}, broker on {sorted(placement.servers)}", flush=True)
                    sdk_rounds, own_rounds = asyncio.run(
                        interleaved(namesrv, mode, args, broker_pid, placement, servers))
                    for who, rounds in (("sdk", sdk_rounds), ("own", own_rounds)):
                        median = Round(*(statistics.median(c) for c in zip(*rounds, strict=True)))
                        medians[(who, mode, placement.name)] = median
                        median.show(f"{who} {mode:5s} median ({placement.name})")
        finally:
            for p in reversed(procs):
                p.terminate()
            for p in procs:
                p.wait(30)
    bar = runs[-1].name  # (split when it ran)

    def ratio(mode: str, placement: str) -> float:
        return medians[("sdk", mode, placement)].rate / medians[("own", mode, placement)].rate

    sdk, own = medians[("sdk", "async", bar)], medians[("own", "async", bar)]
    sdk_sync = medians[("sdk", "sync", bar)]
    sdk_cpu, own_cpu = sdk.client_us + sdk.broker_us, own.client_us + own.broker_us
    # The sdk_vs_own that CPU alone allows: cpu_ratio when client and broker contend for the same
    # core time (a loaded machine: each side's rate ~ 1 / its total CPU per message), core_ratio
    # when each process has a core of its own (each side's rate ~ 1 / its busier process).
    core_ratio = max(own.client_us, own.broker_us) / max(sdk.client_us, sdk.broker_us)
    print(
        f"sdk_send_msgs={sdk.rate:.0f} sdk_vs_own={ratio('async', bar):.2f} "
        f"sdk_sync_msgs={sdk_sync.rate:.0f} sdk_sync_vs_own={ratio('sync', bar):.2f} "
        f"sdk_client_us={sdk.client_us:.0f} own_client_us={own.client_us:.0f} "
        f"sdk_broker_us={sdk.broker_us:.0f} own_broker_us={own.broker_us:.0f} "
        f"cpu_ratio={own_cpu / sdk_cpu:.2f} core_ratio={core_ratio:.2f} "
        f"sdk_client_switches={sdk.client_switches:.1f} own_client_switches={own.client_switches:.1f}"
        + "".join(f" sdk_vs_own_{p.name}={ratio('async', p.name):.2f}"
                  f" sdk_sync_vs_own_{p.name}={ratio('sync', p.name):.2f}" for p in runs if p.name != bar)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
