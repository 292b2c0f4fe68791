"""The permission table: for every RPC of every service the servers expose, what a caller needs.

Each entry is a :class:`Rule`:

- ``check``: the request's resources and the actions of which one must be allowed on each
  (e.g. SendMessage: Pub on its topic; PullMessage: Sub on the topic and on the group);
- ``authenticated``: any authenticated user (client session calls such as v2 Telemetry);
  unauthenticated callers only when the default policy grants anything at all;
- ``broker``: a Broker or Super user (RegisterBroker, the slaves' BrokerMetadata sync);
- ``super``: a Super user only (managing ACL users);
- ``relay``: decided by the broker the call is forwarded to (RelayBrokerCall passes the
  caller's signature on).

A method missing from the table is refused, and ``tests/unit/common/test_acl_rules.py`` fails
for it: every new RPC must declare its permission here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, Literal

from apache.rocketmq.v2 import service_pb2
from pocketmq.broker.v1 import broker_pb2
from pocketmq.namesrv.v1 import namesrv_pb2
from services.common.acl.model import Action, Resource, ResourceType

Requirement = tuple[Resource, tuple[Action, ...]]
Extractor = Callable[[Any, str], list[Requirement]]
Kind = Literal["check", "authenticated", "broker", "super", "relay"]

#: Services every caller may use (health probes, reflection).
PUBLIC_SERVICES = frozenset({"grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection",
                             "grpc.reflection.v1.ServerReflection"})

PUB = (Action.PUB,)
SUB = (Action.SUB,)
SUB_OR_GET = (Action.SUB, Action.GET)
SUB_OR_UPDATE = (Action.SUB, Action.UPDATE)
ROUTE = (Action.PUB, Action.SUB, Action.GET)
CREATE = (Action.CREATE,)


@dataclasses.dataclass(frozen=True)
class Rule:
    kind: Kind
    extract: Extractor | None = None
    #: Checked for every message of a client stream (SendMessageStream), not once per call.
    per_message: bool = False


def topic(name: str) -> Resource:
    return Resource(ResourceType.TOPIC, name)


def group(name: str) -> Resource:
    return Resource(ResourceType.GROUP, name)


def cluster(name: str) -> Resource:
    return Resource(ResourceType.CLUSTER, name)


def check(fn: Callable[[Any, str], Iterable[Requirement]]) -> Rule:
    return Rule("check", lambda req, cl: list(fn(req, cl)))


def on_cluster(actions: tuple[Action, ...]) -> Rule:
    return check(lambda req, cl: [(cluster(cl), actions)])


AUTHENTICATED = Rule("authenticated")
BROKER = Rule("broker")
SUPER = Rule("super")
RELAY = Rule("relay")


def _topic_and_group(t: str, g: str, actions: tuple[Action, ...]) -> list[Requirement]:
    out = [(topic(t), actions)]
    if g:
        out.append((group(g), actions))
    return out


def _batch_topics(r: Any) -> list[Requirement]:
    """Pub on the batch's topic (the send path refuses a message naming another topic)."""
    return [(topic(r.topic), PUB)]


def _receipts(group_name: str, receipts: Iterable[Any]) -> list[Requirement]:
    """Sub on the group and on every topic the POP receipts name (the subscribed or retry topic)."""
    return [(group(group_name), SUB), *((topic(t), SUB) for t in sorted({r.topic for r in receipts}))]


def _pop_stream(r: Any) -> list[Requirement]:
    """One PopStream request: its ack (when set), then its pop (when set, or when neither is)."""
    out = _receipts(r.ack.consumer_group, r.ack.receipts) if r.HasField("ack") else []
    if r.HasField("pop") or not out:
        out += _topic_and_group(r.pop.topic, r.pop.consumer_group, SUB)
    return out


_B = "/pocketmq.broker.v1.Broker/"
_M = "/pocketmq.broker.v1.BrokerMetadata/"
_T = "/pocketmq.broker.v1.Transactions/"
_Q = "/pocketmq.broker.v1.MessageQuery/"
_N = "/pocketmq.namesrv.v1.NameServer/"
_V2 = "/apache.rocketmq.v2.MessagingService/"

V1_RULES: dict[str, Rule] = {
    _B + "SendMessage": check(lambda r, cl: [(topic(r.message.topic), PUB)]),
    _B + "SendMessageBatch": check(lambda r, cl: _batch_topics(r)),
    _B + "SendMessageStream": Rule("check", lambda r, cl: _batch_topics(r), per_message=True),
    _B + "PullMessage": check(lambda r, cl: _topic_and_group(r.topic, r.consumer_group, SUB)),
    _B + "PullMessageStream": check(lambda r, cl: _topic_and_group(r.topic, r.consumer_group, SUB)),
    _B + "PopMessages": check(lambda r, cl: _topic_and_group(r.topic, r.consumer_group, SUB)),
    _B + "AckMessages": check(lambda r, cl: _receipts(r.consumer_group, r.receipts)),
    _B + "ChangeInvisibleTime": check(lambda r, cl: _receipts(r.consumer_group, r.receipts)),
    _B + "PopStream": Rule("check", lambda r, cl: _pop_stream(r), per_message=True),
    _B + "GetMinOffset": check(lambda r, cl: [(topic(r.topic), SUB_OR_GET)]),
    _B + "GetMaxOffset": check(lambda r, cl: [(topic(r.topic), SUB_OR_GET)]),
    _B + "SearchOffset": check(lambda r, cl: [(topic(r.topic), SUB_OR_GET)]),
    _B + "QueryConsumerOffset": check(lambda r, cl: _topic_and_group(r.topic, r.consumer_group, SUB_OR_GET)),
    _B + "UpdateConsumerOffset": check(
        lambda r, cl: _topic_and_group(r.topic, r.consumer_group, SUB_OR_UPDATE)),
    _B + "ConsumerHeartbeat": check(lambda r, cl: [
        (group(r.consumer_group), SUB), *((topic(s.topic), SUB) for s in r.subscriptions)]),
    _B + "UnregisterConsumer": check(lambda r, cl: [(group(r.consumer_group), SUB)]),
    _B + "GetConsumerList": check(lambda r, cl: [(group(r.consumer_group), SUB_OR_GET)]),
    _B + "CreateTopic": check(lambda r, cl: [(topic(r.topic_config.topic_name), (Action.CREATE,))]),
    _B + "CreateTopics": check(lambda r, cl: [(topic(c.topic_name), CREATE) for c in r.topic_configs]
                               or [(cluster(cl), CREATE)]),
    _B + "DeleteTopic": check(lambda r, cl: [(topic(r.topic), (Action.DELETE,))]),
    _B + "GetTopic": check(lambda r, cl: [(topic(r.topic), (Action.GET,))]),
    _B + "ListTopics": on_cluster((Action.LIST,)),
    _B + "CreateSubscriptionGroup": check(lambda r, cl: [(group(r.config.group_name), (Action.CREATE,))]),
    _B + "DeleteSubscriptionGroup": check(lambda r, cl: [(group(r.group_name), (Action.DELETE,))]),
    _B + "ListSubscriptionGroups": on_cluster((Action.LIST,)),
    _B + "GetBrokerStatus": on_cluster((Action.GET,)),
    _B + "GetHAStatus": on_cluster((Action.GET,)),
    # Operator calls: moving a group's offsets changes what it reads (Update on group and topic);
    # live configuration is the cluster's (Get to read it, secrets masked; Update to change it).
    _B + "ResetConsumerOffset": check(
        lambda r, cl: _topic_and_group(r.topic, r.consumer_group, (Action.UPDATE,))),
    _B + "GetConsumerConnections": check(lambda r, cl: [(group(r.consumer_group), SUB_OR_GET)]),
    _B + "GetBrokerConfig": on_cluster((Action.GET,)),
    _B + "UpdateBrokerConfig": on_cluster((Action.UPDATE,)),
    _B + "PutAclUser": SUPER,
    _B + "DeleteAclUser": SUPER,
    _B + "ListAclUsers": SUPER,
    _B + "PutAclPolicy": SUPER,
    _B + "DeleteAclPolicy": SUPER,
    _M + "GetAclTable": BROKER,
    _M + "GetAllTopicConfig": BROKER,
    _M + "GetAllConsumerOffsets": BROKER,
    _M + "GetAllDelayOffsets": BROKER,
    _M + "GetAllSubscriptionGroups": BROKER,
    _T + "EndTransaction": check(lambda r, cl: [(group(r.producer_group), PUB)]),
    _T + "TransactionChecks": check(lambda r, cl: [(group(r.producer_group), PUB)]),
    # By commit log offset: the topic is known only once the message is read.
    _Q + "ViewMessage": on_cluster((Action.GET,)),
    _Q + "QueryMessage": check(lambda r, cl: [(topic(r.topic), SUB_OR_GET)]),
    _Q + "BrowseMessages": check(lambda r, cl: [(topic(r.topic), SUB_OR_GET)]),
    _N + "RegisterBroker": BROKER,
    _N + "UnregisterBroker": BROKER,
    _N + "GetRouteInfoByTopic": check(lambda r, cl: [(topic(r.topic), ROUTE)]),
    _N + "GetBrokerClusterInfo": on_cluster((Action.GET, Action.LIST)),
    _N + "GetTopicsByCluster": check(lambda r, cl: [(cluster(r.cluster), (Action.LIST,))]),
    _N + "GetAllTopicList": on_cluster((Action.LIST,)),
    _N + "WipeWritePermOfBroker": on_cluster((Action.UPDATE,)),
    _N + "AddWritePermOfBroker": on_cluster((Action.UPDATE,)),
    _N + "PutKVConfig": on_cluster((Action.UPDATE,)),
    _N + "GetKVConfig": on_cluster((Action.GET,)),
    _N + "DeleteKVConfig": on_cluster((Action.DELETE,)),
    _N + "GetKVListByNamespace": on_cluster((Action.GET,)),
    _N + "RelayBrokerCall": RELAY,
}


def _v2_group_topic(r: Any, actions: tuple[Action, ...]) -> list[Requirement]:
    return _topic_and_group(r.topic.name, r.group.name, actions)


def _v2_queue_group(r: Any, actions: tuple[Action, ...]) -> list[Requirement]:
    return _topic_and_group(r.message_queue.topic.name, r.group.name, actions)


V2_RULES: dict[str, Rule] = {
    _V2 + "QueryRoute": check(lambda r, cl: [(topic(r.topic.name), ROUTE)]),
    _V2 + "Heartbeat": AUTHENTICATED,
    _V2 + "SendMessage": check(lambda r, cl: [(topic(t), PUB) for t in {m.topic.name for m in r.messages}]
                               or [(topic(""), PUB)]),
    _V2 + "QueryAssignment": check(lambda r, cl: _v2_group_topic(r, SUB)),
    _V2 + "ReceiveMessage": check(lambda r, cl: _v2_queue_group(r, SUB)),
    _V2 + "AckMessage": check(lambda r, cl: _v2_group_topic(r, SUB)),
    _V2 + "ForwardMessageToDeadLetterQueue": check(lambda r, cl: _v2_group_topic(r, SUB)),
    _V2 + "PullMessage": check(lambda r, cl: _v2_queue_group(r, SUB)),
    _V2 + "UpdateOffset": check(lambda r, cl: _v2_queue_group(r, SUB_OR_UPDATE)),
    _V2 + "GetOffset": check(lambda r, cl: _v2_queue_group(r, SUB_OR_GET)),
    _V2 + "QueryOffset": check(lambda r, cl: [(topic(r.message_queue.topic.name), SUB_OR_GET)]),
    _V2 + "EndTransaction": check(lambda r, cl: [(topic(r.topic.name), PUB)]),
    _V2 + "Telemetry": AUTHENTICATED,
    _V2 + "NotifyClientTermination": AUTHENTICATED,
    _V2 + "ChangeInvisibleDuration": check(lambda r, cl: _v2_group_topic(r, SUB)),
    _V2 + "RecallMessage": check(lambda r, cl: [(topic(r.topic.name), PUB)]),
    _V2 + "SyncLiteSubscription": check(lambda r, cl: _v2_group_topic(r, SUB)),
}

RULES: dict[str, Rule] = {**V1_RULES, **V2_RULES}

#: The file descriptors whose services the servers expose (the rules test walks them).
SERVICE_FILES = (broker_pb2.DESCRIPTOR, namesrv_pb2.DESCRIPTOR, service_pb2.DESCRIPTOR)


def all_methods() -> list[str]:
    """``/package.Service/Method`` of every RPC of every exposed service."""
    return [f"/{service.full_name}/{method.name}"
            for fd in SERVICE_FILES for service in fd.services_by_name.values() for method in service.methods]
