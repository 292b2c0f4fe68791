"""Access control with real processes (NameServer + master + slave, aclEnable=true): every RPC
of every service refused without credentials and nothing changed, per-user permissions,
forged / replayed / wrongly signed requests, a fake broker, the relay, the slave's sync."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from google.protobuf import message_factory

from apache.rocketmq.v2 import definition_pb2, service_pb2
from pocketmq.broker.v1 import broker_pb2, broker_pb2_grpc
from pocketmq.client.message import Message
from pocketmq.client.producer import Producer
from pocketmq.common.v1 import common_pb2
from pocketmq.namesrv.v1 import namesrv_pb2
from pocketmq.wire.auth import Credentials, auth_metadata, authorization_value, format_date_time, sign
from services.common.acl.rules import SERVICE_FILES, all_methods
from services.namesrv.relay import relayable_methods
from tests.integration.acl.conftest import (
    ADMIN,
    BROKER,
    CLUSTER,
    GROUP,
    PUB,
    SUB,
    TOPIC,
    WINDOW_MS,
    AclCluster,
)
from tests.integration.procs import wait_until

V2_UNAUTHORIZED = definition_pb2.Code.UNAUTHORIZED
V2_FORBIDDEN = definition_pb2.Code.FORBIDDEN


def _method(full: str) -> Any:
    service_name, name = full.strip("/").split("/")
    for fd in SERVICE_FILES:
        for service in fd.services_by_name.values():
            if service.full_name == service_name:
                return service.methods_by_name[name]
    raise AssertionError(full)


def _msg(body: bytes = b"x") -> broker_pb2.Message:
    return broker_pb2.Message(topic=TOPIC, body=body)


INTRUDER_TOPIC = common_pb2.TopicConfig(topic_name="acl-intruder", read_queue_nums=1, write_queue_nums=1,
                                        perm=6)

#: Requests that would change something (or read something) if they got through.
REQUESTS: dict[str, Any] = {
    "/pocketmq.broker.v1.Broker/SendMessage": broker_pb2.SendMessageRequest(message=_msg(), queue_id=-1),
    "/pocketmq.broker.v1.Broker/SendMessageBatch": broker_pb2.SendMessageBatchRequest(
        topic=TOPIC, queue_id=-1, messages=[_msg()]),
    "/pocketmq.broker.v1.Broker/SendMessageStream": broker_pb2.SendMessageBatchRequest(
        topic=TOPIC, queue_id=-1, messages=[_msg()]),
    "/pocketmq.broker.v1.Broker/PullMessage": broker_pb2.PullMessageRequest(
        consumer_group=GROUP, topic=TOPIC, max_msg_nums=8),
    "/pocketmq.broker.v1.Broker/PullMessageStream": broker_pb2.PullMessageRequest(
        consumer_group=GROUP, topic=TOPIC, max_msg_nums=8),
    "/pocketmq.broker.v1.Broker/UpdateConsumerOffset": broker_pb2.UpdateConsumerOffsetRequest(
        consumer_group=GROUP, topic=TOPIC, queue_id=0, offset=7),
    "/pocketmq.broker.v1.Broker/ConsumerHeartbeat": broker_pb2.ConsumerHeartbeatRequest(
        consumer_group=GROUP, client_id="intruder"),
    "/pocketmq.broker.v1.Broker/CreateTopic": broker_pb2.CreateTopicRequest(topic_config=INTRUDER_TOPIC),
    "/pocketmq.broker.v1.Broker/CreateTopics": broker_pb2.CreateTopicsRequest(topic_configs=[INTRUDER_TOPIC]),
    "/pocketmq.broker.v1.Broker/DeleteTopic": broker_pb2.DeleteTopicRequest(topic=TOPIC),
    "/pocketmq.broker.v1.Broker/CreateSubscriptionGroup": broker_pb2.CreateSubscriptionGroupRequest(
        config=broker_pb2.SubscriptionGroupConfig(group_name="g-intruder")),
    "/pocketmq.broker.v1.Broker/DeleteSubscriptionGroup": broker_pb2.DeleteSubscriptionGroupRequest(
        group_name=GROUP),
    "/pocketmq.namesrv.v1.NameServer/RegisterBroker": namesrv_pb2.RegisterBrokerRequest(
        cluster_name=CLUSTER, broker_name="broker-evil", broker_id=0, broker_addr="127.0.0.1:1",
        ha_server_addr="127.0.0.1:2", topic_configs=[common_pb2.TopicConfig(
            topic_name=TOPIC, read_queue_nums=8, write_queue_nums=8, perm=6)]),
    "/pocketmq.namesrv.v1.NameServer/UnregisterBroker": namesrv_pb2.UnregisterBrokerRequest(
        cluster_name=CLUSTER, broker_name="broker-a", broker_id=0),
    "/pocketmq.namesrv.v1.NameServer/WipeWritePermOfBroker": namesrv_pb2.WipeWritePermOfBrokerRequest(
        broker_name="broker-a"),
    "/pocketmq.namesrv.v1.NameServer/PutKVConfig": namesrv_pb2.PutKVConfigRequest(
        namespace="acl", key="k", value="intruder"),
    "/pocketmq.namesrv.v1.NameServer/DeleteKVConfig": namesrv_pb2.DeleteKVConfigRequest(
        namespace="acl", key="k"),
    "/apache.rocketmq.v2.MessagingService/SendMessage": service_pb2.SendMessageRequest(messages=[
        definition_pb2.Message(topic=definition_pb2.Resource(name=TOPIC), body=b"x",
                               system_properties=definition_pb2.SystemProperties(message_id="01AB"))]),
    "/apache.rocketmq.v2.MessagingService/QueryRoute": service_pb2.QueryRouteRequest(
        topic=definition_pb2.Resource(name=TOPIC)),
}


def request_for(full: str) -> Any:
    if full in REQUESTS:
        return REQUESTS[full]
    return message_factory.GetMessageClass(_method(full).input_type)()


def invoke(channel: grpc.Channel, full: str, request: Any,
           metadata: tuple[tuple[str, str], ...] = ()) -> tuple[grpc.StatusCode, str, Any]:
    """(gRPC code, details, first response) of one call of any shape."""
    desc = _method(full)
    out_cls = message_factory.GetMessageClass(desc.output_type)
    kw: dict[str, Callable[..., Any]] = {"request_serializer": lambda m: m.SerializeToString(),
                                         "response_deserializer": out_cls.FromString}
    try:
        if not desc.client_streaming and not desc.server_streaming:
            reply = channel.unary_unary(full, **kw)(request, timeout=10, metadata=metadata)
        elif not desc.client_streaming:
            reply = next(iter(channel.unary_stream(full, **kw)(request, timeout=10, metadata=metadata)), None)
        elif desc.server_streaming:
            call = channel.stream_stream(full, **kw)(iter([request]), timeout=10, metadata=metadata)
            reply = next(iter(call), None)
        else:
            reply = channel.stream_unary(full, **kw)(iter([request]), timeout=10, metadata=metadata)
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or "", None
    return grpc.StatusCode.OK, "", reply


def snapshot(cluster: AclCluster) -> dict[str, Any]:
    """Everything an unauthorised call could change, read with the admin and broker users."""
    broker = cluster.broker_stub()
    meta = broker_pb2_grpc.BrokerMetadataStub(cluster.channel(cluster.master, BROKER))
    names = cluster.namesrv_stub()
    offsets = meta.GetAllConsumerOffsets(broker_pb2.GetAllConsumerOffsetsRequest(), timeout=5)
    info = names.GetBrokerClusterInfo(namesrv_pb2.GetBrokerClusterInfoRequest(), timeout=5)
    route = names.GetRouteInfoByTopic(namesrv_pb2.GetRouteInfoByTopicRequest(topic=TOPIC), timeout=5)
    return {
        "topics": sorted(t.topic_name for t in broker.ListTopics(broker_pb2.ListTopicsRequest(), timeout=5)
                         .topic_configs),
        "groups": sorted(g.group_name for g in broker.ListSubscriptionGroups(
            broker_pb2.ListSubscriptionGroupsRequest(), timeout=5).configs),
        "offsets": sorted((e.consumer_group, e.topic, e.queue_id, e.offset) for e in offsets.offsets),
        "max": [broker.GetMaxOffset(broker_pb2.QueueRequest(topic=TOPIC, queue_id=q), timeout=5).offset
                for q in (0, 1)],
        "brokers": sorted(info.broker_addr_table),
        "route": sorted((q.broker_name, q.write_queue_nums, q.perm) for q in route.queue_datas),
        "kv": _kv(names),
    }


def _kv(names: Any) -> dict[str, str]:
    try:
        return dict(names.GetKVListByNamespace(namesrv_pb2.GetKVListByNamespaceRequest(namespace="acl"),
                                               timeout=5).table)
    except grpc.RpcError as exc:
        if exc.code() != grpc.StatusCode.NOT_FOUND:
            raise
        return {}


def _servers(cluster: AclCluster, full: str) -> list[str]:
    if full.startswith("/pocketmq.namesrv."):
        return [cluster.namesrv]
    if full.startswith("/apache.rocketmq.v2."):
        return [cluster.master, cluster.namesrv]
    return [cluster.master, cluster.slave]


def test_every_rpc_without_credentials_is_refused_and_changes_nothing(cluster: AclCluster) -> None:
    before = snapshot(cluster)
    checked = 0
    for full in all_methods():
        if full == "/pocketmq.namesrv.v1.NameServer/RelayBrokerCall":
            continue  # below: once per relayable broker method
        for addr in _servers(cluster, full):
            with grpc.insecure_channel(addr) as channel:
                code, details, reply = invoke(channel, full, request_for(full))
            where = f"{full} at {addr}"
            if full.startswith("/apache.rocketmq.v2."):
                assert code == grpc.StatusCode.OK and reply is not None, (where, code, details)
                assert reply.status.code == V2_UNAUTHORIZED, (where, reply.status)
            else:
                assert code == grpc.StatusCode.UNAUTHENTICATED, (where, code, details)
                assert "secret" not in details.lower().replace("secretkey", "")
            checked += 1
    # The relay forwards the (missing) credentials: the broker refuses every method.
    relay = "/pocketmq.namesrv.v1.NameServer/RelayBrokerCall"
    with grpc.insecure_channel(cluster.namesrv) as channel:
        for method in sorted(relayable_methods()):
            req = namesrv_pb2.RelayBrokerCallRequest(broker_addr=cluster.master, method=method,
                                                     request=request_for(method).SerializeToString())
            code, details, _ = invoke(channel, relay, req)
            assert code == grpc.StatusCode.UNAUTHENTICATED, (method, code, details)
            checked += 1
    assert checked > 2 * len(all_methods())
    assert snapshot(cluster) == before


def _denied_metric(cluster: AclCluster) -> float:
    url = f"http://127.0.0.1:{cluster.master_metrics}/metrics"
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("pocketmq_acl_denied_total{"))


def test_pub_only_user_sends_but_cannot_delete_or_learn_what_exists(cluster: AclCluster) -> None:
    before = _denied_metric(cluster)
    with Producer(cluster.namesrv, credentials=PUB) as producer:
        result = producer.send(Message(TOPIC, b"hello from pub-only"))
    assert result.msg_id
    stub = cluster.broker_stub(PUB)
    with pytest.raises(grpc.RpcError) as existing:
        stub.DeleteTopic(broker_pb2.DeleteTopicRequest(topic=TOPIC), timeout=5)
    assert existing.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert existing.value.details() == f"permission denied: user 'pub-only' may not Delete Topic:{TOPIC}"
    with pytest.raises(grpc.RpcError) as missing:
        stub.DeleteTopic(broker_pb2.DeleteTopicRequest(topic="acl-nope"), timeout=5)
    # Same answer whether the topic exists or not.
    assert missing.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert missing.value.details() == "permission denied: user 'pub-only' may not Delete Topic:acl-nope"
    with pytest.raises(grpc.RpcError) as pull:
        stub.PullMessage(broker_pb2.PullMessageRequest(consumer_group=GROUP, topic=TOPIC, max_msg_nums=1),
                         timeout=5)
    assert pull.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert TOPIC in [t.topic_name for t in cluster.broker_stub().ListTopics(broker_pb2.ListTopicsRequest(),
                                                                            timeout=5).topic_configs]
    assert _denied_metric(cluster) >= before + 3
    log = cluster.master_proc.log_text()
    assert "pub-only" in log and "request denied" in log
    for secret in (PUB.secret_key, ADMIN.secret_key, BROKER.secret_key, SUB.secret_key):
        assert secret not in log
    # A Sub user pulls (and may not send).
    sub = cluster.broker_stub(SUB)
    reply = sub.PullMessage(broker_pb2.PullMessageRequest(consumer_group=GROUP, topic=TOPIC, queue_id=0,
                                                          max_msg_nums=32), timeout=5)
    assert reply is not None
    with pytest.raises(grpc.RpcError) as send:
        sub.SendMessage(broker_pb2.SendMessageRequest(message=_msg(), queue_id=-1), timeout=5)
    assert send.value.code() == grpc.StatusCode.PERMISSION_DENIED


def _headers(ak: str, sk: str, at: float) -> tuple[tuple[str, str], ...]:
    return auth_metadata(Credentials(ak, sk), at)


def test_forged_replayed_and_wrongly_signed_requests_are_refused(cluster: AclCluster) -> None:
    status = "/pocketmq.broker.v1.Broker/GetBrokerStatus"
    req = broker_pb2.GetBrokerStatusRequest()
    now = time.time()
    stamp = format_date_time(now)
    old = format_date_time(now - WINDOW_MS / 1000 - 120)
    cases = {
        "wrong secret": _headers(ADMIN.access_key, "not-the-secret", now),
        "unknown user": _headers("nobody", ADMIN.secret_key, now),
        "replayed after the window": (("x-mq-date-time", old), (
            "authorization", authorization_value(ADMIN.access_key, sign(ADMIN.secret_key, old)))),
        "signature of another time": (("x-mq-date-time", stamp), (
            "authorization", authorization_value(ADMIN.access_key, sign(ADMIN.secret_key, old)))),
        "forged scheme": (("x-mq-date-time", stamp), ("authorization", f"Basic {ADMIN.access_key}:x")),
        "no date": (("authorization", authorization_value(ADMIN.access_key, sign(ADMIN.secret_key, stamp))),),
    }
    with grpc.insecure_channel(cluster.master) as channel:
        code, _, reply = invoke(channel, status, req, _headers(ADMIN.access_key, ADMIN.secret_key, now - 20))
        assert code == grpc.StatusCode.OK and reply.cluster_name == CLUSTER  # skewed clock, in the window
        for name, metadata in cases.items():
            code, details, _ = invoke(channel, status, req, metadata)
            assert code == grpc.StatusCode.UNAUTHENTICATED, (name, code, details)
            assert ADMIN.secret_key not in details
        # v2: the SDKs' status codes in the response.
        route = "/apache.rocketmq.v2.MessagingService/QueryRoute"
        _, _, reply = invoke(channel, route, request_for(route), cases["wrong secret"])
        assert reply.status.code == V2_UNAUTHORIZED
        _, _, reply = invoke(channel, route, service_pb2.QueryRouteRequest(
            topic=definition_pb2.Resource(name="other")), _headers(PUB.access_key, PUB.secret_key, now))
        assert reply.status.code == V2_FORBIDDEN
        assert reply.status.message == "permission denied: user 'pub-only' may not Pub|Sub|Get Topic:other"


def test_fake_broker_cannot_register_and_only_broker_users_sync(cluster: AclCluster) -> None:
    fake = REQUESTS["/pocketmq.namesrv.v1.NameServer/RegisterBroker"]
    refused = ((None, grpc.StatusCode.UNAUTHENTICATED), (PUB, grpc.StatusCode.PERMISSION_DENIED),
               (SUB, grpc.StatusCode.PERMISSION_DENIED))
    for credentials, code in refused:
        stub = cluster.namesrv_stub(credentials)
        with pytest.raises(grpc.RpcError) as info:
            stub.RegisterBroker(fake, timeout=5)
        assert info.value.code() == code
    route = cluster.namesrv_stub(SUB).GetRouteInfoByTopic(namesrv_pb2.GetRouteInfoByTopicRequest(topic=TOPIC),
                                                          timeout=5)
    assert [b.broker_name for b in route.broker_datas] == ["broker-a"]
    # Metadata sync: a Broker user reads the tables, a Pub user does not.
    with pytest.raises(grpc.RpcError) as info:
        broker_pb2_grpc.BrokerMetadataStub(cluster.channel(cluster.master, PUB)).GetAllConsumerOffsets(
            broker_pb2.GetAllConsumerOffsetsRequest(), timeout=5)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    # The slave syncs with its Broker credential: a topic created on the master reaches it.
    cluster.broker_stub().CreateTopic(broker_pb2.CreateTopicRequest(topic_config=common_pb2.TopicConfig(
        topic_name="acl-synced", read_queue_nums=1, write_queue_nums=1, perm=6)), timeout=5)
    slave = cluster.broker_stub(ADMIN, cluster.slave)
    wait_until(lambda: slave.GetTopic(broker_pb2.GetTopicRequest(topic="acl-synced"), timeout=5) is not None,
               20, message="topic synced to the slave", ignore=(grpc.RpcError,))


def test_relay_forwards_the_callers_credentials(cluster: AclCluster) -> None:
    method = "/pocketmq.broker.v1.Broker/GetBrokerStatus"
    req = namesrv_pb2.RelayBrokerCallRequest(broker_addr=cluster.master, method=method,
                                             request=broker_pb2.GetBrokerStatusRequest().SerializeToString())
    reply = cluster.namesrv_stub(ADMIN).RelayBrokerCall(req, timeout=10)
    assert broker_pb2.BrokerStatus.FromString(reply.response).cluster_name == CLUSTER
    with pytest.raises(grpc.RpcError) as info:
        cluster.namesrv_stub(PUB).RelayBrokerCall(req, timeout=10)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "Get Cluster:c1" in (info.value.details() or "")


def test_send_stream_checks_every_batch(cluster: AclCluster) -> None:
    stub = cluster.broker_stub(PUB)
    batches = [broker_pb2.SendMessageBatchRequest(topic=TOPIC, queue_id=-1, request_id=i, messages=[_msg()])
               for i in range(3)]
    replies = list(stub.SendMessageStream(iter(batches), timeout=10))
    assert [r.request_id for r in replies] == [0, 1, 2]
    bad = broker_pb2.SendMessageBatchRequest(topic="other", queue_id=-1, request_id=9, messages=[_msg()])
    call = stub.SendMessageStream(iter([*batches[:1], bad]), timeout=10)
    got = []
    with pytest.raises(grpc.RpcError) as info:
        for reply in call:
            got.append(reply.request_id)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert got == [0]


def test_cli_signs_with_flags_or_environment_and_never_prints_the_secret(cluster: AclCluster) -> None:
    import os
    import subprocess
    import sys

    def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("POCKETMQ_")}
        return subprocess.run([sys.executable, "-m", "pocketmq.cli", *args, "--namesrv", cluster.namesrv],
                              capture_output=True, text=True, env={**base, **(env or {})}, timeout=60,
                              check=False)

    refused = cli("topic", "list")
    assert refused.returncode == 1 and "UNAUTHENTICATED" in (refused.stdout + refused.stderr).upper()
    listed = cli("topic", "list", "--output", "json", env={"POCKETMQ_ACCESS_KEY": ADMIN.access_key,
                                                           "POCKETMQ_SECRET_KEY": ADMIN.secret_key})
    assert listed.returncode == 0, listed.stderr
    assert TOPIC in json.loads(listed.stdout)["topics"]
    # Pub-only, straight to the broker: refused (already the broker lookup the delete starts with).
    delete = cli("topic", "delete", TOPIC, "--broker", cluster.master, "--output", "json",
                 "--access-key", PUB.access_key, "--secret-key", PUB.secret_key)
    assert delete.returncode == 1
    output = delete.stdout + delete.stderr
    error = json.loads(delete.stdout)["error"]
    assert error["code"] == "PERMISSION_DENIED" and "user 'pub-only' may not" in error["message"]
    assert PUB.secret_key not in output
    assert TOPIC in [t.topic_name for t in cluster.broker_stub().ListTopics(broker_pb2.ListTopicsRequest(),
                                                                            timeout=5).topic_configs]
    helped = cli("topic", "list", "--help", env={"POCKETMQ_SECRET_KEY": ADMIN.secret_key})
    assert "--secret-key" in helped.stdout and ADMIN.secret_key not in helped.stdout


def test_acl_cli_manages_users_in_the_synced_table(cluster: AclCluster) -> None:
    import os
    import subprocess
    import sys

    admin_env = {**{k: v for k, v in os.environ.items() if not k.startswith("POCKETMQ_")},
                 "POCKETMQ_ACCESS_KEY": ADMIN.access_key, "POCKETMQ_SECRET_KEY": ADMIN.secret_key,
                 "POCKETMQ_NAMESRV": cluster.namesrv}

    def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pocketmq.cli", "acl", *args, "--output", "json"],
                              capture_output=True, text=True, env={**admin_env, **(env or {})}, timeout=60,
                              check=False)

    reader = Credentials("cli-reader", "cli-reader-secret-1")
    made = cli("user", "create", reader.access_key, env={"POCKETMQ_ACL_USER_SECRET": reader.secret_key})
    assert made.returncode == 0, made.stdout + made.stderr
    assert reader.secret_key not in made.stdout + made.stderr
    policy = cli("policy", "set", reader.access_key, "--resource", "Topic:acl-*", "--actions", "Get,Sub")
    assert policy.returncode == 0, policy.stdout + policy.stderr
    stub = cluster.broker_stub(reader)
    assert stub.GetTopic(broker_pb2.GetTopicRequest(topic=TOPIC), timeout=5).topic_config.topic_name == TOPIC
    with pytest.raises(grpc.RpcError) as info:
        stub.DeleteTopic(broker_pb2.DeleteTopicRequest(topic=TOPIC), timeout=5)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    listed = json.loads(cli("user", "list").stdout)
    users = listed["results"][0]["users"]
    assert [u["access_key"] for u in users] == [reader.access_key]
    assert "secret_key" not in users[0] or not users[0]["secret_key"]
    # Registered with the NameServer by the master: the new user gets routes there too.
    names = cluster.namesrv_stub(reader)
    route = namesrv_pb2.GetRouteInfoByTopicRequest(topic=TOPIC)
    wait_until(lambda: names.GetRouteInfoByTopic(route, timeout=5).queue_datas, 20,
               message="ACL table registered with the NameServer", ignore=(grpc.RpcError,))
    # Synced to the slave (it serves reads with the same users).
    slave = cluster.broker_stub(reader, cluster.slave)
    wait_until(lambda: slave.GetTopic(broker_pb2.GetTopicRequest(topic=TOPIC), timeout=5) is not None, 20,
               message="ACL table synced to the slave", ignore=(grpc.RpcError,))
    # Only Super users manage users.
    pub_env = {"POCKETMQ_ACCESS_KEY": PUB.access_key, "POCKETMQ_SECRET_KEY": PUB.secret_key}
    refused = cli("user", "list", env=pub_env)
    assert refused.returncode == 1 and "PERMISSION_DENIED" in refused.stdout
    assert cli("user", "delete", reader.access_key).returncode == 0
    with pytest.raises(grpc.RpcError) as gone:
        stub.GetTopic(broker_pb2.GetTopicRequest(topic=TOPIC), timeout=5)
    assert gone.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_acl_file_is_reloaded_and_default_policies_apply_to_unsigned_callers(cluster: AclCluster) -> None:
    import os

    from tests.integration.acl.conftest import ACL

    def write(doc: dict[str, Any]) -> None:
        tmp = cluster.acl_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, cluster.acl_file)  # as a Kubernetes Secret update swaps the file

    anonymous = cluster.broker_stub(None)
    get = broker_pb2.GetTopicRequest(topic=TOPIC)

    def anonymous_get() -> bool:
        try:
            return anonymous.GetTopic(get, timeout=5).topic_config.topic_name == TOPIC
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAUTHENTICATED
            return False

    assert not anonymous_get()
    write({**ACL, "defaultPolicies": [{"resource": "Topic:acl-*", "actions": ["Get"]}]})
    try:
        wait_until(anonymous_get, 15, message="ACL file re-read by the running broker")
        with pytest.raises(grpc.RpcError) as info:
            anonymous.DeleteTopic(broker_pb2.DeleteTopicRequest(topic=TOPIC), timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "unauthenticated caller may not Delete Topic:acl-t" in (info.value.details() or "")
    finally:
        write(ACL)
        wait_until(lambda: not anonymous_get(), 15, message="ACL file restored")


def test_own_consumer_with_a_sub_user_consumes_what_a_pub_user_sent(cluster: AclCluster) -> None:
    import time as _time

    from pocketmq.client.blocking_consumer import Consumer

    marker = f"own-{_time.time_ns()}"
    with Producer(cluster.namesrv, credentials=PUB) as producer:
        for i in range(3):
            producer.send(Message(TOPIC, f"{marker}-{i}".encode()))
    seen: set[str] = set()
    with Consumer("g-own", cluster.namesrv, consume_from="first", credentials=SUB) as consumer:
        consumer.subscribe(TOPIC)
        deadline = _time.monotonic() + 30
        while len(seen) < 3 and _time.monotonic() < deadline:
            msg = consumer.receive(timeout=2)
            if msg is not None and msg.body.startswith(marker.encode()):
                seen.add(msg.body.decode())
    assert seen == {f"{marker}-{i}" for i in range(3)}
    assert "may not" not in "".join(line for line in cluster.master_proc.log_text().splitlines()
                                    if "sub-only" in line and "g-own" in line)


def test_own_pop_consumer_pops_and_acks_with_a_sub_user_only(cluster: AclCluster) -> None:
    import asyncio

    from pocketmq.client.popconsumer import PopConsumer
    from pocketmq.errors import PermissionDeniedError

    marker = f"pop-{time.time_ns()}".encode()
    with Producer(cluster.namesrv, credentials=PUB) as producer:
        for i in range(3):
            producer.send(Message(TOPIC, marker + b"-%d" % i))

    async def go() -> None:
        # PopStream (pops with their acks riding along) is checked per request.
        async with PopConsumer("g-pop", cluster.namesrv, credentials=SUB) as consumer:
            consumer.subscribe(TOPIC)
            seen: set[bytes] = set()
            done: list[Any] = []
            deadline = time.monotonic() + 30
            while len(seen) < 3 and time.monotonic() < deadline:
                failed, got = await consumer.ack_and_receive(done, wait=1)
                assert failed == []
                done = [m for m in got if m.body.startswith(marker)]
                seen.update(m.body for m in done)
            assert await consumer.ack(done) == []
            assert seen == {marker + b"-%d" % i for i in range(3)}
        async with PopConsumer("g-pop", cluster.namesrv, credentials=PUB) as consumer:
            consumer.subscribe(TOPIC)
            with pytest.raises(PermissionDeniedError):
                await consumer.receive(wait=0)

    asyncio.run(go())
