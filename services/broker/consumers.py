"""Consumer group membership (RocketMQ's ConsumerManager), kept in memory.

Consumers heartbeat every few seconds with their subscriptions; a member silent for longer than
``consumerChannelExpiredTime`` is dropped by :meth:`ConsumerManager.scan_expired`. Clients
rebalance a topic's queues among the sorted member list of their group (GetConsumerList).

Offset resets (``ResetConsumerOffset``) bump the (group, topic) reset generation: members learn
it from heartbeat and pull replies and read the topic again from the reset offsets; commits that
carry an older generation are ignored meanwhile. The generations live with the consumer offsets
(:class:`~services.broker.metadata.offsets.ConsumerOffsetManager`: persisted and synced to
slaves with them); this class answers for them.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping

from services.broker.metadata.offsets import ConsumerOffsetManager

log = logging.getLogger(__name__)


@dataclasses.dataclass
class ConsumerMember:
    client_id: str
    #: time.monotonic() of the last heartbeat.
    last_heartbeat: float
    #: topic -> tag expression.
    subscriptions: dict[str, str]
    addr: str = ""
    language: str = ""
    version: str = ""
    #: time.time() of the last heartbeat (ms), for display.
    last_heartbeat_ms: int = 0


class ConsumerManager:
    def __init__(self, expiry_s: float, resets: ConsumerOffsetManager,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.expiry_s = expiry_s
        self._clock = clock
        self._groups: dict[str, dict[str, ConsumerMember]] = {}
        #: Holds the (group, topic) reset generations.
        self._resets = resets

    def heartbeat(self, group: str, client_id: str, subscriptions: Mapping[str, str], *,
                  addr: str = "", language: str = "", version: str = "") -> bool:
        """Record a heartbeat; True when ``client_id`` joined the group (or its subscriptions
        changed), i.e. members should rebalance."""
        members = self._groups.setdefault(group, {})
        member = members.get(client_id)
        now = self._clock()
        wall_ms = int(time.time() * 1000)
        if member is None:
            members[client_id] = ConsumerMember(client_id, now, dict(subscriptions), addr, language, version,
                                                wall_ms)
            log.info("consumer joined", extra={"group": group, "client_id": client_id,
                                               "members": len(members), "addr": addr})
            return True
        member.last_heartbeat = now
        member.last_heartbeat_ms = wall_ms
        member.addr, member.language, member.version = addr or member.addr, language, version
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

    def member_details(self, group: str) -> list[ConsumerMember]:
        return [self._groups[group][c] for c in sorted(self._groups.get(group, {}))]

    # -- offset resets ----------------------------------------------------------------------------

    def record_reset(self, group: str, topic: str) -> int:
        """A reset of (group, topic) happened: its new generation (greater than any before)."""
        return self._resets.record_reset(group, topic)

    def reset_generation(self, group: str, topic: str) -> int:
        """0 when (group, topic) was never reset."""
        return self._resets.reset_generation(group, topic)

    def reset_generations(self, group: str) -> dict[str, int]:
        return self._resets.reset_generations(group)

    def stale_commit(self, group: str, topic: str, generation: int | None) -> bool:
        """A commit carrying ``generation`` (None: a client that does not track resets) predates
        the last reset of (group, topic) and must be ignored."""
        return self._resets.stale_commit(group, topic, generation)

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
