"""``pocketmq message get/find/browse`` and the admin lookup API against real processes.

One cluster for the module: a NameServer on 127.0.0.1, broker-a (master + slave) and broker-b
on 127.0.0.2, with small commit log segments (256 KiB) and small index files (512 entries), so
segments and index files roll within a few hundred messages. The CLI runs as the relay test
does (tests/integration/cli/test_cli.py): only the NameServer is reachable from it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import pytest

from pocketmq.client.admin import Admin
from pocketmq.client.message import Message
from pocketmq.client.producer import Producer
from pocketmq.errors import NotFoundError
from pocketmq.wire.msgid import parse_offset_msg_id
from tests.integration.cli.test_cli import BROKER_HOST, Cli
from tests.integration.client.cluster import Broker, Cluster
from tests.integration.procs import ProcessGroup
from tests.support import free_port, wait_for

pytestmark = pytest.mark.slow

SMALL_STORE = ["--mapped-file-size-commit-log", str(256 * 1024), "--max-message-size", str(64 * 1024),
               "--max-hash-slot-num", "64", "--max-index-num", "512"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("lookup-cluster")
    group = ProcessGroup(tmp / "logs")
    c = Cluster(group, tmp)
    try:
        c.start_namesrv()
        c.start_broker("broker-a", 0, *SMALL_STORE, host=BROKER_HOST)
        c.start_broker("broker-a", 1, *SMALL_STORE, host=BROKER_HOST)
        c.start_broker("broker-b", 0, *SMALL_STORE, host=BROKER_HOST)
        c.create_topic("orders", queues=2)
        yield c
    finally:
        group.stop_all()


@pytest.fixture(scope="module")
def cli(cluster: Cluster) -> Cli:
    """A CLI that can reach the NameServer and nothing else (one port-forward)."""
    return Cli(cluster.namesrv,
               {"grpc_proxy": f"http://127.0.0.1:{free_port()}", "no_grpc_proxy": "127.0.0.1"})


def _broker(cluster: Cluster, name: str, broker_id: int = 0) -> Broker:
    return next(b for b in cluster.brokers if b.name == name and b.broker_id == broker_id)


def _send(cluster: Cluster, messages: list[Message]) -> list[str]:
    with Producer(cluster.namesrv) as producer:
        return [producer.send(m).msg_id for m in messages]


def _found(cli: Cli, *args: str) -> list[dict[str, object]]:
    proc = cli.run("message", "find", *args, "--output", "json")
    if proc.returncode not in (0, 1):
        raise AssertionError(proc.stderr)
    return list(json.loads(proc.stdout)["messages"]) if proc.stdout.strip() else []


def test_find_by_key_across_groups_and_get_by_id_on_master_and_slave(cluster: Cluster, cli: Cli) -> None:
    ids = _send(cluster, [Message("orders", f"order {i}".encode(), keys=["cust-7", f"order-{i}"], tags="new")
                          for i in range(8)])
    wait_for(lambda: len(_found(cli, "--topic", "orders", "--key", "cust-7")) == 8, 10, "all 8 indexed")
    rows = _found(cli, "--topic", "orders", "--key", "cust-7")
    assert {r["broker_name"] for r in rows} == {"broker-a", "broker-b"}  # round robin over both groups
    assert sorted(r["body"] for r in rows) == sorted(f"order {i}" for i in range(8))
    stamps = [r["store_timestamp"] for r in rows]
    assert stamps == sorted(stamps, reverse=True)  # newest first
    assert [r["body"] for r in _found(cli, "--topic", "orders", "--key", "order-3")] == ["order 3"]
    assert len(_found(cli, "--topic", "orders", "--key", "cust-7", "--limit", "3")) == 3
    later = str(int(time.time() * 1000) + 60_000)
    assert _found(cli, "--topic", "orders", "--key", "cust-7", "--since", later) == []
    nothing = cli.run("message", "find", "--topic", "orders", "--key", "no-such-key")
    assert nothing.returncode == 1

    # By offset message id: on the master, then the same record read from the slave.
    got = cli.json("message", "get", ids[3])["message"]
    assert got["body"] == "order 3" and got["keys"] == ["cust-7", "order-3"] and got["msg_id"] == ids[3]
    assert got["tags"] == "new"
    (host, port), _ = parse_offset_msg_id(ids[3])
    owner = next(b for b in cluster.brokers if b.addr == f"{host}:{port}")
    if owner.name == "broker-a":
        on_slave = wait_for(lambda: _get_from(cli, ids[3], "1"), 10, "readable on the slave")
        assert on_slave["body"] == "order 3"
    hexed = cli.json("message", "get", ids[3], "--hex")["message"]
    assert bytes.fromhex(hexed["body"]) == b"order 3"
    table = cli.run("message", "get", ids[3])
    assert table.returncode == 0 and "order-3" in table.stdout and "cust-7" in table.stdout
    bad = cli.json("message", "get", "00" * 16, code=1)
    assert bad["error"]["type"] == "NotFoundError"


def _get_from(cli: Cli, msg_id: str, broker_id: str) -> dict[str, object] | None:
    proc = cli.run("message", "get", msg_id, "--broker-id", broker_id, "--output", "json")
    return json.loads(proc.stdout)["message"] if proc.returncode == 0 else None


def test_found_on_the_slave_when_the_master_is_down_and_by_unique_id(cluster: Cluster, cli: Cli) -> None:
    master, slave = _broker(cluster, "broker-a", 0), _broker(cluster, "broker-a", 1)
    topic = "slave-read"
    cluster.create_topic(topic, queues=1, masters=[master])
    with Producer(cluster.namesrv) as producer:
        sent = producer.send(Message(topic, b"from the slave", keys="k-slave",
                                     properties={"UNIQ_KEY": "7F0000010001DEADBEEF000000000001"}))
    wait_for(lambda: _get_from(cli, sent.msg_id, "1"), 10, "the slave has it")
    # The slave's own index answers a key lookup.
    with Admin(cluster.namesrv) as admin:
        def on_slave() -> list[object] | None:
            reply = admin.call(slave.addr, "MessageQuery/QueryMessage", _query(topic, "k-slave"))
            return list(reply.messages) or None

        rows = wait_for(on_slave, 10, "indexed on the slave")
        assert [m.body for m in rows] == [b"from the slave"]
        by_uniq = admin.get_message("7F0000010001DEADBEEF000000000001", topic=topic)
        assert by_uniq.body == b"from the slave"
    master.proc.terminate()
    try:
        got = cli.json("message", "get", sent.msg_id)["message"]  # falls back to the slave
        assert got["body"] == "from the slave"
        assert [r["body"] for r in _found(cli, "--topic", topic, "--key", "k-slave")] == ["from the slave"]
    finally:
        cluster.restart(master)


def _sdk_id(seq: int) -> str:
    """A unique message id as the RocketMQ 5 SDKs make it (version 01, MAC, pid, seconds since
    2021-01-01, sequence)."""
    seconds = int(time.time()) - 1_609_459_200
    return f"01{0x0242AC110002:012X}{os.getpid() & 0xFFFF:04X}{seconds:08X}{seq:08X}"


def test_sdk_message_id_found_without_topic_on_both_groups_and_on_the_slave(cluster: Cluster,
                                                                            cli: Cli) -> None:
    a, b = _broker(cluster, "broker-a", 0), _broker(cluster, "broker-b", 0)
    cluster.create_topic("uniq-a", queues=1, masters=[a])
    cluster.create_topic("uniq-b", queues=1, masters=[b])
    id_a, id_b = _sdk_id(1), _sdk_id(2)
    with Producer(cluster.namesrv) as producer:
        producer.send(Message("uniq-a", b"sdk on a", properties={"UNIQ_KEY": id_a}))
        producer.send(Message("uniq-b", b"sdk on b", properties={"UNIQ_KEY": id_b}))
    for msg_id, topic, name, body in ((id_a, "uniq-a", "broker-a", "sdk on a"),
                                      (id_b, "uniq-b", "broker-b", "sdk on b")):
        got = wait_for(lambda m=msg_id: _get_from(cli, m, "0"), 10, f"{msg_id} indexed")
        assert (got["topic"], got["broker_name"], got["body"]) == (topic, name, body)
        plain = cli.json("message", "get", msg_id)["message"]  # no --topic, no member picked
        assert (plain["topic"], plain["broker_name"]) == (topic, name)
    # broker-a's slave answers from its own index (broker-b has no slave: it is left out).
    on_slave = wait_for(lambda: _get_from(cli, id_a, "1"), 10, "indexed on the slave")
    assert (on_slave["topic"], on_slave["broker_name"], on_slave["body"]) == \
        ("uniq-a", "broker-a", "sdk on a")
    missing = cli.run("message", "get", _sdk_id(999))
    error = " ".join(missing.stderr.split())
    assert missing.returncode != 0 and "nor a unique message id in any topic" in error


def _query(topic: str, key: str) -> object:
    from pocketmq.broker.v1 import broker_pb2
    return broker_pb2.QueryMessageRequest(topic=topic, key=key)


def test_found_after_segments_rolled_and_after_a_restart(cluster: Cluster, cli: Cli) -> None:
    b = _broker(cluster, "broker-b", 0)
    topic = "rolled"
    cluster.create_topic(topic, queues=1, masters=[b])
    body = b"x" * 2000
    with Producer(cluster.namesrv) as producer:
        first = producer.send(Message(topic, b"the first", keys="first-key"))
        for start in range(0, 600, 50):  # ~1.2 MB: five 256 KiB segments, two index files
            producer.send_batch([Message(topic, body, keys=f"bulk-{i}") for i in range(start, start + 50)])
        last = producer.send(Message(topic, b"the last", keys="last-key"))
    segments = sorted((b.store_dir / "commitlog").iterdir())
    assert len(segments) >= 4
    wait_for(lambda: _found(cli, "--topic", topic, "--key", "last-key"), 10, "indexed")
    assert len(list((b.store_dir / "index").iterdir())) >= 2  # 512 entries per index file
    for key, want in (("first-key", b"the first"), ("bulk-17", body), ("bulk-555", body),
                      ("last-key", b"the last")):
        rows = _found(cli, "--topic", topic, "--key", key, "--hex")
        assert [bytes.fromhex(str(r["body"])) for r in rows] == [want], key
    b.proc.terminate()
    cluster.restart(b)
    for msg_id, key, want in ((first.msg_id, "first-key", "the first"),
                              (last.msg_id, "last-key", "the last")):
        assert cli.json("message", "get", msg_id)["message"]["body"] == want
        assert [r["body"] for r in _found(cli, "--topic", topic, "--key", key)] == [want]
    with Producer(cluster.namesrv) as producer:
        producer.send(Message(topic, b"after restart", keys="after-key"))
    assert wait_for(lambda: _found(cli, "--topic", topic, "--key", "after-key"), 10, "indexed after restart")


def test_browse_pages_through_a_queue(cluster: Cluster, cli: Cli) -> None:
    a = _broker(cluster, "broker-a", 0)
    topic = "browse-me"
    cluster.create_topic(topic, queues=1, masters=[a])
    t0 = int(time.time() * 1000)
    with Producer(cluster.namesrv) as producer:
        producer.send_batch([Message(topic, f"m{i}".encode()) for i in range(12)])
        time.sleep(0.05)  # a distinct store time for the next batch
        t1 = int(time.time() * 1000)
        producer.send_batch([Message(topic, f"n{i}".encode()) for i in range(3)])
    page = cli.json("message", "browse", "--topic", topic, "--queue", "0", "--limit", "5")
    assert [m["body"] for m in page["messages"]] == ["m0", "m1", "m2", "m3", "m4"]
    assert (page["next_offset"], page["min_offset"], page["max_offset"]) == (5, 0, 15)
    page2 = cli.json("message", "browse", "--topic", topic, "--from-offset", "5", "--limit", "5",
                     "--pages", "2")
    assert [m["body"] for m in page2["messages"]] == [f"m{i}" for i in range(5, 12)] + ["n0", "n1", "n2"]
    assert page2["next_offset"] == 15
    by_time = cli.json("message", "browse", "--topic", topic, "--from-time", str(t1), "--limit", "10")
    assert [m["body"] for m in by_time["messages"]] == ["n0", "n1", "n2"]
    from_t0 = cli.json("message", "browse", "--topic", topic, "--from-time", str(t0))
    assert from_t0["messages"][0]["body"] == "m0"
    text = cli.run("message", "browse", "--topic", topic, "--limit", "3")
    assert text.returncode == 0 and "m2" in text.stdout and "--from-offset 3" in text.stderr
    with Admin(cluster.namesrv) as admin, pytest.raises(NotFoundError):
        admin.browse(topic, 0, broker_name="broker-b")
