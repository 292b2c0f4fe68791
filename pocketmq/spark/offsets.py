"""Offsets of the ``pocketmq`` source: one queue offset per (topic, broker group, queue id).

The JSON form is used for the ``startingOffsets`` / ``endingOffsets`` options and is what
Spark's streaming checkpoint stores::

    {"events": {"broker-a": {"0": 120, "1": 118}, "broker-b": {"0": 97}}}

An offset is the queue offset of the next message to read (a range ``[start, end)`` reads
``end - start`` queue positions). In options, ``-2`` means the queue's earliest retained offset
and ``-1`` its latest (the next offset to be written).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from pocketmq.errors import InvalidArgumentError

__all__ = ["EARLIEST", "LATEST", "QueueKey", "from_json", "limit_end", "parse_json", "to_json"]

EARLIEST = -2
LATEST = -1


class QueueKey(NamedTuple):
    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"


Offsets = dict[QueueKey, int]
OffsetJson = dict[str, dict[str, dict[str, int]]]


def to_json(offsets: Mapping[QueueKey, int]) -> OffsetJson:
    """``{QueueKey: offset}`` -> the nested JSON-able dict (sorted, so equal offsets serialise
    identically)."""
    out: OffsetJson = {}
    for key in sorted(offsets):
        out.setdefault(key.topic, {}).setdefault(key.broker_name, {})[str(key.queue_id)] = int(offsets[key])
    return out


def from_json(data: Any, what: str = "offsets", *, allow_special: bool = False) -> Offsets:
    """The nested dict (parsed JSON) -> ``{QueueKey: offset}``. Offsets must be integers >= 0
    (or -2 / -1 with ``allow_special``). Raises InvalidArgumentError naming ``what``."""
    if not isinstance(data, dict):
        raise InvalidArgumentError(f"{what}: expected a JSON object {{topic: {{broker: {{queue: offset}}}}}}"
                                   f", got {type(data).__name__}")
    out: Offsets = {}
    lowest = EARLIEST if allow_special else 0
    for topic, brokers in data.items():
        if not isinstance(brokers, dict):
            raise InvalidArgumentError(f"{what}: topic {topic!r} must map broker names to objects")
        for broker, queues in brokers.items():
            if not isinstance(queues, dict):
                raise InvalidArgumentError(f"{what}: {topic}@{broker} must map queue ids to offsets")
            for queue, offset in queues.items():
                try:
                    queue_id = int(queue)
                except (TypeError, ValueError):
                    raise InvalidArgumentError(f"{what}: queue id {queue!r} of {topic}@{broker} is not an "
                                               "integer") from None
                if queue_id < 0:
                    raise InvalidArgumentError(f"{what}: queue id {queue_id} of {topic}@{broker} is negative")
                if isinstance(offset, bool) or not isinstance(offset, int) or offset < lowest:
                    hint = " (or -2 = earliest, -1 = latest)" if allow_special else ""
                    raise InvalidArgumentError(
                        f"{what}: offset of {topic}@{broker}:{queue_id} must be an integer >= 0{hint}, "
                        f"got {offset!r}")
                out[QueueKey(str(topic), str(broker), queue_id)] = offset
    return out


def parse_json(text: str, what: str) -> Offsets:
    """An option's JSON text -> offsets (with -2 / -1 allowed)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(f"{what}: not 'earliest', 'latest' or valid JSON ({exc})") from None
    return from_json(data, what, allow_special=True)


def limit_end(start: Mapping[QueueKey, int], latest: Mapping[QueueKey, int], max_messages: int | None
              ) -> Offsets:
    """The end offsets of the next range: ``latest`` when ``max_messages`` is None or not less
    than what is available, else at most ``max_messages`` positions in total, shared between
    queues in proportion to what each has available (largest remainders first, so the total is
    exactly ``max_messages`` and even a limit smaller than the number of queues makes progress).

    Queues of ``start`` missing from ``latest`` keep their start offset (a broker that did not
    answer); queues only in ``latest`` start at 0 (new queues)."""
    keys = sorted(set(start) | set(latest))
    begin = {k: start.get(k, 0) for k in keys}
    top = {k: max(begin[k], latest.get(k, begin[k])) for k in keys}
    available = {k: top[k] - begin[k] for k in keys}
    total = sum(available.values())
    if max_messages is None or total <= max_messages:
        return top
    if max_messages < 0:
        raise InvalidArgumentError("max_messages must be >= 0")
    shares = {k: max_messages * available[k] // total for k in keys}
    left = max_messages - sum(shares.values())
    # Largest fractional part first; ties broken by the key order (deterministic).
    by_remainder = sorted((k for k in keys if available[k] > shares[k]),
                          key=lambda k: (-(max_messages * available[k] % total), k))
    for k in by_remainder[:left]:
        shares[k] += 1
    return {k: begin[k] + shares[k] for k in keys}


def describe(offsets: Mapping[QueueKey, int], keys: Iterable[QueueKey] | None = None) -> str:
    """``topic@broker:queue=offset, ...`` for messages."""
    chosen = sorted(offsets if keys is None else keys)
    return ", ".join(f"{k}={offsets[k]}" for k in chosen if k in offsets)
