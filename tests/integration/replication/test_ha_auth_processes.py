"""``haAuthSecret`` between real broker processes on loopback.

Same secret: slaves replicate byte for byte. A wrong secret, a raw client that does not answer
the challenge, and a secret on one side only: no commit-log byte leaves the master, the master
logs a WARNING naming the peer and counts ``pocketmq_ha_auth_failures_total``, the slave logs a
clear ERROR and keeps retrying, and nothing crashes. The secret never appears in
``--print-config`` output or in the error of a rejected weak secret.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from pocketmq.broker.v1 import broker_pb2 as pb
from services.broker.replication import AUTH_CHALLENGE_SIZE, AUTH_MAGIC, encode_ack
from tests.integration.procs import ProcessGroup
from tests.integration.replication.conftest import Broker, StartBroker
from tests.integration.replication.test_replication_processes import (
    assert_identical_logs,
    caught_up,
    create_topic,
    metric,
    send_numbered,
)
from tests.support import wait_until

pytestmark = pytest.mark.slow

SECRET = "k7Qx-2f9R-pLw3-Zt8v-HA"
OTHER = "m4Nc-8d1T-qRy6-Wb2s-HA"
#: Short housekeeping, so the handshake deadline (min(5 s, haHousekeepingInterval)) is 2 s.
FAST = ("--ha-housekeeping-interval", "2000")
AUTH_FAILURES = "pocketmq_ha_auth_failures_total"


def conf_with_secret(tmp_path: Path, secret: str) -> tuple[str, str]:
    """``-c <file>`` holding haAuthSecret (the slaves read it from a file, the masters from a flag)."""
    path = tmp_path / f"ha-{secret[:4]}.conf"
    path.write_text(f"# broker.conf fragment\nhaAuthSecret={secret}\n")
    return "-c", str(path)


def log_lines(broker: Broker, text: str) -> list[str]:
    return [line for line in broker.proc.log_text().splitlines() if text in line]


def read_until_closed(sock: socket.socket, limit: float) -> tuple[bytes, bool]:
    """Everything the master sends until it closes (True) or ``limit`` passes (False)."""
    sock.settimeout(limit)
    got = bytearray()
    try:
        while chunk := sock.recv(65536):
            got += chunk
        return bytes(got), True
    except TimeoutError:
        return bytes(got), False
    except ConnectionError:
        return bytes(got), True


def assert_secret_never_logged(*brokers: Broker) -> None:
    for broker in brokers:
        text = broker.proc.log_text()
        assert SECRET not in text and OTHER not in text, f"{broker.proc.name} logged a secret"


def test_same_secret_replicates_byte_identical(start_broker: StartBroker, tmp_path: Path) -> None:
    master = start_broker(0, "--ha-auth-secret", SECRET)
    create_topic(master)
    for n in range(0, 256, 64):
        assert send_numbered(master.client, n, 64, 2048).status == pb.PUT_OK
    slave = start_broker(1, "--ha-master-address", master.ha_addr, *conf_with_secret(tmp_path, SECRET))
    wait_until(lambda: caught_up(master, slave), 20, message="slave caught up")
    assert send_numbered(master.client, 256, 16).status == pb.PUT_OK
    wait_until(lambda: caught_up(master, slave), 10, message="live writes replicated")
    assert_identical_logs(master, slave)

    status = master.ha_status()
    (peer,) = status.slaves
    assert peer.ack_offset == status.commit_log_max_offset == status.push2slave_max_offset
    assert slave.ha_status().connected and slave.ha_status().reconnects == 0
    assert metric(master, AUTH_FAILURES) == 0
    assert log_lines(master, "HA connection accepted")[-1].endswith("authenticated=True")
    assert "authentication=True" in log_lines(master, "HA port listening")[0]
    assert_secret_never_logged(master, slave)


def test_slave_with_a_wrong_secret_never_receives_data(start_broker: StartBroker, tmp_path: Path) -> None:
    master = start_broker(0, "--ha-auth-secret", SECRET)
    create_topic(master)
    assert send_numbered(master.client, 0, 32).status == pb.PUT_OK
    slave = start_broker(1, "--ha-master-address", master.ha_addr, *conf_with_secret(tmp_path, OTHER))
    line = master.proc.wait_for_log("HA authentication failed")
    assert "level=warning" in line and "slave=127.0.0.1:" in line and "haAuthSecret differs" in line
    wait_until(lambda: metric(master, AUTH_FAILURES) >= 2, 15, message="retries are counted too")
    slave.proc.wait_for_log("is haAuthSecret the same on the master and this slave?")
    assert "level=error" in log_lines(slave, "replication authentication failed")[0]
    assert not master.ha_status().slaves
    assert master.ha_status().push2slave_max_offset == 0
    slave_status = slave.ha_status()
    assert slave_status.client_max_offset == 0 and not slave_status.connected
    assert metric(master, "pocketmq_ha_connections") == 0
    assert master.proc.alive and slave.proc.alive
    assert_secret_never_logged(master, slave)


def test_raw_client_that_does_not_answer_gets_only_the_challenge(start_broker: StartBroker) -> None:
    master = start_broker(0, "--ha-auth-secret", SECRET, "--ha-sync-from-earliest", "true", *FAST)
    create_topic(master)
    assert send_numbered(master.client, 0, 32).status == pb.PUT_OK
    assert master.ha_status().commit_log_max_offset > 0

    # The pre-authentication protocol: a request offset (and acks), no answer.
    with socket.create_connection(("127.0.0.1", master.ha_port), timeout=5) as raw:
        host, port = raw.getsockname()
        peer = f"{host}:{port}"
        raw.sendall(encode_ack(0))
        started = time.monotonic()
        got, closed = read_until_closed(raw, 10)
        waited = time.monotonic() - started
    assert closed, "the master must close a connection that never answers"
    assert len(got) == AUTH_CHALLENGE_SIZE and got.startswith(AUTH_MAGIC), "no byte beyond the challenge"
    assert 1.0 < waited < 6.0, f"closed by the 2 s handshake deadline, not later/earlier ({waited:.1f}s)"
    line = master.proc.wait_for_log(f"slave={peer}")
    assert "HA authentication failed" in line and "no authentication answer" in line

    # 32 bytes that are not the answer, then a request offset: closed at once.
    with socket.create_connection(("127.0.0.1", master.ha_port), timeout=5) as raw:
        challenge = raw.recv(AUTH_CHALLENGE_SIZE, socket.MSG_WAITALL)
        assert challenge.startswith(AUTH_MAGIC)
        raw.sendall(bytes(32) + encode_ack(0))
        got, closed = read_until_closed(raw, 5)
    assert closed and got == b""
    assert metric(master, AUTH_FAILURES) == 2
    assert not master.ha_status().slaves and master.ha_status().push2slave_max_offset == 0
    assert master.proc.alive


def test_secret_on_the_slave_only(start_broker: StartBroker, tmp_path: Path) -> None:
    master = start_broker(0, *FAST)
    create_topic(master)
    assert send_numbered(master.client, 0, 8).status == pb.PUT_OK
    slave = start_broker(1, "--ha-master-address", master.ha_addr, *conf_with_secret(tmp_path, SECRET), *FAST)
    line = slave.proc.wait_for_log("master does not authenticate; check haAuthSecret on both sides", 15)
    assert "level=error" in line and "replication authentication failed" in line
    wait_until(lambda: slave.ha_status().reconnects >= 1, 15, message="the slave retries")
    assert slave.ha_status().client_max_offset == 0
    assert master.ha_status().push2slave_max_offset == 0
    assert master.proc.alive and slave.proc.alive
    assert_secret_never_logged(master, slave)


def test_secret_on_the_master_only(start_broker: StartBroker) -> None:
    master = start_broker(0, "--ha-auth-secret", SECRET, *FAST)
    create_topic(master)
    assert send_numbered(master.client, 0, 8).status == pb.PUT_OK
    slave = start_broker(1, "--ha-master-address", master.ha_addr, *FAST)
    line = slave.proc.wait_for_log("the master requires haAuthSecret", 15)
    assert "level=error" in line and "replication authentication failed" in line
    master.proc.wait_for_log("HA authentication failed")
    wait_until(lambda: slave.ha_status().reconnects >= 1, 15, message="the slave retries")
    assert metric(master, AUTH_FAILURES) >= 1
    assert slave.ha_status().client_max_offset == 0 and not master.ha_status().slaves
    assert master.proc.alive and slave.proc.alive
    assert_secret_never_logged(master, slave)


# ------------------------------------------------------------------------------------ the key itself


def test_print_config_hides_the_secret(procs: ProcessGroup) -> None:
    proc = procs.start("services.broker", ["--print-config", "--ha-auth-secret", SECRET], name="print-config")
    assert proc.wait(20) == 0
    out = proc.log_text()
    assert "brokerName=broker-a" in out
    assert "# haAuthSecret=<hidden: set, not shown>" in out.splitlines()
    assert SECRET not in out


def test_a_weak_secret_stops_the_broker_naming_the_key_only(procs: ProcessGroup) -> None:
    proc = procs.start("services.broker", [], name="weak-secret", env={"POCKETMQ_HA_AUTH_SECRET": "hunter2"})
    assert proc.wait(20) == 2
    line = proc.wait_for_log("invalid configuration")
    assert "haAuthSecret" in line and "at least 16 characters" in line
    assert "hunter2" not in proc.log_text()
