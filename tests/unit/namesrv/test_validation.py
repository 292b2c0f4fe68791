"""Request validation: each rule, with a message naming the field."""

from __future__ import annotations

import pytest

from pocketmq.common.v1 import common_pb2
from pocketmq.namesrv.v1 import namesrv_pb2 as pb
from services.common.errors import InvalidArgumentError
from services.namesrv import validation


def valid_request(**changes: object) -> pb.RegisterBrokerRequest:
    req = pb.RegisterBrokerRequest(
        cluster_name="DefaultCluster", broker_name="broker-a", broker_id=0, broker_addr="10.0.0.1:10911",
        ha_server_addr="10.0.0.1:10912", metrics_addr="", broker_role="ASYNC_MASTER",
        topic_config_version=common_pb2.DataVersion(timestamp=1, counter=2),
        topic_configs=[
            common_pb2.TopicConfig(topic_name="TopicTest", read_queue_nums=4, write_queue_nums=4, perm=6)
        ],
    )
    for key, value in changes.items():
        setattr(req, key, value)
    return req


def test_a_valid_request_passes() -> None:
    validation.validate_register(valid_request(), max_topics=10)
    validation.validate_register(valid_request(ha_server_addr="", broker_id=3, broker_addr="[::1]:10911"), 10)


@pytest.mark.parametrize(("changes", "message"), [
    ({"cluster_name": ""}, "cluster_name: must not be empty"),
    ({"cluster_name": "a/b"}, "cluster_name: 'a/b' has characters outside"),
    ({"broker_name": "b" * 128}, "broker_name: longer than 127 characters (128)"),
    ({"broker_id": -3}, "broker_id: must be >= 0 (0 = master, > 0 = slave), got -3"),
    ({"broker_addr": ""}, "broker_addr: must not be empty"),
    ({"broker_addr": ":10911"}, "broker_addr: ':10911' is not host:port"),
    ({"broker_addr": "h:0"}, "broker_addr: 'h:0' has an invalid port"),
    ({"broker_addr": "h:x"}, "broker_addr: 'h:x' has an invalid port"),
    ({"broker_addr": "a b:1"}, "broker_addr: 'a b:1' is not host:port"),
    ({"metrics_addr": "nope"}, "metrics_addr: 'nope' is not host:port"),
    ({"broker_role": "R" * 200}, "broker_role: longer than 127"),
])
def test_bad_fields(changes: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        validation.validate_register(valid_request(**changes), max_topics=10)
    assert message in str(info.value)


def test_negative_version() -> None:
    req = valid_request()
    req.topic_config_version.counter = -1
    with pytest.raises(InvalidArgumentError, match="topic_config_version"):
        validation.validate_register(req, 10)


def test_topic_table_rules() -> None:
    req = valid_request()
    req.topic_configs.add(topic_name="TopicTest")
    duplicate = r"topic_configs\[1\]\.topic_name: duplicate topic 'TopicTest'"
    with pytest.raises(InvalidArgumentError, match=duplicate):
        validation.validate_register(req, 10)
    with pytest.raises(InvalidArgumentError, match="2 topics exceed the limit of 1 per registration"):
        validation.validate_register(req, 1)
    for field, value, message in [
        ("read_queue_nums", 70_000, "read_queue_nums: 70000 is outside 0..65535"),
        ("perm", -1, "perm: -1 is not a combination"),
        ("perm", 16, "perm: 16 is not a combination"),
        ("topic_name", "%RETRY%group|x", None),
        ("topic_name", "a.b", "'a.b' has characters outside [%|a-zA-Z0-9_-]"),
    ]:
        req = valid_request()
        setattr(req.topic_configs[0], field, value)
        if message is None:
            validation.validate_register(req, 10)
        else:
            with pytest.raises(InvalidArgumentError) as info:
                validation.validate_register(req, 10)
            assert message in str(info.value)


def test_unregister_and_kv_rules() -> None:
    ok = pb.UnregisterBrokerRequest(cluster_name="c", broker_name="b", broker_id=1, broker_addr="h:1")
    validation.validate_unregister(ok)
    for changes, message in [({"broker_id": -1}, "broker_id"), ({"broker_addr": ""}, "broker_addr"),
                             ({"cluster_name": ""}, "cluster_name")]:
        req = pb.UnregisterBrokerRequest()
        req.CopyFrom(ok)
        for k, v in changes.items():
            setattr(req, k, v)
        with pytest.raises(InvalidArgumentError, match=message):
            validation.validate_unregister(req)
    with pytest.raises(InvalidArgumentError, match="key: longer than 255"):
        validation.check_kv_part("key", "k" * 256)
    with pytest.raises(InvalidArgumentError, match="value: larger than"):
        validation.check_kv_value("v" * (validation.MAX_KV_VALUE_BYTES + 1))
