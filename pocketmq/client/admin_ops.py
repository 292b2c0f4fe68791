"""Operator actions of :class:`~pocketmq.client.admin.AsyncAdmin`: consumer offset resets and
connections, draining a broker group of writes, and live broker configuration. Mixed into
``AsyncAdmin`` (which provides ``call``, ``brokers``, ``route`` and the NameServer client)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from pocketmq.broker.v1 import broker_pb2
from pocketmq.client.routes import MASTER_ID, TopicRoute
from pocketmq.errors import InvalidArgumentError, NotFoundError, PocketMQError
from pocketmq.namesrv.v1 import namesrv_pb2

if TYPE_CHECKING:
    from pocketmq.client.admin import BrokerResult, BrokerTarget

__all__ = ["DrainOutcome", "DrainResult", "OpsMixin"]


@dataclasses.dataclass(frozen=True)
class DrainOutcome:
    """A drain / undrain: each member's brokerPermission change and each NameServer's answer."""

    brokers: list[BrokerResult[broker_pb2.UpdateBrokerConfigResponse]]
    namesrvs: list[DrainResult]

    @property
    def ok(self) -> bool:
        return all(r.error is None for r in self.brokers) and all(n.error is None for n in self.namesrvs)


@dataclasses.dataclass(frozen=True)
class DrainResult:
    """One NameServer's answer to a drain / undrain: topics whose write permission changed."""

    namesrv: str
    topics_changed: int = 0
    error: PocketMQError | None = None


class OpsMixin:
    if TYPE_CHECKING:
        async def start(self) -> None: ...
        async def call(self, addr: str, method: str, request: Any,
                       timeout: float | None = None) -> Any: ...  # noqa: ASYNC109
        async def brokers(self, cluster: str | None = None,
                          masters_only: bool = False) -> list[BrokerTarget]: ...
        async def route(self, topic: str) -> TopicRoute: ...
        async def _each(self, targets: Any, func: Callable[[BrokerTarget], Awaitable[Any]]) -> list[Any]: ...

        namesrv_addrs: list[str]
        _namesrv: Any

    # -- consumer groups --------------------------------------------------------------------------

    async def reset_offsets(
        self, group: str, topic: str, *, timestamp_ms: int | None = None, offset: int | None = None,
        earliest: bool = False, latest: bool = False, cluster: str | None = None,
    ) -> list[BrokerResult[broker_pb2.ResetConsumerOffsetResponse]]:
        """Reset ``group``'s offsets of ``topic`` on every master holding the topic (RocketMQ's
        resetOffsetByTime): exactly one of ``timestamp_ms`` (first message stored at or after
        it), ``offset`` (clamped to each queue's range), ``earliest``, ``latest``. Running
        members of the group notice it and read again from the new offsets."""
        given = [timestamp_ms is not None, offset is not None, earliest, latest]
        if sum(given) != 1:
            raise InvalidArgumentError("give exactly one of timestamp_ms, offset, earliest, latest")
        request = broker_pb2.ResetConsumerOffsetRequest(consumer_group=group, topic=topic)
        if timestamp_ms is not None:
            request.timestamp_ms = timestamp_ms
        elif offset is not None:
            request.offset = offset
        elif earliest:
            request.earliest = True
        else:
            request.latest = True
        route = await self.route(topic)
        masters = [t for t in await self.brokers(cluster, masters_only=True)
                   if t.broker_name in route.brokers]
        if not masters:
            raise NotFoundError(f"no master broker serves topic {topic!r}")
        return await self._each(masters, lambda t: self.call(t.addr, "ResetConsumerOffset", request))

    async def consumer_connections(self, group: str, cluster: str | None = None
                                   ) -> tuple[list[broker_pb2.ConsumerConnection], list[BrokerResult[Any]]]:
        """The group's live members as all brokers report them, one row per client id (the
        freshest heartbeat), and the per-broker results (for errors)."""
        request = broker_pb2.GetConsumerConnectionsRequest(consumer_group=group)
        results = await self._each(await self.brokers(cluster), lambda t: self.call(
            t.addr, "GetConsumerConnections", request))
        merged: dict[str, broker_pb2.ConsumerConnection] = {}
        for r in results:
            if r.value is None:
                continue
            for c in r.value.connections:
                seen = merged.get(c.client_id)
                if seen is None or c.last_heartbeat_ms > seen.last_heartbeat_ms:
                    merged[c.client_id] = c
        return [merged[k] for k in sorted(merged)], results

    # -- broker write permission (drain) ----------------------------------------------------------

    async def _each_namesrv(self, method: str, request: Any) -> list[DrainResult]:
        """``method`` on every NameServer (each keeps its own route table)."""
        await self.start()
        from pocketmq.client.transport import unary

        async def one(addr: str) -> DrainResult:
            try:
                reply = await unary(getattr(self._namesrv._stub(addr), method), request,
                                    self._namesrv.timeout, addr, method)
            except PocketMQError as exc:
                return DrainResult(addr, error=exc)
            count = reply.wipe_topic_count if hasattr(reply, "wipe_topic_count") else reply.add_topic_count
            return DrainResult(addr, int(count))

        return list(await asyncio.gather(*(one(a) for a in self.namesrv_addrs)))

    async def drain_broker(self, broker_name: str) -> DrainOutcome:
        """Take broker group ``broker_name`` out of writes (mqadmin wipeWritePerm, and RocketMQ's
        brokerPermission=4): every member keeps ``brokerPermission=4`` (live, and over restarts)
        and re-registers its topics read-only with every NameServer, and the NameServer(s) this
        admin reaches wipe the write bit at once. Producers move to the other groups at their
        next route refresh (a send on a stale route is refused and retried elsewhere);
        consumers keep reading the group."""
        return await self._set_writable(broker_name, False)

    async def undrain_broker(self, broker_name: str) -> DrainOutcome:
        """Give the write permission back (mqadmin addWritePerm, brokerPermission=6)."""
        return await self._set_writable(broker_name, True)

    async def _set_writable(self, broker_name: str, writable: bool) -> DrainOutcome:
        targets = [t for t in await self.brokers() if t.broker_name == broker_name]
        if not targets:
            names = {t.broker_name for t in await self.brokers()}
            raise NotFoundError(f"broker group {broker_name!r} is not registered "
                                f"(known: {', '.join(sorted(names)) or 'none'})")
        request = broker_pb2.UpdateBrokerConfigRequest(changes={"brokerPermission": "6" if writable else "4"})
        brokers = await self._each(targets, lambda t: self.call(t.addr, "UpdateBrokerConfig", request))
        if writable:
            namesrvs = await self._each_namesrv(
                "AddWritePermOfBroker", namesrv_pb2.AddWritePermOfBrokerRequest(broker_name=broker_name))
        else:
            namesrvs = await self._each_namesrv(
                "WipeWritePermOfBroker", namesrv_pb2.WipeWritePermOfBrokerRequest(broker_name=broker_name))
        return DrainOutcome(brokers, namesrvs)

    # -- live broker configuration ----------------------------------------------------------------

    async def broker_targets(self, broker: str) -> list[BrokerTarget]:
        """``broker``: a broker group name (all its members) or one member's host:port."""
        targets = await self.brokers()
        chosen = [t for t in targets if broker in (t.broker_name, t.addr)]
        if not chosen:
            raise NotFoundError(f"no registered broker is named or addressed {broker!r} (known: "
                                f"{', '.join(sorted({t.broker_name for t in targets})) or 'none'})")
        return sorted(chosen, key=lambda t: (t.broker_id != MASTER_ID, t.broker_id))

    async def broker_config(self, broker: str) -> list[BrokerResult[broker_pb2.GetBrokerConfigResponse]]:
        return await self._each(await self.broker_targets(broker), lambda t: self.call(
            t.addr, "GetBrokerConfig", broker_pb2.GetBrokerConfigRequest()))

    async def set_broker_config(self, broker: str, changes: Mapping[str, str]
                                ) -> list[BrokerResult[broker_pb2.UpdateBrokerConfigResponse]]:
        """Change live-safe keys on ``broker`` (every member of a group name); each broker
        validates and persists them, or refuses naming the key and why."""
        if not changes:
            raise InvalidArgumentError("give at least one key=value")
        request = broker_pb2.UpdateBrokerConfigRequest(changes=dict(changes))
        return await self._each(await self.broker_targets(broker), lambda t: self.call(
            t.addr, "UpdateBrokerConfig", request))
