"""The values a consumer receives: :class:`MessageQueue` and :class:`ReceivedMessage` (both
immutable). They live here because the record decoders build them; :mod:`pocketmq.client`
exports them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

__all__ = ["MessageQueue", "ReceivedMessage"]


class MessageQueue(NamedTuple):
    """One queue of a topic on one broker group. Orders by (topic, broker name, queue id)."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"


class RecordSource(Protocol):
    """Where the fields a decoder left unset come from (the decoded reply)."""

    def fill(self, message: ReceivedMessage) -> None:
        """Set every field of ``message`` still unset and drop its source."""


class _Deferred:
    """Room for a decoder to leave some fields of a :class:`ReceivedMessage` unset: ``_source``
    fills them on the first read of any of them (the fields stay plain slots, so every later
    read, and every read of a field set at once, costs what a slot read costs)."""

    __slots__ = ("_position", "_source")

    _source: RecordSource | None
    _position: int

    if not TYPE_CHECKING:  # to type checkers a ReceivedMessage has its fields, nothing else

        def __getattr__(self, name: str) -> Any:
            # Called only for a slot that is not set: a field a decoder deferred.
            if name[0] != "_":
                try:
                    source = self._source
                except AttributeError:
                    source = None
                if source is not None:
                    source.fill(self)
                    return getattr(self, name)
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


@dataclasses.dataclass(frozen=True, slots=True)
class ReceivedMessage(_Deferred):
    """A consumed message. ``queue``/``queue_offset`` say where it is stored; ``msg_id`` is the
    broker's offset message id."""

    topic: str
    body: bytes
    tags: str
    keys: tuple[str, ...]
    properties: Mapping[str, str]
    queue: MessageQueue
    queue_offset: int
    commit_log_offset: int
    msg_id: str
    born_timestamp: int
    store_timestamp: int
    born_host: str
    store_host: str
    reconsume_times: int = 0

    @property
    def text(self) -> str:
        """The body decoded as UTF-8 (undecodable bytes replaced)."""
        return self.body.decode("utf-8", "replace")

    def to_dict(self, body: str = "text") -> dict[str, Any]:
        """JSON-friendly; ``body`` = "text" (UTF-8), "hex", "base64" or "none"."""
        if body == "hex":
            body_value: str | None = self.body.hex()
        elif body == "base64":
            import base64

            body_value = base64.b64encode(self.body).decode()
        elif body == "none":
            body_value = None
        else:
            body_value = self.text
        return {
            "topic": self.topic, "broker_name": self.queue.broker_name, "queue_id": self.queue.queue_id,
            "queue_offset": self.queue_offset, "msg_id": self.msg_id, "tags": self.tags,
            "keys": list(self.keys), "properties": dict(self.properties), "body": body_value,
            "body_size": len(self.body), "born_timestamp": self.born_timestamp,
            "store_timestamp": self.store_timestamp, "born_host": self.born_host,
            "store_host": self.store_host, "reconsume_times": self.reconsume_times,
        }
