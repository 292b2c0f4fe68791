from __future__ import annotations

import asyncio

import pytest

from pocketmq.client.message import MessageQueue
from pocketmq.client.routes import RouteCache, TopicRoute, parse_order_conf, perm_text
from pocketmq.errors import ConnectionFailedError, NoRouteError, NotFoundError
from pocketmq.namesrv.v1 import namesrv_pb2 as pb


def route_data(perm_b: int = 6, with_master_b: bool = True, order: str = "") -> pb.TopicRouteData:
    b_addrs = {0: "10.0.0.2:10911", 1: "10.0.0.3:10911"} if with_master_b else {1: "10.0.0.3:10911"}
    return pb.TopicRouteData(
        queue_datas=[
            pb.QueueData(broker_name="broker-a", read_queue_nums=2, write_queue_nums=3, perm=6),
            pb.QueueData(broker_name="broker-b", read_queue_nums=2, write_queue_nums=2, perm=perm_b)],
        broker_datas=[pb.BrokerData(cluster="c", broker_name="broker-a", broker_addrs={0: "10.0.0.1:10911"}),
                      pb.BrokerData(cluster="c", broker_name="broker-b", broker_addrs=b_addrs)],
        order_topic_conf=order,
    )


def test_queues() -> None:
    r = TopicRoute.from_proto("t", route_data())
    assert r.write_queues() == [MessageQueue("t", "broker-a", i) for i in range(3)] + [
        MessageQueue("t", "broker-b", i) for i in range(2)]
    assert r.read_queues() == [MessageQueue("t", "broker-a", i) for i in range(2)] + [
        MessageQueue("t", "broker-b", i) for i in range(2)]
    assert r.master_addr("broker-b") == "10.0.0.2:10911"
    assert r.brokers["broker-b"].slave_addrs == ["10.0.0.3:10911"]
    assert r.all_addrs() == ["10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"]


def test_not_writable_or_no_master_means_no_write_queue_but_still_readable() -> None:
    r = TopicRoute.from_proto("t", route_data(perm_b=4))
    assert {q.broker_name for q in r.write_queues()} == {"broker-a"}
    r = TopicRoute.from_proto("t", route_data(with_master_b=False))
    assert {q.broker_name for q in r.write_queues()} == {"broker-a"}
    assert {q.broker_name for q in r.read_queues()} == {"broker-a", "broker-b"}


def test_order_conf() -> None:
    assert parse_order_conf("broker-a:4; broker-b:2;junk") == {"broker-a": 4, "broker-b": 2}
    r = TopicRoute.from_proto("t", route_data(order="broker-b:1"))
    assert r.write_queues() == [MessageQueue("t", "broker-b", 0)]
    assert perm_text(6) == "RW-" and perm_text(7) == "RWX"


class FakeNamesrv:
    def __init__(self) -> None:
        self.calls = 0
        self.reply: pb.TopicRouteData | Exception = route_data()

    async def route(self, topic: str) -> pb.TopicRouteData:
        self.calls += 1
        await asyncio.sleep(0.01)
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


@pytest.mark.asyncio
async def test_route_cache_refresh_and_fallback() -> None:
    ns = FakeNamesrv()
    now = [0.0]
    cache = RouteCache(ns, refresh_interval=30, clock=lambda: now[0])  # type: ignore[arg-type]
    changes: list[str] = []
    cache.add_listener(lambda topic, route: changes.append(topic))
    a, b = await asyncio.gather(cache.get("t"), cache.get("t"))
    assert a == b and ns.calls == 1  # one fetch shared
    assert changes == ["t"]
    await cache.get("t")
    assert ns.calls == 1  # cached
    now[0] = 31
    await cache.get("t")
    assert ns.calls == 2 and changes == ["t"]  # refetched, unchanged: no notification
    await cache.get("t", refresh=True)
    assert ns.calls == 3
    # NameServers down: the last route is used
    ns.reply = ConnectionFailedError("down")
    assert await cache.get("t", refresh=True) == a
    # topic gone
    ns.reply = NotFoundError("no route")
    with pytest.raises(NoRouteError):
        await cache.get("t", refresh=True)
    assert cache.cached("t") is None and changes == ["t", "t"]
    with pytest.raises(ConnectionFailedError):
        ns.reply = ConnectionFailedError("down")
        await cache.get("other")
