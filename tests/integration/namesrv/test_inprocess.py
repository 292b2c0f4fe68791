"""BrokerRegistrar against NameServers running in this process (real gRPC on loopback)."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pocketmq.common.v1 import common_pb2
from pocketmq.namesrv.v1 import namesrv_pb2 as pb
from pocketmq.namesrv.v1 import namesrv_pb2_grpc
from services.broker.registration import BrokerIdentity, BrokerRegistrar
from services.namesrv.api import SERVICE_NAME
from services.namesrv.app import NamesrvApp
from services.namesrv.config import NamesrvConfig
from services.namesrv.routeinfo import DataVersion, Registration
from tests.support import async_wait_until, free_port

pytestmark = pytest.mark.asyncio

StartApp = Callable[..., Awaitable[NamesrvApp]]


@pytest_asyncio.fixture
async def start_app() -> AsyncIterator[StartApp]:
    apps: list[NamesrvApp] = []

    async def start(port: int = 0, **overrides: object) -> NamesrvApp:
        fields: dict[str, object] = {"listen": f"127.0.0.1:{port}", "metrics_port": 0,
                                     "scan_not_active_broker_interval": 50, **overrides}
        app = NamesrvApp(NamesrvConfig(**fields))  # type: ignore[arg-type]
        await app.start()
        apps.append(app)
        return app

    yield start
    for app in apps:
        await app.stop()


def addr_of(app: NamesrvApp) -> str:
    return f"127.0.0.1:{app.port}"


def identity(name: str = "broker-a", broker_id: int = 0, port: int = 10911) -> BrokerIdentity:
    return BrokerIdentity(
        cluster_name="c1", broker_name=name, broker_id=broker_id, broker_addr=f"127.0.0.1:{port}",
        ha_server_addr=f"127.0.0.1:{port + 1}", metrics_addr=f"127.0.0.1:{port + 2}",
        broker_role="ASYNC_MASTER" if broker_id == 0 else "SLAVE",
    )


class Topics:
    """A broker's topic table with a DataVersion bumped on every change."""

    def __init__(self, *names: str) -> None:
        self.version = common_pb2.DataVersion(timestamp=1, counter=1)
        self.configs = [self._config(n) for n in names]

    @staticmethod
    def _config(name: str) -> common_pb2.TopicConfig:
        return common_pb2.TopicConfig(topic_name=name, read_queue_nums=8, write_queue_nums=8, perm=6)

    def add(self, name: str) -> None:
        self.configs.append(self._config(name))
        self.version = common_pb2.DataVersion(timestamp=1, counter=self.version.counter + 1)

    def __call__(self) -> tuple[common_pb2.DataVersion, list[common_pb2.TopicConfig]]:
        return self.version, list(self.configs)


async def test_registers_at_start_then_periodically_and_unregisters_on_stop(start_app: StartApp) -> None:
    app = await start_app()
    table = app.servicer.table
    registrar = BrokerRegistrar([addr_of(app)], identity(), Topics("t1"), period_s=0.05, timeout_s=1)
    await registrar.start()
    # The first registration is done when start() returns.
    assert "127.0.0.1:10911" in table.broker_live_table
    assert table.route("t1") is not None
    seen = table.broker_live_table["127.0.0.1:10911"].last_seen_ms
    await async_wait_until(lambda: registrar.rounds >= 4, 5)
    assert table.broker_live_table["127.0.0.1:10911"].last_seen_ms > seen
    await registrar.stop()
    assert table.broker_live_table == {} and table.route("t1") is None
    assert await registrar.register_now() == []  # stopped: nothing more is sent


async def test_stop_without_unregister_leaves_expiry_to_the_namesrv(start_app: StartApp) -> None:
    app = await start_app(broker_channel_expired_time=300)
    registrar = BrokerRegistrar([addr_of(app)], identity(), Topics("t1"), period_s=10)
    await registrar.start()
    await registrar.stop(unregister=False)
    assert "127.0.0.1:10911" in app.servicer.table.broker_live_table
    await async_wait_until(lambda: not app.servicer.table.broker_live_table, 5, message="expired")


async def test_new_topics_are_published_by_register_now(start_app: StartApp) -> None:
    app = await start_app()
    topics = Topics("t1")
    registrar = BrokerRegistrar([addr_of(app)], identity(), topics, period_s=60)
    await registrar.start()
    topics.add("t2")
    [outcome] = await registrar.register_now()
    assert outcome.ok and outcome.namesrv_addr == addr_of(app)
    assert app.servicer.table.all_topics() == ["t1", "t2"]
    await registrar.stop()


async def test_topic_changes_are_registered_incrementally_and_in_full_where_needed(
    start_app: StartApp, tmp_path: Path
) -> None:
    """After a change a master sends the NameServers that hold its table only what changed (no
    whole-table snapshot is built); a NameServer that lost the table (restarted) asks for the
    whole one and gets it at once."""
    from services.broker.metadata import DataVersion as BrokerVersion
    from services.broker.metadata import TopicConfig, TopicConfigManager

    manager = TopicConfigManager(str(tmp_path))
    for name in ("t1", "t2", "t3"):
        manager.put(TopicConfig(name, 8, 8))
    snapshots = 0

    def snapshot() -> tuple[common_pb2.DataVersion, list[common_pb2.TopicConfig]]:
        nonlocal snapshots
        snapshots += 1
        version, topics = manager.snapshot()
        return version.to_proto(), [t.to_proto() for t in topics]

    def delta(base: common_pb2.DataVersion,
              ) -> tuple[common_pb2.DataVersion, list[common_pb2.TopicConfig], list[str]] | None:
        changes = manager.changes_since(BrokerVersion.from_proto(base))
        if changes is None:
            return None
        version, changed, deleted = changes
        return version.to_proto(), [t.to_proto() for t in changed], deleted

    port = free_port()
    app = await start_app(port=port)
    registrar = BrokerRegistrar([addr_of(app)], identity(), snapshot, period_s=60, topic_delta=delta)
    await registrar.start()
    assert app.servicer.table.all_topics() == ["t1", "t2", "t3"] and snapshots == 1
    manager.put(TopicConfig("t4", 8, 8))
    manager.delete("t2")
    [outcome] = await registrar.register_now(incremental=True)
    assert outcome.ok and not outcome.topic_full_needed and snapshots == 1
    assert app.servicer.table.all_topics() == ["t1", "t3", "t4"]
    await app.stop()
    restarted = await start_app(port=port)
    manager.put(TopicConfig("t5", 8, 8))
    outcomes = await registrar.register_now(incremental=True)
    for _ in range(20):  # the channel may need a moment to reconnect to the new process
        if outcomes[0].ok:
            break
        await asyncio.sleep(0.2)
        outcomes = await registrar.register_now(incremental=True)
    assert outcomes[0].ok and snapshots == 2  # asked for the whole table, which was sent at once
    assert restarted.servicer.table.all_topics() == ["t1", "t3", "t4", "t5"]
    await registrar.stop()


async def test_slave_learns_its_master_and_follows_a_new_one(start_app: StartApp) -> None:
    app = await start_app()
    calls: list[tuple[str, str]] = []
    slave = BrokerRegistrar([addr_of(app)], identity(broker_id=1, port=20911), Topics(), period_s=60,
                            on_master=lambda a, h: calls.append((a, h)))
    await slave.start()
    assert (slave.master_addr, calls) == ("", [])

    master = BrokerRegistrar([addr_of(app)], identity(port=10911), Topics("t1"), period_s=60)
    await master.start()
    await slave.register_now()
    await slave.register_now()  # unchanged: no second callback
    assert (slave.master_addr, slave.master_ha_addr) == ("127.0.0.1:10911", "127.0.0.1:10912")
    assert calls == [("127.0.0.1:10911", "127.0.0.1:10912")]

    await master.stop()  # the master leaves: the slave keeps the address it knew
    await slave.register_now()
    assert slave.master_addr == "127.0.0.1:10911"

    new_master = BrokerRegistrar([addr_of(app)], identity(port=30911), Topics("t1"), period_s=60)
    await new_master.start()
    await slave.register_now()
    assert calls[-1] == ("127.0.0.1:30911", "127.0.0.1:30912")
    await slave.stop()
    await new_master.stop()


async def test_slave_started_before_its_master_learns_it_without_waiting_a_period(
    start_app: StartApp,
) -> None:
    app = await start_app()
    slave = BrokerRegistrar([addr_of(app)], identity(broker_id=1, port=20911), Topics(), period_s=60,
                            retry_s=0.1)
    await slave.start()
    assert slave.master_addr == ""
    master = BrokerRegistrar([addr_of(app)], identity(port=10911), Topics("t1"), period_s=60)
    await master.start()
    await async_wait_until(lambda: slave.master_addr == "127.0.0.1:10911", timeout=5)
    rounds = slave.rounds
    await asyncio.sleep(0.5)  # master known and every NameServer answered: back to the period
    assert slave.rounds == rounds
    await slave.stop()
    await master.stop()


async def test_a_namesrv_started_late_is_registered_with_within_seconds(start_app: StartApp) -> None:
    port = free_port()
    registrar = BrokerRegistrar([f"127.0.0.1:{port}"], identity(), Topics("t1"), period_s=60,
                                timeout_s=0.5, retry_s=0.1)
    await registrar.start()
    assert not registrar.last_outcomes[f"127.0.0.1:{port}"].ok
    app = await start_app(port=port)
    await async_wait_until(lambda: app.servicer.table.all_topics() == ["t1"], timeout=10)
    await registrar.stop()


async def test_disagreeing_namesrvs_majority_then_first_listed(start_app: StartApp) -> None:
    apps = [await start_app() for _ in range(3)]

    def know_master(app: NamesrvApp, port: int) -> None:
        app.servicer.table.register(Registration("c1", "broker-a", 0, f"127.0.0.1:{port}",
                                                 f"127.0.0.1:{port + 1}", DataVersion(1, 1)))

    know_master(apps[0], 40911)
    know_master(apps[1], 50911)
    know_master(apps[2], 50911)
    slave = BrokerRegistrar([addr_of(a) for a in apps], identity(broker_id=1, port=20911), Topics(),
                            period_s=60)
    await slave.register_now()
    assert slave.master_addr == "127.0.0.1:50911"  # two of three
    await slave.stop()

    tie = BrokerRegistrar([addr_of(apps[0]), addr_of(apps[1])], identity(broker_id=2, port=21911), Topics(),
                          period_s=60)
    await tie.register_now()
    assert tie.master_addr == "127.0.0.1:40911"  # one each: the first listed wins
    await tie.stop()


async def test_register_now_never_raises(start_app: StartApp, caplog: pytest.LogCaptureFixture) -> None:
    app = await start_app()
    dead = f"127.0.0.1:{free_port()}"
    registrar = BrokerRegistrar([dead, addr_of(app)], identity(), Topics("t1"), period_s=60, timeout_s=1)
    with caplog.at_level(logging.WARNING):
        outcomes = await registrar.register_now()
    by_addr = {o.namesrv_addr: o for o in outcomes}
    assert not by_addr[dead].ok and by_addr[dead].error == "UNAVAILABLE"
    assert by_addr[addr_of(app)].ok
    assert any(getattr(r, "namesrv", None) == dead for r in caplog.records)

    def broken() -> tuple[common_pb2.DataVersion, list[common_pb2.TopicConfig]]:
        raise RuntimeError("topic store closed")

    registrar.topic_snapshot = broken
    assert await registrar.register_now() == []
    await registrar.stop()


async def test_a_restarted_namesrv_is_registered_with_again_quickly(start_app: StartApp) -> None:
    port = free_port()
    app = await start_app(port=port)
    registrar = BrokerRegistrar([addr_of(app)], identity(), Topics("t1"), period_s=0.1, timeout_s=0.5)
    await registrar.start()
    await app.stop()
    await async_wait_until(lambda: not registrar.last_outcomes[f"127.0.0.1:{port}"].ok, 5)
    await asyncio.sleep(1.0)  # a few failed rounds: the channel backs off
    restarted = await start_app(port=port)
    await async_wait_until(lambda: "127.0.0.1:10911" in restarted.servicer.table.broker_live_table, 8,
                           message="re-registered after the NameServer restart")
    await registrar.stop()


async def test_many_concurrent_registrations_keep_the_table_consistent(start_app: StartApp) -> None:
    app = await start_app(broker_channel_expired_time=60_000)
    table = app.servicer.table
    rng = random.Random(7)
    registrars = [
        BrokerRegistrar([addr_of(app)], identity(f"broker-{g}", broker_id=i, port=10_000 + 10 * (4 * g + i)),
                        Topics(*(f"topic-{n}" for n in rng.sample(range(40), 10))),
                        period_s=0.02, timeout_s=2)
        for g in range(12) for i in range(3)
    ]
    await asyncio.gather(*(r.start() for r in registrars))
    assert len(table.broker_live_table) == len(registrars)

    async def churn() -> None:
        for _ in range(20):
            victim = rng.choice(registrars)
            await victim.register_now()
            app.servicer.expire_brokers()
            table.check_invariants()
            await asyncio.sleep(0)

    await asyncio.gather(churn(), churn(), asyncio.sleep(0.3))
    table.check_invariants()
    assert len(table.broker_live_table) == len(registrars)
    slaves = [r for r in registrars if r.identity.broker_id > 0]
    assert all(r.master_addr == f"127.0.0.1:{10_000 + 40 * int(r.identity.broker_name[7:])}" for r in slaves)

    await asyncio.gather(*(r.stop() for r in registrars))
    assert table.broker_live_table == {} and table.topic_queue_table == {} and table.cluster_addr_table == {}


async def test_kv_config_survives_a_restart_when_persisted(start_app: StartApp, tmp_path: Path) -> None:
    path = tmp_path / "kvConfig.json"
    app = await start_app(kv_config_path=str(path))
    async with grpc.aio.insecure_channel(addr_of(app)) as channel:
        stub = namesrv_pb2_grpc.NameServerStub(channel)
        await stub.PutKVConfig(pb.PutKVConfigRequest(namespace="ns", key="k", value="v"))
        await stub.PutKVConfig(pb.PutKVConfigRequest(namespace="ns", key="gone", value="x"))
        await stub.DeleteKVConfig(pb.DeleteKVConfigRequest(namespace="ns", key="gone"))
        await stub.DeleteKVConfig(pb.DeleteKVConfigRequest(namespace="ns", key="never-there"))
    await app.stop()

    again = await start_app(kv_config_path=str(path))
    async with grpc.aio.insecure_channel(addr_of(again)) as channel:
        stub = namesrv_pb2_grpc.NameServerStub(channel)
        reply = await stub.GetKVListByNamespace(pb.GetKVListByNamespaceRequest(namespace="ns"))
        assert dict(reply.table) == {"k": "v"}
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.GetKVConfig(pb.GetKVConfigRequest(namespace="ns", key="gone"))
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert "no KV config 'gone' in namespace 'ns'" in (info.value.details() or "")
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.GetTopicsByCluster(pb.GetTopicsByClusterRequest(cluster="nowhere"))
        assert info.value.code() == grpc.StatusCode.NOT_FOUND


async def test_broker_name_taken_by_another_cluster_is_failed_precondition(start_app: StartApp) -> None:
    app = await start_app()
    first = BrokerRegistrar([addr_of(app)], identity(), Topics("t1"), period_s=60)
    await first.start()
    other = dataclass_replace(identity(port=40911), cluster_name="c2")
    async with grpc.aio.insecure_channel(addr_of(app)) as channel:
        stub = namesrv_pb2_grpc.NameServerStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.RegisterBroker(pb.RegisterBrokerRequest(
                cluster_name=other.cluster_name, broker_name=other.broker_name, broker_id=1,
                broker_addr=other.broker_addr,
            ))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "already belongs to cluster 'c1'" in (info.value.details() or "")
    await first.stop()


def dataclass_replace(ident: BrokerIdentity, **changes: object) -> BrokerIdentity:
    import dataclasses

    return dataclasses.replace(ident, **changes)  # type: ignore[arg-type]


async def test_route_answers_follow_every_change(start_app: StartApp) -> None:
    """Route answers are cached between changes: every kind of change must show at once."""
    app = await start_app(broker_channel_expired_time=60_000)
    topics = Topics("t1")
    registrar = BrokerRegistrar([addr_of(app)], identity(), topics, period_s=60)
    await registrar.start()
    async with grpc.aio.insecure_channel(addr_of(app)) as channel:
        stub = namesrv_pb2_grpc.NameServerStub(channel)

        async def route(topic: str = "t1") -> pb.TopicRouteData | None:
            try:
                return await stub.GetRouteInfoByTopic(pb.GetRouteInfoByTopicRequest(topic=topic))
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.NOT_FOUND
                return None

        first = await route()
        assert first is not None and first.queue_datas[0].perm == 6 and first.order_topic_conf == ""
        assert (await route()) == first  # served from the cache

        wiped = await stub.WipeWritePermOfBroker(pb.WipeWritePermOfBrokerRequest(broker_name="broker-a"))
        assert wiped.wipe_topic_count == 1
        assert (r := await route()) is not None and r.queue_datas[0].perm == 4
        await stub.AddWritePermOfBroker(pb.AddWritePermOfBrokerRequest(broker_name="broker-a"))
        assert (r := await route()) is not None and r.queue_datas[0].perm == 6

        await stub.PutKVConfig(pb.PutKVConfigRequest(namespace="ORDER_TOPIC_CONFIG", key="t1", value="a:8"))
        assert (r := await route()) is not None and r.order_topic_conf == "a:8"

        slave = BrokerRegistrar([addr_of(app)], identity(broker_id=1, port=20911), Topics(), period_s=60)
        await slave.register_now()
        assert (r := await route()) is not None and dict(r.broker_datas[0].broker_addrs) == {
            0: "127.0.0.1:10911", 1: "127.0.0.1:20911"
        }
        await slave.stop()

        topics.add("t2")
        await registrar.register_now()
        assert await route("t2") is not None

        await registrar.stop(unregister=False)  # silent from now on ...
        table = app.servicer.table
        real_clock = table.clock_ms
        table.clock_ms = lambda: real_clock() + 61_000  # ... and a minute passes: the scan expires it
        await async_wait_until(lambda: not table.broker_live_table, 5)
        assert await route() is None


async def test_readiness_warm_up_reports_not_serving_while_brokers_register(start_app: StartApp) -> None:
    app = await start_app(readiness_warm_up_mills=400)
    async with grpc.aio.insecure_channel(addr_of(app)) as channel:
        health = health_pb2_grpc.HealthStub(channel)

        async def status(service: str) -> int:
            reply = await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=2)
            return int(reply.status)

        assert await status(SERVICE_NAME) == health_pb2.HealthCheckResponse.NOT_SERVING
        assert await status("") == health_pb2.HealthCheckResponse.SERVING  # alive: liveness passes
        assert not app.ready
        # Not ready, but it already takes registrations (and answers route queries).
        registrar = BrokerRegistrar([addr_of(app)], identity(), Topics("t1"), period_s=60)
        await registrar.start()
        try:
            assert app.servicer.table.route("t1") is not None
            await async_wait_until(lambda: app.ready, timeout=5)
            assert await status(SERVICE_NAME) == health_pb2.HealthCheckResponse.SERVING
        finally:
            await registrar.stop()


async def test_no_warm_up_by_default(start_app: StartApp) -> None:
    app = await start_app()
    assert app.ready
