"""Which broker of a group a consumer calls: the master, or its slaves while the master cannot
be reached (probed again every ``master_retry_interval``), or a slave the master suggested."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pocketmq.client.routes import RouteCache, TopicRoute
from pocketmq.client.subscription import ProcessQueue
from pocketmq.client.transport import BrokerCaller
from pocketmq.errors import (
    ConnectionFailedError,
    NoRouteError,
    PocketMQError,
    RequestCancelledError,
    RequestTimeoutError,
)

log = logging.getLogger("pocketmq.client")

__all__ = ["UNREACHABLE", "Failover"]

#: Errors after which a call moves to another broker of the group.
UNREACHABLE = (ConnectionFailedError, RequestTimeoutError, RequestCancelledError)

R = TypeVar("R")


class Failover:
    """Broker choice of one consumer (see the module docstring)."""

    def __init__(self, routes: RouteCache, caller: BrokerCaller, master_retry_interval: float,
                 request_timeout: float) -> None:
        self.routes = routes
        self.caller = caller
        self.master_retry_interval = master_retry_interval
        self.request_timeout = request_timeout
        #: broker name -> when to probe its master again.
        self.master_down: dict[str, float] = {}

    def mark_master_down(self, route: TopicRoute, broker_name: str, addr: str) -> None:
        if route.master_addr(broker_name) == addr and broker_name not in self.master_down:
            log.warning("master unreachable; reading from slaves",
                        extra={"broker": broker_name, "addr": addr})
            self.master_down[broker_name] = time.monotonic() + self.master_retry_interval

    def ordered_addrs(self, route: TopicRoute, broker_name: str, suggested_id: int = 0) -> list[str]:
        """Addresses of a broker group to read from, best first: a suggested slave, the master
        unless it failed recently, the slaves, and the master last."""
        group = route.group(broker_name)
        if group is None:
            return []
        master = group.master_addr
        slaves = group.slave_addrs
        order: list[str] = []
        if suggested_id and suggested_id in group.addrs:
            order.append(group.addrs[suggested_id])
        master_ok = broker_name not in self.master_down
        if master is not None and master_ok:
            order.append(master)
        order.extend(slaves)
        if master is not None and not master_ok:
            order.append(master)
        return list(dict.fromkeys(order))

    async def maybe_restore_master(self, route: TopicRoute, broker_name: str) -> None:
        """While reading from a slave: probe the master every master_retry_interval."""
        until = self.master_down.get(broker_name)
        if until is None or time.monotonic() < until:
            return
        master = route.master_addr(broker_name)
        if master is None:
            self.master_down[broker_name] = time.monotonic() + self.master_retry_interval
            return
        try:
            await self.caller.broker_status(master, min(1.0, self.request_timeout))
        except PocketMQError:
            self.master_down[broker_name] = time.monotonic() + self.master_retry_interval
            return
        if self.master_down.pop(broker_name, None) is not None:
            log.info("master reachable again; reading from it", extra={"broker": broker_name, "addr": master})

    async def call_group(self, pq: ProcessQueue, call: Callable[[str], Awaitable[R]],
                         master_only: bool = False) -> tuple[R, str]:
        """``call(address)`` on the broker group of ``pq``: the best address first, the next one
        when it cannot be reached. Returns (reply, address)."""
        topic, broker_name = pq.queue.topic, pq.queue.broker_name
        route = await self.routes.get(topic)
        await self.maybe_restore_master(route, broker_name)
        addrs = self.ordered_addrs(route, broker_name, 0 if master_only else pq.suggested_id)
        if master_only:
            master = route.master_addr(broker_name)
            addrs = [a for a in addrs if a == master] + [a for a in addrs if a != master]
        if not addrs:
            await self.routes.get(topic, refresh=True)
            raise NoRouteError(f"broker group {broker_name!r} of topic {topic!r} is not in the route")
        last: PocketMQError | None = None
        for addr in addrs:
            try:
                return await call(addr), addr
            except UNREACHABLE as exc:
                last = exc
                self.mark_master_down(route, broker_name, addr)
                if pq.suggested_id:
                    pq.suggested_id = 0
        assert last is not None
        raise last
