"""Commit-log replication (HA) benchmark: catch-up, steady-state lag, SYNC_MASTER vs ASYNC_MASTER,
next to the transport's ceiling and a real peer, all measured in the same run.

Every server is its own process on loopback (``python -m services.broker``, fresh stores under a
temporary directory, ASYNC_FLUSH, no NameServer: slaves get ``--ha-master-address``):

* catch-up: a master store is pre-filled in this process with ``--catchup-mib`` of 1 KiB messages
  (no properties; with ``--properties`` each has a tag and a unique ``UNIQ_KEY``, as RocketMQ
  producers' messages do, which the slave's dispatcher and index parse record by record;
  4 queues, 1 GiB segments; the master runs with ``haSyncFromEarliest=true`` so an empty slave
  takes all of it), then an empty slave starts (with the master's topic table, as its metadata
  sync would give it).  Catch-up throughput = bytes / (slave caught up - the master's connect
  time for it); dispatch throughput = bytes / (every message readable through the slave's
  consume queues, polled with GetMaxOffset - the same connect time).  This is done ``--runs``
  times (3), each time with a new empty slave, each followed by a plain ``sendfile`` round; each
  round prints its figures and the medians of the per-round ratios count; each slave's commit
  log must be the master's byte for byte.  Next to it, in the same run and on the same
  page-cached segment file:
  - ``sendfile``: plain Python ``os.sendfile`` of the file over loopback TCP to a process that
    ``recv_into``s and discards: the ceiling, and the reference of the ratio;
  - ``sendfile -> file``: the same, but the receiver writes what it gets to a new file (once,
    right after the catch-up, like it): what merely storing the bytes costs here.  On this kind
    of VM the first touch of memory the guest has not used lately is expensive (2-9 us per
    4 KiB page), so a receiver that keeps the data pays a cost that ``sendfile`` does not;
  - ``HA stream -> sink``: the real master streaming to a process that speaks the slave's side of
    the protocol but discards the data (what the replication channel itself moves, without the
    slave's store; best of ``--runs``).
  - ``store append_data``: the slave store alone, in this process, appending the same bytes in
    2 MiB pieces (no network; ``queue_data``, as the slave: one piece is written while the next
    is copied), and the same until its reput thread has dispatched them all (the
    source store is opened without a message index: its keyless log would otherwise be
    scanned again by an index thread of its own, in this process).
  The slave receives into four 2 MiB buffers in turn and writes the body bytes of each read with
  one ``append_data`` (into the commit log, unparsed; reads of 64 KiB or more queue on a writer
  thread while the next reads go on, which copies them into the dispatch ring and hands their
  whole 4 KiB blocks to the commit log's write thread, written with ``O_DIRECT`` while the next
  read is copied: replicaDirectWrite; a read is acked once its bytes are in the file);
  the reput thread validates (framing as NumPy columns; body CRCs with one CRC-32 per run of
  same-sized records, see docs/replication.md) and dispatches every record (consume queue
  entries: one write per queue and slice) in place in the ring, right behind the writer, which
  waits when it gets a ring ahead:
  the ack (and so catch-up) counts the commit log, as RocketMQ's slave does, but the consume
  queues keep up with it, and the "... and dispatched" row shows when the index caught up.
  Each round prints the slave's CPU per MB until it caught up and until all was readable.
* steady-state lag: a master and a caught-up slave under a fixed produce load (``--lag-rate``
  msgs/s of 1 KiB, batches of 32); a thread samples the master's GetHAStatus every ~2 ms.  Lag in
  bytes = max offset - the slave's ack; lag in ms = sample time - the first sample time at which
  the master's max offset exceeded that ack (an upper bound, +- the sampling interval).
* SYNC_MASTER vs ASYNC_MASTER: a master + slave pair per role; ``--messages`` 1 KiB messages
  through SendMessageStream in batches of 32 with 16 batches in flight; throughput and p50/p99
  batch latency (write -> reply).
* Redis: Debian's ``redis-server`` primary + replica (``appendonly yes``, ``appendfsync
  everysec``), 16 clients (threads of redis-py's synchronous client, its fastest here) each doing
  XADD x32 pipelined followed by ``WAIT 1`` (acknowledged by the replica): the same payloads and
  concurrency as the SYNC_MASTER batched sends.

  After the plaintext catch-ups, the same master store is served again with ``haTlsEnable``
  (a CA and certificate made for the run) to ``--runs`` new empty TLS slaves: the TLS catch-up,
  printed next to the plaintext one with their ratio.

The last line is ``ha_catchup_ratio=<x> ha_catchup_mbps=<n> ha_dispatch_ratio=<d>
sync_master_msgs=<s> sync_master_p99_ms=<m> vs_redis_sync=<r> ha_tls_catchup_mbps=<t>
ha_tls_vs_plain=<q>``: ratio = slave catch-up MB/s / plain sendfile MB/s (median of the rounds),
dispatch ratio = the slave's dispatch MB/s / its catch-up MB/s (median of the rounds),
vs_redis_sync = SYNC_MASTER msgs/s / Redis XADD+WAIT msgs/s, ha_tls_vs_plain = TLS catch-up /
plaintext catch-up.  Other work on the machine skews
every figure (the load average is printed).

    python benchmarks/bench_ha.py [--catchup-mib 1024] [--properties] [--runs 3] [--messages 200000]
                                  [--lag-rate 20000] [--catchup-only]
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import collections
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import grpc
from benchlib import ROOT, free_port, identity, send_batch_stream, wait_port, wait_redis_replica

from pocketmq.broker.v1 import broker_pb2 as pb
from pocketmq.broker.v1 import broker_pb2_grpc
from pocketmq.common.v1 import common_pb2
from services.broker.storage.config import StoreConfig
from services.broker.storage.record import Message
from services.broker.storage.store import MessageStore

BODY_SIZE = 1024
BATCH = 32
WINDOW = 16
TOPIC = "bench"
#: Queues of the catch-up topic.
QUEUES = 4
SERVICE = "/pocketmq.broker.v1.Broker/"
MB = 1_000_000
GIB = 1024 * 1024 * 1024


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ----------------------------------------------------------------------------- processes


class Broker:
    def __init__(self, workdir: Path, name: str, role: str, *extra: str, store: Path | None = None) -> None:
        self.port = free_port()
        self.ha_port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.store = store or workdir / name
        broker_id = "1" if role == "SLAVE" else "0"
        args = [
            sys.executable, "-m", "services.broker", "--broker-name", "bench", "--broker-id", broker_id,
            "--broker-role", role, "--namesrv-addr", "", "--broker-ip1", "127.0.0.1",
            "--listen-host", "127.0.0.1", "--listen-port", str(self.port), "--ha-listen-port",
            str(self.ha_port), "--metrics-port", "0", "--store-path-root-dir", str(self.store),
            "--shutdown-grace-period", "1000", *extra,
        ]
        self.log = open(workdir / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "POCKETMQ_LOG_LEVEL": "WARNING"}
        self.proc = subprocess.Popen(args, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        wait_port(self.port)
        self.channel = grpc.insecure_channel(self.addr)
        self.stub = broker_pb2_grpc.BrokerStub(self.channel)

    def cpu_seconds(self) -> float:
        """User + system CPU the process has used so far (Linux ``/proc``)."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def max_offset(self, queue_id: int) -> int:
        return int(self.stub.GetMaxOffset(pb.QueueRequest(topic=TOPIC, queue_id=queue_id), timeout=5).offset)

    def ha(self) -> pb.HAStatus:
        return self.stub.GetHAStatus(pb.GetHAStatusRequest(), timeout=5)

    def stop(self) -> None:
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@contextlib.contextmanager
def pair(workdir: Path, role: str, tag: str, *master_extra: str) -> Iterator[tuple[Broker, Broker]]:
    master = Broker(workdir, f"{tag}-master", role, *master_extra)
    slave: Broker | None = None
    try:
        slave = Broker(workdir, f"{tag}-slave", "SLAVE", "--ha-master-address", f"127.0.0.1:{master.ha_port}")
        yield master, slave
    finally:
        if slave is not None:
            slave.stop()
        master.stop()


def fill_store(path: Path, size: int, properties: bool = False) -> int:
    """Write ``size`` bytes of 1 KiB messages (4 queues) straight into a store; returns its max
    offset. With ``properties`` each message carries a tag and a unique id (``TAGS``,
    ``UNIQ_KEY``), as RocketMQ producers' messages do; else none."""
    store = MessageStore(StoreConfig(store_path_root_dir=str(path)))
    store.start()
    try:
        body = os.urandom(BODY_SIZE)
        batch = [Message(TOPIC, body, q % QUEUES) for q in range(BATCH)]
        n = 0
        while store.max_offset < size:
            if properties:
                batch = [Message(TOPIC, body, q % QUEUES, properties={
                    "TAGS": "TagA", "UNIQ_KEY": f"7F00000100002A9F0000{n + q:012X}"}) for q in range(BATCH)]
                n += BATCH
            result = store.append_messages(batch)
            if not result.stored:
                raise RuntimeError(f"fill failed: {result}")
        return store.max_offset
    finally:
        store.shutdown()


# ----------------------------------------------------------------------------- catch-up

_RECEIVER = """
import os, socket, sys
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
print(srv.getsockname()[1], flush=True)
out = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) if len(sys.argv) > 1 else -1
conn, _ = srv.accept()
buf = bytearray(1 << 20); view = memoryview(buf); total = 0
while True:
    n = conn.recv_into(buf)
    if not n:
        break
    total += n
    done = 0
    while out >= 0 and done < n:
        done += os.write(out, view[done:n])
print(total, flush=True)
"""

_SINK = """
import socket, sys, time
from services.broker.replication import SlaveConnectionProtocol, encode_ack
port, want = int(sys.argv[1]), int(sys.argv[2])
sock = socket.create_connection(("127.0.0.1", port))
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
proto = SlaveConnectionProtocol(0)
sock.sendall(encode_ack(0))
buf = bytearray(1 << 20); view = memoryview(buf)
got = 0; t0 = None
while got < want:
    n = sock.recv_into(buf)
    if not n:
        break
    if t0 is None:
        t0 = time.perf_counter()
    for ev in proto.receive_data(view[:n]):
        got += len(getattr(ev, "body", b""))
dt = time.perf_counter() - t0
print(got, dt, flush=True)
"""


def sendfile_mbps(paths: list[Path], total: int, into: Path | None = None) -> float:
    """Plain ``os.sendfile`` of ``paths`` over loopback to a process that ``recv_into``s a
    1 MiB buffer and discards it, or (``into``) writes it to that new file."""
    args = [sys.executable, "-c", _RECEIVER, *([str(into)] if into is not None else [])]
    recv = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    assert recv.stdout is not None
    port = int(recv.stdout.readline())
    with socket.create_connection(("127.0.0.1", port)) as sock:
        start = time.perf_counter()
        left = total
        for path in paths:
            with open(path, "rb") as f:
                size = min(os.fstat(f.fileno()).st_size, left)
                offset = 0
                while offset < size:
                    sent = os.sendfile(sock.fileno(), f.fileno(), offset, size - offset)
                    if sent <= 0:
                        break
                    offset += sent
                left -= size
        sock.shutdown(socket.SHUT_WR)
        received = int(recv.stdout.readline())
        elapsed = time.perf_counter() - start
    recv.wait(10)
    if into is not None:
        into.unlink()
    if received != total:
        raise RuntimeError(f"sendfile receiver got {received} of {total} bytes")
    return total / elapsed / MB


def sink_mbps(ha_port: int, total: int) -> float:
    out = subprocess.run([sys.executable, "-c", _SINK, str(ha_port), str(total)], cwd=ROOT, env={
        **os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=600, check=True)
    got, elapsed = out.stdout.split()
    if int(got) < total:
        raise RuntimeError(f"sink got {got} of {total} bytes")
    return int(got) / float(elapsed) / MB


def catch_up(workdir: Path, size: int, runs: int, properties: bool = False) -> dict[str, float]:
    master_dir = workdir / "catchup-master"
    t = time.perf_counter()
    total = fill_store(master_dir, size, properties)
    print(f"  master store filled: {total / GIB:.2f} GiB in {time.perf_counter() - t:.1f}s", flush=True)
    segments = sorted((master_dir / "commitlog").iterdir())
    results: dict[str, float] = {}
    speeds: list[float] = []
    dispatch_ratios: list[float] = []
    sendfiles: list[float] = []
    catchup_ratios: list[float] = []
    master = Broker(workdir, "catchup-master", "ASYNC_MASTER", "--ha-sync-from-earliest", "true",
                    store=master_dir)
    try:
        asyncio.run(create_topic(master.addr, QUEUES))
        expected = [master.max_offset(q) for q in range(QUEUES)]
        for run in range(runs):
            # The slave starts with the master's topic table (what its metadata sync would
            # fetch), so its consume queues can be read over gRPC as a consumer would.
            shutil.copytree(master_dir / "config", workdir / f"catchup-slave-{run}" / "config")
            started_ms = time.time() * 1000
            slave = Broker(workdir, f"catchup-slave-{run}", "SLAVE", "--ha-master-address",
                           f"127.0.0.1:{master.ha_port}")
            cpu_started = slave.cpu_seconds()
            try:
                elapsed = _caught_up(master, total, started_ms)
                cpu_caught_up = slave.cpu_seconds() - cpu_started
                slave_total = slave.ha().client_max_offset
                if slave_total != total:
                    raise RuntimeError(f"slave holds {slave_total} bytes, master {total}")
                readable = _dispatched(master, slave, expected, started_ms)
                cpu = slave.cpu_seconds() - cpu_started
            finally:
                slave.stop()
            speeds.append(total / elapsed / MB)
            dispatch_ratios.append(elapsed / readable)
            print(f"  (run {run + 1}: slave caught up at {speeds[-1]:.0f} MB/s in {elapsed:.2f}s, "
                  f"all readable through its consume queues at {total / readable / MB:.0f} MB/s in "
                  f"{readable:.2f}s: dispatch ratio {elapsed / readable:.2f}; slave CPU "
                  f"{cpu_caught_up * 1e3 / (total / MB):.2f} ms per MB until caught up, "
                  f"{cpu * 1e3 / (total / MB):.2f} until readable; load {os.getloadavg()[0]:.2f})",
                  flush=True)
            if not all(_same_file(a, slave.store / "commitlog" / a.name) for a in segments):
                raise RuntimeError(f"run {run + 1}: the slave's commit log differs from the master's")
            if not run:
                # Once, and while the slave's files still hold their pages: a file that is
                # written gets fresh page-cache pages, which is the dearest part here.
                results["sendfile_file"] = sendfile_mbps(segments, total, into=workdir / "sendfile-copy")
            shutil.rmtree(slave.store, ignore_errors=True)
            # The reference of this round, right after it (same page cache, same load).
            sendfiles.append(sendfile_mbps(segments, total))
            catchup_ratios.append(speeds[-1] / sendfiles[-1])
            print(f"  (run {run + 1}: plain sendfile {sendfiles[-1]:.0f} MB/s: catch-up ratio "
                  f"{catchup_ratios[-1]:.2f})", flush=True)
        results["sink"] = max(sink_mbps(master.ha_port, total) for _ in range(runs))
    finally:
        master.stop()
    results["catchup"] = max(speeds)
    results["dispatch_ratio"] = statistics.median(dispatch_ratios)
    results["catchup_median"] = sorted(speeds)[len(speeds) // 2]
    results["catchup_tls"], results["catchup_tls_median"] = tls_catch_up(
        workdir, master_dir, segments, total, runs)
    results["sendfile"] = max(sendfiles)
    results["catchup_ratio"] = statistics.median(catchup_ratios)
    results["append_data"], results["dispatched"] = append_data_mbps(
        master_dir, workdir / "append-only", total)
    shutil.rmtree(master_dir, ignore_errors=True)
    return results


def tls_flags(workdir: Path) -> tuple[str, ...]:
    """haTlsEnable with a CA and a certificate made for this run (both ends use it)."""
    from services.common.tls import generate_ca, issue_certificate

    pki = workdir / "pki"
    generate_ca(pki / "ca.crt", pki / "ca.key")
    issue_certificate(pki / "ca.crt", pki / "ca.key", pki / "ha.crt", pki / "ha.key", ("127.0.0.1",),
                      "bench-ha")
    return ("--ha-tls-enable", "true", "--tls-server-cert-path", str(pki / "ha.crt"),
            "--tls-server-key-path", str(pki / "ha.key"), "--tls-server-trust-cert-path", str(pki / "ca.crt"))


def tls_catch_up(workdir: Path, master_dir: Path, segments: list[Path], total: int,
                 runs: int) -> tuple[float, float]:
    """The same catch-up with haTlsEnable on master and slave: (best, median) MB/s."""
    flags = tls_flags(workdir)
    speeds: list[float] = []
    master = Broker(workdir, "catchup-master-tls", "ASYNC_MASTER", "--ha-sync-from-earliest", "true",
                    *flags, store=master_dir)
    try:
        for run in range(runs):
            started_ms = time.time() * 1000
            slave = Broker(workdir, f"catchup-slave-tls-{run}", "SLAVE", "--ha-master-address",
                           f"127.0.0.1:{master.ha_port}", *flags)
            try:
                elapsed = _caught_up(master, total, started_ms)
                if slave.ha().client_max_offset != total:
                    got = slave.ha().client_max_offset
                    raise RuntimeError(f"TLS slave holds {got} bytes, master {total}")
            finally:
                slave.stop()
            speeds.append(total / elapsed / MB)
            print(f"  (TLS run {run + 1}: slave caught up at {speeds[-1]:.0f} MB/s in {elapsed:.2f}s)",
                  flush=True)
            if not all(_same_file(a, slave.store / "commitlog" / a.name) for a in segments):
                raise RuntimeError(f"TLS run {run + 1}: the slave's commit log differs from the master's")
            shutil.rmtree(slave.store, ignore_errors=True)
    finally:
        master.stop()
    return max(speeds), sorted(speeds)[len(speeds) // 2]


def _caught_up(master: Broker, total: int, started_ms: float) -> float:
    """Seconds from the master's connect time of the slave started at ``started_ms`` until it
    acked ``total``."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        done = [s for s in master.ha().slaves if s.ack_offset >= total and s.connected_since_ms >= started_ms]
        if done:
            return (time.time() * 1000 - done[0].connected_since_ms) / 1000
        time.sleep(0.01)
    raise RuntimeError("slave did not catch up within 600 s")


def _dispatched(master: Broker, slave: Broker, expected: list[int], started_ms: float) -> float:
    """Seconds from the master's connect time of ``slave`` until the slave's consume queues
    (GetMaxOffset, as a consumer sees them) hold every message: ``expected`` per queue."""
    since = [s.connected_since_ms for s in master.ha().slaves if s.connected_since_ms >= started_ms]
    if not since:
        raise RuntimeError("the slave is not connected")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if all(slave.max_offset(q) >= want for q, want in enumerate(expected)):
            return (time.time() * 1000 - since[0]) / 1000
        time.sleep(0.01)
    raise RuntimeError("the slave did not dispatch everything within 600 s")


def append_data_mbps(source: Path, target: Path, total: int,
                     chunk: int = 2 * 1024 * 1024) -> tuple[float, float]:
    """The slave store's own ceiling: ``queue_data`` of the same bytes in ``chunk``-sized pieces
    (what one socket read of the slave holds at most), in this process, no network, each
    copied into the dispatch ring while the previous one is written; and the
    same until every record is dispatched (the reput thread runs alongside)."""
    # (the source is only read: no message index thread of its own competing with the slave's)
    src = MessageStore(StoreConfig(store_path_root_dir=str(source), message_index_enable=False))
    dst = MessageStore(StoreConfig(store_path_root_dir=str(target)))
    src.start()
    dst.start()
    try:
        start = time.perf_counter()
        offset = src.min_offset
        written: collections.deque[Future[int]] = collections.deque()
        while offset < total:
            data = src.get_data(offset, chunk)
            if data is None:
                break
            with data:  # (as the slave: the next append goes on while this one is written)
                written.append(dst.queue_data(offset, data.data))
                offset += data.size
            while written and written[0].done():
                written.popleft().result()
        for done in written:
            done.result()
        appended = time.perf_counter() - start
        if not dst.wait_dispatched(offset, 600):
            raise RuntimeError(f"slave store did not dispatch up to {offset}: {dst.dispatch_error}")
        dispatched = time.perf_counter() - start
        size = offset - src.min_offset
        return size / appended / MB, size / dispatched / MB
    finally:
        src.shutdown()
        dst.shutdown()
        shutil.rmtree(target, ignore_errors=True)


def _same_file(a: Path, b: Path) -> bool:
    if not b.exists():
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x = fa.read(1 << 24)
            y = fb.read(1 << 24)
            if x != y:
                return False
            if not x:
                return True


# ----------------------------------------------------------------------------- produce


def batch_request(request_id: int = 0) -> bytes:
    body = os.urandom(BODY_SIZE)
    messages = [pb.Message(body=body) for _ in range(BATCH)]
    return pb.SendMessageBatchRequest(topic=TOPIC, queue_id=0, request_id=request_id,
                                      messages=messages).SerializeToString()


async def create_topic(addr: str, queues: int = 1) -> None:
    async with grpc.aio.insecure_channel(addr) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        await stub.CreateTopic(pb.CreateTopicRequest(topic_config=common_pb2.TopicConfig(
            topic_name=TOPIC, read_queue_nums=queues, write_queue_nums=queues, perm=6)), timeout=10)


async def produce_stream(addr: str, messages: int, window: int = WINDOW) -> tuple[float, list[float]]:
    """Batches of 32 through SendMessageStream, ``window`` in flight; (msgs/s, batch latencies s)."""
    calls = messages // BATCH
    elapsed, replies, latencies = await send_batch_stream(addr, batch_request(), calls, window)
    statuses: dict[int, int] = {}
    for reply in replies:
        statuses[reply.status] = statuses.get(reply.status, 0) + 1
    if statuses.get(pb.PUT_OK, 0) != calls:
        names = {pb.PutStatus.Name(k): v for k, v in statuses.items()}
        raise RuntimeError(f"not every batch was PUT_OK: {names}")
    return calls * BATCH / elapsed, latencies


def ready_to_produce(master: Broker) -> None:
    """Create the benchmark topic on ``master`` and wait until its slave is connected."""
    asyncio.run(create_topic(master.addr))
    deadline = time.monotonic() + 20
    while not master.ha().slaves:
        if time.monotonic() > deadline:
            raise RuntimeError("slave did not connect")
        time.sleep(0.05)


def produce_phase(workdir: Path, role: str, messages: int) -> tuple[float, list[float]]:
    with pair(workdir, role, role.lower()) as (master, _slave):
        ready_to_produce(master)
        asyncio.run(produce_stream(master.addr, min(messages, 20_000)))  # warm-up
        return asyncio.run(produce_stream(master.addr, messages))


# ----------------------------------------------------------------------------- steady-state lag


_SAMPLER = """
import sys, time, grpc
from pocketmq.broker.v1 import broker_pb2 as pb, broker_pb2_grpc
addr, seconds, interval = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
stub = broker_pb2_grpc.BrokerStub(grpc.insecure_channel(addr))
print("ready", flush=True)
sys.stdin.readline()
end = time.monotonic() + seconds
out = []
while time.monotonic() < end:
    t = time.monotonic()
    status = stub.GetHAStatus(pb.GetHAStatusRequest(), timeout=5)
    if status.slaves:
        out.append(f"{t} {status.commit_log_max_offset} {status.slaves[0].ack_offset}")
    time.sleep(max(0.0, interval - (time.monotonic() - t)))
print("\\n".join(out), flush=True)
"""


def lag_phase(workdir: Path, rate: int, seconds: float) -> dict[str, float]:
    """A fixed produce load on an ASYNC_MASTER with one slave; a separate process samples the
    master's GetHAStatus every ~2 ms (own process: no GIL shared with the load generator)."""
    with pair(workdir, "ASYNC_MASTER", "lag") as (master, _slave):
        ready_to_produce(master)
        sampler = subprocess.Popen([sys.executable, "-c", _SAMPLER, master.addr, str(seconds), "0.002"],
                                   cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert sampler.stdin is not None and sampler.stdout is not None
        sampler.stdout.readline()

        async def load() -> int:
            request = batch_request()
            interval = BATCH / rate
            async with grpc.aio.insecure_channel(master.addr) as channel:
                call = channel.unary_unary(SERVICE + "SendMessageBatch", request_serializer=identity,
                                           response_deserializer=pb.SendMessageBatchResponse.FromString)
                await call(request)
                sampler.stdin.write("go\n")  # type: ignore[union-attr]
                sampler.stdin.flush()  # type: ignore[union-attr]
                start = time.perf_counter()
                n = 0
                pending: set[asyncio.Future[object]] = set()
                while time.perf_counter() - start < seconds:
                    task: asyncio.Future[object] = asyncio.ensure_future(call(request))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                    n += 1
                    await asyncio.sleep(max(0.0, start + n * interval - time.perf_counter()))
                await asyncio.gather(*pending)
                return n * BATCH

        sent = asyncio.run(load())
        output, _ = sampler.communicate(timeout=60)
    rows = (line.split() for line in output.split("\n") if line)
    samples = [(float(t), int(m), int(a)) for t, m, a in rows]
    # drop the first second (connection and page-cache warm-up)
    t_first = samples[0][0] + 1.0 if samples else 0.0
    lag_bytes: list[float] = []
    lag_ms: list[float] = []
    times = [s[0] for s in samples]
    maxes = [s[1] for s in samples]
    for t, max_offset, ack in samples:
        if t < t_first:
            continue
        lag_bytes.append(max(0, max_offset - ack))
        if ack >= max_offset:
            lag_ms.append(0.0)
            continue
        # the last sample at which the master's log did not yet hold data beyond ack
        i = bisect.bisect_right(maxes, ack)
        appeared = times[i - 1] if i > 0 else times[0]
        lag_ms.append(max(0.0, (t - appeared) * 1000))
    return {"rate": sent / seconds, "samples": len(lag_bytes),
            "bytes_p50": percentile(lag_bytes, 0.5), "bytes_p99": percentile(lag_bytes, 0.99),
            "ms_p50": percentile(lag_ms, 0.5), "ms_p99": percentile(lag_ms, 0.99)}


# ----------------------------------------------------------------------------- Redis


class Redis:
    """Primary + replica, started here on loopback ports."""

    def __init__(self, workdir: Path) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.port = free_port()
        self.replica_port = free_port()
        replica_of = ["--replicaof", "127.0.0.1", str(self.port)]
        for name, port, extra in (("primary", self.port, []), ("replica", self.replica_port, replica_of)):
            d = workdir / f"redis-{name}"
            d.mkdir()
            self.procs.append(subprocess.Popen(
                ["/usr/bin/redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(d),
                 "--save", "", "--appendonly", "yes", "--appendfsync", "everysec", *extra],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            wait_port(port)
        import redis

        replica = redis.Redis(port=self.replica_port)
        wait_redis_replica(replica)
        replica.close()

    def produce(self, messages: int, clients: int = WINDOW) -> tuple[float, list[float]]:
        """``clients`` threads, each with its own connection, doing XADD x32 pipelined + WAIT 1
        (redis-py's synchronous client: faster here than its asyncio client)."""
        import redis

        body = os.urandom(BODY_SIZE)
        calls = messages // BATCH
        latencies: list[float] = []
        lock = threading.Lock()
        issued = [0]

        def worker(conn: redis.Redis) -> None:
            while True:
                with lock:
                    if issued[0] >= calls:
                        return
                    issued[0] += 1
                t = time.perf_counter()
                pipe = conn.pipeline(transaction=False)
                for _ in range(BATCH):
                    pipe.xadd(TOPIC, {"b": body})
                pipe.execute_command("WAIT", 1, 3000)
                replies = pipe.execute()
                if replies[-1] < 1:
                    raise RuntimeError("WAIT 1 timed out: the replica did not acknowledge")
                latencies.append(time.perf_counter() - t)

        conns = [redis.Redis(port=self.port) for _ in range(clients)]
        try:
            for conn in conns:
                conn.ping()
            threads = [threading.Thread(target=worker, args=(c,)) for c in conns]
            start = time.perf_counter()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            elapsed = time.perf_counter() - start
        finally:
            for conn in conns:
                conn.close()
        return calls * BATCH / elapsed, latencies

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


# ----------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--catchup-mib", type=int, default=1024)
    parser.add_argument("--properties", action="store_true",
                        help="catch-up messages carry TAGS and a unique UNIQ_KEY (as RocketMQ producers' "
                             "do); the default has no properties")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--lag-rate", type=int, default=20_000, help="msgs/s during the lag phase")
    parser.add_argument("--lag-seconds", type=float, default=5.0)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--runs", type=int, default=3,
                        help="catch-ups (each to a new empty slave) and sendfile runs; the best of each "
                        "counts")
    parser.add_argument("--catchup-only", action="store_true",
                        help="only the catch-up phase (prints ha_catchup_ratio and ha_catchup_mbps)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    workdir = Path(tempfile.mkdtemp(prefix="bench-ha-", dir=args.workdir))
    print(f"bench-ha: workdir {workdir}, {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    redis: Redis | None = None
    try:
        print(f"catch-up of {args.catchup_mib} MiB (1 KiB messages) to an empty slave ...", flush=True)
        cu = catch_up(workdir, args.catchup_mib * 1024 * 1024, args.runs, args.properties)
        print(f"  slave catch-up      {cu['catchup']:8.0f} MB/s  (best of {args.runs}, median "
              f"{cu['catchup_median']:.0f}; commit logs byte-identical)")
        print(f"  slave catch-up TLS  {cu['catchup_tls']:8.0f} MB/s  (haTlsEnable, best of {args.runs}, "
              f"median "
              f"{cu['catchup_tls_median']:.0f}; commit logs byte-identical)")
        tls_ratio = cu["catchup_tls"] / cu["catchup"]
        print(f"  TLS / plaintext catch-up = {tls_ratio:.2f}")
        print(f"  HA stream -> sink   {cu['sink']:8.0f} MB/s  (the channel alone, data discarded)")
        print(f"  store append_data   {cu['append_data']:8.0f} MB/s  (the slave store alone, no network: "
              "the bound on catch-up)")
        print(f"  ... and dispatched  {cu['dispatched']:8.0f} MB/s  (until the reput thread indexed it all)")
        print(f"  sendfile -> file    {cu['sendfile_file']:8.0f} MB/s  (a plain receiver writing a new file: "
              "what storing the bytes costs)")
        print(f"  plain sendfile      {cu['sendfile']:8.0f} MB/s  (ceiling: the receiver discards; best of "
              f"{args.runs}, one right after each catch-up)")
        ratio = cu["catchup_ratio"]
        print(f"  ratios: catch-up {ratio:.2f} of sendfile (median of the rounds; target >= 0.6), "
              f"{cu['catchup'] / cu['sendfile_file']:.2f} of sendfile -> file; channel "
              f"{cu['sink'] / cu['sendfile']:.2f} of sendfile", flush=True)
        print(f"  slave consume queues: everything readable at {cu['dispatch_ratio']:.2f} of the "
              "catch-up speed (median of the rounds; target >= 0.8)", flush=True)
        if args.catchup_only:
            print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            print(f"ha_catchup_ratio={ratio:.2f} ha_catchup_mbps={cu['catchup']:.0f} "
                  f"ha_dispatch_ratio={cu['dispatch_ratio']:.2f} "
                  f"ha_tls_catchup_mbps={cu['catchup_tls']:.0f} ha_tls_vs_plain={tls_ratio:.2f}")
            return 0

        print(f"steady-state lag at {args.lag_rate} msgs/s for {args.lag_seconds:g}s ...", flush=True)
        lag = lag_phase(workdir, args.lag_rate, args.lag_seconds)
        print(f"  achieved {lag['rate']:.0f} msgs/s, {lag['samples']:.0f} samples: lag p50 "
              f"{lag['bytes_p50']:.0f} B / {lag['ms_p50']:.1f} ms, p99 {lag['bytes_p99']:.0f} B / "
              f"{lag['ms_p99']:.1f} ms", flush=True)

        results: dict[str, tuple[float, list[float]]] = {}
        for role in ("ASYNC_MASTER", "SYNC_MASTER"):
            print(f"{role}: {args.messages} msgs, batches of {BATCH}, {WINDOW} in flight ...", flush=True)
            results[role] = produce_phase(workdir, role, args.messages)
        redis = Redis(workdir)
        print(f"redis XADD x{BATCH} + WAIT 1, {WINDOW} clients ...", flush=True)
        results["redis"] = redis.produce(args.messages)

        print(f"\n{'produce (1 KiB)':<26} {'msgs/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
        for name, key in (("ASYNC_MASTER", "ASYNC_MASTER"), ("SYNC_MASTER", "SYNC_MASTER"),
                          ("redis XADD+WAIT 1", "redis")):
            rate, lat = results[key]
            print(f"{name:<26} {rate:10.0f} {percentile(lat, 0.5) * 1000:8.2f} "
                  f"{percentile(lat, 0.99) * 1000:8.2f}")
        sync_rate, sync_lat = results["SYNC_MASTER"]
        async_rate = results["ASYNC_MASTER"][0]
        redis_rate = results["redis"][0]
        print(f"SYNC_MASTER / ASYNC_MASTER = {sync_rate / async_rate:.2f} (target >= 0.7); "
              f"SYNC_MASTER / redis = {sync_rate / redis_rate:.2f} (target >= 1)")
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"ha_catchup_ratio={ratio:.2f} ha_catchup_mbps={cu['catchup']:.0f} "
              f"ha_dispatch_ratio={cu['dispatch_ratio']:.2f} sync_master_msgs={sync_rate:.0f} "
              f"sync_master_p99_ms={percentile(sync_lat, 0.99) * 1000:.1f} "
              f"vs_redis_sync={sync_rate / redis_rate:.2f} ha_tls_catchup_mbps={cu['catchup_tls']:.0f} "
              f"ha_tls_vs_plain={tls_ratio:.2f}")
        return 0
    finally:
        if redis is not None:
            redis.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
