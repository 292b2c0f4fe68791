"""The in-flight table of POP consumption and its durable record format (pure, no I/O).

Every pop appends one *checkpoint* (CK) record to the revive topic naming the group, topic,
queue, the popped offsets, their delivery attempts and the invisible deadline; its queue offset
in the revive topic is the checkpoint id, part of every receipt handle it issued. An ack (or a
revive, or a dead-letter) appends an ACK record naming (topic, queue, offset, checkpoint id).
Replaying the revive topic from the last progress point rebuilds the table exactly: a CK sets
the entry of each of its offsets (a later CK of the same offset replaces it: that is how
ChangeInvisibleDuration works), an ACK removes an entry only if its checkpoint id matches.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping

#: Property naming the kind of a revive-topic record.
PROPERTY_POP_OP = "POP_OP"
OP_CHECKPOINT = "ck"
OP_ACK = "ack"

#: (group, topic, queue id, queue offset): one popped message of a group.
Key = tuple[str, str, int, int]
#: (group, topic, queue id).
QueueKey = tuple[str, str, int]


@dataclasses.dataclass
class Entry:
    key: Key
    ck_id: int
    deadline_ms: int
    attempt: int
    pop_ms: int
    client_id: str = ""
    auto_renew: bool = False
    #: Renewals done in memory (push consumers); bounded by the renew limit.
    renewed: int = 0


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    group: str
    topic: str
    queue_id: int
    offsets: tuple[int, ...]
    attempts: tuple[int, ...]
    pop_ms: int
    deadline_ms: int
    client_id: str = ""
    auto_renew: bool = False

    def encode(self) -> bytes:
        return json.dumps({"g": self.group, "t": self.topic, "q": self.queue_id, "o": list(self.offsets),
                           "a": list(self.attempts), "p": self.pop_ms, "d": self.deadline_ms,
                           "c": self.client_id, "r": self.auto_renew}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, body: bytes) -> Checkpoint:
        d = json.loads(body)
        return cls(str(d["g"]), str(d["t"]), int(d["q"]), tuple(int(o) for o in d["o"]),
                   tuple(int(a) for a in d["a"]), int(d["p"]), int(d["d"]), str(d.get("c", "")),
                   bool(d.get("r", False)))


#: (topic, queue id, offset, checkpoint id) of an ack; (topic, queue id, offset, next attempt) of
#: a FIFO redelivery (the queue's cursor goes back to the offset).
AckItem = tuple[str, int, int, int]


def encode_acks(group: str, acks: list[AckItem], resets: list[AckItem] | None = None) -> bytes:
    doc: dict[str, object] = {"g": group, "k": [list(a) for a in acks]}
    if resets:
        doc["f"] = [list(r) for r in resets]
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_acks(body: bytes) -> tuple[str, list[AckItem], list[AckItem]]:
    d = json.loads(body)
    acks = [(str(t), int(q), int(o), int(c)) for t, q, o, c in d["k"]]
    resets = [(str(t), int(q), int(o), int(a)) for t, q, o, a in d.get("f", ())]
    return str(d["g"]), acks, resets


class InFlight:
    """Popped, not yet acked messages of every group, and each queue's pop cursor."""

    def __init__(self) -> None:
        self.entries: dict[Key, Entry] = {}
        self._by_queue: dict[QueueKey, set[int]] = {}
        #: Next offset to pop per (group, topic, queue).
        self.cursors: dict[QueueKey, int] = {}
        #: FIFO groups: the delivery attempt of a message handed out again from its own queue.
        self.fifo_attempts: dict[Key, int] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def checkpoint(self, ck: Checkpoint, ck_id: int) -> list[Entry]:
        added = []
        for offset, attempt in zip(ck.offsets, ck.attempts, strict=True):
            key = (ck.group, ck.topic, ck.queue_id, offset)
            entry = Entry(key, ck_id, ck.deadline_ms, attempt, ck.pop_ms, ck.client_id, ck.auto_renew)
            self.entries[key] = entry
            self._by_queue.setdefault(key[:3], set()).add(offset)  # type: ignore[arg-type]
            added.append(entry)
            qk: QueueKey = (ck.group, ck.topic, ck.queue_id)
            if self.cursors.get(qk, -1) < offset + 1:
                self.cursors[qk] = offset + 1
        return added

    def reset(self, key: Key, attempt: int) -> None:
        """FIFO redelivery: the queue is read again from ``key``'s offset, at ``attempt``."""
        qk: QueueKey = (key[0], key[1], key[2])
        cursor = self.cursors.get(qk)
        self.cursors[qk] = key[3] if cursor is None else min(cursor, key[3])
        self.fifo_attempts[key] = attempt

    def get(self, key: Key, ck_id: int) -> Entry | None:
        entry = self.entries.get(key)
        return entry if entry is not None and entry.ck_id == ck_id else None

    def remove(self, key: Key, ck_id: int) -> Entry | None:
        entry = self.get(key, ck_id)
        if entry is None:
            return None
        del self.entries[key]
        qk: QueueKey = (key[0], key[1], key[2])
        offsets = self._by_queue.get(qk)
        if offsets is not None:
            offsets.discard(key[3])
            if not offsets:
                del self._by_queue[qk]
        return entry

    def drop_queue(self, qk: QueueKey, cursor: int) -> int:
        """An offset reset: forget the queue's in-flight messages (their receipt handles become
        invalid) and pop from ``cursor`` next; returns how many were dropped."""
        offsets = self._by_queue.pop(qk, set())
        for offset in offsets:
            self.entries.pop((*qk, offset), None)  # type: ignore[arg-type]
        self.cursors[qk] = cursor
        return len(offsets)

    def busy(self, qk: QueueKey) -> bool:
        return bool(self._by_queue.get(qk))

    def committable(self, qk: QueueKey) -> int | None:
        """The group's consumer offset of a queue: its lowest in-flight offset, else its cursor."""
        offsets = self._by_queue.get(qk)
        if offsets:
            return min(offsets)
        return self.cursors.get(qk)

    def min_ck_id(self) -> int | None:
        return min((e.ck_id for e in self.entries.values()), default=None)

    def by_group(self) -> Mapping[str, list[Entry]]:
        out: dict[str, list[Entry]] = {}
        for entry in self.entries.values():
            out.setdefault(entry.key[0], []).append(entry)
        return out

    def __iter__(self) -> Iterator[Entry]:
        return iter(list(self.entries.values()))
