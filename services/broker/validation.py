"""Request validation shared by the broker API: topic and group names, tag expressions, delay
levels and message limits.

Everything here is pure: functions return a value or raise
:class:`~services.common.errors.InvalidArgumentError` whose text names the offending value. The
name and tag expression rules are the wire package's (:mod:`pocketmq.wire.names`,
:mod:`pocketmq.wire.tags`), shared with the client.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from pocketmq.wire import names, tags
from pocketmq.wire.errors import WireError
from pocketmq.wire.names import (
    AUTO_CREATE_TOPIC_KEY,
    GROUP_MAX_LENGTH,
    SCHEDULE_TOPIC,
    SYSTEM_TOPICS,
    TIMER_TOPIC,
    TOPIC_MAX_LENGTH,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from pocketmq.wire.record import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC, tag_hash_code
from pocketmq.wire.tags import MATCH_ALL, TagFilter
from services.common.errors import InvalidArgumentError

__all__ = [
    "AUTO_CREATE_TOPIC_KEY", "GROUP_MAX_LENGTH", "MATCH_ALL", "SCHEDULE_TOPIC", "SYSTEM_TOPICS",
    "TIMER_TOPIC", "TOPIC_MAX_LENGTH", "TRANS_HALF_TOPIC", "TRANS_OP_HALF_TOPIC", "TagFilter",
    "effective_delay_level", "parse_tag_expression", "perm_to_string", "validate_group",
    "validate_offset", "validate_perm", "validate_queue_nums", "validate_send_topic", "validate_topic",
]

#: Property keys the broker sets itself; a client may not send them.
RESERVED_PROPERTIES = frozenset({PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID})

# Permission bits (RocketMQ's PermName).
PERM_INHERIT = 1
PERM_WRITE = 2
PERM_READ = 4
PERM_ALL = PERM_INHERIT | PERM_WRITE | PERM_READ

MAX_QUEUE_NUMS = 1024

#: RocketMQ 5's topic attribute naming the message type a topic accepts (the NameServer's route
#: table reads it under the same name).
MESSAGE_TYPE_ATTRIBUTE = "message.type"
#: Its values (RocketMQ's TopicMessageType, without MIXED/UNSPECIFIED: "" means any type).
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION")


def validate_topic(topic: str) -> str:
    """A legal topic name (charset ``[%|a-zA-Z0-9_-]``, 1..127 characters)."""
    try:
        return names.validate_topic(topic)
    except WireError as exc:
        raise InvalidArgumentError(str(exc)) from None


@functools.lru_cache(maxsize=1024)
def validate_send_topic(topic: str) -> str:
    """A topic clients may produce to: legal and not a broker-internal topic (checked on every
    send: pure, so legal names are cached; an illegal one raises and is not)."""
    try:
        return names.validate_send_topic(topic)
    except WireError as exc:
        raise InvalidArgumentError(str(exc)) from None


def validate_group(group: str) -> str:
    """A legal consumer/subscription group name (same charset, 1..255 characters)."""
    try:
        return names.validate_group(group)
    except WireError as exc:
        raise InvalidArgumentError(str(exc)) from None


def validate_queue_nums(read_queue_nums: int, write_queue_nums: int) -> None:
    for key, value in (("read_queue_nums", read_queue_nums), ("write_queue_nums", write_queue_nums)):
        if not 1 <= value <= MAX_QUEUE_NUMS:
            raise InvalidArgumentError(f"{key} must be 1..{MAX_QUEUE_NUMS}, got {value}")


def validate_perm(perm: int) -> int:
    if perm & ~PERM_ALL or perm == 0:
        raise InvalidArgumentError(
            f"perm {perm} is not a combination of READ(4), WRITE(2) and INHERIT(1)"
        )
    return perm


def validate_message_type(message_type: str) -> str:
    """"" (any type) or one of :data:`MESSAGE_TYPES`."""
    if message_type and message_type not in MESSAGE_TYPES:
        raise InvalidArgumentError(
            f"topic attribute {MESSAGE_TYPE_ATTRIBUTE}={message_type!r} is not one of "
            f"{', '.join(MESSAGE_TYPES)}")
    return message_type


def perm_to_string(perm: int) -> str:
    return ("R" if perm & PERM_READ else "-") + ("W" if perm & PERM_WRITE else "-") + (
        "X" if perm & PERM_INHERIT else "-"
    )


def validate_offset(offset: int, what: str = "queue offset") -> int:
    if offset < 0:
        raise InvalidArgumentError(f"{what} must be >= 0, got {offset}")
    return offset


# -- tag expressions ---------------------------------------------------------------------------


def parse_tag_expression(
    expression: str, hash_code: Callable[[str], int] = tag_hash_code
) -> TagFilter:
    """``"*"``/``""`` -> everything; ``"a || b"`` -> tags a and b (RocketMQ's TAG syntax)."""
    try:
        return tags.parse_tag_expression(expression, hash_code)
    except WireError as exc:
        raise InvalidArgumentError(str(exc)) from None


# -- delay levels ------------------------------------------------------------------------------


def effective_delay_level(level: int, max_level: int) -> int:
    """RocketMQ's rule: 0 = no delay; above the highest level = the highest level."""
    if level < 0:
        raise InvalidArgumentError(f"delay level must be >= 0, got {level}")
    return min(level, max_level)
