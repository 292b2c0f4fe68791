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


class MessageSlots:
    """The storage of a :class:`ReceivedMessage`: its fields (in their order) and the room for a
    decoder to leave some of them unset, which ``_source`` fills on the first read of any of them
    (the fields stay plain slots, so every later read costs what a slot read costs).

    ReceivedMessage adds no slots of its own, so a decoder builds a message here with plain
    slot stores (ReceivedMessage is frozen: its ``__setattr__`` refuses them) and turns it into
    a ReceivedMessage by assigning ``__class__``, which is cheap between layouts this alike."""

    # The fields in their order, then the decoder's room.
    __slots__ = ("topic", "body", "tags", "keys", "properties", "queue", "queue_offset",  # noqa: RUF023
                 "commit_log_offset", "msg_id", "born_timestamp", "store_timestamp", "born_host",
                 "store_host", "reconsume_times", "_position", "_source")

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
class ReceivedMessage(MessageSlots):
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


assert vars(ReceivedMessage)["__slots__"] == () and MessageSlots.__slots__[:-2] == tuple(
    f.name for f in dataclasses.fields(ReceivedMessage)), "MessageSlots must hold ReceivedMessage's fields"
