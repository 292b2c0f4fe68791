"""``haTlsEnable`` between real broker processes: the commit log travels over TLS, both ends show
a certificate of the cluster's CA. A slave with the CA catches up byte-identical; a plaintext
peer, a TLS client without a certificate and a slave whose certificate another CA signed get no
commit-log byte, and the master names them in a WARNING and counts them."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

import pytest

from pocketmq.broker.v1 import broker_pb2 as pb
from services.broker.replication import encode_ack
from tests.integration.replication.conftest import StartBroker
from tests.integration.replication.test_ha_auth_processes import AUTH_FAILURES, read_until_closed
from tests.integration.replication.test_replication_processes import (
    assert_identical_logs,
    caught_up,
    create_topic,
    metric,
    send_numbered,
)
from tests.integration.tls.pki import Pki, make_pki
from tests.support import wait_until

pytestmark = pytest.mark.slow


def ha_tls(pki: Pki, cert: Path | None = None, key: Path | None = None) -> list[str]:
    return ["--ha-tls-enable", "true", "--tls-server-cert-path", str(cert or pki.server_cert),
            "--tls-server-key-path", str(key or pki.server_key), "--tls-server-trust-cert-path", str(pki.ca),
            "--ha-housekeeping-interval", "2000"]


def test_slave_over_tls_catches_up_byte_identical_and_outsiders_get_nothing(
        start_broker: StartBroker, tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    master = start_broker(0, *ha_tls(pki), "--ha-sync-from-earliest", "true")
    create_topic(master)
    for n in range(0, 1536, 128):  # several 1 MiB segments
        assert send_numbered(master.client, n, 128, 8192).status == pb.PUT_OK
    max_offset = master.ha_status().commit_log_max_offset
    assert max_offset > 2 * 1024 * 1024

    # A plaintext peer asking for the log from 0: the master expects a TLS handshake and closes.
    with socket.create_connection(("127.0.0.1", master.ha_port), timeout=5) as raw:
        raw.sendall(encode_ack(0))
        got, closed = read_until_closed(raw, 10)
    assert closed and len(got) < 64, f"{len(got)} bytes to a plaintext peer"
    # TLS that trusts the master but shows no certificate: refused before any data.
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    ctx.check_hostname = False
    received = b""
    with socket.create_connection(("127.0.0.1", master.ha_port), timeout=5) as raw:
        try:
            with ctx.wrap_socket(raw) as conn:
                conn.sendall(encode_ack(0))
                received = conn.recv(65536)
        except (ssl.SSLError, ConnectionError):
            pass
    assert received == b""
    # A slave whose certificate another CA signed never receives data.
    outsider = start_broker(2, *ha_tls(pki, pki.rogue_cert, pki.rogue_key), "--ha-master-address",
                            master.ha_addr)
    line = master.proc.wait_for_log("HA TLS handshake failed")
    assert "level=warning" in line and "slave=127.0.0.1:" in line
    wait_until(lambda: metric(master, AUTH_FAILURES) >= 3, 15, message="refusals counted")
    assert outsider.ha_status().client_max_offset == 0 and not outsider.ha_status().connected
    assert master.ha_status().push2slave_max_offset == 0 and not master.ha_status().slaves
    outsider.stop()

    slave = start_broker(1, *ha_tls(pki), "--ha-master-address", master.ha_addr)
    wait_until(lambda: caught_up(master, slave), 60, message="slave caught up over TLS")
    assert send_numbered(master.client, 1536, 16).status == pb.PUT_OK
    wait_until(lambda: caught_up(master, slave), 10, message="live writes replicated over TLS")
    assert_identical_logs(master, slave)
    assert "tls=True" in master.proc.wait_for_log("HA port listening")
    assert master.proc.alive and slave.proc.alive
