"""NameServer and broker registration with real processes on loopback.

The registering party is ``registrar_proc``: the real BrokerRegistrar in its own process, so a
SIGKILL is a real crash (no unregister) and a SIGTERM a real graceful stop.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from pocketmq.common.v1 import common_pb2
from pocketmq.namesrv.v1 import namesrv_pb2 as pb
from tests.integration.namesrv.conftest import EXPIRY_MS, SCAN_MS, Namesrv, Registrar
from tests.integration.procs import ProcessGroup
from tests.support import ROOT, free_port, now_ms, wait_until

pytestmark = pytest.mark.slow

StartNamesrv = Callable[..., Namesrv]
StartRegistrar = Callable[..., Registrar]


def test_broker_registers_and_its_topics_appear_in_routes(
    start_namesrv: StartNamesrv, start_registrar: StartRegistrar
) -> None:
    ns = start_namesrv()
    broker = start_registrar([ns], "broker-a", topics=("orders", "payments"), ha_addr="127.0.0.1:20912")

    route = wait_until(lambda: ns.route("orders"), 5, message="route for 'orders'")
    assert [q.broker_name for q in route.queue_datas] == ["broker-a"]
    assert route.queue_datas[0].write_queue_nums == 4 and route.queue_datas[0].perm == 6
    assert [(b.cluster, b.broker_name, dict(b.broker_addrs)) for b in route.broker_datas] == [
        ("c1", "broker-a", {0: broker.broker_addr})
    ]
    assert list(ns.stub.GetTopicsByCluster(pb.GetTopicsByClusterRequest(cluster="c1")).topics) == [
        "orders", "payments"
    ]
    assert "payments" in ns.stub.GetAllTopicList(pb.GetAllTopicListRequest()).topics
    info = ns.cluster_info()
    assert list(info.cluster_addr_table["c1"].broker_names) == ["broker-a"]
    live = info.broker_live_table[broker.broker_addr]
    assert (live.broker_name, live.broker_id, live.ha_server_addr) == ("broker-a", 0, "127.0.0.1:20912")
    assert ns.proc.wait_for_log("broker registered")


def test_sigkilled_broker_disappears_after_the_expiry_and_not_before(
    start_namesrv: StartNamesrv, start_registrar: StartRegistrar
) -> None:
    ns = start_namesrv()
    broker = start_registrar([ns], "broker-k", topics=("doomed",), cluster="ck")
    wait_until(lambda: ns.route("doomed"), 5)

    broker.proc.kill()  # SIGKILL: no unregister
    # Read the last registration only once the process is surely dead.
    last_update = ns.cluster_info().broker_live_table[broker.broker_addr].last_update_timestamp
    assert now_ms() - last_update < EXPIRY_MS / 2, "the broker was not heartbeating before the kill"

    def gone() -> bool:
        return broker.broker_addr not in ns.live_addrs()

    wait_until(gone, EXPIRY_MS / 1000 + 5, interval=0.01, message="expired broker removed")
    removed_at = now_ms()
    silent = removed_at - last_update
    assert silent >= EXPIRY_MS, f"removed after {silent} ms of silence, before the {EXPIRY_MS} ms expiry"
    assert silent <= EXPIRY_MS + SCAN_MS + 1500, f"removed only after {silent} ms of silence"
    # Everything it contributed went with it.
    assert ns.route("doomed") is None
    info = ns.cluster_info()
    assert "broker-k" not in info.broker_addr_table and "ck" not in info.cluster_addr_table
    assert "expired" in ns.proc.wait_for_log("broker expired")


def test_gracefully_stopped_broker_is_removed_at_once(
    start_namesrv: StartNamesrv, start_registrar: StartRegistrar
) -> None:
    ns = start_namesrv(expiry_ms=60_000)
    broker = start_registrar([ns], "broker-g", topics=("leaving",))
    assert broker.broker_addr in ns.live_addrs()

    started = time.monotonic()
    assert broker.proc.terminate() == 0
    wait_until(lambda: broker.broker_addr not in ns.live_addrs(), 5, message="unregistered")
    assert time.monotonic() - started < 5  # far below the 60 s expiry
    assert ns.route("leaving") is None
    ns.proc.wait_for_log("broker unregistered")


def test_slave_gets_its_masters_address_and_ha_address(
    start_namesrv: StartNamesrv, start_registrar: StartRegistrar
) -> None:
    ns = start_namesrv()
    # The slave starts first: its first replies name no master.
    slave = start_registrar([ns], "broker-s", broker_id=1, topics=("slave-only",))
    assert slave.status()["master_addr"] == ""
    master = start_registrar([ns], "broker-s", broker_id=0, topics=("replicated",),
                             ha_addr="127.0.0.1:30912")

    status = wait_until(lambda: (s := slave.status())["master_addr"] and s, 5, message="slave learned master")
    assert (status["master_addr"], status["master_ha_addr"]) == (master.broker_addr, "127.0.0.1:30912")
    assert status["on_master"] == [[master.broker_addr, "127.0.0.1:30912"]]
    group = ns.cluster_info().broker_addr_table["broker-s"]
    assert dict(group.broker_addrs) == {0: master.broker_addr, 1: slave.broker_addr}
    # Topic configs are taken from the master only.
    assert ns.route("replicated") is not None
    assert ns.route("slave-only") is None


def test_slave_reregistered_as_broker_id_0_replaces_the_old_master(
    start_namesrv: StartNamesrv, start_registrar: StartRegistrar
) -> None:
    ns = start_namesrv(expiry_ms=30_000)  # long: the old master must go by replacement, not expiry
    master = start_registrar([ns], "broker-p", broker_id=0, topics=("t-old",))
    slave = start_registrar([ns], "broker-p", broker_id=1, topics=("t-old",))
    wait_until(lambda: slave.status()["master_addr"] == master.broker_addr, 5)

    master.proc.kill()  # the master crashes
    slave.proc.kill()  # the slave is restarted as the new master, at the same address
    promoted = start_registrar([ns], "broker-p", broker_id=0, topics=("t-old", "t-new"),
                               broker_addr=slave.broker_addr)

    info = ns.cluster_info()
    assert dict(info.broker_addr_table["broker-p"].broker_addrs) == {0: promoted.broker_addr}
    assert set(info.broker_live_table) == {promoted.broker_addr}
    assert info.broker_live_table[promoted.broker_addr].broker_id == 0
    for topic in ("t-old", "t-new"):
        route = ns.route(topic)
        assert route is not None, topic
        assert dict(route.broker_datas[0].broker_addrs) == {0: promoted.broker_addr}
    ns.proc.wait_for_log("broker entry replaced")


def test_with_two_namesrvs_one_killed_the_broker_stays_registered_with_the_other(
    start_namesrv: StartNamesrv, start_registrar: StartRegistrar
) -> None:
    ns1, ns2 = start_namesrv(name="namesrv-1"), start_namesrv(name="namesrv-2")
    broker = start_registrar([ns1, ns2], "broker-m", topics=("everywhere",))
    for ns in (ns1, ns2):
        assert broker.broker_addr in ns.live_addrs()
        assert ns.route("everywhere") is not None

    ns1.proc.kill()
    killed_at = now_ms()
    rounds_before = broker.status()["rounds"]
    time.sleep(EXPIRY_MS / 1000 * 1.5)  # longer than the expiry: only fresh heartbeats keep it

    live = ns2.cluster_info().broker_live_table[broker.broker_addr]
    status = broker.status()
    # The status file may lag one round: the third round counted after the kill began after it,
    # and ns2 took its heartbeat.
    assert status["rounds"] - rounds_before >= 3
    assert live.last_update_timestamp >= killed_at
    assert ns2.route("everywhere") is not None
    assert status["outcomes"][ns2.addr]["ok"] is True
    assert status["outcomes"][ns1.addr]["ok"] is False
    broker.proc.wait_for_log(f"namesrv={ns1.addr}")  # the failure is logged with the address


@pytest.fixture
def blackhole() -> Iterator[str]:
    """A TCP port that accepts connections and never answers (a hung NameServer)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield f"127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


def test_a_hung_namesrv_does_not_delay_registration_with_the_others(
    start_namesrv: StartNamesrv, start_registrar: StartRegistrar, blackhole: str
) -> None:
    ns = start_namesrv()
    broker = start_registrar([blackhole, ns], "broker-h", topics=("h",), timeout=1.0)

    before = now_ms()
    for _ in range(3):  # a few rounds: the first ones wait for the connection attempt
        rounds = broker.status()["rounds"]
        status = wait_until(lambda r=rounds: (s := broker.status())["rounds"] > r and s, 10)
        hung, good = status["outcomes"][blackhole], status["outcomes"][ns.addr]
        # The hung one fails (handshake or call timeout), bounded by the per-call timeout ...
        assert not hung["ok"] and hung["error"] in ("DEADLINE_EXCEEDED", "UNAVAILABLE")
        assert hung["elapsed_s"] < 1.0 * 3
        # ... while the call to the healthy one in the same round returns within that timeout
        # (the hung one may also fail at once, UNAVAILABLE while its channel backs off).
        assert good["ok"] and good["elapsed_s"] < 1.0
    # The rounds counted after ``before`` began after it: the healthy one was registered with since.
    live = ns.cluster_info().broker_live_table[broker.broker_addr]
    assert live.last_update_timestamp >= before
    assert ns.route("h") is not None


def _code_and_details(call: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call()
    err = info.value
    return err.code(), err.details()  # type: ignore[attr-defined]


def _topic(name: str, **kw: int) -> common_pb2.TopicConfig:
    fields = {"read_queue_nums": 4, "write_queue_nums": 4, "perm": 6, **kw}
    return common_pb2.TopicConfig(topic_name=name, **fields)


def test_malformed_requests_get_invalid_argument_and_change_nothing(start_namesrv: StartNamesrv) -> None:
    ns = start_namesrv("--max-topics-per-registration", "50", expiry_ms=60_000)
    valid = pb.RegisterBrokerRequest(
        cluster_name="c1", broker_name="broker-v", broker_id=0, broker_addr="127.0.0.1:10911",
        ha_server_addr="127.0.0.1:10912", topic_config_version=common_pb2.DataVersion(timestamp=1, counter=1),
        topic_configs=[_topic("kept")],
    )
    ns.stub.RegisterBroker(valid)
    before = ns.cluster_info()
    topics_before = list(ns.stub.GetAllTopicList(pb.GetAllTopicListRequest()).topics)

    def reg(**changes: object) -> Callable[[], object]:
        req = pb.RegisterBrokerRequest()
        req.CopyFrom(valid)
        req.broker_name = "broker-new"  # would create a new group if it got through
        req.topic_config_version.counter = 2  # would re-read the topic table
        for key, value in changes.items():
            if key == "topic_configs":
                del req.topic_configs[:]
                req.topic_configs.extend(value)  # type: ignore[arg-type]
            else:
                setattr(req, key, value)
        return lambda: ns.stub.RegisterBroker(req)

    many = [_topic(f"t{i}") for i in range(51)]
    cases: list[tuple[Callable[[], object], str]] = [
        (reg(cluster_name=""), "cluster_name: must not be empty"),
        (reg(broker_name=""), "broker_name: must not be empty"),
        (reg(broker_name="a b"), "broker_name: 'a b' has characters outside"),
        (reg(broker_name="x" * 128), "broker_name: longer than 127 characters"),
        (reg(broker_id=-1), "broker_id: must be >= 0"),
        (reg(broker_addr=""), "broker_addr: must not be empty"),
        (reg(broker_addr="no-port"), "broker_addr: 'no-port' is not host:port"),
        (reg(broker_addr="h:99999"), "broker_addr: 'h:99999' has an invalid port"),
        (reg(ha_server_addr="h:"), "ha_server_addr: 'h:' has an invalid port"),
        (reg(topic_configs=many), "topic_configs: 51 topics exceed the limit of 50 per registration"),
        (reg(topic_configs=[_topic("ok"), _topic("")]), "topic_configs[1].topic_name: must not be empty"),
        (reg(topic_configs=[_topic("a.b")]), "topic_configs[0].topic_name: 'a.b' has characters outside"),
        (reg(topic_configs=[_topic("d"), _topic("d")]), "topic_configs[1].topic_name: duplicate topic 'd'"),
        (reg(topic_configs=[_topic("q", write_queue_nums=-4)]),
         "topic_configs[0].write_queue_nums: -4 is outside"),
        (reg(topic_configs=[_topic("p", perm=8)]), "topic_configs[0].perm: 8 is not a combination"),
        (lambda: ns.stub.UnregisterBroker(pb.UnregisterBrokerRequest(
            cluster_name="c1", broker_name="broker-v", broker_id=-1, broker_addr="127.0.0.1:10911")),
         "broker_id: must be >= 0"),
        (lambda: ns.stub.UnregisterBroker(pb.UnregisterBrokerRequest(
            cluster_name="c1", broker_name="", broker_id=0, broker_addr="127.0.0.1:10911")),
         "broker_name: must not be empty"),
        (lambda: ns.stub.GetRouteInfoByTopic(pb.GetRouteInfoByTopicRequest(topic="")),
         "topic: must not be empty"),
        (lambda: ns.stub.GetTopicsByCluster(pb.GetTopicsByClusterRequest(cluster="")),
         "cluster: must not be empty"),
        (lambda: ns.stub.WipeWritePermOfBroker(pb.WipeWritePermOfBrokerRequest(broker_name="")),
         "broker_name: must not be empty"),
        (lambda: ns.stub.PutKVConfig(pb.PutKVConfigRequest(namespace="", key="k", value="v")),
         "namespace: must not be empty"),
    ]
    for call, expected in cases:
        code, details = _code_and_details(call)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (expected, code, details)
        assert expected in details, (expected, details)

    assert ns.cluster_info() == before
    assert list(ns.stub.GetAllTopicList(pb.GetAllTopicListRequest()).topics) == topics_before == ["kept"]
    assert ns.proc.alive


def test_health_reflection_kv_metrics_and_graceful_sigterm(
    start_namesrv: StartNamesrv, start_registrar: StartRegistrar
) -> None:
    ns = start_namesrv()
    start_registrar([ns], "broker-x", topics=("metered",), cluster="cm")
    with grpc.insecure_channel(ns.addr) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "pocketmq.namesrv.v1.NameServer"):
            reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        replies = reflection.ServerReflectionInfo(iter([request]))
        names = {s.name for r in replies for s in r.list_services_response.service}
        assert {"pocketmq.namesrv.v1.NameServer", "grpc.health.v1.Health"} <= names

    ns.stub.PutKVConfig(pb.PutKVConfigRequest(namespace="ORDER_TOPIC_CONFIG", key="metered", value="x:4"))
    kv = ns.stub.GetKVConfig(pb.GetKVConfigRequest(namespace="ORDER_TOPIC_CONFIG", key="metered"))
    assert kv.value == "x:4"
    route = ns.route("metered")
    assert route is not None and route.order_topic_conf == "x:4"
    assert ns.route("unknown-topic") is None

    # A refused call is counted once its handler has ended, which may be just after the caller
    # got its status: scrape until that count is there, then check every figure in that scrape.
    not_found = 'pocketmq_namesrv_requests_total{code="NOT_FOUND",method="GetRouteInfoByTopic"} 1.0'

    def counted() -> str:
        url = f"http://127.0.0.1:{ns.metrics_port}/metrics"
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        return text if not_found in text else ""

    text = wait_until(counted, 5, message="the NOT_FOUND route query counted")
    assert 'pocketmq_namesrv_live_brokers{cluster="cm"} 1.0' in text
    assert 'pocketmq_namesrv_registrations_total{kind="new"} 1.0' in text
    assert 'pocketmq_namesrv_route_queries_total{result="found"}' in text
    assert 'pocketmq_namesrv_route_queries_total{result="not_found"} 1.0' in text
    assert 'pocketmq_namesrv_request_duration_seconds_count{method="RegisterBroker"}' in text
    assert "pocketmq_namesrv_broker_expirations_total 0.0" in text

    assert ns.proc.terminate(timeout=10) == 0
    ns.proc.wait_for_log("namesrv stopped")


def test_config_file_help_and_bad_config(procs: ProcessGroup, tmp_path: Path) -> None:
    help_text = subprocess.run(
        [sys.executable, "-m", "services.namesrv", "--help"], cwd=ROOT, capture_output=True, text=True,
        timeout=30, check=True,
    ).stdout
    for flag in ("--listen", "--metrics-port", "--broker-channel-expired-time",
                 "--scan-not-active-broker-interval", "--max-topics-per-registration", "-c FILE"):
        assert flag in help_text

    port = free_port()
    conf = tmp_path / "namesrv.conf"
    conf.write_text(f"# test\nlisten=127.0.0.1:{port}\nmetricsPort=0\nbrokerChannelExpiredTime=7000\n")
    proc = procs.start_grpc("services.namesrv", ["-c", str(conf)], f"127.0.0.1:{port}", name="from-file")
    assert "brokerChannelExpiredTime=7000" in proc.wait_for_log("namesrv started")

    bad = procs.start("services.namesrv", ["--broker-channel-expired-time", "soon"], name="bad-config")
    assert bad.wait(30) == 2
    assert "brokerChannelExpiredTime" in bad.log_text()
