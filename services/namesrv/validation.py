"""Request validation for the NameServer API (pure functions, no I/O).

Every check runs before the route table is touched, so a malformed request fails with
INVALID_ARGUMENT naming the field and the rule it broke, and changes nothing.
"""

from __future__ import annotations

import re
from typing import Any

from pocketmq.wire.address import AddressError, InvalidPortError, parse_host_port
from pocketmq.wire.names import (
    BROKER_NAME_CHARS,
    BROKER_NAME_CHARSET,
    BROKER_NAME_MAX_LENGTH,
    NAME_CHARS,
    NAME_CHARSET,
)
from services.common.errors import InvalidArgumentError

MAX_NAME_LENGTH = BROKER_NAME_MAX_LENGTH
#: Cluster and broker names (the rule the broker's config applies too).
NAME_RE = BROKER_NAME_CHARS
#: Topic names (RocketMQ's rule: no '.').
TOPIC_RE = NAME_CHARS
MAX_QUEUE_NUMS = 65_535
#: READ | WRITE | INHERIT.
PERM_MASK = 7
MAX_KV_KEY_LENGTH = 255
MAX_KV_VALUE_BYTES = 1024 * 1024


def _fail(field: str, message: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{field}: {message}")


def check_name(field: str, value: str, pattern: re.Pattern[str] = NAME_RE) -> None:
    if not value:
        raise _fail(field, "must not be empty")
    if len(value) > MAX_NAME_LENGTH:
        raise _fail(field, f"longer than {MAX_NAME_LENGTH} characters ({len(value)})")
    if not pattern.fullmatch(value):
        allowed = NAME_CHARSET if pattern is TOPIC_RE else BROKER_NAME_CHARSET
        raise _fail(field, f"{value!r} has characters outside {allowed}")


def check_topic(field: str, value: str) -> None:
    check_name(field, value, TOPIC_RE)


def check_address(field: str, value: str, required: bool = True) -> None:
    """``host:port`` with a non-empty host and a port in 1..65535 (IPv6 hosts in brackets)."""
    if not value:
        if required:
            raise _fail(field, "must not be empty")
        return
    if any(c.isspace() for c in value):
        raise _fail(field, f"{value!r} is not host:port")
    try:
        parse_host_port(value)
    except InvalidPortError:
        raise _fail(field, f"{value!r} has an invalid port (expected 1..65535)") from None
    except AddressError:
        raise _fail(field, f"{value!r} is not host:port") from None


def check_broker_id(field: str, value: int) -> None:
    if value < 0:
        raise _fail(field, f"must be >= 0 (0 = master, > 0 = slave), got {value}")


def validate_register(req: Any, max_topics: int) -> None:
    """A RegisterBrokerRequest."""
    check_name("cluster_name", req.cluster_name)
    check_name("broker_name", req.broker_name)
    check_broker_id("broker_id", req.broker_id)
    check_address("broker_addr", req.broker_addr)
    check_address("ha_server_addr", req.ha_server_addr, required=False)
    check_address("metrics_addr", req.metrics_addr, required=False)
    if len(req.broker_role) > MAX_NAME_LENGTH:
        raise _fail("broker_role", f"longer than {MAX_NAME_LENGTH} characters")
    version = req.topic_config_version
    if version.timestamp < 0 or version.counter < 0:
        raise _fail("topic_config_version", "timestamp and counter must be >= 0")
    count = len(req.topic_configs)
    if count > max_topics:
        raise _fail("topic_configs", f"{count} topics exceed the limit of {max_topics} per registration "
                                     "(maxTopicsPerRegistration)")
    if not _topic_table_ok(req.topic_configs):
        _explain_topic_table(req.topic_configs)
    if req.deleted_topics and not req.HasField("topic_delta_base"):
        raise _fail("deleted_topics", "only an incremental registration (topic_delta_base) deletes topics")
    for i, name in enumerate(req.deleted_topics):
        check_topic(f"deleted_topics[{i}]", name)


_TOPIC_LINES_RE = re.compile(rf"(?:{NAME_CHARSET}{{1,{MAX_NAME_LENGTH}}}\n)*")


def _topic_table_ok(configs: Any) -> bool:
    """Fast path for every heartbeat: is the whole topic table valid? (C-level checks first.)"""
    names: list[str] = []
    for tc in configs:  # one pass: each element access builds a wrapper object
        names.append(tc.topic_name)
        if (not 0 <= tc.read_queue_nums <= MAX_QUEUE_NUMS or not 0 <= tc.write_queue_nums <= MAX_QUEUE_NUMS
                or tc.perm & ~PERM_MASK):
            return False
    return bool(_TOPIC_LINES_RE.fullmatch("".join(n + "\n" for n in names))) and len(set(names)) == len(names)


def _explain_topic_table(configs: Any) -> None:
    """Slow path: find the first bad entry and raise naming it."""
    seen: set[str] = set()
    for i, tc in enumerate(configs):
        where = f"topic_configs[{i}]"
        check_topic(f"{where}.topic_name", tc.topic_name)
        if tc.topic_name in seen:
            raise _fail(f"{where}.topic_name", f"duplicate topic {tc.topic_name!r}")
        seen.add(tc.topic_name)
        for attr in ("read_queue_nums", "write_queue_nums"):
            value = getattr(tc, attr)
            if not 0 <= value <= MAX_QUEUE_NUMS:
                raise _fail(f"{where}.{attr}",
                            f"{value} is outside 0..{MAX_QUEUE_NUMS} (topic {tc.topic_name!r})")
        if tc.perm & ~PERM_MASK or tc.perm < 0:
            raise _fail(f"{where}.perm", f"{tc.perm} is not a combination of READ(4), WRITE(2), INHERIT(1)")
    raise _fail("topic_configs", "invalid topic table")  # unreachable if both paths agree


def validate_unregister(req: Any) -> None:
    check_name("cluster_name", req.cluster_name)
    check_name("broker_name", req.broker_name)
    check_broker_id("broker_id", req.broker_id)
    check_address("broker_addr", req.broker_addr)


def check_kv_part(field: str, value: str) -> None:
    if not value:
        raise _fail(field, "must not be empty")
    if len(value) > MAX_KV_KEY_LENGTH:
        raise _fail(field, f"longer than {MAX_KV_KEY_LENGTH} characters ({len(value)})")


def check_kv_value(value: str) -> None:
    if len(value.encode()) > MAX_KV_VALUE_BYTES:
        raise _fail("value", f"larger than {MAX_KV_VALUE_BYTES} bytes")
