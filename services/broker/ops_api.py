# ruff: noqa: N802  (method names are the RPC names)
"""Operator calls of the ``pocketmq.broker.v1.Broker`` service: consumer offset reset (RocketMQ's
resetOffsetByTime), consumer connections and live configuration. Mixed into
:class:`services.broker.api.BrokerServicer`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, TypeAlias

import grpc

from apache.rocketmq.v2 import definition_pb2
from pocketmq.broker.v1 import broker_pb2 as pb
from services.broker import liveconfig
from services.broker import validation as v
from services.common.config import ConfigError
from services.common.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError, grpc_method

if TYPE_CHECKING:
    from services.broker.app import BrokerApp

log = logging.getLogger(__name__)
Ctx: TypeAlias = grpc.aio.ServicerContext


async def reset_offsets(app: BrokerApp,
                        request: pb.ResetConsumerOffsetRequest) -> pb.ResetConsumerOffsetResponse:
    """Set the group's offset of every queue of the topic as the request says, move the POP
    positions (a RESET record in the revive log), bump the reset generation, make all of it
    durable (the generation is kept with the offsets, so a restart or a promoted slave still
    ignores commits from before the reset) and wake parked pulls of the topic so members learn
    it at once."""
    if not app.broker_config.is_master:
        raise FailedPreconditionError(
            f"offsets are reset on the master; broker {app.broker_config.broker_name} "
            f"(brokerId={app.broker_config.broker_id}) is a SLAVE")
    group = v.validate_group(request.consumer_group)
    topic = v.validate_topic(request.topic)
    tc = app.topics.get(topic)
    if tc is None:
        raise NotFoundError(f"topic {topic!r} does not exist on broker {app.broker_config.broker_name}")
    target = request.WhichOneof("target")
    if target is None:
        raise InvalidArgumentError("say where to reset to: timestamp_ms, offset, earliest or latest")
    if target == "timestamp_ms" and request.timestamp_ms < 0:
        raise InvalidArgumentError(f"timestamp_ms must be >= 0, got {request.timestamp_ms}")
    app.ensure_group(group)
    store = app.store
    changes = []
    positions: dict[int, int] = {}
    for qid in range(max(tc.read_queue_nums, tc.write_queue_nums)):
        lo, hi = store.min_queue_offset(topic, qid), store.max_queue_offset(topic, qid)
        if target == "timestamp_ms":
            new = max(lo, store.queue_offset_by_time(topic, qid, request.timestamp_ms))
        elif target == "offset":
            new = min(max(request.offset, lo), hi)
        elif target == "earliest":
            new = lo
        else:
            new = hi
        old = app.offsets.query(group, topic, qid)
        app.offsets.commit(group, topic, qid, new)
        positions[qid] = new
        changes.append(pb.QueueOffsetChange(queue_id=qid, old_offset=-1 if old is None else old,
                                            new_offset=new))
    app.pop.reset_queues(group, topic, positions)
    generation = app.consumers.record_reset(group, topic)
    await app.offsets.persist_async()
    for qid in range(max(tc.read_queue_nums, tc.write_queue_nums)):
        app.notifier.notify(topic, qid)
    log.info("consumer offsets reset", extra={
        "group": group, "topic": topic, "target": target, "generation": generation,
        "offsets": ",".join(f"{c.queue_id}:{c.old_offset}->{c.new_offset}" for c in changes)})
    return pb.ResetConsumerOffsetResponse(queues=changes, reset_generation=generation)


def connections(app: BrokerApp, group: str) -> list[pb.ConsumerConnection]:
    out = [pb.ConsumerConnection(
        client_id=m.client_id, addr=m.addr, language=m.language or "pocketmq", version=m.version,
        protocol="pocketmq", client_type="CONSUMER", last_heartbeat_ms=m.last_heartbeat_ms,
        subscriptions=[pb.Subscription(topic=t, expression=e) for t, e in sorted(m.subscriptions.items())])
        for m in app.consumers.member_details(group)]
    if app.v2 is not None:
        for c in app.v2.clients.consumers_of(group):
            subs = [pb.Subscription(topic=e.topic.name, expression=e.expression.expression or "*")
                    for e in c.settings.subscription.subscriptions]
            out.append(pb.ConsumerConnection(
                client_id=c.client_id, addr=c.host, language=c.language, version=c.version,
                protocol="rocketmq-v2",
                client_type=definition_pb2.ClientType.Name(c.client_type),  # type: ignore[arg-type]
                subscriptions=subs))
    return out


class OpsMethods:
    """The operator RPCs; the servicer provides ``app``."""

    app: BrokerApp

    @grpc_method
    async def ResetConsumerOffset(self, request: pb.ResetConsumerOffsetRequest,
                                  context: Ctx) -> pb.ResetConsumerOffsetResponse:
        return await reset_offsets(self.app, request)

    @grpc_method
    async def GetConsumerConnections(self, request: pb.GetConsumerConnectionsRequest,
                                     context: Ctx) -> pb.GetConsumerConnectionsResponse:
        group = v.validate_group(request.consumer_group)
        return pb.GetConsumerConnectionsResponse(connections=connections(self.app, group))

    @grpc_method
    async def GetBrokerConfig(self, request: pb.GetBrokerConfigRequest,
                              context: Ctx) -> pb.GetBrokerConfigResponse:
        return pb.GetBrokerConfigResponse(entries=[
            pb.BrokerConfigEntry(key=k, value=val, live=live, overridden=ov)
            for k, val, live, ov in liveconfig.entries(self.app)])

    @grpc_method
    async def UpdateBrokerConfig(self, request: pb.UpdateBrokerConfigRequest,
                                 context: Ctx) -> pb.UpdateBrokerConfigResponse:
        try:
            liveconfig.apply(self.app, dict(request.changes))
        except ConfigError as exc:
            raise InvalidArgumentError(str(exc)) from None
        changed = set(request.changes)
        return pb.UpdateBrokerConfigResponse(entries=[
            pb.BrokerConfigEntry(key=k, value=val, live=live, overridden=ov)
            for k, val, live, ov in liveconfig.entries(self.app) if k in changed])
