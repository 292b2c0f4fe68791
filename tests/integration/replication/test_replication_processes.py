"""Commit-log replication between real broker processes on loopback (1 MiB segments).

What replication must show: an empty slave catches up a master holding several segments and the
commit logs are byte-identical; a SIGKILLed slave resumes from its own offset (no gap, no
duplicate); under SYNC_MASTER a master SIGKILLed mid-load loses nothing it acknowledged; a
stopped slave gives SLAVE_NOT_AVAILABLE at once; a slave that stops acking gives
FLUSH_SLAVE_TIMEOUT after slaveTimeout; bogus acks and garbage on the HA port close only that
connection and never move push2SlaveMaxOffset.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

import grpc
import pytest

from pocketmq.broker.v1 import broker_pb2 as pb
from services.broker.replication import encode_ack
from services.broker.storage.record import decode_record
from tests.integration.broker.client import BrokerClient
from tests.integration.replication.conftest import SEGMENT, Broker, StartBroker
from tests.integration.replication.proxy import StallingProxy
from tests.support import metric_value, wait_until

pytestmark = pytest.mark.slow

TOPIC = "Repl"


def create_topic(broker: Broker, queues: int = 2) -> None:
    broker.client.create_topic(TOPIC, queues, queues)


def send_numbered(client: BrokerClient, start: int, count: int, size: int = 1024,
                  queue_id: int = 0) -> pb.SendMessageBatchResponse:
    """A batch whose bodies start with their sequence numbers (8 bytes, big-endian)."""
    bodies = [struct.pack(">Q", n) + bytes([n % 251]) * (size - 8) for n in range(start, start + count)]
    return client.send_batch(TOPIC, bodies, queue_id)


def commit_log(broker: Broker) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((broker.store_dir / "commitlog").iterdir())}


def assert_identical_logs(master: Broker, slave: Broker, *, all_segments: bool = True) -> None:
    ours, theirs = commit_log(master), commit_log(slave)
    if all_segments:
        assert sorted(theirs) == sorted(ours)
    assert theirs, "the slave has no commit log"
    for name, data in theirs.items():
        assert data == ours[name], f"segment {name} differs"


def caught_up(master: Broker, slave: Broker) -> bool:
    return slave.ha_status().client_max_offset == master.ha_status().commit_log_max_offset


def metric(broker: Broker, name: str) -> float:
    return metric_value(broker.metrics_port, name)


def pull_sequence(client: BrokerClient, queue_id: int) -> list[int]:
    return [struct.unpack(">Q", m.body[:8])[0] for m in client.pull_all(TOPIC, queue_id)]


def wait_for_topic(slave: Broker) -> None:
    wait_until(lambda: TOPIC in slave.client.topics(), 15, message="slave synced the topic metadata")


# ------------------------------------------------------------------------------------ catch-up


def test_empty_slave_catches_up_several_segments_byte_identical_and_serves_pulls(
        namesrv: str, start_broker: StartBroker) -> None:
    master = start_broker(0, "--ha-sync-from-earliest", "true", namesrv=namesrv)
    create_topic(master)
    n = 0
    while master.ha_status().commit_log_max_offset < 4 * SEGMENT + SEGMENT // 2:
        assert send_numbered(master.client, n, 64, 4096, queue_id=n // 64 % 2).status == pb.PUT_OK
        n += 64
    assert len(commit_log(master)) == 5
    slave = start_broker(1, namesrv=namesrv)
    wait_until(lambda: caught_up(master, slave), 30, message="slave caught up")
    assert_identical_logs(master, slave)

    status = master.ha_status()
    assert status.push2slave_max_offset == status.commit_log_max_offset
    (peer,) = status.slaves
    assert peer.request_offset == 0 and peer.ack_offset == status.commit_log_max_offset
    assert peer.transferred_bytes == status.commit_log_max_offset and peer.lag_bytes == 0
    assert slave.ha_status().connected and slave.ha_status().master_ha_addr == master.ha_addr
    assert metric(master, "pocketmq_ha_connections") == 1
    assert metric(master, "pocketmq_ha_push2slave_max_offset") == status.commit_log_max_offset
    assert metric(slave, "pocketmq_ha_client_max_offset") == status.commit_log_max_offset

    # Replicated records are in the slave's consume queues: consumers can pull there.
    # (The slave's reput thread indexes them behind the ack: wait for it.)
    wait_for_topic(slave)
    for queue_id in (0, 1):
        expected = pull_sequence(master.client, queue_id)
        wait_until(lambda q=queue_id, e=expected: pull_sequence(slave.client, q) == e, 10,
                   message=f"queue {queue_id} dispatched on the slave")
    assert len(pull_sequence(slave.client, 0)) + len(pull_sequence(slave.client, 1)) == n

    # Live writes keep flowing.
    assert send_numbered(master.client, n, 10).status == pb.PUT_OK
    wait_until(lambda: caught_up(master, slave), 10, message="live write replicated")
    assert_identical_logs(master, slave)


def test_sigkilled_slave_resumes_from_its_own_offset_without_gap_or_duplicate(
        namesrv: str, start_broker: StartBroker) -> None:
    master = start_broker(0, namesrv=namesrv)
    create_topic(master)
    slave = start_broker(1, namesrv=namesrv)
    stop = threading.Event()
    sent = [0]
    errors: list[BaseException] = []

    def produce() -> None:
        client = BrokerClient(master.addr)
        try:
            while not stop.is_set():
                assert send_numbered(client, sent[0], 16, 2048).status == pb.PUT_OK
                sent[0] += 16
                time.sleep(0.002)
        except BaseException as exc:
            errors.append(exc)
        finally:
            client.close()

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        wait_until(lambda: slave.ha_status().client_max_offset > SEGMENT // 2, 20, message="slave has data")
        slave.kill()
        killed_at = sent[0]
        wait_until(lambda: sent[0] > killed_at + 200, 20, message="master kept accepting writes")
        slave = start_broker(1, namesrv=namesrv, store_dir=slave.store_dir, port=slave.port,
                             ha_port=slave.ha_port)
        wait_until(lambda: slave.ha_status().connected, 10, message="restarted slave connected")
        time.sleep(0.3)
    finally:
        stop.set()
        producer.join(20)
    assert not errors, errors
    wait_until(lambda: caught_up(master, slave), 20, message="restarted slave caught up")

    # It asked for its own (recovered) offset, not for the start of a segment.
    line = slave.proc.wait_for_log("connected to master")
    request = int(line.split("request_offset=")[1].split()[0])
    assert request > 0
    assert_identical_logs(master, slave)
    wait_for_topic(slave)
    wait_until(lambda: pull_sequence(slave.client, 0) == list(range(sent[0])), 10,
               message="every acknowledged message readable on the slave")


# ------------------------------------------------------------------------------------ SYNC_MASTER


def sync_master_with_slave(namesrv: str, start_broker: StartBroker) -> tuple[Broker, Broker]:
    """A SYNC_MASTER with the test topic and a connected slave."""
    master = start_broker(0, role="SYNC_MASTER", namesrv=namesrv)
    create_topic(master)
    slave = start_broker(1, namesrv=namesrv)
    wait_until(lambda: len(master.ha_status().slaves) == 1, 10, message="slave connected")
    return master, slave


def test_sync_master_killed_under_load_loses_nothing_it_acknowledged(
        namesrv: str, start_broker: StartBroker) -> None:
    master, slave = sync_master_with_slave(namesrv, start_broker)
    acked: list[tuple[str, bytes]] = []  # (msg id, body) of every PUT_OK
    stop = threading.Event()
    lock = threading.Lock()

    def produce(worker: int) -> None:
        client = BrokerClient(master.addr)
        n = 0
        try:
            while not stop.is_set():
                bodies = [struct.pack(">IIQ", worker, n + i, time.monotonic_ns()) * 64 for i in range(8)]
                n += 8
                try:
                    reply = client.send_batch(TOPIC, bodies, worker % 2)
                except grpc.RpcError:
                    return  # the master is gone
                if reply.status == pb.PUT_OK:
                    with lock:
                        acked.extend(zip(reply.msg_ids, bodies, strict=True))
        finally:
            client.close()

    producers = [threading.Thread(target=produce, args=(w,), daemon=True) for w in range(4)]
    for p in producers:
        p.start()
    wait_until(lambda: len(acked) > 2000, 30, message="sends acknowledged")
    master.kill()  # SIGKILL while sends are in flight
    stop.set()
    for p in producers:
        p.join(20)
    assert len(acked) > 2000

    # Every acknowledged message is in the slave's commit log, byte for byte as on the master.
    slave_max = slave.ha_status().client_max_offset
    ours, theirs = commit_log(master), commit_log(slave)

    def record_bytes(log: dict[str, bytes], offset: int) -> bytes:
        name = f"{offset - offset % SEGMENT:020d}"
        data = log[name]
        pos = offset % SEGMENT
        record = decode_record(data, pos)
        return data[pos:pos + record.store_size]

    for msg_id, body in acked:
        offset = int(msg_id[-16:], 16)
        on_slave = record_bytes(theirs, offset)
        assert offset + len(on_slave) <= slave_max
        assert on_slave == record_bytes(ours, offset)
        assert decode_record(on_slave, 0).body == body


def test_sync_master_answers_slave_not_available_quickly_when_the_slave_is_stopped(
        namesrv: str, start_broker: StartBroker) -> None:
    master, slave = sync_master_with_slave(namesrv, start_broker)
    assert send_numbered(master.client, 0, 4).status == pb.PUT_OK
    slave.stop()
    wait_until(lambda: not master.ha_status().slaves, 5, message="master saw the slave leave")
    started = time.monotonic()
    reply = send_numbered(master.client, 4, 4)
    elapsed = time.monotonic() - started
    assert reply.status == pb.SLAVE_NOT_AVAILABLE
    assert "stored on the master" in reply.remark
    assert elapsed < 1.5  # not after the slaveTimeout (3 s by default)
    assert len(master.client.pull_all(TOPIC, 0)) == 8  # stored anyway
    assert metric(master, "pocketmq_ha_slave_not_available_total") == 1


def test_sync_master_gives_flush_slave_timeout_when_the_slave_stops_acking(
        start_broker: StartBroker) -> None:
    master = start_broker(0, "--slave-timeout", "1000", role="SYNC_MASTER")
    create_topic(master)
    proxy = StallingProxy(("127.0.0.1", master.ha_port))
    try:
        start_broker(1, "--ha-master-address", proxy.addr)
        wait_until(lambda: len(master.ha_status().slaves) == 1, 10, message="slave connected via the proxy")
        assert send_numbered(master.client, 0, 4).status == pb.PUT_OK
        proxy.stall_acks()
        time.sleep(0.1)
        started = time.monotonic()
        reply = send_numbered(master.client, 4, 4)
        elapsed = time.monotonic() - started
        assert reply.status == pb.FLUSH_SLAVE_TIMEOUT, reply
        assert "stored on the master" in reply.remark
        assert 0.95 <= elapsed < 1.6, elapsed
        assert metric(master, "pocketmq_ha_flush_slave_timeout_total") == 1
        assert metric(master, "pocketmq_ha_sync_wait_seconds_count") >= 2
    finally:
        proxy.close()


# ------------------------------------------------------------------------------------ bogus peers


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.settimeout(5)
    return sock


def _closed_by_peer(sock: socket.socket) -> bool:
    try:
        while sock.recv(65536):
            pass
        return True
    except TimeoutError:
        return False
    except ConnectionError:
        return True


def test_ack_beyond_the_masters_max_offset_disconnects_and_leaves_push2slave_unchanged(
        start_broker: StartBroker) -> None:
    master = start_broker(0)
    create_topic(master)
    slave = start_broker(1, "--ha-master-address", master.ha_addr)
    assert send_numbered(master.client, 0, 32).status == pb.PUT_OK
    wait_until(lambda: caught_up(master, slave), 10, message="slave caught up")
    before = master.ha_status()
    with _connect(master.ha_port) as bogus:
        bogus.sendall(encode_ack(0))
        bogus.recv(12)
        bogus.sendall(encode_ack(before.commit_log_max_offset + 1_000_000))
        assert _closed_by_peer(bogus)
    after = master.ha_status()
    assert after.push2slave_max_offset == before.push2slave_max_offset
    assert [s.slave_addr for s in after.slaves] == [s.slave_addr for s in before.slaves]
    master.proc.wait_for_log("beyond the master's max offset")
    assert send_numbered(master.client, 32, 8).status == pb.PUT_OK
    wait_until(lambda: caught_up(master, slave), 10, message="the real slave is still served")


def test_garbage_on_the_ha_port_closes_only_that_connection(start_broker: StartBroker) -> None:
    master = start_broker(0)
    create_topic(master)
    slave = start_broker(1, "--ha-master-address", master.ha_addr)
    assert send_numbered(master.client, 0, 8).status == pb.PUT_OK
    wait_until(lambda: caught_up(master, slave), 10, message="slave caught up")
    before = master.ha_status()
    for garbage in (b"GET /metrics HTTP/1.1\r\nHost: broker\r\n\r\n", b"\xff" * 100, b"\x80" + bytes(30)):
        with _connect(master.ha_port) as bogus:
            bogus.sendall(garbage)
            assert _closed_by_peer(bogus)
    after = master.ha_status()
    assert after.push2slave_max_offset == before.push2slave_max_offset
    assert [(s.slave_addr, s.connected_since_ms) for s in after.slaves] == \
        [(s.slave_addr, s.connected_since_ms) for s in before.slaves]
    assert send_numbered(master.client, 8, 8).status == pb.PUT_OK
    wait_until(lambda: caught_up(master, slave), 10, message="replication unaffected")
    assert master.proc.alive and slave.proc.alive
    assert slave.ha_status().reconnects == 0


def test_slave_follows_the_master_the_nameserver_names_after_a_restart_elsewhere(
        namesrv: str, start_broker: StartBroker) -> None:
    """The master moves (same store, new ports): the slave's next registration learns the new
    HA address from the NameServer and it resumes there."""
    master = start_broker(0, namesrv=namesrv)
    create_topic(master)
    slave = start_broker(1, namesrv=namesrv)
    assert send_numbered(master.client, 0, 32).status == pb.PUT_OK
    wait_until(lambda: caught_up(master, slave), 10, message="slave caught up")
    old_ha = master.ha_addr
    assert master.stop() == 0  # unregisters
    moved = start_broker(0, namesrv=namesrv, store_dir=master.store_dir)
    assert moved.ha_addr != old_ha
    assert send_numbered(moved.client, 32, 32).status == pb.PUT_OK
    wait_until(lambda: slave.ha_status().master_ha_addr == moved.ha_addr, 25,
               message="slave learned the new master from the NameServer")
    wait_until(lambda: caught_up(moved, slave), 10, message="slave caught up with the moved master")
    assert_identical_logs(moved, slave)
    wait_for_topic(slave)
    wait_until(lambda: pull_sequence(slave.client, 0) == list(range(64)), 10,
               message="every message readable on the slave")
