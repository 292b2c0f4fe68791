"""Failover time of a SYNC_MASTER group under controllerMode=etcd, next to a plain restart.

Both sides run in this one run, on loopback, with Debian's etcd and a real NameServer:

* failover: three members (brokerIds 1-3, SYNC_MASTER while leading) under controllerMode=etcd
  with the default lease (controllerLeaseTtl 3000 ms, renewed every 500 ms). Four producer
  threads send batches of 4 to whichever member takes them. ``--kills`` times (default 5), the
  master is SIGKILLed; the figure is the time from the SIGKILL to the first PUT_OK from another
  member. The killed member is restarted (it rejoins as a slave) before the next kill.
* reference: a static SYNC_MASTER (brokerId 0) with one slave and no controller. The master is
  SIGKILLed and started again at once; the figure is the time from the SIGKILL to its first
  PUT_OK (the store recovery, the server start and the slave's reconnect included).

After the failover rounds every PUT_OK message is looked up in the final master's commit log;
``failover_lost`` counts those missing or different. Every round is printed, then the medians;
the line before last is ``restart_p50_s=<r> restart_max_s=<m> lease_ttl_s=<t>``, the last
``failover_p50_s=<x> failover_max_s=<y> failover_lost=<n>``.

    python benchmarks/bench_failover.py [--kills 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc
from benchlib import ROOT, free_port, wait_port

from pocketmq.broker.v1 import broker_pb2 as pb
from pocketmq.broker.v1 import broker_pb2_grpc
from services.broker.storage.record import decode_record

TOPIC = "BenchFailover"
TTL_MS = 3000
_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 100), ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 500)]


class Node:
    def __init__(self, name: str, args: list[str], port: int, store: Path, logs: Path) -> None:
        self.name, self.args, self.port, self.store, self.logs = name, args, port, store, logs
        self.addr = f"127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.channel = grpc.insecure_channel(self.addr, options=_OPTIONS)
        self.stub = broker_pb2_grpc.BrokerStub(self.channel)

    def start(self) -> None:
        log = open(self.logs / f"{self.name}.log", "ab")  # noqa: SIM115 - the child keeps it
        self.proc = subprocess.Popen([sys.executable, "-m", "services.broker", *self.args], cwd=ROOT,
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_port(self.port)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def status(self) -> pb.HAStatus | None:
        try:
            return self.stub.GetHAStatus(pb.GetHAStatusRequest(), timeout=2)
        except grpc.RpcError:
            return None

    def log_bytes(self, upto: int) -> bytes:
        out = bytearray()
        for p in sorted((self.store / "commitlog").iterdir()):
            if int(p.name) >= upto:
                break
            out += p.read_bytes()[:upto - int(p.name)]
        return bytes(out)


def broker_args(cluster: str, broker_id: int, role: str, namesrv: str, port: int, store: Path,
                extra: list[str]) -> list[str]:
    return ["--broker-cluster-name", cluster, "--broker-name", "broker-a", "--broker-id", str(broker_id),
            "--broker-role", role, "--namesrv-addr", namesrv, "--broker-ip1", "127.0.0.1",
            "--listen-host", "127.0.0.1", "--listen-port", str(port), "--ha-listen-port", str(free_port()),
            "--metrics-port", "0", "--store-path-root-dir", str(store), "--shutdown-grace-period", "2000",
            "--ha-send-heartbeat-interval", "1000", "--ha-housekeeping-interval", "5000", *extra]


class Producers:
    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes
        self.acked: list[tuple[str, bytes]] = []
        #: (request sent, reply received, node) of every PUT_OK
        self.oks: list[tuple[float, float, str]] = []
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(w,), daemon=True) for w in range(4)]
        for t in self.threads:
            t.start()

    def _run(self, worker: int) -> None:
        i, n = worker % len(self.nodes), 0
        while not self.done.is_set():
            node = self.nodes[i]
            bodies = [struct.pack(">IIQ", worker, n + k, time.monotonic_ns()) * 8 for k in range(4)]
            n += 4
            sent = time.monotonic()
            request = pb.SendMessageBatchRequest(topic=TOPIC, queue_id=worker % 2,
                                                 messages=[pb.Message(body=b) for b in bodies])
            try:
                reply = node.stub.SendMessageBatch(request, timeout=5)
                ok = reply.status == pb.PUT_OK
            except grpc.RpcError:
                ok = False
            if not ok:
                i = (i + 1) % len(self.nodes)
                time.sleep(0.02)
                continue
            with self.lock:
                self.acked.extend(zip(reply.msg_ids, bodies, strict=True))
                self.oks.append((sent, time.monotonic(), node.name))

    def first_ok(self, after: float, exclude: str = "", only: str = "") -> float:
        """When the first PUT_OK for a request sent after ``after`` arrived (0: none yet)."""
        with self.lock:
            times = [got for sent, got, name in self.oks
                     if sent > after and name != exclude and (not only or name == only)]
        return min(times, default=0.0)

    def finish(self) -> None:
        self.done.set()
        for t in self.threads:
            t.join(20)


def wait(predicate: object, timeout: float, what: str) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()  # type: ignore[operator]
        if value:
            return value
        time.sleep(0.02)
    raise SystemExit(f"timed out: {what}")


def start_etcd(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("etcd")
    if binary is None:
        raise SystemExit("etcd is not installed (Debian etcd-server; make setup installs it)")
    client, peer = free_port(), free_port()
    url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
    log = open(tmp / "etcd.log", "wb")  # noqa: SIM115 - the child keeps it
    argv = [binary, "--name", "b", "--data-dir", str(tmp / "etcd"), "--listen-client-urls", url,
            "--advertise-client-urls", url, "--listen-peer-urls", peer_url,
            "--initial-advertise-peer-urls", peer_url, "--initial-cluster", f"b={peer_url}"]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    wait_port(client)
    return proc, f"127.0.0.1:{client}"


def failover_rounds(tmp: Path, namesrv: str, etcd: str, kills: int) -> tuple[list[float], int]:
    nodes = []
    for member in (1, 2, 3):
        port = free_port()
        store = tmp / f"m{member}"
        extra = ["--controller-mode", "etcd", "--controller-etcd-endpoints", etcd,
                 "--controller-lease-ttl", str(TTL_MS), "--ha-max-time-slave-not-catchup", "3000"]
        args = broker_args("bench-fo", member, "SYNC_MASTER", namesrv, port, store, extra)
        nodes.append(Node(f"m{member}", args, port, store, tmp))
    for node in nodes:
        node.start()

    def master() -> Node | None:
        return next((n for n in nodes if n.proc and n.proc.poll() is None
                     and (s := n.status()) is not None and s.broker_role != "SLAVE"), None)

    producers = Producers(nodes)
    times: list[float] = []
    try:
        for round_no in range(1, kills + 1):
            victim = wait(master, 20, "a master")
            assert isinstance(victim, Node)
            wait(lambda v=victim: len(v.status().sync_state_set) == 3, 20, "both slaves in sync")  # type: ignore[union-attr]
            before = len(producers.acked)
            wait(lambda b=before: len(producers.acked) > b + 200, 20, "PUT_OK before the kill")
            killed = time.monotonic()
            victim.kill()
            first = wait(lambda k=killed, v=victim.name: producers.first_ok(k, exclude=v), 20, "PUT_OK after")
            assert isinstance(first, float)
            times.append(first - killed)
            print(f"failover round {round_no}: killed {victim.name}, first PUT_OK on another member after "
                  f"{first - killed:.2f} s", flush=True)
            victim.start()
            wait(lambda v=victim: (s := v.status()) is not None and s.broker_role == "SLAVE" and s.connected,
                 30, "the killed member rejoined")
    finally:
        producers.finish()
    final = wait(master, 20, "a master")
    assert isinstance(final, Node)
    top = final.status().commit_log_max_offset  # type: ignore[union-attr]
    data = final.log_bytes(top)
    lost = 0
    for msg_id, body in producers.acked:
        offset = int(msg_id[-16:], 16)
        if offset >= top or decode_record(data, offset).body != body:
            lost += 1
    print(f"failover: {len(producers.acked)} PUT_OK messages checked on the final master, {lost} lost")
    for node in nodes:
        node.stop()
    return times, lost


def restart_rounds(tmp: Path, namesrv: str, kills: int) -> list[float]:
    port, slave_port = free_port(), free_port()
    master = Node("static-master", broker_args("bench-rs", 0, "SYNC_MASTER", namesrv, port, tmp / "s0", []),
                  port, tmp / "s0", tmp)
    slave = Node("static-slave", broker_args("bench-rs", 1, "SLAVE", namesrv, slave_port, tmp / "s1", []),
                 slave_port, tmp / "s1", tmp)
    master.start()
    slave.start()
    producers = Producers([master])
    times: list[float] = []
    try:
        for round_no in range(1, kills + 1):
            before = len(producers.acked)
            wait(lambda b=before: len(producers.acked) > b + 200, 30, "PUT_OK before the kill")
            killed = time.monotonic()
            master.kill()
            respawned = time.monotonic()  # (replies read after this come from the new process)
            master.start()
            first = wait(lambda r=respawned: producers.first_ok(r, only=master.name), 30,
                         "PUT_OK after restart")
            assert isinstance(first, float)
            times.append(first - killed)
            print(f"restart round {round_no}: first PUT_OK from the restarted master after "
                  f"{first - killed:.2f} s", flush=True)
    finally:
        producers.finish()
        master.stop()
        slave.stop()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=5)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; lease TTL {TTL_MS} ms",
          flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-failover-"))
    etcd, etcd_addr = start_etcd(tmp)
    ns_port = free_port()
    namesrv = subprocess.Popen([sys.executable, "-m", "services.namesrv", "--listen", f"127.0.0.1:{ns_port}",
                                "--metrics-port", "0"], cwd=ROOT, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_port(ns_port)
        failover, lost = failover_rounds(tmp, f"127.0.0.1:{ns_port}", etcd_addr, args.kills)
        restart = restart_rounds(tmp, f"127.0.0.1:{ns_port}", args.kills)
    finally:
        namesrv.terminate()
        etcd.terminate()
        namesrv.wait(10)
        etcd.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"failover (s): {' '.join(f'{t:.2f}' for t in failover)}; median {statistics.median(failover):.2f}")
    print(f"plain restart, no failover (s): {' '.join(f'{t:.2f}' for t in restart)}; "
          f"median {statistics.median(restart):.2f}")
    print(f"restart_p50_s={statistics.median(restart):.2f} restart_max_s={max(restart):.2f} "
          f"lease_ttl_s={TTL_MS / 1000:g}")
    print(f"failover_p50_s={statistics.median(failover):.2f} failover_max_s={max(failover):.2f} "
          f"failover_lost={lost}")


if __name__ == "__main__":
    main()
