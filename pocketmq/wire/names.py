"""Topic and group names (RocketMQ's ``TopicValidator`` rules) and the topics clients may not
send to."""

from __future__ import annotations

import re

from pocketmq.wire.errors import InvalidNameError

__all__ = [
    "BROKER_NAME_CHARS", "BROKER_NAME_CHARSET", "BROKER_NAME_MAX_LENGTH", "GROUP_MAX_LENGTH", "NAME_CHARS",
    "NAME_CHARSET", "SYSTEM_TOPICS", "TOPIC_MAX_LENGTH", "InvalidNameError",
    "validate_group", "validate_send_topic", "validate_topic",
]

#: The characters of topic and group names: letters, digits, ``%``, ``|``, ``_`` and ``-``
#: (use ``fullmatch``).
NAME_CHARSET = "[%|a-zA-Z0-9_-]"
NAME_CHARS = re.compile(NAME_CHARSET + "+")
TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 255
#: Cluster and broker names: the topic charset plus ``.`` (host-like names), 1..127 characters.
BROKER_NAME_CHARSET = "[A-Za-z0-9_.%|-]"
BROKER_NAME_CHARS = re.compile(BROKER_NAME_CHARSET + "+")
BROKER_NAME_MAX_LENGTH = 127

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


def _check_name(kind: str, name: str, max_length: int) -> str:
    if not name or not name.strip():
        raise InvalidNameError(f"{kind} name must not be empty")
    if len(name) > max_length:
        raise InvalidNameError(
            f"{kind} name {name[:40]!r}... is {len(name)} characters long (at most {max_length})"
        )
    if not NAME_CHARS.fullmatch(name):
        raise InvalidNameError(
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
        raise InvalidNameError(f"topic {topic!r} is a system topic; clients may not send to it")
    return topic


def validate_group(group: str) -> str:
    """A legal consumer/subscription group name (same charset, 1..255 characters)."""
    return _check_name("consumer group", group, GROUP_MAX_LENGTH)
