"""Connected RocketMQ 5 clients, keyed by ``x-mq-client-id``.

A client becomes known with its first Settings on a Telemetry stream (its type, producer topics
or consumer group and the merged settings live here); Heartbeat refreshes it; it leaves on
NotifyClientTermination, when its last stream closes and it stays silent for the expiry time,
or at broker stop. Transaction checks find producers of a topic through :meth:`producers_of`.
Touched only from the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Iterator

from apache.rocketmq.v2 import definition_pb2, service_pb2
from services.broker.v2.settings import PRODUCER_TYPES

log = logging.getLogger(__name__)

ClientType = definition_pb2.ClientType
#: Outbound commands queued per stream before the stream counts as stuck and drops them.
STREAM_QUEUE_LIMIT = 1024


class TelemetryStream:
    """The server side of one Telemetry stream: commands queued for the writer."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self.outbox: asyncio.Queue[service_pb2.TelemetryCommand | None] = asyncio.Queue(STREAM_QUEUE_LIMIT)
        self.closed = False

    def send(self, command: service_pb2.TelemetryCommand) -> bool:
        if self.closed:
            return False
        try:
            self.outbox.put_nowait(command)
        except asyncio.QueueFull:
            log.warning("telemetry stream backlog full; command dropped", extra={"client_id": self.client_id})
            return False
        return True

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(asyncio.QueueFull):
                self.outbox.put_nowait(None)


@dataclasses.dataclass
class Client:
    client_id: str
    client_type: int
    settings: definition_pb2.Settings
    #: Stored names of the topics a producer publishes to (declared or used).
    topics: set[str] = dataclasses.field(default_factory=set)
    #: Stored name of a consumer's group.
    group: str = ""
    namespace: str = ""
    language: str = ""
    version: str = ""
    #: The SDK's host name (its user agent), for connection listings.
    host: str = ""
    streams: list[TelemetryStream] = dataclasses.field(default_factory=list)
    last_seen: float = dataclasses.field(default_factory=time.monotonic)

    @property
    def is_producer(self) -> bool:
        return self.client_type in PRODUCER_TYPES


class ClientRegistry:
    def __init__(self, expiry_s: float) -> None:
        self.expiry_s = expiry_s
        self._clients: dict[str, Client] = {}

    def __len__(self) -> int:
        return len(self._clients)

    def get(self, client_id: str) -> Client | None:
        return self._clients.get(client_id)

    def put(self, client: Client) -> Client:
        """Register ``client`` (from its Settings); keeps the streams and topics it had."""
        old = self._clients.get(client.client_id)
        if old is not None:
            client.streams = old.streams
            if old.client_type == client.client_type:
                client.topics |= old.topics
        else:
            log.info("client connected", extra={
                "client_id": client.client_id, "type": ClientType.Name(client.client_type),  # type: ignore[arg-type]
                "language": client.language, "group": client.group,
                "topics": ",".join(sorted(client.topics))})
        self._clients[client.client_id] = client
        return client

    def touch(self, client_id: str) -> Client | None:
        client = self._clients.get(client_id)
        if client is not None:
            client.last_seen = time.monotonic()
        return client

    def add_stream(self, client: Client, stream: TelemetryStream) -> None:
        if stream not in client.streams:
            client.streams.append(stream)

    def remove_stream(self, stream: TelemetryStream) -> None:
        client = self._clients.get(stream.client_id)
        if client is not None and stream in client.streams:
            client.streams.remove(stream)
            client.last_seen = time.monotonic()

    def remove(self, client_id: str) -> Client | None:
        client = self._clients.pop(client_id, None)
        if client is not None:
            for stream in client.streams:
                stream.close()
            log.info("client left", extra={"client_id": client_id,
                                           "type": ClientType.Name(client.client_type)})  # type: ignore[arg-type]
        return client

    def expire(self) -> list[str]:
        """Drop clients without a stream that were silent for longer than the expiry time."""
        deadline = time.monotonic() - self.expiry_s
        gone = [c.client_id for c in self._clients.values() if not c.streams and c.last_seen < deadline]
        for client_id in gone:
            self.remove(client_id)
        return gone

    def consumers_of(self, group: str) -> list[Client]:
        """Consumers of ``group`` (stored group name), by client id."""
        return sorted((c for c in self._clients.values() if not c.is_producer and c.group == group),
                      key=lambda c: c.client_id)

    def producers_of(self, topic: str) -> Iterator[Client]:
        """Producers with a live stream that publish to ``topic``, most recently seen first."""
        found = [c for c in self._clients.values() if c.is_producer and c.streams and topic in c.topics]
        yield from sorted(found, key=lambda c: c.last_seen, reverse=True)

    def counts_by_type(self) -> dict[str, int]:
        counts = Counter(ClientType.Name(c.client_type) for c in self._clients.values())  # type: ignore[arg-type]
        return dict(counts)

    def stream_count(self) -> int:
        return sum(len(c.streams) for c in self._clients.values())

    def close(self) -> None:
        for client in self._clients.values():
            for stream in client.streams:
                stream.close()
