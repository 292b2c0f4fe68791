"""`make run`: the local cluster starts, replicates, serves the CLI and stops cleanly on Ctrl-C;
it leaves no child behind (second Ctrl-C, SIGKILL of the parent) and refuses a taken port."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from services.local_cluster import Children, cluster_specs, run_cluster
from tests.support import async_wait_until, ports_free, wait_until

pytestmark = pytest.mark.slow


def cluster_ports(namesrv: int, broker: int) -> list[int]:
    return [namesrv, namesrv + 1, namesrv + 2, *range(broker, broker + 3), *range(broker + 10, broker + 13)]


def pick_ports() -> tuple[int, int]:
    """A NameServer port and a broker base port whose derived ports are all free (from a random
    start, so that test runs side by side rarely try the same block)."""
    start = random.randrange(21000, 40000)
    for base in range(start, 60000, 37):
        namesrv, broker = base, base + 10
        if ports_free(cluster_ports(namesrv, broker)):
            return namesrv, broker
    raise RuntimeError("no free port block")


def start_cluster(tmp_path: Path, namesrv_port: int, broker_port: int
                  ) -> tuple[subprocess.Popen[str], list[str], threading.Thread]:
    """``python -m services.local_cluster`` in its own session (as a terminal would run it);
    its output lines are collected into the returned list."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.local_cluster", "--data-dir", str(tmp_path / "data"),
         "--namesrv-port", str(namesrv_port), "--broker-port", str(broker_port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    return proc, lines, reader


def running(pid: int) -> bool:
    """Whether ``pid`` is a live (not zombie) PocketMQ service process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X") and b"services." in cmdline


def child_pids(lines: list[str]) -> list[int]:
    """The children's pids, from the cluster banner."""
    def listed() -> list[int]:
        return [int(m.group(1)) for line in list(lines) if (m := re.search(r"^  \S+\s+pid=(\d+) ", line))]

    pids = wait_until(lambda: len(listed()) == 3 and listed(), timeout=60, message="the cluster banner")
    assert all(running(pid) for pid in pids), "".join(lines)
    return pids


def cli(namesrv: str, *args: str, ca: Path | None = None) -> subprocess.CompletedProcess[str]:
    exe = str(Path(sys.executable).with_name("pocketmq"))
    tls = ["--ca-file", str(ca)] if ca else []
    return subprocess.run([exe, *args, "--namesrv", namesrv, "--output", "json", *tls],
                          capture_output=True, text=True, timeout=60)


def test_local_cluster_replicates_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    namesrv_port, broker_port = pick_ports()
    namesrv = f"127.0.0.1:{namesrv_port}"
    proc, lines, reader = start_cluster(tmp_path, namesrv_port, broker_port)
    try:
        wait_until(lambda: any("local cluster (Ctrl-C" in line for line in lines), timeout=60,
                   message="the cluster banner")
        assert any(f"gRPC={namesrv}" in line for line in lines)
        # master and slave share a per-run haAuthSecret (in their environment, not their argv)
        assert sum("ha-auth=on" in line for line in lines) == 2
        # TLS on every port by default, with a local CA the banner tells clients to trust
        ca = tmp_path / "data" / "tls" / "ca.crt"
        assert sum("tls=on" in line for line in lines) == 3
        assert any(f"--ca-file {ca}" in line for line in lines), "".join(lines)
        plain = cli(namesrv, "cluster", "list", "--timeout", "2")
        assert plain.returncode != 0

        def both_registered() -> bool:
            out = cli(namesrv, "cluster", "list", ca=ca)
            return out.returncode == 0 and len(json.loads(out.stdout)["brokers"]) == 2

        wait_until(both_registered, timeout=60, message="master and slave registered")
        sent = cli(namesrv, "send", "demo", "hello local cluster", ca=ca)
        assert sent.returncode == 0, sent.stderr

        def replicated() -> bool:
            out = cli(namesrv, "broker", "ha-status", ca=ca)
            if out.returncode != 0:
                return False
            doc = json.loads(out.stdout)
            rows = {row["broker_id"]: row for row in doc["brokers"]}
            master, slave = rows[0]["ha"], rows[1]["ha"]
            return (master["commit_log_max_offset"] > 0
                    and slave["client_max_offset"] == master["commit_log_max_offset"])

        wait_until(replicated, timeout=30, message="the slave caught up")
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does in a terminal
        code = proc.wait(timeout=60)
        reader.join(timeout=5)
    assert code == 0, "".join(lines[-40:])
    assert any("local cluster stopped" in line for line in lines)
    assert any('msg="broker stopped"' in line for line in lines)
    assert not any("authentication failed" in line for line in lines)


def cleanup(proc: subprocess.Popen[str], reader: threading.Thread, pids: list[int]) -> None:
    """After a failed check: no process of the test may outlive it."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    cleanup_pids(pids)
    reader.join(timeout=5)


def cleanup_pids(pids: list[int]) -> None:
    for pid in pids:
        if running(pid):
            os.kill(pid, signal.SIGKILL)


def test_second_ctrl_c_kills_every_child(tmp_path: Path) -> None:
    namesrv_port, broker_port = pick_ports()
    proc, lines, reader = start_cluster(tmp_path, namesrv_port, broker_port)
    pids: list[int] = []
    try:
        pids += child_pids(lines)
        # A NameServer that hangs: the graceful stop cannot finish before the second Ctrl-C.
        os.kill(pids[0], signal.SIGSTOP)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: a graceful stop begins ...
        time.sleep(0.2)  # the interval under test, not a wait for an event
        os.killpg(proc.pid, signal.SIGINT)  # ... and the impatient second Ctrl-C
        wait_until(lambda: not any(running(pid) for pid in pids), timeout=10,
                   message=f"children {pids} gone")
        wait_until(lambda: ports_free(cluster_ports(namesrv_port, broker_port), reuse=True), timeout=10,
                   message="the cluster's ports free")
        assert proc.wait(timeout=10) != 0
    finally:
        cleanup(proc, reader, pids)
    killed = [line for line in lines if line.startswith("second signal: killing")]
    assert killed, "".join(lines[-40:])
    assert f"namesrv (pid {pids[0]})" in killed[0], killed[0]


def test_children_die_with_a_killed_parent(tmp_path: Path) -> None:
    namesrv_port, broker_port = pick_ports()
    proc, lines, reader = start_cluster(tmp_path, namesrv_port, broker_port)
    pids: list[int] = []
    try:
        pids += child_pids(lines)
        proc.kill()  # no handler runs: only the kernel can stop the children now
        assert proc.wait(timeout=10) == -signal.SIGKILL
        wait_until(lambda: not any(running(pid) for pid in pids), timeout=5,
                   message=f"children {pids} gone")
    finally:
        cleanup(proc, reader, pids)
    wait_until(lambda: ports_free(cluster_ports(namesrv_port, broker_port), reuse=True), timeout=10,
               message="the cluster's ports free")


def test_taken_port_refuses_to_start(tmp_path: Path) -> None:
    namesrv_port, broker_port = pick_ports()
    taken = broker_port + 11  # the slave's HA port: the last child, so no earlier one may start
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", taken))
        holder.listen()
        result = subprocess.run(
            [sys.executable, "-m", "services.local_cluster", "--data-dir", str(tmp_path / "data"),
             "--namesrv-port", str(namesrv_port), "--broker-port", str(broker_port)],
            capture_output=True, text=True, timeout=2, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        output = result.stdout + result.stderr
        assert result.returncode != 0
        assert len(output.splitlines()) == 1, output
        assert f"port {taken} " in output and f"by pid {os.getpid()} " in output, output
    assert not (tmp_path / "data").exists()
    assert "pid=" not in output and "|" not in output
    started = [pid for pid in (int(d) for d in os.listdir("/proc") if d.isdigit())
               if f"{namesrv_port}".encode() in _cmdline(pid) and b"services." in _cmdline(pid)]
    assert not started, started


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_an_error_in_the_cluster_kills_its_children(tmp_path: Path) -> None:
    """The ``finally`` path: whatever ends ``run_cluster`` abnormally (here a cancellation, as an
    unexpected exception would), no child is left running."""
    namesrv_port, broker_port = pick_ports()
    specs = cluster_specs(tmp_path, "127.0.0.1", namesrv_port, broker_port)[:1]
    children = Children()

    async def scenario() -> None:
        task = asyncio.create_task(run_cluster(specs, asyncio.Event(), children))
        await async_wait_until(lambda: children.procs and running(children.procs[0][1].pid), timeout=30,
                               message="the NameServer started")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        asyncio.run(scenario())
        assert children.procs
        assert not running(children.procs[0][1].pid)
    finally:
        cleanup_pids([proc.pid for _, proc in children.procs])
