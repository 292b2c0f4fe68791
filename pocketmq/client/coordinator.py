"""Group membership of a consumer: heartbeats to every broker of the subscribed topics, the
member list, and the rebalance that shares the topics' readable queues among the members
(:func:`~pocketmq.client.allocate.allocate_averagely`: sorted members, sorted queues,
contiguous blocks differing by at most one), so members agree without talking to each other."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from pocketmq import __version__
from pocketmq.broker.v1 import broker_pb2
from pocketmq.client.allocate import allocate_averagely
from pocketmq.client.failover import UNREACHABLE, Failover
from pocketmq.client.message import MessageQueue
from pocketmq.client.routes import RouteCache, TopicRoute
from pocketmq.client.subscription import ConsumerSettings, ProcessQueue, SubscriptionState
from pocketmq.client.transport import BrokerCaller
from pocketmq.errors import NoRouteError, NotFoundError, PocketMQError

log = logging.getLogger("pocketmq.client")

__all__ = ["GroupCoordinator"]

#: What this client library calls itself in heartbeats (``pocketmq consumer connections``).
CLIENT_LANGUAGE = "pocketmq-python"
CLIENT_VERSION = __version__


class GroupCoordinator:
    """Heartbeats and rebalances of one consumer. ``add(queue)`` starts following a queue the
    member now owns; ``drop(pq, timeout)`` stops one it no longer owns (the state is already
    removed from ``state.pqs``)."""

    def __init__(self, settings: ConsumerSettings, state: SubscriptionState, routes: RouteCache,
                 caller: BrokerCaller, failover: Failover, add: Callable[[MessageQueue], None],
                 drop: Callable[[ProcessQueue, float, bool], Awaitable[None]]) -> None:
        self.settings = settings
        self.state = state
        self.routes = routes
        self.caller = caller
        self.failover = failover
        self._add = add
        self._drop = drop
        self._lock = asyncio.Lock()
        self._wakeup = asyncio.Event()
        routes.add_listener(lambda _topic, _route: self.wake())

    # -- heartbeats -------------------------------------------------------------------------------

    def _heartbeat_request(self) -> broker_pb2.ConsumerHeartbeatRequest:
        return broker_pb2.ConsumerHeartbeatRequest(
            consumer_group=self.settings.group, client_id=self.settings.client_id,
            subscriptions=[broker_pb2.Subscription(topic=t, expression=f.expression)
                           for t, f in sorted(self.state.subs.items())],
            language=CLIENT_LANGUAGE, version=CLIENT_VERSION)

    async def _broker_addrs(self) -> set[str]:
        addrs: set[str] = set()
        for topic in list(self.state.subs):
            try:
                route = await self.routes.get(topic)
            except PocketMQError as exc:
                log.debug("no route for heartbeat", extra={"topic": topic, "error": str(exc)})
                continue
            addrs.update(route.all_addrs())
        return addrs

    async def heartbeat_all(self) -> None:
        request = self._heartbeat_request()

        async def one(addr: str) -> None:
            try:
                reply = await self.caller.consumer_heartbeat(addr, request, self.settings.request_timeout)
            except PocketMQError as exc:
                log.debug("heartbeat failed", extra={"broker": addr, "error": str(exc)})
                return
            for topic, generation in reply.reset_generations.items():
                self.state.learn_reset(topic, generation)

        await asyncio.gather(*(one(a) for a in await self._broker_addrs()))

    async def unregister_all(self) -> None:
        s = self.settings

        async def one(addr: str) -> None:
            with contextlib.suppress(PocketMQError):
                await self.caller.unregister_consumer(addr, s.group, s.client_id, min(2.0, s.request_timeout))

        addrs: set[str] = set()
        for topic in self.routes.topics():
            route = self.routes.cached(topic)
            if route is not None:
                addrs.update(route.all_addrs())
        await asyncio.gather(*(one(a) for a in addrs))

    async def heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat_interval)
            await self.heartbeat_all()

    async def members(self, topic: str, route: TopicRoute | None = None) -> list[str]:
        """The group's members as a broker of ``topic`` reports them (the first broker group by
        name that answers, master first), sorted."""
        route = route or await self.routes.get(topic)
        s = self.settings
        last: PocketMQError | None = None
        for name in sorted(route.brokers):
            for addr in self.failover.ordered_addrs(route, name):
                try:
                    client_ids = await self.caller.consumer_list(addr, s.group, s.request_timeout)
                except NotFoundError:
                    return []
                except PocketMQError as exc:
                    last = exc
                    if isinstance(exc, UNREACHABLE):
                        self.failover.mark_master_down(route, name, addr)
                    continue
                return sorted(client_ids)
        raise last or NoRouteError(f"topic {topic!r} has no broker to ask for members")

    async def restart_topic(self, topic: str) -> None:
        """The group's offsets of ``topic`` were reset: stop the owned queues of the topic without
        committing (what they hold is dropped) and follow them again from the broker's offsets."""
        async with self._lock:
            pqs = self.state.pqs
            queues = sorted(q for q in pqs if q.topic == topic)
            await asyncio.gather(*(self._drop(pqs.pop(q), 10.0, False) for q in queues))
            for queue in queues:
                self._add(queue)
        log.info("offsets reset by an operator; reading again from the reset offsets", extra={
            "group": self.settings.group, "topic": topic, "queues": len(queues),
            "generation": self.state.reset_generations.get(topic, 0)})

    # -- rebalance --------------------------------------------------------------------------------

    def wake(self) -> None:
        """Rebalance now rather than at the next interval (subscriptions or routes changed)."""
        self._wakeup.set()

    async def rebalance_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), self.settings.rebalance_interval)
            self._wakeup.clear()
            try:
                await self.rebalance()
            except Exception:
                log.exception("rebalance failed", extra={"group": self.settings.group})

    async def rebalance(self) -> None:
        async with self._lock:
            await self._rebalance()

    async def _rebalance(self) -> None:
        s, pqs = self.settings, self.state.pqs
        keep_topics: set[str] = set()
        desired: set[MessageQueue] = set()
        for topic in list(self.state.subs):
            try:
                route = await self.routes.get(topic)
                queues = route.read_queues()
                members = await self.members(topic, route)
            except NoRouteError as exc:
                log.warning("topic has no route; releasing its queues",
                            extra={"topic": topic, "error": str(exc)})
                continue
            except PocketMQError as exc:
                log.warning("rebalance: cannot read the group's members; keeping the current queues",
                            extra={"topic": topic, "error": str(exc)})
                keep_topics.add(topic)
                continue
            if s.client_id not in members:
                # The broker has not seen our heartbeat yet: announce ourselves, decide next round.
                await self.heartbeat_all()
                keep_topics.add(topic)
                continue
            desired.update(allocate_averagely(s.client_id, members, queues))
        current = set(pqs)
        removed = [q for q in current if q not in desired and q.topic not in keep_topics]
        added = sorted(q for q in desired if q not in current)
        if not removed and not added:
            return
        drops = []
        for queue in removed:
            pq = pqs.pop(queue)
            drops.append(self._drop(pq, 10.0, True))
        await asyncio.gather(*drops)
        for queue in added:
            self._add(queue)
        log.info("rebalanced", extra={
            "group": s.group, "client_id": s.client_id, "added": ",".join(map(str, added)),
            "removed": ",".join(map(str, sorted(removed))), "owned": len(pqs)})
