"""What a consumer subscribes to and owns: its settings, its topics' tag filters and the state
of every queue it owns (:class:`ProcessQueue`)."""

from __future__ import annotations

import asyncio
import bisect
import collections
import dataclasses
import enum
from collections.abc import Callable, Sequence
from typing import TypeVar

from pocketmq.client.message import MessageQueue, ReceivedMessage
from pocketmq.client.tags import TagFilter
from pocketmq.wire.fast import DecodeHint, Pending

__all__ = ["Batch", "BatchQueue", "ConsumeFrom", "ConsumerSettings", "ProcessQueue", "SubscriptionState",
           "built"]

T = TypeVar("T")


class ConsumeFrom(enum.Enum):
    """Where a group starts reading a queue it has no committed offset for."""

    #: New messages only (the queue's max offset when the group first reads it).
    LAST_OFFSET = "last"
    #: Everything still stored (the queue's min offset).
    FIRST_OFFSET = "first"
    #: Messages stored at or after ``consume_timestamp``.
    TIMESTAMP = "timestamp"


@dataclasses.dataclass(frozen=True)
class ConsumerSettings:
    """A started consumer's settings (see :class:`~pocketmq.client.consumer.AsyncConsumer`)."""

    group: str
    client_id: str
    consume_from: ConsumeFrom
    consume_timestamp_ms: int
    pull_batch_size: int
    long_poll_timeout: float
    heartbeat_interval: float
    rebalance_interval: float
    commit_interval: float
    buffer_batches: int
    max_reconsume_times: int
    master_retry_interval: float
    request_timeout: float


#: What a pull found: messages, or a checked reply whose messages are built when first asked for
#: (when handed out: see :class:`~pocketmq.wire.fast.Pending`).
Batch = list[ReceivedMessage] | Pending


def built(batch: Batch) -> list[ReceivedMessage]:
    """The messages of a pulled batch, built now if they were left for when it is handed out."""
    return batch if isinstance(batch, list) else batch.messages()


class BatchQueue(asyncio.Queue[T]):
    """The queue pulled batches wait in for the application, whose fillers may wait for room
    before they make an item: a fetcher decodes a reply only once it can hand it on, so a reply
    held back stays raw bytes and decoded messages wait only here (few, so the application reads
    them while they are still in the CPU caches)."""

    def __init__(self, maxsize: int) -> None:
        super().__init__(maxsize)
        self._room_waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def room(self) -> asyncio.Future[None] | None:
        """None if :meth:`put_nowait` would succeed now; else a future that is done once an item
        has been taken (another filler may take the room first)."""
        if not self.full():
            return None
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._room_waiters.append(waiter)
        return waiter

    def get_nowait(self) -> T:  # (get() ends here too)
        item = super().get_nowait()
        waiters = self._room_waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break
        return item


class ProcessQueue:
    """State of one owned queue: where to pull next, what is delivered but not yet processed,
    what was committed."""

    __slots__ = ("buffer", "commit_task", "committed", "consume_task", "decode_hint", "done", "dropped",
                 "inflight", "initialized", "last_addr", "next_offset", "pull_commit_unconfirmed",
                 "pull_task", "queue", "reset", "started", "suggested_id")

    def __init__(self, queue: MessageQueue, buffer_batches: int) -> None:
        self.queue = queue
        self.next_offset = -1
        #: The offset the broker holds for the group, as far as this member knows (-1: unknown).
        self.committed = -1
        #: The UpdateConsumerOffset call of this queue in flight, if any (one at a time).
        self.commit_task: asyncio.Task[None] | None = None
        #: A pull carrying a commit was sent and the broker has not answered it yet.
        self.pull_commit_unconfirmed = False
        self.initialized = False
        #: Set once the starting offset is decided and recorded on the broker.
        self.started = asyncio.Event()
        self.dropped = False
        #: The group's offsets were reset under this queue: it commits nothing more.
        self.reset = False
        #: Offsets delivered to the application and not processed yet: the ascending offsets of
        #: each delivered batch (a range when it has no gaps), of which the first ``done`` of the
        #: first batch are processed. Kept per batch, not per message.
        self.inflight: collections.deque[Sequence[int]] = collections.deque()
        self.done = 0
        self.buffer: BatchQueue[Batch | None] = BatchQueue(buffer_batches)
        self.pull_task: asyncio.Task[None] | None = None
        self.consume_task: asyncio.Task[None] | None = None
        #: A slave the master suggested reading from (0 = the master).
        self.suggested_id = 0
        #: The broker the last pull answered from.
        self.last_addr = ""
        #: Whether what is consumed from here reads the fields the decoder can defer.
        self.decode_hint = DecodeHint()

    def add_inflight(self, offsets: Sequence[int]) -> None:
        """A batch was delivered: its messages' offsets (ascending)."""
        if offsets:
            self.inflight.append(offsets)

    def commit_offset(self) -> int:
        """The offset to commit: the first unprocessed message, or where the next pull starts."""
        inflight = self.inflight
        return inflight[0][self.done] if inflight else self.next_offset

    def ack(self, offset: int) -> None:
        """Every delivered message up to ``offset`` is processed."""
        inflight = self.inflight
        if inflight:
            batch = inflight[0]
            done = self.done
            if batch[done] == offset:  # the next message in order (a handler's ack per message)
                done += 1
                if done == len(batch):
                    inflight.popleft()
                    done = 0
                self.done = done
                return
        while inflight:
            batch = inflight[0]
            if batch[-1] <= offset:
                inflight.popleft()
                self.done = 0
                continue
            if batch[self.done] <= offset:
                self.done = bisect.bisect_right(batch, offset, self.done)
            return


class SubscriptionState:
    """Subscribed topics (topic -> tag filter) and owned queues (queue -> state). The
    coordinator changes the queues, the fetcher reads both."""

    def __init__(self) -> None:
        self.subs: dict[str, TagFilter] = {}
        self.pqs: dict[MessageQueue, ProcessQueue] = {}
        #: Topic -> the offset-reset generation of the group this member has applied (see
        #: ``ResetConsumerOffset``); sent with commits, so the broker ignores those made before a
        #: reset this member has not applied yet.
        self.reset_generations: dict[str, int] = {}
        #: Called with a topic whose owned queues must be read again from the broker's offsets.
        self.on_reset: Callable[[str], None] | None = None

    def learn_reset(self, topic: str, generation: int) -> None:
        """A broker reported ``topic``'s reset generation; a newer one than applied makes the
        member re-read the topic's owned queues from the reset offsets."""
        if generation <= self.reset_generations.get(topic, 0):
            return
        self.reset_generations[topic] = generation
        affected = [pq for q, pq in self.pqs.items() if q.topic == topic]
        for pq in affected:  # stop at once: nothing of the old position may be committed now
            pq.dropped = pq.reset = True
        if affected and self.on_reset is not None:
            self.on_reset(topic)

    def assignment(self) -> frozenset[MessageQueue]:
        return frozenset(q for q, pq in self.pqs.items() if not pq.dropped)
