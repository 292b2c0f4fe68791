"""Every RPC of every service the servers expose declares its permission (a new RPC without
one fails here), and every declared extractor reads its request without error."""

from __future__ import annotations

from google.protobuf import message_factory

from pocketmq.broker.v1 import broker_pb2
from services.common.acl.model import Resource, ResourceType
from services.common.acl.rules import RULES, SERVICE_FILES, all_methods
from services.namesrv.relay import relayable_methods


def _request_class(full_method: str) -> type:
    service_name, method_name = full_method.strip("/").split("/")
    for fd in SERVICE_FILES:
        for service in fd.services_by_name.values():
            if service.full_name == service_name:
                return message_factory.GetMessageClass(service.methods_by_name[method_name].input_type)
    raise AssertionError(full_method)


def test_every_rpc_of_every_service_declares_a_permission() -> None:
    methods = all_methods()
    assert len(methods) > 50
    missing = [m for m in methods if m not in RULES]
    assert missing == [], f"RPCs without a permission in services/common/acl/rules.py: {missing}"
    assert sorted(set(RULES) - set(methods)) == [], "rules for RPCs that do not exist"


def test_every_relayable_method_is_decided_by_the_broker_rules() -> None:
    assert relayable_methods() <= set(RULES)


def test_extractors_name_the_resources_of_the_request() -> None:
    for method, rule in RULES.items():
        if rule.kind != "check":
            assert rule.extract is None, method
            continue
        assert rule.extract is not None
        empty = rule.extract(_request_class(method)(), "c1")
        assert empty and all(isinstance(r, Resource) and actions for r, actions in empty), method
    send = RULES["/pocketmq.broker.v1.Broker/SendMessageBatch"]
    assert send.extract is not None
    req = broker_pb2.SendMessageBatchRequest(topic="a", messages=[broker_pb2.Message(topic="a")])
    assert [str(r) for r, _ in send.extract(req, "c1")] == ["Topic:a"]
    pull = RULES["/pocketmq.broker.v1.Broker/PullMessage"]
    assert pull.extract is not None
    got = pull.extract(broker_pb2.PullMessageRequest(topic="t", consumer_group="g"), "c1")
    assert [(r.type, r.name) for r, _ in got] == [(ResourceType.TOPIC, "t"), (ResourceType.GROUP, "g")]
    status = RULES["/pocketmq.broker.v1.Broker/GetBrokerStatus"]
    assert status.extract is not None
    assert str(status.extract(broker_pb2.GetBrokerStatusRequest(), "c1")[0][0]) == "Cluster:c1"
