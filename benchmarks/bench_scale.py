"""Cost of topic admin, first sends and broker start as the number of topics and queues grows.

For each size N (default 1k, 5k and 10k topics of 8 queues) one real NameServer and one real
broker (``python -m services.broker``, ASYNC_MASTER, ASYNC_FLUSH, a fresh temporary store) run
on free loopback ports. The broker starts with a topic table of N topics already in its
``config/topics.json`` (the broker's own file format), then, in each round:

* create: ``K`` new topics of 8 queues one by one through the admin client
  (``AsyncAdmin.create_topic``, what ``pocketmq topic create`` does: a NameServer lookup, then
  the call to the broker, relayed through the NameServer the first time and direct once the
  broker's address connected, as ``relay="auto"`` does in a loop of admin calls; a single
  ``pocketmq topic create`` makes one relayed call), ms per topic; ``K`` more with CreateTopic straight
  to the broker (its part of that cost); and, where the broker has it, ``K`` topics in one
  batch (``AsyncAdmin.create_topics``), ms per topic;
* first send: one 100-byte message each to ``K`` queues that never had one (SendMessage to an
  explicit queue), ms per message, next to a second message to the same queues ("next send",
  the reference: the cost of the unary call itself).

Then every topic gets a message on ``--data-queues`` of its queues (N x that many consume queues
holding data), and the broker is stopped cleanly (SIGTERM) and started again, 3 times: start time
is from spawning the process to its first answered GetBrokerStatus. The reference is the same
start on an empty store, measured in the same run.

Every round is printed with the median; the machine's load average is printed before and after.
Next to each time the CPU it took, which a shared machine disturbs less: broker + NameServer CPU
per admin create (including the registration of the new topics with the NameServer that follows),
broker CPU per first and per next send, the broker's CPU until it answers after a start.
The last line: ``scale_create_topic_ms=<at the largest N> scale_first_send_ms=<at the largest
N> scale_start_s=<largest N>``, then the largest N's direct CreateTopic and batch create ms per
topic (``scale_create_direct_ms``, ``scale_batch_create_ms``), the CPU figures
(``scale_create_cpu_ms``, ``scale_first_send_cpu_us``, ``scale_next_send_cpu_us``,
``scale_start_cpu_s``), what a first send costs more than a next one
(``scale_first_send_extra_ms``) and the empty-store start (``scale_empty_start_s``).

    python benchmarks/bench_scale.py [--sizes 1000,5000,10000] [--quick] [--sample 200]
                                     [--rounds 3] [--data-queues 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from benchlib import ROOT, cpu_seconds, free_port, wait_port

from pocketmq.broker.v1 import broker_pb2 as pb
from pocketmq.broker.v1 import broker_pb2_grpc
from pocketmq.client.admin import AsyncAdmin
from pocketmq.common.v1 import common_pb2

QUEUES = 8
BODY = b"x" * 100


def load() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


def median_line(name: str, values: list[float], unit: str) -> float:
    med = statistics.median(values)
    rounds = " ".join(f"{v:.3f}" for v in values)
    print(f"  {name:<34} median {med:9.3f} {unit}   rounds: {rounds}", flush=True)
    return med


#: Open files the broker may have: every consume queue file holds a descriptor (its mapping's),
#: so 10k queues with data need more than the common default of 1024.
NOFILE = 1 << 17


def raise_nofile() -> None:
    """In the broker's child process: raise RLIMIT_NOFILE as an operator would (``ulimit -n``;
    only root may pass the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(soft, NOFILE if os.geteuid() == 0 else hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(want, hard)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Cluster:
    """One NameServer (shared) and one broker whose store lives in ``workdir``."""

    def __init__(self, workdir: Path, namesrv: str, namesrv_pid: int) -> None:
        self.workdir = workdir
        self.namesrv = namesrv
        self.namesrv_pid = namesrv_pid
        #: CPU seconds the broker process had used when it first answered (start-up CPU).
        self.start_cpu = 0.0
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def seed_topics(self, n: int) -> None:
        """Write a topic table of ``n`` topics into the store's config directory."""
        table = {f"scale-{i}": {"topicName": f"scale-{i}", "readQueueNums": QUEUES, "writeQueueNums": QUEUES,
                                "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False}
                 for i in range(n)}
        config = self.workdir / "store" / "config"
        config.mkdir(parents=True, exist_ok=True)
        doc = {"topicConfigTable": table, "dataVersion": {"timestamp": int(time.time() * 1000), "counter": 1}}
        (config / "topics.json").write_text(json.dumps(doc))

    def start(self) -> float:
        """Start the broker; seconds until it answers GetBrokerStatus."""
        log = open(self.workdir / "broker.log", "ab")  # noqa: SIM115 - lives as long as the process
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.broker", "--namesrv-addr", self.namesrv,
             "--broker-ip1", "127.0.0.1", "--listen-host", "127.0.0.1", "--listen-port", str(self.port),
             "--ha-listen-port", str(free_port()), "--metrics-port", "0",
             "--store-path-root-dir", str(self.workdir / "store"),
             "--broker-role", "ASYNC_MASTER", "--flush-disk-type", "ASYNC_FLUSH"],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, preexec_fn=raise_nofile)
        asyncio.run(self._wait_ready())
        elapsed = time.perf_counter() - t0
        self.start_cpu = cpu_seconds(self.proc.pid)
        return elapsed

    def cpu(self) -> tuple[float, float]:
        """CPU seconds used so far by (the broker, the NameServer)."""
        assert self.proc is not None
        return cpu_seconds(self.proc.pid), cpu_seconds(self.namesrv_pid)

    async def _wait_ready(self) -> None:
        deadline = time.monotonic() + 300
        # Short reconnect backoff: gRPC's default (1 s, growing) would add up to seconds between
        # the broker listening and this poll's next connection attempt.
        options = [("grpc.initial_reconnect_backoff_ms", 20), ("grpc.min_reconnect_backoff_ms", 20),
                   ("grpc.max_reconnect_backoff_ms", 50)]
        async with grpc.aio.insecure_channel(self.addr, options=options) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            while True:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise RuntimeError(f"broker exited with {self.proc.returncode}; "
                                       f"see {self.workdir}/broker.log")
                try:
                    await stub.GetBrokerStatus(pb.GetBrokerStatusRequest(), timeout=2)
                    return
                except grpc.aio.AioRpcError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.01)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


async def create_one_by_one(cluster: Cluster, names: list[str]) -> tuple[float, float]:
    """(ms per topic, broker + NameServer CPU ms per topic), created one at a time through the
    admin client (the CPU includes the registration of the new topics with the NameServer,
    which runs shortly after: counted up to 0.5 s after the last create)."""
    async with AsyncAdmin(cluster.namesrv, timeout=30) as admin:
        await admin.create_topic("scale-warmup", read_queues=QUEUES, write_queues=QUEUES)
        await asyncio.sleep(0.5)
        cpu0 = sum(cluster.cpu())
        t0 = time.perf_counter()
        for name in names:
            for result in await admin.create_topic(name, read_queues=QUEUES, write_queues=QUEUES):
                if result.error is not None:
                    raise RuntimeError(f"create {name}: {result.error}")
        elapsed = time.perf_counter() - t0
        await asyncio.sleep(0.5)
        return elapsed * 1000 / len(names), (sum(cluster.cpu()) - cpu0) * 1000 / len(names)


async def create_direct(cluster: Cluster, names: list[str]) -> float:
    """ms per topic, one CreateTopic call each straight to the broker (no NameServer lookup
    or relay): the broker's part of the admin client's cost."""
    async with grpc.aio.insecure_channel(cluster.addr) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        await stub.GetBrokerStatus(pb.GetBrokerStatusRequest())
        t0 = time.perf_counter()
        for name in names:
            await stub.CreateTopic(pb.CreateTopicRequest(topic_config=common_pb2.TopicConfig(
                topic_name=name, read_queue_nums=QUEUES, write_queue_nums=QUEUES, perm=6)), timeout=30)
        return (time.perf_counter() - t0) * 1000 / len(names)


async def create_batch(cluster: Cluster, names: list[str]) -> float | None:
    """ms per topic, all in one batch call (None when the admin client has no batch API)."""
    async with AsyncAdmin(cluster.namesrv, timeout=60) as admin:
        create_topics = getattr(admin, "create_topics", None)
        if create_topics is None:
            return None
        t0 = time.perf_counter()
        for result in await create_topics(names, read_queues=QUEUES, write_queues=QUEUES):
            if result.error is not None:
                raise RuntimeError(f"batch create: {result.error}")
        return (time.perf_counter() - t0) * 1000 / len(names)


def send_request(topic: str, queue_id: int) -> pb.SendMessageRequest:
    return pb.SendMessageRequest(message=pb.Message(topic=topic, body=BODY), queue_id=queue_id,
                                 producer_group="bench-scale")


async def first_sends(cluster: Cluster, queues: list[tuple[str, int]]) -> tuple[float, float, float, float]:
    """(first send ms, next send ms, broker CPU us per first send, per next send) per message
    over ``queues`` (none has a message yet)."""
    async with grpc.aio.insecure_channel(cluster.addr) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        await stub.GetBrokerStatus(pb.GetBrokerStatusRequest())
        times: list[float] = []
        cpus: list[float] = []
        for attempt in range(2):
            cpu0 = cluster.cpu()[0]
            t0 = time.perf_counter()
            for topic, queue_id in queues:
                reply = await stub.SendMessage(send_request(topic, queue_id), timeout=30)
                if reply.status != pb.PUT_OK or reply.queue_offset != attempt:
                    raise RuntimeError(f"send to {topic}/{queue_id}: {reply}")
            times.append((time.perf_counter() - t0) * 1000 / len(queues))
            cpus.append((cluster.cpu()[0] - cpu0) * 1e6 / len(queues))
        return times[0], times[1], cpus[0], cpus[1]


async def fill(cluster: Cluster, queues: list[tuple[str, int]], inflight: int = 16) -> None:
    """One message to each queue that does not have one yet."""
    async with grpc.aio.insecure_channel(cluster.addr) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        it = iter(queues)

        async def worker() -> None:
            for topic, queue_id in it:
                reply = await stub.SendMessage(send_request(topic, queue_id), timeout=60)
                if reply.status != pb.PUT_OK:
                    raise RuntimeError(f"send to {topic}/{queue_id}: {reply}")

        await asyncio.gather(*(worker() for _ in range(inflight)))


def start_namesrv(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log = open(workdir / "namesrv.log", "wb")  # noqa: SIM115 - lives as long as the process
    proc = subprocess.Popen([sys.executable, "-m", "services.namesrv", "--listen", f"127.0.0.1:{port}",
                             "--metrics-port", "0"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    wait_port(port)
    return proc, f"127.0.0.1:{port}"


def run_size(root: Path, namesrv: str, namesrv_pid: int, n: int,
             args: argparse.Namespace) -> dict[str, float]:
    workdir = root / f"n{n}"
    workdir.mkdir()
    cluster = Cluster(workdir, namesrv, namesrv_pid)
    cluster.seed_topics(n)
    print(f"\n== {n} topics x {QUEUES} queues (load {load()})", flush=True)
    try:
        first_start = cluster.start()
        print(f"  first start (empty store, {n} topics in the table): {first_start:.2f} s", flush=True)
        creates: list[float] = []
        create_cpus: list[float] = []
        first_cpus: list[float] = []
        next_cpus: list[float] = []
        directs: list[float] = []
        batches: list[float] = []
        firsts: list[float] = []
        nexts: list[float] = []
        sample = args.sample
        used: set[int] = set()
        for r in range(args.rounds):
            create_ms, create_cpu = asyncio.run(create_one_by_one(
                cluster, [f"scale-new-{r}-{i}" for i in range(sample)]))
            creates.append(create_ms)
            create_cpus.append(create_cpu)
            directs.append(asyncio.run(create_direct(
                cluster, [f"scale-direct-{r}-{i}" for i in range(sample)])))
            batch = asyncio.run(create_batch(cluster, [f"scale-batch-{r}-{i}" for i in range(sample)]))
            if batch is not None:
                batches.append(batch)
            # Queues spread over the table: topic i*step, queue r.
            step = max(1, n // sample)
            picks = [(f"scale-{(i * step) % n}", r % QUEUES) for i in range(sample)]
            used.update(((i * step) % n) * QUEUES + r % QUEUES for i in range(sample))
            first, nxt, first_cpu, next_cpu = asyncio.run(first_sends(cluster, picks))
            firsts.append(first)
            nexts.append(nxt)
            first_cpus.append(first_cpu)
            next_cpus.append(next_cpu)
            print(f"  round {r + 1}: create {creates[-1]:.3f} ms/topic (CPU {create_cpu:.3f} ms; direct "
                  f"{directs[-1]:.3f})" + (f", batch create {batches[-1]:.3f} ms/topic" if batches else "")
                  + f", first send {first:.3f} ms (broker CPU {first_cpu:.0f} us), next send {nxt:.3f} ms "
                  f"(CPU {next_cpu:.0f} us), load {load()}", flush=True)
        out = {
            "create": median_line("create topic (admin, one by one)", creates, "ms/topic"),
            "create_cpu": median_line("  CPU (broker + NameServer)", create_cpus, "ms/topic"),
            "direct_create": median_line("create topic (CreateTopic to the broker)", directs, "ms/topic"),
            "first_send": median_line("first send to a queue", firsts, "ms/msg"),
            "next_send": median_line("next send to that queue (reference)", nexts, "ms/msg"),
            "first_send_cpu": median_line("  broker CPU per first send", first_cpus, "us/msg"),
            "next_send_cpu": median_line("  broker CPU per next send", next_cpus, "us/msg"),
        }
        if batches:
            out["batch_create"] = median_line("create topics (one batch)", batches, "ms/topic")
        todo = [(f"scale-{t}", q) for t in range(n) for q in range(args.data_queues)
                if t * QUEUES + q not in used]
        t0 = time.perf_counter()
        asyncio.run(fill(cluster, todo))
        print(f"  filled {len(todo)} more queues in {time.perf_counter() - t0:.1f} s "
              f"({n * args.data_queues} queues hold data at least)", flush=True)
        starts: list[float] = []
        start_cpus: list[float] = []
        for _ in range(args.rounds):
            cluster.stop()
            starts.append(cluster.start())
            start_cpus.append(cluster.start_cpu)
        out["start"] = median_line("broker start after clean shutdown", starts, "s")
        out["start_cpu"] = median_line("  broker CPU until it answers", start_cpus, "s")
        return out
    finally:
        cluster.stop()


def reference_start(root: Path, namesrv: str, namesrv_pid: int, rounds: int) -> tuple[float, float]:
    """(start s, broker CPU s until it answers) of a broker with an empty store."""
    workdir = root / "empty"
    workdir.mkdir()
    cluster = Cluster(workdir, namesrv, namesrv_pid)
    try:
        times = [cluster.start()]
        cpus = [cluster.start_cpu]
        for _ in range(rounds - 1):
            cluster.stop()
            times.append(cluster.start())
            cpus.append(cluster.start_cpu)
    finally:
        cluster.stop()
    return (median_line("reference: start with an empty store", times, "s"),
            median_line("  broker CPU until it answers", cpus, "s"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,5000,10000", help="topic counts (comma separated)")
    parser.add_argument("--quick", action="store_true", help="sizes 200,500,1000, sample 50")
    parser.add_argument("--sample", type=int, default=200, help="topics created / queues sent to per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data-queues", type=int, default=1, help="queues per topic given a message "
                        "before the restarts (consume queues holding data = topics x this)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.quick:
        sizes, args.sample = [200, 500, 1000], 50
    root = Path(tempfile.mkdtemp(prefix="pocketmq-bench-scale-"))
    print(f"bench-scale: sizes {sizes} x {QUEUES} queues, sample {args.sample}, {args.rounds} rounds, "
          f"load before {load()}", flush=True)
    namesrv_proc, namesrv = start_namesrv(root)
    try:
        print("\n== reference", flush=True)
        ref_start, ref_start_cpu = reference_start(root, namesrv, namesrv_proc.pid, args.rounds)
        results = {n: run_size(root, namesrv, namesrv_proc.pid, n, args) for n in sizes}
    finally:
        namesrv_proc.send_signal(signal.SIGTERM)
        namesrv_proc.wait(30)
        shutil.rmtree(root, ignore_errors=True)
    print(f"\nload after {load()}")
    print(f"{'topics':>8} {'create ms':>10} {'(CPU ms)':>9} {'direct ms':>10} {'batch ms':>9} "
          f"{'first send ms':>14} {'next send ms':>13} {'(CPU us)':>12} {'start s':>8} {'(CPU s)':>8}")
    for n, r in results.items():
        batch = f"{r['batch_create']:.3f}" if "batch_create" in r else "-"
        cpu_sends = f"{r['first_send_cpu']:.0f}/{r['next_send_cpu']:.0f}"
        print(f"{n:>8} {r['create']:>10.3f} {r['create_cpu']:>9.3f} {r['direct_create']:>10.3f} {batch:>9} "
              f"{r['first_send']:>14.3f} {r['next_send']:>13.3f} {cpu_sends:>12} {r['start']:>8.2f} "
              f"{r['start_cpu']:>8.2f}")
    print(f"reference: empty-store start {ref_start:.2f} s (CPU {ref_start_cpu:.2f} s); flat cost = the "
          f"largest size's figure close to the smallest's; CPU us = broker CPU per first / next send")
    top = results[sizes[-1]]
    batch = f" scale_batch_create_ms={top['batch_create']:.3f}" if "batch_create" in top else ""
    print(f"scale_create_topic_ms={top['create']:.3f} scale_first_send_ms={top['first_send']:.3f} "
          f"scale_start_s={top['start']:.2f} scale_create_direct_ms={top['direct_create']:.3f}{batch} "
          f"scale_create_cpu_ms={top['create_cpu']:.3f} "
          f"scale_first_send_extra_ms={top['first_send'] - top['next_send']:.3f} "
          f"scale_first_send_cpu_us={top['first_send_cpu']:.0f} "
          f"scale_next_send_cpu_us={top['next_send_cpu']:.0f} "
          f"scale_start_cpu_s={top['start_cpu']:.2f} scale_empty_start_s={ref_start:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
