"""Brokers as real processes on loopback: produce/pull, long polling, streams, restarts, slave
metadata sync, delayed delivery, and the errors invalid requests get."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable

import grpc
import pytest

from pocketmq.broker.v1 import broker_pb2 as pb
from pocketmq.namesrv.v1 import namesrv_pb2, namesrv_pb2_grpc
from pocketmq.wire.record import decode_records
from tests.integration.broker.client import BrokerClient
from tests.integration.broker.conftest import Broker
from tests.support import metric_value, wait_until

pytestmark = pytest.mark.slow

StartBroker = Callable[..., Broker]


def rpc_fails(call: Callable[[], object], code: grpc.StatusCode, *fragments: str) -> str:
    with pytest.raises(grpc.RpcError) as info:
        call()
    err = info.value
    assert err.code() == code, err.details()  # type: ignore[attr-defined]
    details: str = err.details()  # type: ignore[attr-defined]
    for fragment in fragments:
        assert fragment in details, details
    return details


def namesrv_stub(addr: str) -> namesrv_pb2_grpc.NameServerStub:
    return namesrv_pb2_grpc.NameServerStub(grpc.insecure_channel(addr))


def test_produce_pull_round_trip_on_two_broker_groups(namesrv: str, start_broker: StartBroker) -> None:
    brokers = [start_broker("broker-a", namesrv=namesrv), start_broker("broker-b", namesrv=namesrv)]
    for broker in brokers:
        c = broker.client
        assert c.create_topic("orders", read=2, write=2).write_queue_nums == 2
        sent = []
        for i in range(10):
            r = c.send("orders", f"{broker.proc.name}-{i}".encode(), queue_id=0,
                       tags="paid" if i % 2 else "new", keys=f"k{i} order-{i}", properties={"p": str(i)})
            assert r.status == pb.PUT_OK and r.queue_offset == i and len(r.msg_id) == 32
            sent.append(r.msg_id)
        batch = c.send_batch("orders", [b"b%d" % i for i in range(32)], queue_id=1)
        assert (batch.status, batch.queue_id, batch.queue_offset, len(batch.msg_ids)) == (pb.PUT_OK, 1, 0, 32)

        got = c.pull_all("orders", 0)
        assert [m.body for m in got] == [f"{broker.proc.name}-{i}".encode() for i in range(10)]
        assert [m.msg_id for m in got] == sent
        assert got[3].tags == "paid" and got[3].keys == "k3 order-3" and got[3].properties["p"] == "3"
        assert [m.queue_offset for m in got] == list(range(10))
        assert [m.body for m in c.pull_all("orders", 1)] == [b"b%d" % i for i in range(32)]

        paid = c.pull("orders", 0, 0, 32, subscription="paid")
        assert paid.status == pb.FOUND and [m.queue_offset for m in paid.messages] == [1, 3, 5, 7, 9]
        either = c.pull("orders", 0, 0, 32, subscription="paid || new")
        assert len(either.messages) == 10
        nothing = c.pull("orders", 0, 0, 32, subscription="shipped")
        assert nothing.status == pb.NO_MATCHED_MSG and nothing.next_begin_offset == 10

        raw = c.pull("orders", 1, 0, 32, raw=True)
        records = decode_records(raw.records)
        assert [r.body for r in records] == [b"b%d" % i for i in range(32)] and raw.next_begin_offset == 32
        assert (c.min_offset("orders", 1), c.max_offset("orders", 1)) == (0, 32)

    # Both groups serve the topic according to the NameServer.
    stub = namesrv_stub(namesrv)

    def both() -> bool:
        route = stub.GetRouteInfoByTopic(namesrv_pb2.GetRouteInfoByTopicRequest(topic="orders"), timeout=5)
        return sorted(q.broker_name for q in route.queue_datas) == ["broker-a", "broker-b"]

    wait_until(both, 5, message="route of 'orders' lists both broker groups", ignore=(grpc.RpcError,))

    # Prometheus metrics with the broker's identity.
    url = f"http://127.0.0.1:{brokers[0].metrics_port}/metrics"
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    series = ('pocketmq_broker_put_messages_total'
              '{broker="broker-a",broker_id="0",cluster="c1",status="PUT_OK"}')
    assert f"{series} 42.0" in text
    assert "pocketmq_broker_commitlog_max_offset" in text


def test_stream_replies_go_past_the_transfer_count(start_broker: StartBroker) -> None:
    """maxTransferCountOnMessageInMemory (32) caps a unary pull; a PullMessageStream reply of raw
    records takes selection after selection up to the pull's count within the byte caps, tag
    filter included."""
    c = start_broker().client
    c.create_topic("big", read=1, write=1)
    for i in range(3):
        c.send_batch("big", [b"m%03d" % (32 * i + j) for j in range(32)], queue_id=0)
    c.send("big", b"tagged", queue_id=0, tags="t")
    c.send("big", b"other", queue_id=0, tags="u")

    def first_reply(offset: int, count: int, max_bytes: int = 0, subscription: str = "*"
                    ) -> pb.PullMessageResponse:
        call = c.stub.PullMessageStream(pb.PullMessageRequest(
            consumer_group="g", topic="big", queue_id=0, queue_offset=offset, max_msg_nums=count,
            max_bytes=max_bytes, subscription=subscription, raw_records=True), timeout=10)
        try:
            reply: pb.PullMessageResponse = next(call)
            return reply
        finally:
            call.cancel()

    unary = c.pull("big", 0, 0, 256, raw=True)
    assert len(decode_records(unary.records)) == 32 and unary.next_begin_offset == 32
    whole = first_reply(0, 256)
    records = decode_records(whole.records)
    assert [r.body for r in records] == [b"m%03d" % i for i in range(96)] + [b"tagged", b"other"]
    assert (whole.status, whole.next_begin_offset) == (pb.FOUND, 98)
    part = first_reply(10, 40)
    assert [r.queue_offset for r in decode_records(part.records)] == list(range(10, 50))
    # The byte cap: whole records only, at least one.
    sizes = [r.store_size for r in records]
    capped = first_reply(0, 256, max_bytes=sum(sizes[:40]) + sizes[40] // 2)
    assert len(decode_records(capped.records)) == 40 and capped.next_begin_offset == 40
    one = first_reply(5, 256, max_bytes=1)
    assert [r.queue_offset for r in decode_records(one.records)] == [5] and one.next_begin_offset == 6
    tagged = first_reply(0, 256, subscription="t")
    assert [r.body for r in decode_records(tagged.records)] == [b"tagged"]


def test_long_polling_and_streams(start_broker: StartBroker) -> None:
    broker = start_broker()
    c = broker.client
    c.create_topic("lp", read=1, write=1)

    start = time.monotonic()
    r = c.pull("lp", 0, 0, suspend_ms=300)
    assert r.status == pb.NO_NEW_MSG and 0.25 <= time.monotonic() - start < 2

    result: dict[str, object] = {}

    def parked_pull() -> None:
        t0 = time.monotonic()
        result["reply"] = c.pull("lp", 0, 0, suspend_ms=10_000)
        result["elapsed"] = time.monotonic() - t0

    def parked() -> float:
        return metric_value(broker.metrics_port, "pocketmq_broker_pulls_suspended")

    assert parked() == 0  # the delay service's own waits are not pulls
    t = threading.Thread(target=parked_pull)
    t.start()
    wait_until(lambda: parked() == 1, 10, message="the pull parked on the broker")
    assert c.send("lp", b"wake up", 0).status == pb.PUT_OK
    t.join(10)
    reply = result["reply"]
    assert isinstance(reply, pb.PullMessageResponse) and reply.status == pb.FOUND
    assert [m.body for m in reply.messages] == [b"wake up"]
    elapsed = result["elapsed"]
    assert isinstance(elapsed, float) and elapsed < 5, elapsed  # woken by the send, not the 10 s limit
    assert parked() == 0

    # SendMessageStream answers in request order; PullMessageStream follows the queue.
    def requests():  # type: ignore[no-untyped-def]
        for i in range(5):
            bodies = [pb.Message(body=b"s%d-%d" % (i, j)) for j in range(10)]
            yield pb.SendMessageBatchRequest(topic="lp", queue_id=0, request_id=100 + i, messages=bodies)

    replies = list(c.stub.SendMessageStream(requests(), timeout=10))
    assert [r.request_id for r in replies] == [100, 101, 102, 103, 104]
    assert [r.queue_offset for r in replies] == [1, 11, 21, 31, 41]
    stream = c.stream_pull("lp", 0, 0, max_nums=20)
    bodies: list[bytes] = []
    for reply in stream:
        bodies.extend(r.body for r in decode_records(reply.records))
        if len(bodies) >= 51:
            break
    assert bodies[0] == b"wake up" and bodies[-1] == b"s4-9" and len(bodies) == 51
    stream.cancel()  # type: ignore[attr-defined]

    # A bad request ends the stream with its status after the replies before it; the requests
    # after it (read ahead already, perhaps) are not stored.
    def batch(request_id: int, topic: str = "lp") -> pb.SendMessageBatchRequest:
        return pb.SendMessageBatchRequest(topic=topic, queue_id=0, request_id=request_id,
                                          messages=[pb.Message(body=b"r%d" % request_id)] * 4)

    call = c.stub.SendMessageStream(iter([batch(200), batch(201), batch(202, "bad topic!"), batch(203)]),
                                    timeout=10)
    got: list[int] = []
    with pytest.raises(grpc.RpcError) as info:
        for reply in call:
            got.append(reply.request_id)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "request 202" in str(info.value.details())
    assert got == [200, 201] and c.max_offset("lp", 0) == 59


def test_offsets_topics_and_messages_survive_a_restart(start_broker: StartBroker) -> None:
    broker = start_broker()
    c = broker.client
    c.create_topic("durable", read=2, write=2)
    c.create_group("cg1")
    for i in range(20):
        assert c.send("durable", b"m%d" % i, queue_id=i % 2).status == pb.PUT_OK
    c.commit("cg1", "durable", 0, 7)
    c.commit("cg1", "durable", 1, 3)
    assert broker.stop() == 0

    files = {p.name for p in (broker.store_dir / "config").iterdir()}
    assert {"topics.json", "consumerOffset.json", "delayOffset.json", "subscriptionGroup.json"} <= files
    offsets = json.loads((broker.store_dir / "config" / "consumerOffset.json").read_text())
    assert offsets["offsetTable"]["durable@cg1"] == {"0": 7, "1": 3}

    again = start_broker(store_dir=broker.store_dir, port=broker.port)
    c2 = again.client
    assert (c2.committed("cg1", "durable", 0), c2.committed("cg1", "durable", 1)) == (7, 3)
    assert c2.topics()["durable"].read_queue_nums == 2 and "cg1" in c2.groups()
    assert [m.body for m in c2.pull_all("durable", 0)] == [b"m%d" % i for i in range(0, 20, 2)]
    assert c2.send("durable", b"after", queue_id=0).queue_offset == 10

    # A pull's commit moves the offset forward only; UpdateConsumerOffset may move it back.
    def pull_committing(offset: int) -> None:
        c2.stub.PullMessage(pb.PullMessageRequest(consumer_group="cg1", topic="durable", queue_id=0,
                                                  queue_offset=offset, max_msg_nums=1, subscription="*",
                                                  commit_offset=offset), timeout=10)

    pull_committing(5)
    assert c2.committed("cg1", "durable", 0) == 7
    pull_committing(9)
    assert c2.committed("cg1", "durable", 0) == 9
    c2.commit("cg1", "durable", 0, 2)
    assert c2.committed("cg1", "durable", 0) == 2


def test_slave_syncs_metadata_from_its_master_and_refuses_writes(
    namesrv: str, start_broker: StartBroker
) -> None:
    master = start_broker("broker-s", 0, namesrv=namesrv)
    m = master.client
    m.create_topic("synced", read=3, write=3)
    m.create_group("sg1")
    m.send("synced", b"x", 0)
    m.commit("sg1", "synced", 2, 42)

    interval_ms = 1000
    slave = start_broker("broker-s", 1, "--slave-sync-interval", str(interval_ms), namesrv=namesrv)
    s = slave.client
    started = time.monotonic()

    def synced() -> bool:
        return ("synced" in s.topics() and "sg1" in s.groups()
                and s.offsets_table().get(("sg1", "synced", 2)) == 42)

    wait_until(synced, 2 * interval_ms / 1000 + 2, message="slave has the master's metadata")
    assert time.monotonic() - started <= 2 * interval_ms / 1000 + 2
    assert s.committed("sg1", "synced", 2) == 42
    # The slave persists the replaced table right after adopting it (in a writer thread).
    topics_path = slave.store_dir / "config" / "topics.json"

    def persisted() -> bool:
        try:
            return "synced" in json.loads(topics_path.read_text())["topicConfigTable"]
        except (FileNotFoundError, ValueError):
            return False

    wait_until(persisted, 5, message="slave persisted the synced topic table")
    topics_file = json.loads(topics_path.read_text())
    assert topics_file["topicConfigTable"]["synced"]["readQueueNums"] == 3
    assert s.status().master_addr == master.addr

    # Changes follow within one period.
    m.commit("sg1", "synced", 2, 43)
    m.create_topic("later", 1, 1)
    t0 = time.monotonic()
    wait_until(lambda: s.offsets_table().get(("sg1", "synced", 2)) == 43 and "later" in s.topics(),
               interval_ms / 1000 + 2, message="slave follows metadata changes")
    assert time.monotonic() - t0 <= interval_ms / 1000 + 1.5

    # Writes and admin on the slave are refused, naming the master.
    rpc_fails(lambda: s.send("synced", b"nope", 0), grpc.StatusCode.FAILED_PRECONDITION,
              "SLAVE", "refuses writes", master.addr)
    rpc_fails(lambda: s.send_batch("synced", [b"a"], 0), grpc.StatusCode.FAILED_PRECONDITION, master.addr)
    rpc_fails(lambda: s.create_topic("other"), grpc.StatusCode.FAILED_PRECONDITION, master.addr)
    # Reads work on the slave (its data arrives by commit-log replication).
    assert s.pull("synced", 0, 0, suspend_ms=0).status in (pb.NO_NEW_MSG, pb.FOUND)


def test_delayed_message_is_delivered_no_earlier_than_its_level(start_broker: StartBroker) -> None:
    broker = start_broker("broker-d", 0, "--message-delay-level", "1s 2s 3s")
    c = broker.client
    c.create_topic("later", read=1, write=1)
    sent_at = time.time()
    r = c.send("later", b"in two seconds", 0, delay_level=2, tags="t")
    assert r.status == pb.PUT_OK
    assert c.pull("later", 0, 0).status == pb.NO_NEW_MSG
    reply = c.pull("later", 0, 0, suspend_ms=6000, timeout=10)
    delivered_at = time.time()
    assert reply.status == pb.FOUND, reply
    msg = reply.messages[0]
    assert msg.body == b"in two seconds" and msg.tags == "t"
    assert delivered_at - sent_at >= 2.0 - 0.05
    assert msg.store_timestamp >= int(sent_at * 1000) + 2000 - 50
    assert "REAL_TOPIC" not in msg.properties and "DELAY" not in msg.properties
    # Above the highest level = the highest level; never earlier.
    assert c.send("later", b"clamped", 0, delay_level=99).status == pb.PUT_OK

    table = c.meta.GetAllDelayOffsets(pb.GetAllDelayOffsetsRequest(), timeout=5)
    assert dict(table.offsets)[2] == 1
    assert broker.stop() == 0
    delay_file = json.loads((broker.store_dir / "config" / "delayOffset.json").read_text())
    assert delay_file["offsetTable"]["2"] == 1


def test_invalid_requests_get_clear_errors_and_change_nothing(start_broker: StartBroker) -> None:
    broker = start_broker("broker-v", 0, "--auto-create-subscription-group", "false",
                          "--consumer-channel-expired-time", "1500")
    c = broker.client
    c.create_topic("valid", read=2, write=2)
    c.create_group("known")
    assert c.send("valid", b"one", 0).status == pb.PUT_OK
    c.commit("known", "valid", 0, 1)
    before = (c.status().commit_log_max_offset, c.topics(), c.offsets_table(), c.groups())

    inv = grpc.StatusCode.INVALID_ARGUMENT
    for bad in ("bad topic", "x" * 128, "", "a/b", "tópico"):
        rpc_fails(lambda bad=bad: c.send(bad, b"x"), inv, "topic")  # type: ignore[misc]
        rpc_fails(lambda bad=bad: c.create_topic(bad), inv, "topic")  # type: ignore[misc]
    rpc_fails(lambda: c.send("x" * 128, b"x"), inv, "at most 127")
    rpc_fails(lambda: c.send("SCHEDULE_TOPIC_XXXX", b"x"), inv, "system topic")
    rpc_fails(lambda: c.send("valid", b"x", queue_id=5), inv, "queue id 5 is out of range")

    big = c.send("valid", b"x" * (4 * 1024 * 1024 + 1), 0)
    assert big.status == pb.MESSAGE_ILLEGAL and "maxMessageSize" in big.remark and big.queue_offset == -1
    empty = c.send("valid", b"", 0)
    assert empty.status == pb.MESSAGE_ILLEGAL and "empty" in empty.remark
    batch = c.send_batch("valid", [b"ok", b"x" * (4 * 1024 * 1024 + 1)], 0)
    assert batch.status == pb.MESSAGE_ILLEGAL and "message 1 of the batch" in batch.remark

    rpc_fails(lambda: c.pull("valid", 0, -1, group="known"), inv, "queue offset must be >= 0")
    rpc_fails(lambda: c.commit("known", "valid", 0, -5), inv, "consumer offset must be >= 0")
    nf = grpc.StatusCode.NOT_FOUND
    rpc_fails(lambda: c.commit("ghost", "valid", 0, 3), nf, "'ghost'", "autoCreateSubscriptionGroup")
    rpc_fails(lambda: c.pull("valid", 0, 0, group="ghost"), nf, "'ghost'")
    rpc_fails(lambda: c.committed("ghost", "valid", 0), nf, "'ghost'")
    rpc_fails(lambda: c.heartbeat("ghost", "client-1", "valid"), nf, "'ghost'")
    rpc_fails(lambda: c.consumers("ghost"), nf, "'ghost'")
    rpc_fails(lambda: c.committed("known", "valid", 1), nf, "no committed offset")
    rpc_fails(lambda: c.pull("nosuchtopic", 0, 0, group="known"), nf, "nosuchtopic")
    rpc_fails(lambda: c.commit("bad group!", "valid", 0, 1), inv, "illegal characters")
    rpc_fails(lambda: c.pull("valid", 0, 0, group="known", subscription="||"), inv, "subscription expression")

    after = (c.status().commit_log_max_offset, c.topics(), c.offsets_table(), c.groups())
    assert after == before

    # Consumer membership on a known group: sorted members, expiry drops the silent one.
    c.heartbeat("known", "client-b", "valid")
    c.heartbeat("known", "client-a", "valid")
    assert c.consumers("known") == ["client-a", "client-b"]
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        c.heartbeat("known", "client-a", "valid")
        try:
            if c.consumers("known") == ["client-a"]:
                break
        except grpc.RpcError:
            pass
        time.sleep(0.3)
    assert c.consumers("known") == ["client-a"]
    c.stub.UnregisterConsumer(pb.UnregisterConsumerRequest(consumer_group="known", client_id="client-a"))
    rpc_fails(lambda: c.consumers("known"), nf, "no live member")


def test_sigterm_unregisters_and_exits_cleanly(namesrv: str, start_broker: StartBroker) -> None:
    broker = start_broker("broker-t", namesrv=namesrv)
    stub = namesrv_stub(namesrv)

    def live() -> set[str]:
        info = stub.GetBrokerClusterInfo(namesrv_pb2.GetBrokerClusterInfoRequest(), timeout=5)
        return set(info.broker_live_table)

    wait_until(lambda: broker.addr in live(), 5, message="broker registered")
    assert broker.client.send("t1", b"x").status == pb.PUT_OK  # auto-created topic
    assert broker.stop() == 0
    assert broker.addr not in live()
    text = broker.proc.log_text()
    assert "broker stopped" in text and "message store shut down" in text
    assert not (broker.store_dir / "abort").exists()


def test_client_module_round_trip_decoding(start_broker: StartBroker) -> None:
    """The raw records a consumer decodes carry everything the decoded form does."""
    broker = start_broker()
    c: BrokerClient = broker.client
    c.send("rt", b"payload", 0, tags="a", keys="k1 k2", properties={"x": "y"})
    decoded = c.pull("rt", 0, 0)
    raw = decode_records(c.pull("rt", 0, 0, raw=True).records)
    assert len(raw) == 1 and len(decoded.messages) == 1
    d, r = decoded.messages[0], raw[0]
    assert (r.body, r.tags, r.keys, r.properties["x"]) == (d.body, d.tags, d.keys.split(), d.properties["x"])
    assert (r.queue_offset, r.physical_offset, r.msg_id) == (d.queue_offset, d.commit_log_offset, d.msg_id)


def test_sync_flush_and_sync_master_statuses_and_topic_deletion(start_broker: StartBroker) -> None:
    """SYNC_FLUSH replies after the group commit; a SYNC_MASTER without a slave stores the message
    and says SLAVE_NOT_AVAILABLE (stored, not replicated). Deleting a topic drops its queues
    and offsets."""
    broker = start_broker("broker-y", 0, "--broker-role", "SYNC_MASTER", "--flush-disk-type", "SYNC_FLUSH")
    c = broker.client
    c.create_topic("sync", read=1, write=1)
    r = c.send("sync", b"durable", 0)
    assert r.status == pb.SLAVE_NOT_AVAILABLE and "stored on the master" in r.remark
    batch = c.send_batch("sync", [b"a", b"b"], 0)
    assert batch.status == pb.SLAVE_NOT_AVAILABLE and batch.queue_offset == 1
    assert [m.body for m in c.pull_all("sync", 0)] == [b"durable", b"a", b"b"]
    assert c.status().flush_disk_type == "SYNC_FLUSH"

    c.commit("g", "sync", 0, 2)
    c.stub.DeleteTopic(pb.DeleteTopicRequest(topic="sync"), timeout=5)
    assert "sync" not in c.topics()
    assert ("g", "sync", 0) not in c.offsets_table()
    rpc_fails(lambda: c.stub.GetTopic(pb.GetTopicRequest(topic="sync"), timeout=5), grpc.StatusCode.NOT_FOUND,
              "'sync'")
    rpc_fails(lambda: c.stub.DeleteTopic(pb.DeleteTopicRequest(topic="SCHEDULE_TOPIC_XXXX"), timeout=5),
              grpc.StatusCode.INVALID_ARGUMENT, "system topic")


def test_batch_created_topics_and_lazily_opened_queues_survive_a_crash(start_broker: StartBroker) -> None:
    from pocketmq.common.v1 import common_pb2

    def bulk(prefix: str, n: int) -> pb.CreateTopicsRequest:
        return pb.CreateTopicsRequest(topic_configs=[common_pb2.TopicConfig(
            topic_name=f"{prefix}-{i}", read_queue_nums=2, write_queue_nums=2) for i in range(n)])

    broker = start_broker("broker-a", 0, "--flush-interval-consume-queue", "100")
    c = broker.client
    assert len(c.stub.CreateTopics(bulk("bulk", 40), timeout=10).topic_configs) == 40
    queues = [(f"bulk-{i}", q) for i in range(40) for q in range(2)]
    for r in range(2):
        for topic, q in queues:
            assert c.send(topic, f"{topic}/{q}/{r}".encode(), queue_id=q).queue_offset == r
    assert broker.stop() == 0

    # Clean restart: the queues open on first use and continue their offsets.
    again = start_broker("broker-a", 0, "--flush-interval-consume-queue", "100",
                         store_dir=broker.store_dir, port=broker.port)
    c2 = again.client
    for topic, q in queues:
        assert c2.send(topic, f"{topic}/{q}/2".encode(), queue_id=q).queue_offset == 2
    c2.create_topic("one-more", read=1, write=1)
    assert len(c2.stub.CreateTopics(bulk("late", 30), timeout=10).topic_configs) == 30
    # Let a consume queue flush and checkpoint cover the sends, then crash.
    checkpoint = broker.store_dir / "checkpoint"
    sent = checkpoint.stat().st_mtime_ns
    wait_until(lambda: checkpoint.stat().st_mtime_ns > sent, 10, message="checkpoint written")
    again.proc.kill()

    third = start_broker(store_dir=broker.store_dir, port=broker.port)
    c3 = third.client
    topics = c3.topics()
    assert {f"bulk-{i}" for i in range(40)} | {f"late-{i}" for i in range(30)} | {"one-more"} <= set(topics)
    assert topics["late-7"].write_queue_nums == 2
    for topic, q in queues:
        assert c3.max_offset(topic, q) == 3
        assert [m.body for m in c3.pull_all(topic, q)] == [f"{topic}/{q}/{r}".encode() for r in range(3)]
