"""The in-flight table of POP consumption and its durable record format (pure, no I/O).

Every pop appends one *checkpoint* (CK) record to the revive topic naming the group, topic,
queue, the popped offsets, their delivery attempts and the invisible deadline; its queue offset
in the revive topic is the checkpoint id, part of every receipt handle it issued. An ack (or a
revive, or a dead-letter) appends one ACK record naming, per checkpoint, the offsets it resolves.
An offset reset of a group appends one RESET record naming the group, the topic and each
queue's new pop position. Replaying the revive topic from the last progress point rebuilds the
table exactly: a CK adds its offsets (a CK that *replaces* offsets of an older one takes them
over: that is how ChangeInvisibleDuration works), an ACK removes offsets only from the checkpoint
it names, a RESET drops the queue's in-flight checkpoints before it and moves its cursor. A
record of a kind the reader does not know is skipped (brokers before RESET records ignore them).

The table is kept per checkpoint (one :class:`Ck` per pop, not one object per message): a batch
of a thousand messages costs one CK record, one heap entry and one dict of pending offsets.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence

#: Property naming the kind of a revive-topic record.
PROPERTY_POP_OP = "POP_OP"
OP_CHECKPOINT = "ck"
OP_ACK = "ack"
OP_RESET = "reset"

#: (group, topic, queue id, queue offset): one popped message of a group.
Key = tuple[str, str, int, int]
#: (group, topic, queue id).
QueueKey = tuple[str, str, int]


@dataclasses.dataclass
class Entry:
    """One in-flight message (a snapshot view of its checkpoint)."""

    key: Key
    ck_id: int
    deadline_ms: int
    #: Delivery attempt; 0 = the record's reconsume times + 1.
    attempt: int
    pop_ms: int
    client_id: str = ""
    auto_renew: bool = False


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    group: str
    topic: str
    queue_id: int
    offsets: tuple[int, ...]
    #: Delivery attempt per offset; empty = each record's reconsume times + 1.
    attempts: tuple[int, ...]
    pop_ms: int
    deadline_ms: int
    client_id: str = ""
    auto_renew: bool = False
    #: The checkpoint whose offsets this one takes over (ChangeInvisibleDuration), or -1.
    replaces: int = -1

    def encode(self) -> bytes:
        doc: dict[str, object] = {"g": self.group, "t": self.topic, "q": self.queue_id,
                                  "o": list(self.offsets), "p": self.pop_ms, "d": self.deadline_ms,
                                  "c": self.client_id, "r": self.auto_renew}
        if self.attempts:
            doc["a"] = list(self.attempts)
        if self.replaces >= 0:
            doc["x"] = self.replaces
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, body: bytes) -> Checkpoint:
        d = json.loads(body)
        offsets = tuple(int(o) for o in d["o"])
        attempts = tuple(int(a) for a in d.get("a", ()))
        if attempts and len(attempts) != len(offsets):
            raise ValueError("checkpoint has a different number of offsets and attempts")
        return cls(str(d["g"]), str(d["t"]), int(d["q"]), offsets, attempts, int(d["p"]), int(d["d"]),
                   str(d.get("c", "")), bool(d.get("r", False)), int(d.get("x", -1)))


class Ck:
    """A live checkpoint: the offsets of one pop not acked yet."""

    __slots__ = ("auto_renew", "ck_id", "client_id", "deadline_ms", "group", "pending", "pop_ms", "queue_id",
                 "renewed", "topic")

    def __init__(self, ck: Checkpoint, ck_id: int) -> None:
        self.ck_id = ck_id
        self.group = ck.group
        self.topic = ck.topic
        self.queue_id = ck.queue_id
        self.pop_ms = ck.pop_ms
        self.deadline_ms = ck.deadline_ms
        self.client_id = ck.client_id
        self.auto_renew = ck.auto_renew
        #: Renewals done in memory (push consumers); bounded by the renew limit.
        self.renewed = 0
        #: offset -> delivery attempt (0 = derive), in ascending offset order.
        self.pending: dict[int, int] = (dict(zip(ck.offsets, ck.attempts, strict=True)) if ck.attempts
                                        else dict.fromkeys(ck.offsets, 0))

    @property
    def qk(self) -> QueueKey:
        return (self.group, self.topic, self.queue_id)

    def entry(self, offset: int) -> Entry:
        return Entry((self.group, self.topic, self.queue_id, offset), self.ck_id, self.deadline_ms,
                     self.pending[offset], self.pop_ms, self.client_id, self.auto_renew)


#: An ack of a checkpoint: (topic, queue id, checkpoint id, offsets).
AckBatch = tuple[str, int, int, Sequence[int]]
#: A FIFO redelivery: (topic, queue id, offset, next attempt): the queue's cursor goes back to it.
ResetItem = tuple[str, int, int, int]


def encode_acks(group: str, acks: Iterable[AckBatch], resets: Sequence[ResetItem] | None = None) -> bytes:
    doc: dict[str, object] = {"g": group, "b": [[t, q, c, list(o)] for t, q, c, o in acks]}
    if resets:
        doc["f"] = [list(r) for r in resets]
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_acks(body: bytes) -> tuple[str, list[AckBatch], list[ResetItem]]:
    d = json.loads(body)
    acks: list[AckBatch] = [(str(t), int(q), int(c), [int(o) for o in offs])
                            for t, q, c, offs in d.get("b", ())]
    # One item per message: the format before acks were grouped by checkpoint.
    acks.extend((str(t), int(q), int(c), [int(o)]) for t, q, o, c in d.get("k", ()))
    resets = [(str(t), int(q), int(o), int(a)) for t, q, o, a in d.get("f", ())]
    return str(d["g"]), acks, resets


def encode_reset(group: str, topic: str, positions: Mapping[int, int]) -> bytes:
    """A RESET record: the group's pop position of each listed queue of ``topic``."""
    return json.dumps({"g": group, "t": topic, "q": [[q, o] for q, o in sorted(positions.items())]},
                      separators=(",", ":")).encode()


def decode_reset(body: bytes) -> tuple[str, str, dict[int, int]]:
    d = json.loads(body)
    return str(d["g"]), str(d["t"]), {int(q): int(o) for q, o in d["q"]}


class InFlight:
    """Popped, not yet acked messages of every group (by checkpoint), and each queue's pop
    cursor."""

    def __init__(self) -> None:
        self.cks: dict[int, Ck] = {}
        self._by_queue: dict[QueueKey, dict[int, Ck]] = {}
        self._count = 0
        #: Next offset to pop per (group, topic, queue).
        self.cursors: dict[QueueKey, int] = {}
        #: FIFO groups: the delivery attempt of a message handed out again from its own queue.
        self.fifo_attempts: dict[Key, int] = {}

    def __len__(self) -> int:
        return self._count

    def checkpoint(self, ck: Checkpoint, ck_id: int) -> Ck:
        qk: QueueKey = (ck.group, ck.topic, ck.queue_id)
        if ck.replaces >= 0:
            old = self.cks.get(ck.replaces)
            if old is not None:
                self.discard(old, ck.offsets)
        elif len(ck.offsets) == 1:
            # A CK record written before CKs named the one they replace: a newer single-offset
            # CK of an in-flight message replaced the older one.
            for other in list(self._by_queue.get(qk, {}).values()):
                if ck.offsets[0] in other.pending:
                    self.discard(other, ck.offsets)
        live = Ck(ck, ck_id)
        if not live.pending:
            return live
        self.cks[ck_id] = live
        self._by_queue.setdefault(qk, {})[ck_id] = live
        self._count += len(live.pending)
        end = max(ck.offsets) + 1
        if self.cursors.get(qk, -1) < end:
            self.cursors[qk] = end
        return live

    def discard(self, ck: Ck, offsets: Iterable[int]) -> list[int]:
        """Remove ``offsets`` from ``ck``; returns those that were pending."""
        pending = ck.pending
        done = [o for o in offsets if pending.pop(o, None) is not None]
        self._count -= len(done)
        if not pending and self.cks.pop(ck.ck_id, None) is not None:
            queue = self._by_queue.get(ck.qk)
            if queue is not None:
                queue.pop(ck.ck_id, None)
                if not queue:
                    del self._by_queue[ck.qk]
        return done

    def live(self, group: str, topic: str, queue_id: int, ck_id: int) -> Ck | None:
        ck = self.cks.get(ck_id)
        if ck is None or ck.group != group or ck.topic != topic or ck.queue_id != queue_id:
            return None
        return ck

    def reset(self, key: Key, attempt: int) -> None:
        """FIFO redelivery: the queue is read again from ``key``'s offset, at ``attempt``."""
        qk: QueueKey = (key[0], key[1], key[2])
        cursor = self.cursors.get(qk)
        self.cursors[qk] = key[3] if cursor is None else min(cursor, key[3])
        self.fifo_attempts[key] = attempt

    def get(self, key: Key, ck_id: int) -> Entry | None:
        ck = self.live(key[0], key[1], key[2], ck_id)
        return ck.entry(key[3]) if ck is not None and key[3] in ck.pending else None

    def remove(self, key: Key, ck_id: int) -> bool:
        ck = self.live(key[0], key[1], key[2], ck_id)
        return ck is not None and bool(self.discard(ck, (key[3],)))

    def drop_queue(self, qk: QueueKey, cursor: int) -> int:
        """An offset reset: forget the queue's in-flight messages (their receipt handles become
        invalid) and pop from ``cursor`` next; returns how many were dropped."""
        dropped = 0
        for ck in list(self._by_queue.get(qk, {}).values()):
            dropped += len(self.discard(ck, list(ck.pending)))
        self.cursors[qk] = cursor
        return dropped

    def busy(self, qk: QueueKey) -> bool:
        return qk in self._by_queue

    def committable(self, qk: QueueKey) -> int | None:
        """The group's consumer offset of a queue: its lowest in-flight offset, else its cursor."""
        cks = self._by_queue.get(qk)
        if cks:
            return min(next(iter(ck.pending)) for ck in cks.values())
        return self.cursors.get(qk)

    def min_ck_id(self) -> int | None:
        return min(self.cks, default=None)

    def by_group(self) -> Mapping[str, tuple[int, int]]:
        """group -> (in-flight messages, pop time of the oldest, ms)."""
        out: dict[str, tuple[int, int]] = {}
        for ck in self.cks.values():
            n, oldest = out.get(ck.group, (0, ck.pop_ms))
            out[ck.group] = (n + len(ck.pending), min(oldest, ck.pop_ms))
        return out

    def __iter__(self) -> Iterator[Ck]:
        return iter(list(self.cks.values()))
