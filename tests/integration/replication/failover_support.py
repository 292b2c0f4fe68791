"""What the failover tests share (controllerMode etcd and kubernetes): a three-member SYNC_MASTER
group of real broker processes, producers that only count PUT_OK, and the checks that every
acknowledged message is on the new master."""

from __future__ import annotations

import struct
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc

from pocketmq.broker.v1 import broker_pb2 as pb
from pocketmq.broker.v1 import broker_pb2_grpc
from services.broker.storage.record import decode_record
from tests.integration.broker.client import BrokerClient
from tests.integration.procs import ProcessGroup
from tests.integration.replication.conftest import BROKER_SERVICE, SEGMENT
from tests.support import free_port, wait_until

TOPIC = "Failover"
TTL_MS = 3000  # the default controllerLeaseTtl


class Member:
    """One member (brokerId 1..3) of a controlled group, as a real broker process."""

    def __init__(self, procs: ProcessGroup, member_id: int, args: list[str], port: int, store: Path,
                 env: dict[str, str] | None = None) -> None:
        self.procs = procs
        self.id = member_id
        self.args = args
        self.env = env
        self.port = port
        self.addr = f"127.0.0.1:{port}"
        self.store = store
        self.proc = procs.start_grpc("services.broker", args, self.addr, name=f"m{member_id}",
                                     service=BROKER_SERVICE, env=env)
        self.client = BrokerClient(self.addr)

    def metrics(self) -> dict[str, float]:
        """This member's pocketmq_controller_* samples from its /metrics endpoint."""
        from prometheus_client.parser import text_string_to_metric_families

        port = self.args[self.args.index("--metrics-port") + 1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
        return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples
                if s.name.startswith("pocketmq_controller_")}

    def restart(self) -> None:
        self.proc = self.procs.start_grpc("services.broker", self.args, self.addr, name=f"m{self.id}",
                                          service=BROKER_SERVICE, env=self.env)

    def status(self) -> pb.HAStatus | None:
        try:
            return self.client.stub.GetHAStatus(pb.GetHAStatusRequest(), timeout=2)
        except grpc.RpcError:
            return None

    def is_master(self) -> bool:
        s = self.status()
        return s is not None and s.broker_role != "SLAVE"

    def log_bytes(self, upto: int) -> bytes:
        out = bytearray()
        for p in sorted((self.store / "commitlog").iterdir()):
            start = int(p.name)
            if start >= upto:
                break
            out += p.read_bytes()[:upto - start]
        return bytes(out)


def start_members(procs: ProcessGroup, namesrv: str, tmp: Path, cluster: str, controller: tuple[str, ...],
                  env: Callable[[int], dict[str, str]] | None = None) -> list[Member]:
    """Members 1, 2 and 3 of SYNC_MASTER group broker-a of ``cluster``; ``controller``: the
    controllerMode flags; ``env``: extra environment of member n."""
    members = []
    for member_id in (1, 2, 3):
        port = free_port()
        store = tmp / f"m{member_id}"
        args = [
            "--broker-cluster-name", cluster, "--broker-name", "broker-a", "--broker-id", str(member_id),
            "--broker-role", "SYNC_MASTER", "--namesrv-addr", namesrv, "--broker-ip1", "127.0.0.1",
            "--listen-host", "127.0.0.1", "--listen-port", str(port), "--ha-listen-port", str(free_port()),
            "--metrics-port", str(free_port()), "--store-path-root-dir", str(store),
            "--mapped-file-size-commit-log", str(SEGMENT), "--max-message-size", "65536",
            "--shutdown-grace-period", "2000", "--ha-send-heartbeat-interval", "1000",
            "--ha-housekeeping-interval", "5000", "--register-name-server-period", "10000",
            "--slave-sync-interval", "1000", "--controller-lease-ttl", str(TTL_MS),
            "--ha-max-time-slave-not-catchup", "3000", *controller,
        ]
        members.append(Member(procs, member_id, args, port, store, env(member_id) if env else None))
    return members


def master_of(members: list[Member], timeout: float = 15) -> Member:
    return wait_until(lambda: next((m for m in members if m.proc.alive and m.is_master()), None), timeout,
                      message="a master elected")


#: A client reconnects quickly to a broker whose server restarted in place (gRPC's default
#: reconnect backoff starts at 1 s and grows).
_FAST_RECONNECT = [("grpc.initial_reconnect_backoff_ms", 100), ("grpc.min_reconnect_backoff_ms", 100),
                   ("grpc.max_reconnect_backoff_ms", 500)]


def fast_client(addr: str) -> BrokerClient:
    client = BrokerClient(addr)
    client.channel.close()
    client.channel = grpc.insecure_channel(addr, options=_FAST_RECONNECT)
    client.stub = broker_pb2_grpc.BrokerStub(client.channel)
    return client


class Producers:
    """4 threads sending batches to whichever member takes them; only PUT_OK counts."""

    def __init__(self, members: list[Member]) -> None:
        self.members = members
        self.acked: list[tuple[str, bytes]] = []
        self.first_ok_after: dict[float, float] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.last_ok = 0.0
        #: (monotonic time, member id) of every PUT_OK reply
        self.oks: list[tuple[float, int]] = []
        self.threads = [threading.Thread(target=self._run, args=(w,), daemon=True) for w in range(4)]
        for t in self.threads:
            t.start()

    def _run(self, worker: int) -> None:
        clients = [fast_client(m.addr) for m in self.members]
        n = 0
        i = worker % len(clients)
        try:
            while not self.stop.is_set():
                bodies = [struct.pack(">IIQ", worker, n + k, time.monotonic_ns()) * 8 for k in range(4)]
                n += 4
                try:
                    reply = clients[i].send_batch(TOPIC, bodies, worker % 2)
                    ok = reply.status == pb.PUT_OK
                except grpc.RpcError:
                    ok = False
                if not ok:
                    i = (i + 1) % len(clients)
                    time.sleep(0.02)
                    continue
                now = time.monotonic()
                with self.lock:
                    self.acked.extend(zip(reply.msg_ids, bodies, strict=True))
                    self.last_ok = now
                    self.oks.append((now, self.members[i].id))
        finally:
            for c in clients:
                c.close()

    def count(self) -> int:
        with self.lock:
            return len(self.acked)

    def ok_since(self, t: float, exclude: int) -> float:
        """When a member other than ``exclude`` last answered PUT_OK, if after ``t`` (else 0)."""
        with self.lock:
            times = [when for when, member in self.oks if member != exclude and when > t]
        return min(times, default=0.0)

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(20)


def check_all_acked_on(producers: Producers, member: Member, max_offset: int) -> None:
    data = member.log_bytes(max_offset)
    for msg_id, body in producers.acked:
        offset = int(msg_id[-16:], 16)
        assert offset < max_offset, f"acknowledged message at {offset} missing on the master"
        record = decode_record(data, offset)
        assert record.body == body



def sync_state(member: Member) -> list[int]:
    s = member.status()
    return list(s.sync_state_set) if s is not None else []


def logs_equal(members: list[Member], master: Member) -> int:
    """Wait until every member has the master's max offset and check that every log holds the
    same bytes up to it; returns that offset."""
    final = master.status()
    assert final is not None
    top = final.commit_log_max_offset
    for m in members:
        wait_until(lambda m=m: (s := m.status()) is not None and s.commit_log_max_offset == top, 20,
                   message=f"member {m.id} caught up")
    reference = master.log_bytes(top)
    for m in members:
        assert m.log_bytes(top) == reference, f"member {m.id}'s log differs from the master's"
    return top
