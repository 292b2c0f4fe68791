"""Topic routes: which broker groups serve a topic, with how many queues, at which addresses.

:class:`TopicRoute` is a pure, immutable view of a NameServer ``TopicRouteData``.
:class:`RouteCache` keeps the routes a client uses, fetched on first use, refreshed in the
background every ``refresh_interval`` seconds and at once when a caller reports a failure
(:meth:`RouteCache.get` with ``refresh=True``). A NameServer outage does not break a client that
already has a route: it keeps using the last one it got.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import NamedTuple

from pocketmq.client.message import MessageQueue
from pocketmq.client.transport import NamesrvClient
from pocketmq.errors import NoRouteError, NotFoundError, PocketMQError
from pocketmq.namesrv.v1 import namesrv_pb2

log = logging.getLogger("pocketmq.client")

#: The template topic of auto-created topics (RocketMQ's name).
AUTO_CREATE_TOPIC = "TBW102"
PERM_INHERIT = 1
PERM_WRITE = 2
PERM_READ = 4
MASTER_ID = 0


def perm_text(perm: int) -> str:
    """RocketMQ's ``RW-``-style permission string."""
    return (("R" if perm & PERM_READ else "-") + ("W" if perm & PERM_WRITE else "-")
            + ("X" if perm & PERM_INHERIT else "-"))


class BrokerGroup(NamedTuple):
    """One broker group: brokerId -> gRPC address (0 = master)."""

    cluster: str
    broker_name: str
    addrs: Mapping[int, str]

    @property
    def master_addr(self) -> str | None:
        return self.addrs.get(MASTER_ID)

    @property
    def slave_addrs(self) -> list[str]:
        """Slave addresses, lowest brokerId first."""
        return [self.addrs[i] for i in sorted(self.addrs) if i != MASTER_ID]

    def read_addrs(self) -> list[str]:
        """Where the group's messages can be read: the master first, then the slaves."""
        return [self.addrs[i] for i in sorted(self.addrs)]


class QueueData(NamedTuple):
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


def parse_order_conf(conf: str) -> dict[str, int]:
    """RocketMQ's ORDER_TOPIC_CONFIG value ``"broker-a:4;broker-b:4"`` -> write queues per group."""
    out: dict[str, int] = {}
    for item in conf.split(";"):
        name, sep, count = item.strip().rpartition(":")
        if sep and name and count.strip().isdigit():
            out[name] = int(count)
    return out


@dataclasses.dataclass(frozen=True)
class TopicRoute:
    topic: str
    queue_datas: tuple[QueueData, ...]
    brokers: Mapping[str, BrokerGroup]
    order_topic_conf: str = ""

    @classmethod
    def from_proto(cls, topic: str, data: namesrv_pb2.TopicRouteData) -> TopicRoute:
        queues = tuple(sorted(
            QueueData(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm, q.topic_sys_flag)
            for q in data.queue_datas))
        brokers = {
            b.broker_name: BrokerGroup(b.cluster, b.broker_name, MappingProxyType(dict(b.broker_addrs)))
            for b in data.broker_datas}
        return cls(topic, queues, MappingProxyType(brokers), data.order_topic_conf)

    def for_new_topic(self, topic: str) -> TopicRoute:
        """Read as the auto-create template's route (RocketMQ's ``TBW102``): the groups whose
        template queues carry PERM_INHERIT, for a topic no NameServer knows yet. A broker with
        autoCreateTopicEnable creates the topic on the first send."""
        queues = tuple(q._replace(perm=q.perm & (PERM_READ | PERM_WRITE))
                       for q in self.queue_datas if q.perm & PERM_INHERIT)
        names = {q.broker_name for q in queues}
        brokers = MappingProxyType({n: b for n, b in self.brokers.items() if n in names})
        return TopicRoute(topic, queues, brokers)

    def write_queues(self) -> list[MessageQueue]:
        """Queues a producer may send to: writable, on a group whose master is registered; for an
        ordered topic (ORDER_TOPIC_CONFIG set) the groups and counts the configuration names.
        Sorted by broker name, then queue id."""
        order = parse_order_conf(self.order_topic_conf) if self.order_topic_conf else None
        out: list[MessageQueue] = []
        for q in self.queue_datas:
            group = self.brokers.get(q.broker_name)
            if group is None or group.master_addr is None:
                continue
            if order is not None:
                count = order.get(q.broker_name, 0)
            else:
                count = q.write_queue_nums if q.perm & PERM_WRITE else 0
            out.extend(MessageQueue(self.topic, q.broker_name, i) for i in range(count))
        return out

    def read_queues(self) -> list[MessageQueue]:
        """Queues a consumer group shares out: readable, on a group with any live member."""
        out: list[MessageQueue] = []
        for q in self.queue_datas:
            group = self.brokers.get(q.broker_name)
            if group is None or not group.addrs or not q.perm & PERM_READ:
                continue
            out.extend(MessageQueue(self.topic, q.broker_name, i) for i in range(q.read_queue_nums))
        return out

    def master_addr(self, broker_name: str) -> str | None:
        group = self.brokers.get(broker_name)
        return group.master_addr if group is not None else None

    def group(self, broker_name: str) -> BrokerGroup | None:
        return self.brokers.get(broker_name)

    def all_addrs(self) -> list[str]:
        """Every broker address of the route, masters first within each group."""
        return [addr for name in sorted(self.brokers) for addr in self.brokers[name].read_addrs()]

    def to_dict(self) -> dict[str, object]:
        return {
            "topic": self.topic,
            "order_topic_conf": self.order_topic_conf,
            "queue_datas": [q._asdict() | {"perm_text": perm_text(q.perm)} for q in self.queue_datas],
            "broker_datas": [
                {"cluster": b.cluster, "broker_name": b.broker_name,
                 "broker_addrs": {str(k): v for k, v in sorted(b.addrs.items())}}
                for _, b in sorted(self.brokers.items())
            ],
        }


RouteListener = Callable[[str, "TopicRoute | None"], None]


class _Entry:
    __slots__ = ("fetched", "route")

    def __init__(self, route: TopicRoute, fetched: float) -> None:
        self.route = route
        self.fetched = fetched


class RouteCache:
    """Routes of the topics a client uses (see the module docstring)."""

    def __init__(self, namesrv: NamesrvClient, refresh_interval: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.namesrv = namesrv
        self.refresh_interval = refresh_interval
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self._inflight: dict[str, asyncio.Future[TopicRoute]] = {}
        self._listeners: list[RouteListener] = []
        self._task: asyncio.Task[None] | None = None

    def add_listener(self, listener: RouteListener) -> None:
        """``listener(topic, route)`` after a fetched route differs from the cached one
        (``route`` None: the topic has no route any more)."""
        self._listeners.append(listener)

    def cached(self, topic: str) -> TopicRoute | None:
        entry = self._entries.get(topic)
        return entry.route if entry is not None else None

    def topics(self) -> list[str]:
        return sorted(self._entries)

    async def get(self, topic: str, *, refresh: bool = False) -> TopicRoute:
        """The topic's route: cached when younger than ``refresh_interval`` (and not ``refresh``),
        else fetched. When the NameServers cannot be reached the cached route is returned
        however old. Raises :class:`~pocketmq.errors.NoRouteError` when no NameServer knows the
        topic."""
        entry = self._entries.get(topic)
        if entry is not None and not refresh and self._clock() - entry.fetched < self.refresh_interval:
            return entry.route
        return await self._fetch(topic)

    def _fetch(self, topic: str) -> asyncio.Future[TopicRoute]:
        """One fetch per topic at a time; concurrent callers share it."""
        future = self._inflight.get(topic)
        if future is None:
            future = asyncio.ensure_future(self._do_fetch(topic))
            self._inflight[topic] = future
            future.add_done_callback(lambda _f: self._inflight.pop(topic, None))
        return future

    async def _do_fetch(self, topic: str) -> TopicRoute:
        try:
            data = await self.namesrv.route(topic)
        except NotFoundError as exc:
            self._update(topic, None)
            raise NoRouteError(f"no route for topic {topic!r}: {exc.message}", address=exc.address) from None
        except PocketMQError as exc:
            entry = self._entries.get(topic)
            if entry is not None and exc.retriable:
                log.warning("route refresh failed; using the last route",
                            extra={"topic": topic, "error": str(exc)})
                return entry.route
            raise
        route = TopicRoute.from_proto(topic, data)
        self._update(topic, route)
        return route

    def _update(self, topic: str, route: TopicRoute | None) -> None:
        old = self._entries.get(topic)
        if route is None:
            if old is None:
                return
            del self._entries[topic]
        else:
            self._entries[topic] = _Entry(route, self._clock())
            if old is not None and old.route == route:
                return
        for listener in self._listeners:
            try:
                listener(topic, route)
            except Exception:
                log.exception("route listener failed")

    async def refresh_all(self) -> None:
        """Fetch every cached topic's route again (the periodic refresh)."""
        for topic in list(self._entries):
            try:
                await self._fetch(topic)
            except PocketMQError as exc:
                log.warning("route refresh failed", extra={"topic": topic, "error": str(exc)})

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._refresh_loop(), name="pocketmq-routes")

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_interval)
            await self.refresh_all()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for future in list(self._inflight.values()):
            future.cancel()
