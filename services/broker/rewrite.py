"""The send path's rewrite of timer and transaction messages into the broker's system topics
(beside the delay-level rewrite in :mod:`services.broker.send`).

- ``TIMER_DELIVER_MS`` in the future: stored in the timer topic (queue 0) with its real topic and
  queue in ``REAL_TOPIC`` / ``REAL_QID``; delivered by :mod:`services.broker.timer.service`.
  A time not in the future is stored normally; one beyond ``timerMaxDelaySec`` is refused.
- ``TRAN_MSG=true``: a half message, stored in the half topic (queue 0) the same way and made
  visible (or discarded) by :mod:`services.broker.transaction`.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

from services.broker.storage import record
from services.broker.validation import TIMER_TOPIC, TRANS_HALF_TOPIC
from services.common.errors import InvalidArgumentError

SPECIAL_PROPERTIES = (record.PROPERTY_TIMER_DELIVER_MS, record.PROPERTY_TRANSACTION_PREPARED)


def is_special(props: Mapping[str, str]) -> bool:
    """True when the message is a timer or a transaction message (rewritten on send)."""
    return record.PROPERTY_TIMER_DELIVER_MS in props or record.PROPERTY_TRANSACTION_PREPARED in props


def parse_deliver_ms(value: str) -> int:
    if not value.isdigit() or len(value) > 18:
        raise InvalidArgumentError(
            f"{record.PROPERTY_TIMER_DELIVER_MS} must be epoch milliseconds as a decimal number, "
            f"got {value!r}")
    return int(value)


def rewrite_special(props: MutableMapping[str, str], real_topic: str, real_queue_id: int, *,
                    delay_level: int, max_delay_sec: int, now_ms: int) -> tuple[str, int] | None:
    """The (system topic, queue) a timer/transaction message is stored in, its properties
    completed (REAL_TOPIC / REAL_QID); None for a message stored as sent. Raises
    InvalidArgumentError for a malformed or out-of-range one."""
    timer = props.get(record.PROPERTY_TIMER_DELIVER_MS)
    prepared = props.get(record.PROPERTY_TRANSACTION_PREPARED)
    target: tuple[str, int] | None = None
    if prepared is not None and prepared.lower() == "true":
        if timer is not None or delay_level:
            raise InvalidArgumentError("a transaction message cannot be delayed (no delay level, no "
                                       f"{record.PROPERTY_TIMER_DELIVER_MS})")
        if not props.get(record.PROPERTY_PRODUCER_GROUP):
            raise InvalidArgumentError("a transaction message needs a producer group (the broker asks "
                                       "that group's producers about unresolved transactions)")
        target = (TRANS_HALF_TOPIC, 0)
    elif timer is not None:
        if delay_level:
            raise InvalidArgumentError(
                f"a message has either a delay level or {record.PROPERTY_TIMER_DELIVER_MS}, not both")
        deliver_ms = parse_deliver_ms(timer)
        if deliver_ms - now_ms > max_delay_sec * 1000:
            raise InvalidArgumentError(
                f"delivery time {deliver_ms} is {(deliver_ms - now_ms) // 1000} s ahead, beyond "
                f"timerMaxDelaySec ({max_delay_sec} s)")
        if deliver_ms > now_ms:
            target = (TIMER_TOPIC, 0)
    if target is not None:
        props[record.PROPERTY_REAL_TOPIC] = real_topic
        props[record.PROPERTY_REAL_QUEUE_ID] = str(real_queue_id)
    return target
