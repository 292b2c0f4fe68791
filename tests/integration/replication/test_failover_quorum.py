"""Failover under a three-member etcd cluster (Debian's etcd-server) with real broker processes:
what a SYNC_MASTER group does when etcd loses one member (nothing) or its quorum (the master
fences itself, nobody is promoted, the group waits and says why, then carries on), and a kill
that leaves the old master with a tail no slave received (cut into ``ha-diverged/`` when it
rejoins, by epochs).

One etcd cluster serves the module; each test uses its own cluster name (its own keys)."""

from __future__ import annotations

import json
import shutil
import signal
import struct
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pocketmq.broker.v1 import broker_pb2 as pb
from pocketmq.wire.record import BLANK_MAGIC_CODE, decode_record
from tests.integration.broker.client import BrokerClient
from tests.integration.procs import ProcessGroup
from tests.integration.replication.failover_support import (
    TOPIC,
    TTL_MS,
    Member,
    Producers,
    check_all_acked_on,
    logs_equal,
    master_of,
    sync_state,
)
from tests.integration.replication.proxy import FreezingProxy
from tests.integration.replication.test_failover_etcd import start_group
from tests.support import free_port, wait_until

pytestmark = pytest.mark.slow


@dataclass
class EtcdMember:
    name: str
    client_port: int
    argv: list[str]
    proc: subprocess.Popen[bytes]

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def pause(self) -> None:
        """Stopped: it neither answers its clients nor votes (SIGSTOP)."""
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)


@pytest.fixture(scope="module")
def etcd3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[EtcdMember]]:
    """Three etcd members on loopback, each with its own client and peer port and data dir."""
    binary = shutil.which("etcd")
    assert binary, "etcd is not installed (Debian etcd-server; make setup installs it)"
    data = tmp_path_factory.mktemp("etcd3")
    names = ["e0", "e1", "e2"]
    clients = {n: free_port() for n in names}
    peers = {n: f"http://127.0.0.1:{free_port()}" for n in names}
    cluster = ",".join(f"{n}={peers[n]}" for n in names)
    members: list[EtcdMember] = []
    logs = []
    try:
        for n in names:
            url = f"http://127.0.0.1:{clients[n]}"
            argv = [binary, "--name", n, "--data-dir", str(data / n), "--listen-client-urls", url,
                    "--advertise-client-urls", url, "--listen-peer-urls", peers[n],
                    "--initial-advertise-peer-urls", peers[n], "--initial-cluster", cluster,
                    "--initial-cluster-state", "new", "--initial-cluster-token", "pocketmq-test"]
            log = open(data / f"{n}.log", "wb")  # noqa: SIM115 - closed below
            logs.append(log)
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            members.append(EtcdMember(n, clients[n], argv, proc))
        for m in members:
            wait_until(lambda m=m: _healthy(m.client_port), 30, message=f"etcd {m.name} has a leader")
        yield members
    finally:
        for m in members:
            m.resume()
            m.proc.send_signal(signal.SIGTERM)
        for m in members:
            try:
                m.proc.wait(10)
            except subprocess.TimeoutExpired:
                m.proc.kill()
                m.proc.wait(5)
        for log in logs:
            log.close()


def _healthy(port: int) -> bool:
    """etcd's /health: true once the member is in a cluster with a leader (a quorum)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
            return b'"health":"true"' in reply.read()
    except OSError:
        return False


def _etcd_call(member: EtcdMember, path: str, body: dict[str, str] | None = None) -> dict[str, Any]:
    """etcd's JSON gateway (v3 API over HTTP)."""
    request = urllib.request.Request(f"http://{member.endpoint}/v3/{path}",
                                     data=json.dumps(body or {}).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=5) as reply:
        result: dict[str, Any] = json.loads(reply.read())
    return result


def make_leader(etcd: list[EtcdMember], target: EtcdMember) -> None:
    """Move the etcd cluster's raft leadership to ``target``."""
    target_id = _etcd_call(target, "maintenance/status")["header"]["member_id"]

    def done() -> bool:
        status = _etcd_call(target, "maintenance/status")
        if status.get("leader") == target_id:
            return True
        leader = next(m for m in etcd if _etcd_call(m, "maintenance/status")["header"]["member_id"]
                      == status.get("leader"))
        _etcd_call(leader, "maintenance/transfer-leadership", {"targetID": target_id})
        return False

    wait_until(done, 20, message=f"etcd {target.name} leads", ignore=(OSError, StopIteration, KeyError))


def endpoints(etcd: list[EtcdMember]) -> str:
    return ";".join(m.endpoint for m in etcd)


def _flag(member: Member, name: str) -> int:
    return int(member.args[member.args.index(name) + 1])


def metric(member: Member, name: str) -> float | None:
    port = _flag(member, "--metrics-port")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as reply:
            text = reply.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def failovers(members: list[Member]) -> dict[int, int]:
    out = {}
    for m in members:
        s = m.status()
        assert s is not None, f"member {m.id} answers"
        out[m.id] = s.failovers
    return out


def test_one_etcd_member_down_changes_nothing_and_a_quorum_loss_fences_the_master(
        procs: ProcessGroup, namesrv: str, etcd3: list[EtcdMember], tmp_path: Path) -> None:
    members = start_group(procs, namesrv, endpoints(etcd3), tmp_path, "quorum")
    master = master_of(members)
    wait_until(lambda: len(sync_state(master)) == 3, 20, message="both slaves in sync")
    producers = Producers(members)
    try:
        wait_until(lambda: producers.count() > 200, 30, message="PUT_OK before any etcd member stops")

        # -- one member of three stopped: the etcd leader, and the endpoint every broker talks to
        # first (a renewal has to go elsewhere, and wait for etcd's own election) -----------------
        make_leader(etcd3, etcd3[0])
        before = failovers(members)
        etcd3[0].pause()
        paused_at = time.monotonic()
        # the lease (TTL 3 s) would have ended without renewals by now: it was renewed elsewhere
        wait_until(lambda: producers.ok_since(paused_at + TTL_MS / 1000 + 1, -1), 20,
                   message="writes go on with one etcd member stopped")
        assert master.is_master(), "the master kept its lease"
        assert failovers(members) == before, "no failover with one etcd member stopped"
        assert not [w for w, m in producers.oks if w > paused_at and m != master.id], \
            "only the one master acknowledged"
        etcd3[0].resume()
        wait_until(lambda: _healthy(etcd3[0].client_port), 15, message="etcd member back")
        refenced = master.proc.log_text().count("leader lease renewed again")

        # -- two of three stopped: no quorum -------------------------------------------------------
        etcd3[1].pause()
        etcd3[2].pause()
        lost_at = time.monotonic()
        wait_until(lambda: all((s := m.status()) is not None and s.broker_role == "SLAVE" for m in members),
                   TTL_MS / 1000 + 5, message="the master demoted itself (it cannot renew)")
        demoted_s = time.monotonic() - lost_at
        wait_until(lambda: all("etcd" in (((s := m.status()) and s.problem) or "") for m in members), 15,
                   message="every member says the DCS is the problem")
        time.sleep(TTL_MS / 1000)  # (a non-event: nothing to wait for but time)
        assert not any(m.is_master() for m in members), "no member was promoted without a quorum"
        reachable = [metric(m, "pocketmq_controller_dcs_reachable") for m in members]
        assert reachable == [0.0, 0.0, 0.0], reachable
        assert [metric(m, "pocketmq_controller_is_master") for m in members] == [0.0, 0.0, 0.0]
        status = members[0].status()
        assert status is not None
        problems = status.problem
        checked_at = time.monotonic()
        # the fence: nothing acknowledged once the lease could have expired (it was renewed last
        # before the quorum was lost, so it ends by lost_at + TTL at the latest)
        late = [round(w - lost_at, 3) for w, _ in producers.oks if lost_at + TTL_MS / 1000 < w < checked_at]
        assert not late, f"PUT_OK {late} s after the quorum was lost"

        etcd3[1].resume()
        etcd3[2].resume()
        resumed_at = time.monotonic()
        first_ok = wait_until(lambda: producers.ok_since(resumed_at, -1), 30,
                              message="PUT_OK once the quorum is back")
        after = time.monotonic()
        wait_until(lambda: producers.ok_since(after, -1), 10, message="writes go on")
    finally:
        producers.finish()
    print(f"one etcd member down: master fenced and back {refenced} time(s); "
          f"demoted {demoted_s:.2f} s after the quorum loss; first PUT_OK "
          f"{first_ok - resumed_at:.2f} s after it was restored; problem: {problems!r}")
    print("old master:", [line.split('msg="')[1].split('"')[0] for line in master.proc.log_text().splitlines()
                          if "demoted master:" in line])
    assert "leader lease not renewed in time" in master.proc.log_text()
    # the demoted master gave its leader key up as soon as its first step reached etcd again,
    # unless the key had run out (or been taken) by then: how long etcd's new leader keeps old
    # leases, against how long each client takes to get through, varies on a loaded machine
    released = [line for line in master.proc.log_text().splitlines() if "demoted master:" in line]
    assert released, "the demoted master tried to give its leader key up"
    assert "etcd unreachable or without quorum" in problems
    for m in members:
        assert "etcd unreachable or without quorum" in m.proc.log_text(), f"member {m.id}'s log says why"
    master = master_of(members)
    wait_until(lambda: len(sync_state(master)) == 3, 20, message="both slaves in sync again")
    top = logs_equal(members, master)
    check_all_acked_on(producers, master, top)
    assert len(producers.acked) > 300


def test_a_killed_master_with_an_unreplicated_tail_rejoins_and_cuts_it_by_epochs(
        procs: ProcessGroup, namesrv: str, etcd3: list[EtcdMember], tmp_path: Path) -> None:
    # every member advertises its HA port on 127.0.0.2, where a proxy of the test forwards to it
    extra = ("--broker-ip2", "127.0.0.2", "--slave-timeout", "1000",
             "--ha-max-time-slave-not-catchup", "8000", "--ha-housekeeping-interval", "10000")
    members = start_group(procs, namesrv, endpoints(etcd3), tmp_path, "diverge", extra)
    proxies = {m.id: FreezingProxy(("127.0.0.2", _flag(m, "--ha-listen-port")),
                                   ("127.0.0.1", _flag(m, "--ha-listen-port"))) for m in members}
    try:
        _diverge(members, proxies)
    finally:
        for p in proxies.values():
            p.close()


def _diverge(members: list[Member], proxies: dict[int, FreezingProxy]) -> None:
    old = master_of(members)
    wait_until(lambda: len(sync_state(old)) == 3, 20, message="both slaves in sync")
    before_cut = Producers(members)
    try:
        wait_until(lambda: before_cut.count() > 300, 30, message="PUT_OK before the cut")
    finally:
        before_cut.finish()
    top = wait_until(lambda: (s := old.status()) is not None and s.commit_log_max_offset, 5)
    for m in members:
        wait_until(lambda m=m: (s := m.status()) is not None and s.commit_log_max_offset == top, 20,
                   message=f"member {m.id} has everything before the cut")
    wait_until(lambda: len(sync_state(old)) == 3, 10, message="both slaves in sync before the cut")

    # the link between the master and its slaves stops carrying anything; sends still reach the
    # master, which stores them but cannot get them acknowledged
    proxies[old.id].freeze()
    unacked = [f"never-acknowledged-{i}-{k}".encode() * 4 for i in range(3) for k in range(4)]
    replies: list[pb.SendMessageBatchResponse] = []
    lock = threading.Lock()

    def send(i: int) -> None:
        client = BrokerClient(old.addr)
        try:
            reply = client.send_batch(TOPIC, unacked[4 * i:4 * i + 4], i % 2)
        finally:
            client.close()
        with lock:
            replies.append(reply)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(replies) == 3
    statuses = {r.status for r in replies}
    assert statuses <= {pb.FLUSH_SLAVE_TIMEOUT, pb.SLAVE_NOT_AVAILABLE}, statuses
    tail_end = wait_until(lambda: (s := old.status()) is not None and s.commit_log_max_offset, 5)
    assert tail_end > top
    for m in members:
        if m is not old:
            s = m.status()
            assert s is not None and s.commit_log_max_offset == top, "the tail never reached a slave"
    old.proc.kill()
    proxies[old.id].cut()  # the slaves notice at once (nothing held back is delivered)
    old_tail = old.log_bytes(tail_end)[top:]  # what the killed master wrote and nobody acknowledged

    others = [m for m in members if m is not old]
    new = master_of(others, timeout=20)
    producers = Producers(members)
    try:
        # the new master's log goes well past the old tail: offsets alone would not show the cut
        wait_until(lambda: ((s := new.status()) is not None
                            and s.commit_log_max_offset > tail_end + 2 * (tail_end - top)), 30,
                   message="the new master wrote past the old tail")
        old.restart()
        wait_until(lambda: (s := old.status()) is not None and s.broker_role == "SLAVE" and s.connected,
                   20, message="the old master rejoined as a slave")
        resumed = time.monotonic()
        wait_until(lambda: producers.ok_since(resumed, old.id), 10, message="writes go on")
    finally:
        producers.finish()

    cut = sorted((old.store / "ha-diverged").glob("*.bin"))
    assert [p.name for p in cut] == [f"{top:020d}-{tail_end:020d}.bin"]
    kept = cut[0].read_bytes()
    assert kept == old_tail
    bodies = []
    pos = 0
    while pos < len(kept):
        size, magic = struct.unpack_from(">iI", kept, pos)
        if magic != BLANK_MAGIC_CODE:  # (a segment's end filler is no message)
            bodies.append(decode_record(kept, pos).body)
        pos += size
    assert sorted(bodies) == sorted(unacked), "the cut holds exactly the messages never acknowledged"
    log_text = old.proc.log_text()
    assert "goes beyond the last point it shares with the master's epochs" in log_text
    assert "DIVERGED" in log_text

    final = new.status()
    assert final is not None
    print(f"shared up to {top}, unacknowledged tail {top}..{tail_end} ({tail_end - top} bytes, "
          f"{len(bodies)} messages) cut; the new master's log reached {final.commit_log_max_offset}")
    for run in (before_cut, producers):  # every PUT_OK message, before and after the kill
        check_all_acked_on(run, new, final.commit_log_max_offset)
        assert not {body for _, body in run.acked} & set(unacked)
    logs_equal(members, new)
    assert len(producers.acked) > 300
