"""The pure rules of the RocketMQ 5 API layer: namespaces, routes, settings, message types,
status mapping."""

from __future__ import annotations

import pytest

from apache.rocketmq.v2 import definition_pb2 as d
from pocketmq.namesrv.v1 import namesrv_pb2 as n
from services.broker.storage.status import PutMessageStatus
from services.broker.v2 import produce, resources, route, settings, status
from services.broker.v2.resources import RequestMeta
from services.broker.v2.status import Code, V2Error


def test_namespace_wrap_and_unwrap_like_rocketmq() -> None:
    assert resources.wrap("", "t") == "t"
    assert resources.wrap("ns", "t") == "ns%t"
    assert resources.wrap("ns", "%RETRY%g") == "%RETRY%ns%g"
    assert resources.wrap("ns", "%DLQ%g") == "%DLQ%ns%g"
    for name in ("t", "%RETRY%g", "%DLQ%g"):
        assert resources.unwrap("ns", resources.wrap("ns", name)) == name


def test_topic_name_takes_the_namespace_from_resource_or_header() -> None:
    header = RequestMeta(namespace="ns")
    assert resources.topic_name(d.Resource(name="t"), header) == "ns%t"
    assert resources.topic_name(d.Resource(name="t", resource_namespace="ns"), RequestMeta()) == "ns%t"
    with pytest.raises(V2Error) as exc:
        resources.topic_name(d.Resource(name="t", resource_namespace="other"), header)
    assert exc.value.code == Code.ILLEGAL_TOPIC
    for bad in ("a b", "a%b", "x" * 65):
        with pytest.raises(V2Error) as exc:
            resources.topic_name(d.Resource(name="t", resource_namespace=bad), RequestMeta())
        assert exc.value.code == Code.ILLEGAL_TOPIC
    with pytest.raises(V2Error) as exc:
        resources.group_name(d.Resource(name="g", resource_namespace="a b"), RequestMeta())
    assert exc.value.code == Code.ILLEGAL_CONSUMER_GROUP
    with pytest.raises(V2Error) as exc:
        resources.topic_name(d.Resource(name="SCHEDULE_TOPIC_XXXX"), RequestMeta())
    assert exc.value.code == Code.ILLEGAL_TOPIC


def test_client_id_required() -> None:
    with pytest.raises(V2Error) as exc:
        RequestMeta().require_client_id()
    assert exc.value.code == Code.CLIENT_ID_REQUIRED
    meta = RequestMeta.from_metadata([("x-mq-client-id", b"c1"), ("x-mq-namespace", "ns"), ("other", "x")])
    assert (meta.client_id, meta.namespace) == ("c1", "ns")


def _route(
    read: int, write: int, perm: int, addrs: dict[int, str], message_type: str = ""
) -> n.TopicRouteData:
    return n.TopicRouteData(
        queue_datas=[
            n.QueueData(
                broker_name="b",
                read_queue_nums=read,
                write_queue_nums=write,
                perm=perm,
                message_type=message_type,
            )
        ],
        broker_datas=[n.BrokerData(cluster="c", broker_name="b", broker_addrs=addrs)],
    )


def test_route_queue_permissions_follow_read_and_write_counts() -> None:
    topic = d.Resource(name="t")
    queues = route.message_queues(topic, _route(2, 4, 6, {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}))
    assert [q.id for q in queues] == [0, 1, 2, 3]
    assert [q.permission for q in queues] == [d.Permission.READ_WRITE] * 2 + [d.Permission.WRITE] * 2
    assert all(q.broker.id == 0 and q.broker.endpoints.addresses[0].host == "10.0.0.1" for q in queues)
    assert all(q.broker.endpoints.scheme == d.AddressScheme.IPv4 for q in queues)
    assert list(queues[0].accept_message_types) == list(route.ALL_TYPES)


def test_route_without_master_is_read_only_through_a_slave() -> None:
    queues = route.message_queues(d.Resource(name="t"), _route(4, 4, 6, {2: "slave.example:10911"}, "FIFO"))
    assert {q.broker.id for q in queues} == {2}
    assert {q.permission for q in queues} == {d.Permission.READ}
    assert queues[0].broker.endpoints.scheme == d.AddressScheme.DOMAIN_NAME
    assert list(queues[0].accept_message_types) == [d.MessageType.FIFO]


def test_route_address_map_and_template_cap() -> None:
    queues = route.message_queues(
        d.Resource(name="t"),
        _route(8, 8, 6, {0: "h:10911"}),
        lambda a: a.replace("10911", "10914"),
        queue_nums=4,
    )
    assert len(queues) == 4 and queues[0].broker.endpoints.addresses[0].port == 10914


def test_settings_for_producers_and_consumers() -> None:
    prod = settings.producer_settings(d.Settings(client_type=d.ClientType.PRODUCER), 1234)
    assert prod.publishing.max_body_size == 1234 and prod.publishing.validate_message_type
    assert prod.backoff_policy.max_attempts == 3 and not prod.metric.on
    cons = settings.consumer_settings(
        d.Settings(client_type=d.ClientType.PUSH_CONSUMER),
        fifo=True,
        retry_max_times=16,
        delay_levels_ms=(1000, 5000),
    )
    assert cons.backoff_policy.max_attempts == 17
    assert [x.seconds for x in cons.backoff_policy.customized_backoff.next] == [1, 5]
    assert cons.subscription.fifo and cons.subscription.receive_batch_size == 32


def test_message_type_must_agree_with_its_fields() -> None:
    msg = d.Message(system_properties=d.SystemProperties(message_type=d.MessageType.NORMAL))
    assert produce.message_type_of(msg) == d.MessageType.NORMAL
    msg.system_properties.message_group = "g"
    with pytest.raises(V2Error) as exc:
        produce.message_type_of(msg)
    assert exc.value.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    msg.system_properties.message_type = d.MessageType.MESSAGE_TYPE_UNSPECIFIED
    assert produce.message_type_of(msg) == d.MessageType.FIFO
    msg.system_properties.message_type = d.MessageType.LITE
    with pytest.raises(V2Error) as exc:
        produce.message_type_of(msg)
    assert exc.value.code == Code.UNSUPPORTED


def test_fifo_queue_is_stable_and_in_range() -> None:
    picks = {produce.fifo_queue(f"group-{i}", 8) for i in range(200)}
    assert picks == set(range(8))
    assert produce.fifo_queue("order-1", 8) == produce.fifo_queue("order-1", 8)


def test_every_put_status_has_a_v2_code() -> None:
    assert set(status.PUT_STATUS_CODES) == set(PutMessageStatus)
    assert status.PUT_STATUS_CODES[PutMessageStatus.SLAVE_NOT_AVAILABLE] == Code.HA_NOT_AVAILABLE
    assert status.PUT_STATUS_CODES[PutMessageStatus.FLUSH_SLAVE_TIMEOUT] == Code.SLAVE_PERSISTENCE_TIMEOUT
    assert status.PUT_STATUS_CODES[PutMessageStatus.FLUSH_DISK_TIMEOUT] == Code.MASTER_PERSISTENCE_TIMEOUT
