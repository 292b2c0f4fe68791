"""Cluster administration: what the ``pocketmq`` CLI does, usable from Python.

Routes and cluster membership come from the NameServer. Calls to brokers (status, HA status,
topic and group admin, offsets) go, by default, through a NameServer's broker relay
(``relay="auto"``): an operator who reaches only the NameServer - one ``kubectl port-forward`` -
can administer every broker; a broker whose own address connects is then called directly (see
:class:`~pocketmq.client.transport.BrokerCaller`). ``broker="host:port"`` instead talks to that
one broker directly.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, Generic, NamedTuple, TypeVar

from pocketmq.broker.v1 import broker_pb2
from pocketmq.client import loop as _loop
from pocketmq.client.admin_ops import OpsMixin
from pocketmq.client.allocate import allocation_table
from pocketmq.client.core import ClientCore
from pocketmq.client.lookup import MessageLookup
from pocketmq.client.message import MessageQueue
from pocketmq.client.producer import namesrv_from_env
from pocketmq.client.routes import MASTER_ID, PERM_READ, PERM_WRITE, TopicRoute
from pocketmq.client.transport import BrokerCaller, NamesrvClient, RelayMode, parse_addresses
from pocketmq.common.v1 import common_pb2
from pocketmq.errors import InvalidArgumentError, NoRouteError, NotFoundError, PocketMQError
from pocketmq.namesrv.v1 import namesrv_pb2
from pocketmq.wire.auth import Credentials
from pocketmq.wire.tls import ClientTls
from pocketmq.wire.tls import resolve as resolve_tls

__all__ = ["Admin", "AsyncAdmin", "BrokerResult", "BrokerTarget", "QueueProgress"]

T = TypeVar("T")


class BrokerTarget(NamedTuple):
    """One broker process, as the NameServer lists it."""

    cluster: str
    broker_name: str
    broker_id: int
    addr: str

    @property
    def is_master(self) -> bool:
        return self.broker_id == MASTER_ID


@dataclasses.dataclass(frozen=True)
class BrokerResult(Generic[T]):
    """The outcome of one call on one broker: ``value`` or ``error``."""

    target: BrokerTarget
    value: T | None = None
    error: PocketMQError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclasses.dataclass(frozen=True)
class QueueProgress:
    queue: MessageQueue
    broker_offset: int
    consumer_offset: int | None
    client: str = ""

    @property
    def lag(self) -> int:
        return self.broker_offset - (self.consumer_offset or 0) if self.consumer_offset is not None \
            else self.broker_offset

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.queue.topic, "broker_name": self.queue.broker_name,
                "queue_id": self.queue.queue_id, "broker_offset": self.broker_offset,
                "consumer_offset": self.consumer_offset, "lag": self.lag, "client": self.client}


class AsyncAdmin(MessageLookup, OpsMixin):
    """Admin calls (asyncio); message lookup (``get_message``, ``find_messages``, ``browse``)
    comes from :class:`~pocketmq.client.lookup.MessageLookup`, operator actions (offset resets,
    connections, drain, live config) from :class:`~pocketmq.client.admin_ops.OpsMixin`.

    ``relay``: "auto" (default: through the NameServer, direct when it has no relay or once
    the broker's address connected), "relay" (NameServer only) or "direct" (connect to broker
    addresses).
    ``broker="host:port"`` addresses one broker directly for broker calls."""

    def __init__(
        self,
        namesrv: str | Sequence[str] | None = None,
        *,
        broker: str | None = None,
        relay: RelayMode = "auto",
        timeout: float = 5.0,
        membership_ttl: float = 2.0,
        tls: ClientTls | bool | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        """``tls``: see :class:`~pocketmq.client.producer.AsyncProducer`."""
        self.namesrv_addrs = namesrv_from_env(namesrv)
        self.tls = resolve_tls(tls)
        self._credentials = credentials
        self.broker = parse_addresses(broker, "broker")[0] if broker else None
        self.timeout = timeout
        #: How long the master list of a cluster is reused by calls on every master (topic and
        #: group admin) before the NameServer is asked again (0: every call). A call that
        #: fails on a remembered master is retried at once on the current masters.
        self.membership_ttl = membership_ttl
        self._masters_cache: dict[str | None, tuple[float, list[BrokerTarget]]] = {}
        self._relay_mode: RelayMode = "direct" if self.broker else relay
        self._core: ClientCore | None = None
        self._namesrv: NamesrvClient
        self._caller: BrokerCaller

    async def start(self) -> None:
        if self._core is None:
            self._core = ClientCore(self.namesrv_addrs, timeout=self.timeout, relay=self._relay_mode,
                                    tls=self.tls or False, credentials=self._credentials)
            self._namesrv = self._core.namesrv
            self._caller = self._core.caller

    async def close(self) -> None:
        if self._core is not None:
            await self._core.close()

    async def __aenter__(self) -> AsyncAdmin:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    @property
    def relay_mode(self) -> RelayMode:
        return self._caller.mode

    async def call(self, addr: str, method: str, request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        """One Broker call (relayed or direct, see the class docstring)."""
        await self.start()
        return await self._caller.call(addr, method, request, timeout or self.timeout)

    # -- NameServer -------------------------------------------------------------------------------

    async def cluster_info(self) -> namesrv_pb2.ClusterInfo:
        await self.start()
        return await self._namesrv.cluster_info()

    async def brokers(self, cluster: str | None = None, masters_only: bool = False) -> list[BrokerTarget]:
        """Brokers to address: the ``broker`` given to the constructor, else every broker the
        NameServer knows (of ``cluster``), sorted by cluster, name, id."""
        if self.broker is not None:
            status = await self.call(self.broker, "GetBrokerStatus", broker_pb2.GetBrokerStatusRequest())
            return [BrokerTarget(status.cluster_name, status.broker_name, status.broker_id, self.broker)]
        info = await self.cluster_info()
        if cluster is not None and cluster not in info.cluster_addr_table:
            raise NotFoundError(f"cluster {cluster!r} is not known to the NameServer "
                                f"(known: {', '.join(sorted(info.cluster_addr_table)) or 'none'})")
        out = []
        for name, group in info.broker_addr_table.items():
            if cluster is not None and group.cluster != cluster:
                continue
            for broker_id, addr in group.broker_addrs.items():
                if masters_only and broker_id != MASTER_ID:
                    continue
                out.append(BrokerTarget(group.cluster, name, broker_id, addr))
        return sorted(out)

    async def route(self, topic: str) -> TopicRoute:
        await self.start()
        try:
            return TopicRoute.from_proto(topic, await self._namesrv.route(topic))
        except NotFoundError as exc:
            raise NoRouteError(f"no route for topic {topic!r}: {exc.message}", address=exc.address) from None

    async def topics(self, cluster: str | None = None) -> list[str]:
        await self.start()
        if cluster:
            return sorted(await self._namesrv.topics_of_cluster(cluster))
        return sorted(await self._namesrv.all_topics())

    # -- fan-out helper -------------------------------------------------------------------------

    async def _each(self, targets: Iterable[BrokerTarget],
                    func: Callable[[BrokerTarget], Awaitable[T]]) -> list[BrokerResult[T]]:
        async def one(target: BrokerTarget) -> BrokerResult[T]:
            try:
                return BrokerResult(target, await func(target))
            except PocketMQError as exc:
                return BrokerResult(target, error=exc)

        return list(await asyncio.gather(*(one(t) for t in targets)))

    async def _masters(self, cluster: str | None, *, fresh: bool = True) -> list[BrokerTarget]:
        """The masters (of ``cluster``); ``fresh=False`` accepts the list remembered for
        ``membership_ttl`` seconds."""
        now = time.monotonic()
        hit = self._masters_cache.get(cluster)
        if not fresh and hit is not None and now - hit[0] < self.membership_ttl:
            return hit[1]
        targets = await self.brokers(cluster, masters_only=True)
        if not targets:
            raise NotFoundError("no master broker is registered"
                                + (f" in cluster {cluster!r}" if cluster else ""))
        if self.membership_ttl > 0 and self.broker is None:
            self._masters_cache[cluster] = (now, targets)
        return targets

    async def _on_masters(self, cluster: str | None,
                          func: Callable[[BrokerTarget], Awaitable[T]]) -> list[BrokerResult[T]]:
        """``func`` on every master, with the membership remembered for ``membership_ttl`` (a
        loop of admin calls asks the NameServer once, not per call). When a remembered master
        fails, the current masters are fetched, and ``func`` runs on those it has not succeeded
        on (a master that moved or joined), so a failover never leaves a stale target's error."""
        hit = self._masters_cache.get(cluster)
        cached = (hit is not None and self.broker is None
                  and time.monotonic() - hit[0] < self.membership_ttl)
        targets = await self._masters(cluster, fresh=False)
        results = await self._each(targets, func)
        if not cached or all(r.error is None for r in results):
            return results
        current = await self._masters(cluster)
        if current == targets:
            return results
        done = {r.target for r in results if r.error is None}
        kept = [r for r in results if r.target in done and r.target in current]
        again = await self._each([t for t in current if t not in done], func)
        return sorted([*kept, *again], key=lambda r: r.target)

    # -- brokers --------------------------------------------------------------------------------

    async def broker_status(self, cluster: str | None = None) -> list[BrokerResult[broker_pb2.BrokerStatus]]:
        return await self._each(await self.brokers(cluster), lambda t: self.call(
            t.addr, "GetBrokerStatus", broker_pb2.GetBrokerStatusRequest()))

    async def ha_status(self, cluster: str | None = None) -> list[BrokerResult[broker_pb2.HAStatus]]:
        return await self._each(await self.brokers(cluster), lambda t: self.call(
            t.addr, "GetHAStatus", broker_pb2.GetHAStatusRequest()))

    # -- topics ---------------------------------------------------------------------------------

    async def create_topic(
        self, topic: str, *, read_queues: int = 4, write_queues: int = 4, perm: int = PERM_READ | PERM_WRITE,
        order: bool = False, cluster: str | None = None, message_type: str = "",
    ) -> list[BrokerResult[common_pb2.TopicConfig]]:
        """Create (or overwrite) the topic on every master (of ``cluster``). ``message_type``:
        the RocketMQ 5 ``message.type`` attribute (NORMAL, FIFO, DELAY, TRANSACTION; "" = any)."""
        config = _topic_config(topic, read_queues, write_queues, perm, order, message_type)

        async def create(t: BrokerTarget) -> common_pb2.TopicConfig:
            reply = await self.call(t.addr, "CreateTopic", broker_pb2.CreateTopicRequest(topic_config=config))
            created: common_pb2.TopicConfig = reply.topic_config
            return created

        return await self._on_masters(cluster, create)

    async def create_topics(
        self, topics: Sequence[str], *, read_queues: int = 4, write_queues: int = 4,
        perm: int = PERM_READ | PERM_WRITE, order: bool = False, cluster: str | None = None,
        message_type: str = "", batch_size: int = 1000,
    ) -> list[BrokerResult[list[common_pb2.TopicConfig]]]:
        """Create (or overwrite) many topics with the same settings on every master (of
        ``cluster``): one CreateTopics call per ``batch_size`` topics and master, so the broker
        stores each batch with one metadata write."""
        if batch_size < 1:
            raise InvalidArgumentError("batch_size must be >= 1")
        configs = [_topic_config(topic, read_queues, write_queues, perm, order, message_type)
                   for topic in topics]

        async def create(t: BrokerTarget) -> list[common_pb2.TopicConfig]:
            created: list[common_pb2.TopicConfig] = []
            for start in range(0, len(configs), batch_size):
                reply = await self.call(t.addr, "CreateTopics", broker_pb2.CreateTopicsRequest(
                    topic_configs=configs[start:start + batch_size]))
                created.extend(reply.topic_configs)
            return created

        return await self._on_masters(cluster, create)

    async def update_topic(
        self, topic: str, *, read_queues: int | None = None, write_queues: int | None = None,
        perm: int | None = None, order: bool | None = None, cluster: str | None = None,
    ) -> list[BrokerResult[common_pb2.TopicConfig]]:
        """Change the given fields of the topic on every master that has it (NotFound on the
        others)."""

        async def update(t: BrokerTarget) -> common_pb2.TopicConfig:
            reply = await self.call(t.addr, "GetTopic", broker_pb2.GetTopicRequest(topic=topic))
            current = reply.topic_config
            config = common_pb2.TopicConfig()
            config.CopyFrom(current)
            if read_queues is not None:
                config.read_queue_nums = read_queues
            if write_queues is not None:
                config.write_queue_nums = write_queues
            if perm is not None:
                config.perm = perm
            if order is not None:
                config.order = order
            reply = await self.call(t.addr, "CreateTopic", broker_pb2.CreateTopicRequest(topic_config=config))
            created: common_pb2.TopicConfig = reply.topic_config
            return created

        return await self._on_masters(cluster, update)

    async def delete_topic(self, topic: str, cluster: str | None = None) -> list[BrokerResult[bool]]:
        """Delete the topic on every master (value False where it did not exist)."""

        async def delete(t: BrokerTarget) -> bool:
            try:
                await self.call(t.addr, "DeleteTopic", broker_pb2.DeleteTopicRequest(topic=topic))
            except NotFoundError:
                return False
            return True

        return await self._on_masters(cluster, delete)

    async def topic_configs(
        self, cluster: str | None = None
    ) -> list[BrokerResult[list[common_pb2.TopicConfig]]]:
        async def configs(t: BrokerTarget) -> list[common_pb2.TopicConfig]:
            reply = await self.call(t.addr, "ListTopics", broker_pb2.ListTopicsRequest())
            return list(reply.topic_configs)

        return await self._on_masters(cluster, configs)

    # -- access control ---------------------------------------------------------------------------

    async def acl(self, method: str, request: Any, cluster: str | None = None) -> list[BrokerResult[Any]]:
        """One ACL admin call (``PutAclUser``, ``DeleteAclUser``, ``ListAclUsers``, ``PutAclPolicy``,
        ``DeleteAclPolicy``) on every master: each broker group keeps its own ACL table."""

        async def one(t: BrokerTarget) -> Any:
            return await self.call(t.addr, method, request)

        return await self._on_masters(cluster, one)

    # -- subscription groups ----------------------------------------------------------------------

    async def create_group(
        self, group: str, *, consume_enable: bool = True, consume_from_min_enable: bool = True,
        broadcast: bool = False, retry_max_times: int = 16, cluster: str | None = None,
    ) -> list[BrokerResult[broker_pb2.SubscriptionGroupConfig]]:
        config = broker_pb2.SubscriptionGroupConfig(
            group_name=group, consume_enable=consume_enable, consume_from_min_enable=consume_from_min_enable,
            consume_broadcast_enable=broadcast, retry_queue_nums=1, retry_max_times=retry_max_times)

        async def create(t: BrokerTarget) -> broker_pb2.SubscriptionGroupConfig:
            reply = await self.call(t.addr, "CreateSubscriptionGroup",
                                    broker_pb2.CreateSubscriptionGroupRequest(config=config))
            created: broker_pb2.SubscriptionGroupConfig = reply.config
            return created

        return await self._on_masters(cluster, create)

    async def groups(self, cluster: str | None = None
                     ) -> list[BrokerResult[list[broker_pb2.SubscriptionGroupConfig]]]:
        async def configs(t: BrokerTarget) -> list[broker_pb2.SubscriptionGroupConfig]:
            reply = await self.call(t.addr, "ListSubscriptionGroups",
                                    broker_pb2.ListSubscriptionGroupsRequest())
            return list(reply.configs)

        return await self._on_masters(cluster, configs)

    # -- consumer progress ----------------------------------------------------------------------

    async def consumer_members(self, group: str, route: TopicRoute) -> list[str]:
        request = broker_pb2.GetConsumerListRequest(consumer_group=group)
        for name in sorted(route.brokers):
            for addr in route.brokers[name].read_addrs():
                try:
                    reply = await self.call(addr, "GetConsumerList", request)
                except NotFoundError:
                    return []
                except PocketMQError:
                    continue
                return sorted(reply.client_ids)
        return []

    async def consumer_topics(self, group: str, cluster: str | None = None) -> list[str]:
        """Topics ``group`` has committed offsets for on the masters (sorted; retry and
        dead-letter topics included)."""
        results = await self._on_masters(cluster, lambda t: self.call(
            t.addr, "BrokerMetadata/GetAllConsumerOffsets", broker_pb2.GetAllConsumerOffsetsRequest()))
        topics: set[str] = set()
        for r in results:
            if r.error is not None:
                raise r.error
            assert r.value is not None
            topics.update(e.topic for e in r.value.offsets if e.consumer_group == group)
        return sorted(topics)

    async def consumer_progress(self, group: str, topic: str) -> list[QueueProgress]:
        """Per queue of ``topic``: the broker's max offset, the group's committed offset, the lag
        and the member that owns the queue (by the allocation every member computes)."""
        route = await self.route(topic)
        queues = route.read_queues()
        members = await self.consumer_members(group, route)
        owners = {q: m for m, qs in allocation_table(members, queues).items() for q in qs}

        async def first_answer(addrs: list[str], method: str, request: Any) -> Any:
            last: PocketMQError | None = None
            for addr in addrs:
                try:
                    return await self.call(addr, method, request)
                except NotFoundError:
                    raise
                except PocketMQError as exc:
                    last = exc
            raise last or NoRouteError(f"no broker for {method}")

        async def one(q: MessageQueue) -> QueueProgress:
            group_ = route.brokers[q.broker_name]
            addrs = group_.read_addrs()
            max_reply = await first_answer(addrs, "GetMaxOffset",
                                           broker_pb2.QueueRequest(topic=q.topic, queue_id=q.queue_id))
            try:
                offset_reply = await first_answer(
                    addrs, "QueryConsumerOffset", broker_pb2.QueryConsumerOffsetRequest(
                        consumer_group=group, topic=q.topic, queue_id=q.queue_id))
                consumer_offset: int | None = int(offset_reply.offset)
            except NotFoundError:
                consumer_offset = None
            return QueueProgress(q, int(max_reply.offset), consumer_offset, owners.get(q, ""))

        if self.broker is not None:
            queues = [q for q in queues if route.brokers[q.broker_name].addrs.get(MASTER_ID) == self.broker
                      or self.broker in route.brokers[q.broker_name].addrs.values()]
        return list(await asyncio.gather(*(one(q) for q in queues)))


class Admin:
    """Blocking face of :class:`AsyncAdmin` (same arguments and methods)."""

    def __init__(self, namesrv: str | Sequence[str] | None = None, *, broker: str | None = None,
                 relay: RelayMode = "auto", timeout: float = 5.0,
                 tls: ClientTls | bool | None = None, credentials: Credentials | None = None) -> None:
        self._async = AsyncAdmin(namesrv, broker=broker, relay=relay, timeout=timeout, tls=tls,
                                 credentials=credentials)

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        _loop.run(self._async.close())

    def __getattr__(self, name: str) -> Callable[..., Any]:
        attr = getattr(self._async, name)
        if not inspect.iscoroutinefunction(attr):
            raise AttributeError(name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return _loop.run(attr(*args, **kwargs))

        return call


def _topic_config(topic: str, read_queues: int, write_queues: int, perm: int, order: bool,
                  message_type: str) -> common_pb2.TopicConfig:
    """One topic's config as created by :meth:`AsyncAdmin.create_topic` / ``create_topics``;
    ``message_type`` is the RocketMQ 5 ``message.type`` attribute ("" = any type)."""
    if read_queues < 1 or write_queues < 1:
        raise InvalidArgumentError("read and write queue counts must be >= 1")
    return common_pb2.TopicConfig(topic_name=topic, read_queue_nums=read_queues,
                                  write_queue_nums=write_queues, perm=perm, order=order,
                                  attributes={"message.type": message_type} if message_type else {})
