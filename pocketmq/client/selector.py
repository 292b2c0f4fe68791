"""Choosing the queue a message goes to.

* :class:`RoundRobin` (the default): the topic's writable queues in turn, skipping brokers that
  failed recently when others are available.
* :class:`HashSelector` (ordered messages): the same sharding key always maps to the same queue
  while the topic's queues do not change, so messages with one key are stored in order.
* Any callable ``(queues, message, key) -> MessageQueue`` can be passed instead.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Container, Sequence
from typing import Protocol

from pocketmq.client.message import Message, MessageQueue
from pocketmq.errors import InvalidArgumentError

__all__ = ["HashSelector", "QueueSelector", "RoundRobin", "hash_key"]


class QueueSelector(Protocol):
    def __call__(self, queues: Sequence[MessageQueue], message: Message, key: str | None) -> MessageQueue:
        """Pick one of ``queues`` (never empty, sorted) for ``message``."""
        ...


def hash_key(key: str) -> int:
    """A stable hash of a sharding key (CRC-32 of its UTF-8 bytes): the same in every process and
    Python version, unlike ``hash()``."""
    return zlib.crc32(key.encode())


class HashSelector:
    """``queues[crc32(key) % len(queues)]``: one key, one queue (ordered messages)."""

    def __call__(self, queues: Sequence[MessageQueue], message: Message, key: str | None) -> MessageQueue:
        if key is None:
            raise InvalidArgumentError("HashSelector needs a sharding key")
        return queues[hash_key(key) % len(queues)]


class RoundRobin:
    """The queues of a topic in turn, one counter per topic."""

    def __init__(self) -> None:
        self._counters: dict[str, itertools.count[int]] = {}

    def next_index(self, topic: str) -> int:
        counter = self._counters.get(topic)
        if counter is None:
            counter = self._counters[topic] = itertools.count()
        return next(counter)

    def __call__(self, queues: Sequence[MessageQueue], message: Message, key: str | None) -> MessageQueue:
        return queues[self.next_index(message.topic) % len(queues)]

    def pick(self, topic: str, queues: Sequence[MessageQueue], avoid: Container[str] = ()) -> MessageQueue:
        """The next queue not on a broker in ``avoid``; if every queue's broker is to be avoided,
        the next queue regardless."""
        start = self.next_index(topic)
        n = len(queues)
        for i in range(n):
            queue = queues[(start + i) % n]
            if queue.broker_name not in avoid:
                return queue
        return queues[start % n]


SelectorFunc = Callable[[Sequence[MessageQueue], Message, "str | None"], MessageQueue]
