"""The RocketMQ 5 API on the wire, with PocketMQ's own generated stubs: routes, Telemetry
settings, heartbeats, namespaces, metrics, and bad input answered with the right v2 code while
nothing changes in the store."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf.duration_pb2 import Duration

from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from pocketmq.broker.v1 import broker_pb2 as bpb
from tests.integration.procs import wait_until
from tests.sdk.cluster import MAX_MESSAGE_SIZE, Cluster, V2Client, v2_message

Code = d.Code
TOPIC, FIFO_TOPIC, NS_TOPIC = "v2-normal", "v2-fifo", "ns1%v2-space"


@pytest.fixture(scope="module")
def topics(cluster: Cluster) -> Cluster:
    cluster.create_topic(TOPIC, "NORMAL")
    cluster.create_topic(FIFO_TOPIC, "FIFO")
    cluster.create_topic(NS_TOPIC)
    return cluster


@pytest.fixture
def broker_v2(topics: Cluster) -> Iterator[V2Client]:
    client = V2Client(topics.brokers[0].addr)
    yield client
    client.close()


@pytest.fixture
def namesrv_v2(topics: Cluster) -> Iterator[V2Client]:
    client = V2Client(topics.namesrv)
    yield client
    client.close()


def producer_settings(*topics: str) -> s.TelemetryCommand:
    return s.TelemetryCommand(
        settings=d.Settings(
            client_type=d.ClientType.PRODUCER,
            publishing=d.Publishing(topics=[d.Resource(name=t) for t in topics]),
            user_agent=d.UA(language=d.Language.PYTHON, version="test"),
        )
    )


# -- routes -----------------------------------------------------------------------------------


def test_query_route_at_namesrv_and_broker_lists_every_master_queue(
    topics: Cluster, namesrv_v2: V2Client, broker_v2: V2Client
) -> None:
    request = s.QueryRouteRequest(topic=d.Resource(name=FIFO_TOPIC))
    answers = [namesrv_v2.call("QueryRoute", request), broker_v2.call("QueryRoute", request)]
    for reply in answers:
        assert reply.status.code == Code.OK, reply.status
        queues = reply.message_queues
        assert len(queues) == 8
        addrs = {b.name: b.addr for b in topics.brokers}
        for q in queues:
            assert q.broker.id == 0
            ep = q.broker.endpoints.addresses[0]
            assert f"{ep.host}:{ep.port}" == addrs[q.broker.name]
            assert q.permission == d.Permission.READ_WRITE
            assert list(q.accept_message_types) == [d.MessageType.FIFO]
            assert q.topic.name == FIFO_TOPIC
        assert sorted((q.broker.name, q.id) for q in queues) == sorted(
            (b, i) for b in addrs for i in range(4)
        )
    assert answers[0].message_queues == answers[1].message_queues


def test_namesrv_answers_other_rpcs_naming_the_brokers(topics: Cluster, namesrv_v2: V2Client) -> None:
    reply = namesrv_v2.call("SendMessage", s.SendMessageRequest(messages=[v2_message(TOPIC, b"x")]))
    assert reply.status.code == Code.ILLEGAL_ACCESS_POINT
    for b in topics.brokers:
        assert f"{b.name}={b.addr}" in reply.status.message
    [command] = namesrv_v2.telemetry(producer_settings(TOPIC))
    assert command.status.code == Code.ILLEGAL_ACCESS_POINT


# -- settings, heartbeats ---------------------------------------------------------------------


def test_producer_settings_answered_with_broker_limits(broker_v2: V2Client) -> None:
    [answer] = broker_v2.telemetry(producer_settings(TOPIC), client_id="settings-producer")
    assert answer.status.code == Code.OK
    st = answer.settings
    assert st.client_type == d.ClientType.PRODUCER
    assert st.publishing.max_body_size == MAX_MESSAGE_SIZE
    assert st.publishing.validate_message_type
    assert st.backoff_policy.max_attempts == 3
    assert st.backoff_policy.WhichOneof("strategy") == "exponential_backoff"
    assert st.HasField("metric") and not st.metric.on
    assert [t.name for t in st.publishing.topics] == [TOPIC]


def test_push_consumer_settings_follow_the_subscription_group(topics: Cluster, broker_v2: V2Client) -> None:
    for b in topics.brokers:
        b.client.stub.CreateSubscriptionGroup(
            bpb.CreateSubscriptionGroupRequest(
                config=bpb.SubscriptionGroupConfig(
                    group_name="v2-orderly",
                    consume_enable=True,
                    retry_max_times=5,
                    consume_message_orderly=True,
                )
            ),
            timeout=10,
        )
    command = s.TelemetryCommand(
        settings=d.Settings(
            client_type=d.ClientType.PUSH_CONSUMER,
            subscription=d.Subscription(
                group=d.Resource(name="v2-orderly"),
                subscriptions=[
                    d.SubscriptionEntry(
                        topic=d.Resource(name=FIFO_TOPIC),
                        expression=d.FilterExpression(type=d.FilterType.TAG, expression="*"),
                    )
                ],
            ),
        )
    )
    [answer] = broker_v2.telemetry(command, client_id="settings-consumer")
    assert answer.status.code == Code.OK, answer.status
    sub = answer.settings.subscription
    assert sub.fifo and sub.receive_batch_size == 32
    assert sub.long_polling_timeout.seconds == 20
    policy = answer.settings.backoff_policy
    assert policy.max_attempts == 6
    assert [n.seconds for n in policy.customized_backoff.next][:3] == [1, 5, 10]
    assert len(policy.customized_backoff.next) == 18


def test_heartbeat_before_settings_is_unrecognized_then_ok(broker_v2: V2Client) -> None:
    request = s.HeartbeatRequest(client_type=d.ClientType.PRODUCER)
    reply = broker_v2.call("Heartbeat", request, client_id="hb-client")
    assert reply.status.code == Code.UNRECOGNIZED_CLIENT_TYPE
    broker_v2.telemetry(producer_settings(TOPIC), client_id="hb-client")
    assert broker_v2.call("Heartbeat", request, client_id="hb-client").status.code == Code.OK
    reply = broker_v2.call(
        "NotifyClientTermination", s.NotifyClientTerminationRequest(), client_id="hb-client"
    )
    assert reply.status.code == Code.OK
    assert (
        broker_v2.call("Heartbeat", request, client_id="hb-client").status.code
        == Code.UNRECOGNIZED_CLIENT_TYPE
    )


def test_unknown_client_type_and_missing_client_id(broker_v2: V2Client) -> None:
    [answer] = broker_v2.telemetry(s.TelemetryCommand(settings=d.Settings()), client_id="typeless")
    assert answer.status.code == Code.UNRECOGNIZED_CLIENT_TYPE
    [answer] = broker_v2.telemetry(producer_settings(TOPIC), client_id="")
    assert answer.status.code == Code.CLIENT_ID_REQUIRED


def test_receive_with_a_bad_invisible_time_or_polling_time_is_refused(broker_v2: V2Client) -> None:
    def receive(**fields: Any) -> int:
        request = s.ReceiveMessageRequest(
            group=d.Resource(name="g"), message_queue=d.MessageQueue(topic=d.Resource(name=TOPIC)),
            batch_size=1, **fields
        )
        [reply] = list(broker_v2.stub.ReceiveMessage(request, metadata=broker_v2.metadata(), timeout=10))
        return int(reply.status.code)

    assert receive(invisible_duration=Duration(seconds=5)) == Code.ILLEGAL_INVISIBLE_TIME
    assert receive(invisible_duration=Duration(seconds=13 * 3600)) == Code.ILLEGAL_INVISIBLE_TIME
    assert receive(invisible_duration=Duration(seconds=30), long_polling_timeout=Duration(seconds=600)) == (
        Code.ILLEGAL_POLLING_TIME
    )


# -- namespaces -------------------------------------------------------------------------------


def test_namespace_prefixes_the_stored_topic(topics: Cluster, broker_v2: V2Client) -> None:
    msg = v2_message("v2-space", b"namespaced", namespace="ns1")
    reply = broker_v2.call("SendMessage", s.SendMessageRequest(messages=[msg]))
    assert reply.status.code == Code.OK, reply.status
    stored = [m for m in topics.messages(NS_TOPIC) if m.body == b"namespaced"]
    assert [m.properties["UNIQ_KEY"] for m in stored] == [msg.system_properties.message_id]
    # The header carries the same namespace.
    msg2 = v2_message("v2-space", b"by-header")
    reply = broker_v2.call("SendMessage", s.SendMessageRequest(messages=[msg2]), namespace="ns1")
    assert reply.status.code == Code.OK, reply.status
    assert any(m.body == b"by-header" for m in topics.messages(NS_TOPIC))


def test_concurrent_calls_each_see_their_own_headers(topics: Cluster, broker_v2: V2Client) -> None:
    """The broker keeps each call's headers for its handler: calls in flight together never see
    another call's namespace."""
    calls = []
    for i in range(40):
        namespace = "ns1" if i % 2 else ""
        msg = v2_message("v2-space" if namespace else TOPIC, f"concurrent-{i}".encode())
        calls.append(broker_v2.stub.SendMessage.future(
            s.SendMessageRequest(messages=[msg]), metadata=broker_v2.metadata(namespace), timeout=10))
    replies = [call.result() for call in calls]
    assert [r.status.code for r in replies] == [Code.OK] * 40, [r.status for r in replies if r.status.code]
    for topic, odd in ((NS_TOPIC, 1), (TOPIC, 0)):
        bodies = {m.body for m in topics.messages(topic) if m.body.startswith(b"concurrent-")}
        assert bodies == {f"concurrent-{i}".encode() for i in range(40) if i % 2 == odd}


# -- bad input: the right code, nothing changed ----------------------------------------------


def _refused(
    cluster: Cluster,
    client: V2Client,
    rpc: str,
    request: object,
    code: int,
    namespace: str = "",
    text: str = "",
) -> None:
    before_offsets, before_topics = cluster.max_offsets(), [b.client.topics() for b in cluster.brokers]
    before_offsets_table = [b.client.offsets_table() for b in cluster.brokers]
    reply = client.call(rpc, request, namespace=namespace)
    assert reply.status.code == code, reply.status
    assert text in reply.status.message
    assert "Traceback" not in reply.status.message
    assert cluster.max_offsets() == before_offsets
    assert [b.client.topics() for b in cluster.brokers] == before_topics
    assert [b.client.offsets_table() for b in cluster.brokers] == before_offsets_table


def test_unknown_topic_with_auto_create_off_is_topic_not_found(
    topics: Cluster, broker_v2: V2Client, namesrv_v2: V2Client
) -> None:
    _refused(
        topics,
        broker_v2,
        "SendMessage",
        s.SendMessageRequest(messages=[v2_message("no-such", b"x")]),
        Code.TOPIC_NOT_FOUND,
        text="autoCreateTopicEnable is false",
    )
    _refused(
        topics,
        namesrv_v2,
        "QueryRoute",
        s.QueryRouteRequest(topic=d.Resource(name="no-such")),
        Code.TOPIC_NOT_FOUND,
    )


def test_oversized_body_is_message_body_too_large(topics: Cluster, broker_v2: V2Client) -> None:
    msg = v2_message(TOPIC, b"x" * (MAX_MESSAGE_SIZE + 1))
    _refused(
        topics,
        broker_v2,
        "SendMessage",
        s.SendMessageRequest(messages=[msg]),
        Code.MESSAGE_BODY_TOO_LARGE,
        text=str(MAX_MESSAGE_SIZE),
    )


def test_wrong_message_type_for_the_topic(topics: Cluster, broker_v2: V2Client) -> None:
    normal_to_fifo = v2_message(FIFO_TOPIC, b"x")
    _refused(
        topics,
        broker_v2,
        "SendMessage",
        s.SendMessageRequest(messages=[normal_to_fifo]),
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        text="accepts FIFO",
    )
    fifo_to_normal = v2_message(TOPIC, b"x", group="g1", message_type=d.MessageType.FIFO)
    _refused(
        topics,
        broker_v2,
        "SendMessage",
        s.SendMessageRequest(messages=[fifo_to_normal]),
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        text="accepts NORMAL",
    )
    # A FIFO message without its message group contradicts its own type.
    groupless = v2_message(FIFO_TOPIC, b"x", message_type=d.MessageType.FIFO)
    _refused(
        topics,
        broker_v2,
        "SendMessage",
        s.SendMessageRequest(messages=[groupless]),
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    )


def test_garbage_receipt_handle_is_invalid_receipt_handle(topics: Cluster, broker_v2: V2Client) -> None:
    request = s.AckMessageRequest(
        group=d.Resource(name="g"),
        topic=d.Resource(name=TOPIC),
        entries=[s.AckMessageEntry(message_id="0102", receipt_handle="garbage\x00handle")],
    )
    _refused(topics, broker_v2, "AckMessage", request, Code.INVALID_RECEIPT_HANDLE)
    request2 = s.ChangeInvisibleDurationRequest(
        group=d.Resource(name="g"), topic=d.Resource(name=TOPIC), receipt_handle="zzz", message_id="0102"
    )
    _refused(topics, broker_v2, "ChangeInvisibleDuration", request2, Code.INVALID_RECEIPT_HANDLE)


def test_malformed_namespace(topics: Cluster, broker_v2: V2Client) -> None:
    bad = v2_message("v2-space", b"x", namespace="bad ns!")
    _refused(
        topics,
        broker_v2,
        "SendMessage",
        s.SendMessageRequest(messages=[bad]),
        Code.ILLEGAL_TOPIC,
        text="namespace 'bad ns!' is malformed",
    )
    # The resource's namespace and the header's disagree.
    other = v2_message("v2-space", b"x", namespace="ns1")
    _refused(
        topics,
        broker_v2,
        "SendMessage",
        s.SendMessageRequest(messages=[other]),
        Code.ILLEGAL_TOPIC,
        namespace="ns2",
    )
    _refused(
        topics,
        broker_v2,
        "QueryRoute",
        s.QueryRouteRequest(topic=d.Resource(name="v2-space", resource_namespace="a%b")),
        Code.ILLEGAL_TOPIC,
    )


@pytest.mark.parametrize(
    ("field", "code"),
    [
        ("message_id", Code.ILLEGAL_MESSAGE_ID),
        ("body", Code.MESSAGE_BODY_EMPTY),
        ("tag", Code.ILLEGAL_MESSAGE_TAG),
        ("property", Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        ("topic", Code.ILLEGAL_TOPIC),
    ],
)
def test_malformed_message_fields(topics: Cluster, broker_v2: V2Client, field: str, code: int) -> None:
    msg = v2_message(TOPIC, b"x")
    if field == "message_id":
        msg.system_properties.message_id = "not hex!"
    elif field == "body":
        msg.body = b""
    elif field == "tag":
        msg.system_properties.tag = "a||b"
    elif field == "property":
        msg.user_properties["UNIQ_KEY"] = "spoofed"
    else:
        msg.topic.name = "bad topic"
    _refused(topics, broker_v2, "SendMessage", s.SendMessageRequest(messages=[msg]), code)


# -- metrics ----------------------------------------------------------------------------------


def test_metrics_count_requests_clients_and_streams(topics: Cluster, broker_v2: V2Client) -> None:
    broker_v2.call("SendMessage", s.SendMessageRequest(messages=[v2_message(TOPIC, b"metered")]))
    broker_v2.call("SendMessage", s.SendMessageRequest(messages=[v2_message("no-such-metered", b"x")]))
    broker_v2.telemetry(producer_settings(TOPIC), client_id="metrics-client")
    port = topics.brokers[0].metrics_port
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert "pocketmq_v2_requests_total{" in text
    assert 'rpc="SendMessage"' in text and 'code="OK"' in text
    assert any('rpc="SendMessage"' in line and 'code="TOPIC_NOT_FOUND"' in line
               for line in text.splitlines() if line.startswith("pocketmq_v2_requests_total{"))
    assert "pocketmq_v2_clients{" in text and 'client_type="PRODUCER"' in text
    assert "pocketmq_v2_telemetry_streams{" in text


def test_cli_creates_a_typed_topic_routed_with_its_type(topics: Cluster, namesrv_v2: V2Client) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pocketmq.cli", "topic", "create", *args,
                               "--namesrv", topics.namesrv, "--output", "json"],
                              capture_output=True, text=True, timeout=60)

    assert cli("v2-cli-delay", "--message-type", "delay").returncode == 0
    bad = cli("v2-cli-bad", "--message-type", "SOMETIMES")
    assert bad.returncode != 0 and "message.type" in (bad.stdout + bad.stderr)

    def route_types() -> set[int]:
        reply = namesrv_v2.call("QueryRoute", s.QueryRouteRequest(topic=d.Resource(name="v2-cli-delay")))
        return {t for q in reply.message_queues for t in q.accept_message_types}

    assert wait_until(lambda: route_types() == {d.MessageType.DELAY}, 15, message="typed route")
