"""`make run`: the local cluster starts, replicates, serves the CLI and stops cleanly on Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support import ports_free, wait_until

pytestmark = pytest.mark.slow


def pick_ports() -> tuple[int, int]:
    """A NameServer port and a broker base port whose derived ports are all free."""
    for base in range(21000, 60000, 37):
        namesrv, broker = base, base + 10
        wanted = [namesrv, namesrv + 1, *range(broker, broker + 3), *range(broker + 10, broker + 13)]
        if ports_free(wanted):
            return namesrv, broker
    raise RuntimeError("no free port block")


def cli(namesrv: str, *args: str) -> subprocess.CompletedProcess[str]:
    exe = str(Path(sys.executable).with_name("pocketmq"))
    return subprocess.run([exe, *args, "--namesrv", namesrv, "--output", "json"],
                          capture_output=True, text=True, timeout=60)


def test_local_cluster_replicates_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    namesrv_port, broker_port = pick_ports()
    namesrv = f"127.0.0.1:{namesrv_port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.local_cluster", "--data-dir", str(tmp_path / "data"),
         "--namesrv-port", str(namesrv_port), "--broker-port", str(broker_port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        wait_until(lambda: any("local cluster (Ctrl-C" in line for line in lines), timeout=60,
                   message="the cluster banner")
        assert any(f"gRPC={namesrv}" in line for line in lines)
        # master and slave share a per-run haAuthSecret (in their environment, not their argv)
        assert sum("ha-auth=on" in line for line in lines) == 2

        def both_registered() -> bool:
            out = cli(namesrv, "cluster", "list")
            return out.returncode == 0 and len(json.loads(out.stdout)["brokers"]) == 2

        wait_until(both_registered, timeout=60, message="master and slave registered")
        sent = cli(namesrv, "send", "demo", "hello local cluster")
        assert sent.returncode == 0, sent.stderr

        def replicated() -> bool:
            out = cli(namesrv, "broker", "ha-status")
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
