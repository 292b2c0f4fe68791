"""Request validation shared by the broker API: topic and group names (RocketMQ's rules), tag
expressions, delay levels and message limits.

Everything here is pure: functions return a value or raise
:class:`~services.common.errors.InvalidArgumentError` whose text names the offending value.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from services.broker.storage import record
from services.common.errors import InvalidArgumentError

#: RocketMQ's TopicValidator: letters, digits, ``%``, ``|``, ``_`` and ``-``.
_NAME_CHARS = re.compile(r"^[%|a-zA-Z0-9_-]+$")
TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 255

#: Where delayed messages wait (queue id = delay level - 1), as in RocketMQ.
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
#: The template topic auto-created topics copy (RocketMQ's ``TBW102``).
AUTO_CREATE_TOPIC_KEY = "TBW102"
#: Where timer messages (arbitrary delivery time) wait: queue 0 holds the messages, queue 1
#: the broker's delivery records (RocketMQ 5's timer topic name).
TIMER_TOPIC = "rmq_sys_wheel_timer"
#: Half (prepared) transaction messages and the op records resolving them (RocketMQ's names).
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
#: Topics clients may not send to directly.
SYSTEM_TOPICS = frozenset({SCHEDULE_TOPIC, AUTO_CREATE_TOPIC_KEY, TIMER_TOPIC, TRANS_HALF_TOPIC,
                           TRANS_OP_HALF_TOPIC})

#: Property keys the broker sets itself; a client may not send them.
RESERVED_PROPERTIES = frozenset({record.PROPERTY_REAL_TOPIC, record.PROPERTY_REAL_QUEUE_ID})

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


def _check_name(kind: str, name: str, max_length: int) -> str:
    if not name or not name.strip():
        raise InvalidArgumentError(f"{kind} name must not be empty")
    if len(name) > max_length:
        raise InvalidArgumentError(
            f"{kind} name {name[:40]!r}... is {len(name)} characters long (at most {max_length})"
        )
    if not _NAME_CHARS.match(name):
        raise InvalidArgumentError(
            f"{kind} name {name!r} has illegal characters (allowed: letters, digits, %, |, _ and -)"
        )
    return name


def validate_topic(topic: str) -> str:
    """A legal topic name (charset ``[%|a-zA-Z0-9_-]``, 1..127 characters)."""
    return _check_name("topic", topic, TOPIC_MAX_LENGTH)


def validate_send_topic(topic: str) -> str:
    """A topic clients may produce to: legal and not a broker-internal topic."""
    validate_topic(topic)
    if topic in SYSTEM_TOPICS:
        raise InvalidArgumentError(f"topic {topic!r} is a system topic; clients may not send to it")
    return topic


def validate_group(group: str) -> str:
    """A legal consumer/subscription group name (same charset, 1..255 characters)."""
    return _check_name("consumer group", group, GROUP_MAX_LENGTH)


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


@dataclasses.dataclass(frozen=True)
class TagFilter:
    """A parsed subscription expression: ``None`` tags = everything (``*``)."""

    expression: str
    tags: frozenset[str] | None
    hash_codes: frozenset[int] | None

    @property
    def matches_all(self) -> bool:
        return self.tags is None

    def matches(self, tag: str | None) -> bool:
        return self.tags is None or (tag is not None and tag in self.tags)


MATCH_ALL = TagFilter("*", None, None)


def parse_tag_expression(
    expression: str, hash_code: Callable[[str], int] = record.tag_hash_code
) -> TagFilter:
    """``"*"``/``""`` -> everything; ``"a || b"`` -> tags a and b (RocketMQ's TAG syntax).

    Empty alternatives (``"a || "``) are ignored; an expression with no tag at all is an error.
    """
    text = expression.strip()
    if text in ("", "*"):
        return MATCH_ALL
    tags = [part.strip() for part in text.split("||")]
    tags = [t for t in tags if t]
    if not tags:
        raise InvalidArgumentError(f"subscription expression {expression!r} names no tag")
    for tag in tags:
        if tag == "*":
            return MATCH_ALL
        if any(c.isspace() for c in tag):
            raise InvalidArgumentError(
                f"subscription expression {expression!r}: tag {tag!r} contains whitespace "
                "(separate tags with ||)"
            )
    unique = frozenset(tags)
    return TagFilter(text, unique, frozenset(hash_code(t) for t in unique))


# -- delay levels ------------------------------------------------------------------------------


def effective_delay_level(level: int, max_level: int) -> int:
    """RocketMQ's rule: 0 = no delay; above the highest level = the highest level."""
    if level < 0:
        raise InvalidArgumentError(f"delay level must be >= 0, got {level}")
    return min(level, max_level)
