"""Receipt handles of popped messages (pure).

``<topic> <queue id> <queue offset> <checkpoint id> <deadline ms> <broker name>``: topic, group
and broker names never contain spaces. The checkpoint id is the queue offset of the CK record in
the revive topic, so a handle names exactly one pop of one message: after
ChangeInvisibleDuration (a new CK) the old handle no longer matches.
"""

from __future__ import annotations

import dataclasses

MAX_HANDLE_LENGTH = 1024


class BadHandleError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class ReceiptHandle:
    topic: str
    queue_id: int
    offset: int
    ck_id: int
    deadline_ms: int
    broker_name: str

    def encode(self) -> str:
        return (f"{self.topic} {self.queue_id} {self.offset} {self.ck_id} {self.deadline_ms} "
                f"{self.broker_name}")

    @classmethod
    def decode(cls, text: str) -> ReceiptHandle:
        if not text or len(text) > MAX_HANDLE_LENGTH:
            raise BadHandleError("receipt handle is empty or too long")
        parts = text.split(" ")
        if len(parts) != 6:
            raise BadHandleError(f"receipt handle {text[:64]!r} was not issued by a PocketMQ broker")
        topic, qid, offset, ck_id, deadline, broker = parts
        try:
            handle = cls(topic, int(qid), int(offset), int(ck_id), int(deadline), broker)
        except ValueError:
            raise BadHandleError(f"receipt handle {text[:64]!r} is malformed") from None
        if not topic or handle.queue_id < 0 or handle.offset < 0 or handle.ck_id < 0:
            raise BadHandleError(f"receipt handle {text[:64]!r} is malformed")
        return handle
