"""Consumer group membership (RocketMQ's ConsumerManager), kept in memory.

Consumers heartbeat every few seconds with their subscriptions; a member silent for longer than
``consumerChannelExpiredTime`` is dropped by :meth:`ConsumerManager.scan_expired`. Clients
rebalance a topic's queues among the sorted member list of their group (GetConsumerList).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)


@dataclasses.dataclass
class ConsumerMember:
    client_id: str
    #: time.monotonic() of the last heartbeat.
    last_heartbeat: float
    #: topic -> tag expression.
    subscriptions: dict[str, str]


class ConsumerManager:
    def __init__(self, expiry_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.expiry_s = expiry_s
        self._clock = clock
        self._groups: dict[str, dict[str, ConsumerMember]] = {}

    def heartbeat(self, group: str, client_id: str, subscriptions: Mapping[str, str]) -> bool:
        """Record a heartbeat; True when ``client_id`` joined the group (or its subscriptions
        changed), i.e. members should rebalance."""
        members = self._groups.setdefault(group, {})
        member = members.get(client_id)
        now = self._clock()
        if member is None:
            members[client_id] = ConsumerMember(client_id, now, dict(subscriptions))
            log.info("consumer joined", extra={"group": group, "client_id": client_id,
                                               "members": len(members)})
            return True
        member.last_heartbeat = now
        if member.subscriptions != subscriptions:
            member.subscriptions = dict(subscriptions)
            return True
        return False

    def unregister(self, group: str, client_id: str) -> bool:
        members = self._groups.get(group)
        if not members or members.pop(client_id, None) is None:
            return False
        if not members:
            del self._groups[group]
        log.info("consumer left", extra={"group": group, "client_id": client_id})
        return True

    def members(self, group: str) -> list[str]:
        """Client ids of the live members, sorted (every member computes the same assignment)."""
        return sorted(self._groups.get(group, {}))

    def subscriptions(self, group: str) -> dict[str, dict[str, str]]:
        return {cid: dict(m.subscriptions) for cid, m in self._groups.get(group, {}).items()}

    def groups(self) -> list[str]:
        return sorted(self._groups)

    def member_count(self) -> int:
        return sum(len(m) for m in self._groups.values())

    def scan_expired(self) -> list[tuple[str, str]]:
        """Drop members silent for longer than the expiry; returns (group, client id) dropped."""
        deadline = self._clock() - self.expiry_s
        dropped: list[tuple[str, str]] = []
        for group in list(self._groups):
            members = self._groups[group]
            for client_id in [c for c, m in members.items() if m.last_heartbeat < deadline]:
                del members[client_id]
                dropped.append((group, client_id))
                log.info("consumer expired", extra={"group": group, "client_id": client_id,
                                                    "expiry_s": self.expiry_s})
            if not members:
                del self._groups[group]
        return dropped
