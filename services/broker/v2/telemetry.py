"""The Telemetry stream: a client's Settings in, merged Settings and server commands out.

Each stream gets a :class:`TelemetryStream` outbox; a reader task handles what the client sends
(Settings, thread stack traces, verification results) and the handler writes the outbox until
the stream ends. The first Settings registers the client in the :class:`ClientRegistry` under
its ``x-mq-client-id``; later ones replace its settings (the SDKs resend them periodically).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from apache.rocketmq.v2 import definition_pb2, service_pb2
from services.broker.v2 import settings as s
from services.broker.v2.clients import Client, ClientRegistry, TelemetryStream
from services.broker.v2.resources import RequestMeta, group_name, namespace_of, topic_name
from services.broker.v2.status import Code, V2Error, from_service_error, ok
from services.common.errors import ServiceError

if TYPE_CHECKING:
    from services.broker.app import BrokerApp

log = logging.getLogger(__name__)

ClientType = definition_pb2.ClientType


class Telemetry:
    def __init__(self, app: BrokerApp, clients: ClientRegistry) -> None:
        self.app = app
        self.clients = clients

    def client_from_settings(self, settings: definition_pb2.Settings, meta: RequestMeta) -> Client:
        """Validate a client's Settings and build its registry entry with the merged settings."""
        client_id = meta.require_client_id()
        ctype = settings.client_type
        if ctype in s.PRODUCER_TYPES:
            topics = {topic_name(t, meta) for t in settings.publishing.topics}
            namespace = next((namespace_of(t, meta, Code.ILLEGAL_TOPIC) for t in settings.publishing.topics),
                             meta.namespace)
            merged = s.producer_settings(settings, self.app.store_config.max_message_size)
            return Client(client_id, ctype, merged, topics=topics, namespace=namespace,
                          language=meta.language, version=meta.version or settings.user_agent.version,
                          host=settings.user_agent.hostname)
        if ctype in s.CONSUMER_TYPES:
            sub = settings.subscription
            if not sub.HasField("group"):
                raise V2Error(Code.ILLEGAL_CONSUMER_GROUP, "a consumer's settings must name its group")
            group = group_name(sub.group, meta)
            try:
                config = self.app.ensure_group(group)
            except ServiceError as exc:
                raise from_service_error(exc, not_found=Code.CONSUMER_GROUP_NOT_FOUND,
                                         invalid=Code.ILLEGAL_CONSUMER_GROUP) from None
            for entry in sub.subscriptions:
                topic_name(entry.topic, meta)
            merged = s.consumer_settings(settings, fifo=config.consume_message_orderly,
                                         retry_max_times=config.retry_max_times,
                                         delay_levels_ms=self.app.broker_config.delay_levels_ms)
            return Client(client_id, ctype, merged, group=group,
                          namespace=namespace_of(sub.group, meta, Code.ILLEGAL_CONSUMER_GROUP),
                          language=meta.language, version=meta.version or settings.user_agent.version,
                          host=settings.user_agent.hostname)
        raise V2Error(Code.UNRECOGNIZED_CLIENT_TYPE,
                      f"settings name client type {ClientType.Name(ctype)}; expected PRODUCER, "  # type: ignore[arg-type]
                      "PUSH_CONSUMER, SIMPLE_CONSUMER or PULL_CONSUMER")

    def on_command(self, command: service_pb2.TelemetryCommand, meta: RequestMeta,
                   stream: TelemetryStream) -> None:
        kind = command.WhichOneof("command")
        if kind == "settings":
            try:
                client = self.clients.put(self.client_from_settings(command.settings, meta))
            except V2Error as exc:
                stream.send(service_pb2.TelemetryCommand(status=exc.status()))
                return
            self.clients.add_stream(client, stream)
            stream.send(service_pb2.TelemetryCommand(status=ok(), settings=client.settings))
        elif kind in ("thread_stack_trace", "verify_message_result"):
            log.info("telemetry reply", extra={"client_id": meta.client_id, "kind": kind})
        else:
            stream.send(service_pb2.TelemetryCommand(status=definition_pb2.Status(
                code=Code.BAD_REQUEST, message=f"clients do not send {kind or 'empty'} commands")))

    async def serve(self, requests: AsyncIterator[service_pb2.TelemetryCommand],
                    meta: RequestMeta) -> AsyncIterator[service_pb2.TelemetryCommand]:
        stream = TelemetryStream(meta.client_id)
        if not meta.client_id:
            yield service_pb2.TelemetryCommand(status=definition_pb2.Status(
                code=Code.CLIENT_ID_REQUIRED, message="the x-mq-client-id request header is required"))
            return

        async def read() -> None:
            try:
                async for command in requests:
                    self.on_command(command, meta, stream)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the client went away mid-read
                log.debug("telemetry stream read ended",
                          extra={"client_id": meta.client_id, "error": str(exc)})
            finally:
                stream.close()

        reader = asyncio.create_task(read(), name=f"telemetry-{meta.client_id}")
        try:
            while True:
                command = await stream.outbox.get()
                if command is None:
                    break
                yield command
        finally:
            stream.close()
            self.clients.remove_stream(stream)
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
