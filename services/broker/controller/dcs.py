"""The group's keys in etcd (v3 API through ``aetcd``): the leader key under a lease, the
SyncStateSet, and one liveness record per member.  Layout (``<p>`` = ``/pocketmq/<cluster>/<group>``):

- ``<p>/leader``: JSON ``{brokerId, addr, haAddr}`` under the master's lease; the key's create
  revision is the master's epoch (etcd revisions only grow, so every new master has a larger one);
- ``<p>/syncstateset``: JSON ``{epoch, master, members}``, written by the master only while its
  leader key is unchanged (a transaction compares the key's create revision);
- ``<p>/members/<brokerId>``: JSON ``{brokerId, maxOffset, addr, leaderless}`` under the member's
  own lease (``leaderless``: the member had seen no leader before it read that offset).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import aetcd

from pocketmq.wire.dcs import LEADER, MEMBERS, SWITCHOVER, SYNC_STATE_SET, group_key
from services.common.config import parse_address

__all__ = ["Dcs", "EtcdDcs", "Leader", "SyncStateSet"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Leader:
    broker_id: int
    addr: str
    ha_addr: str
    epoch: int
    #: False between taking the lease and serving as master (slaves wait for it).
    ready: bool = True


@dataclass(frozen=True)
class SyncStateSet:
    epoch: int
    master: int
    members: frozenset[int]


class MemberRecord(NamedTuple):
    """A member's last published record: its max offset, and whether it had already seen the
    group without a leader when it read that offset (so the offset includes everything the old
    master acknowledged that reached it: the master's fence ends before its lease can); None
    from a member of a version that does not say (its offset is taken as it is, as before)."""

    max_offset: int
    leaderless: bool | None


def member_json(broker_id: int, max_offset: int, addr: str, leaderless: bool, **extra: Any) -> str:
    """A member's published record as JSON, the same in both DCS backends (read back by
    :func:`member_record`; ``extra``: fields of one backend)."""
    return json.dumps({"brokerId": broker_id, "maxOffset": max_offset, "addr": addr,
                       "leaderless": leaderless, **extra})


def member_record(obj: dict[str, Any]) -> tuple[int, MemberRecord]:
    """(brokerId, record) of a member's published JSON (:func:`member_json`)."""
    leaderless = obj.get("leaderless")
    return int(obj["brokerId"]), MemberRecord(int(obj["maxOffset"]),
                                              None if leaderless is None else bool(leaderless))


class Dcs(Protocol):
    """What the controller (:mod:`.runner`) needs of a coordination service: implemented on etcd
    (:class:`EtcdDcs`) and on Kubernetes Leases (:class:`.k8s_dcs.KubernetesDcs`)."""

    ttl_s: float

    async def leader(self) -> Leader | None: ...
    async def campaign(self, broker_id: int, addr: str, ha_addr: str, floor: int = 0) -> int | None: ...
    async def mark_ready(self, epoch: int, broker_id: int, addr: str, ha_addr: str) -> bool: ...
    async def renew(self) -> bool: ...
    async def resign(self) -> None: ...
    async def release(self, epoch: int, broker_id: int) -> str: ...
    async def publish_sync_state(self, state: SyncStateSet) -> bool: ...
    async def sync_state(self) -> SyncStateSet | None: ...
    async def publish_member(self, broker_id: int, max_offset: int, addr: str,
                             leaderless: bool = False) -> None: ...
    async def members(self) -> dict[int, MemberRecord]: ...
    async def switchover(self) -> int | None: ...
    async def hand_over(self, target: int) -> None: ...
    async def clear_switchover(self) -> None: ...
    async def failed(self) -> None: ...
    async def close(self) -> None: ...


class EtcdDcs:
    """One member's view of its group's keys (see the module doc)."""

    def __init__(self, endpoints: str, cluster: str, group: str, ttl_s: int, timeout_s: float) -> None:
        self._endpoints = [e.strip() for e in endpoints.split(";") if e.strip()]
        self._cluster, self._group = cluster, group
        self.ttl_s: float = ttl_s
        self._timeout_s = timeout_s
        self._client: aetcd.Client | None = None
        self._lease: Any = None
        self._member_lease: Any = None

    def _key(self, name: str) -> bytes:
        return group_key(self._cluster, self._group, name)

    async def _c(self) -> aetcd.Client:
        if self._client is None:
            host, port = parse_address(self._endpoints[0], "controllerEtcdEndpoints")
            self._client = aetcd.Client(host=host, port=port, timeout=max(1, round(self._timeout_s)))
        return self._client

    async def _rotate(self) -> None:
        """After an error: drop the client; the next call connects to the next endpoint."""
        client, self._client = self._client, None
        self._endpoints = self._endpoints[1:] + self._endpoints[:1]
        self._member_lease = None
        if client is not None:
            try:
                await client.close()
            except Exception:
                log.debug("closing the etcd client failed", exc_info=True)

    async def close(self) -> None:
        await self._rotate()

    # -- the leader key ----------------------------------------------------------------------

    async def leader(self) -> Leader | None:
        c = await self._c()
        got = await c.get(self._key(LEADER))
        if got is None:
            return None
        obj = json.loads(got.value)
        return Leader(int(obj["brokerId"]), str(obj["addr"]), str(obj["haAddr"]), int(got.create_revision),
                      bool(obj.get("ready", True)))

    async def campaign(self, broker_id: int, addr: str, ha_addr: str, floor: int = 0) -> int | None:
        """Create the leader key under a new lease if nobody holds it: the new epoch, or None.
        (``floor``, the newest epoch in the candidate's store, is not used: etcd revisions only
        grow, unless the etcd cluster is rebuilt empty.)"""
        c = await self._c()
        lease = await c.lease(self.ttl_s)
        t = c.transactions
        value = json.dumps({"brokerId": broker_id, "addr": addr, "haAddr": ha_addr, "ready": False}).encode()
        ok, responses = await c.transaction(compare=[t.create(self._key(LEADER)) == 0],
                                            success=[t.put(self._key(LEADER), value, lease)], failure=[])
        if not ok:
            await lease.revoke()
            return None
        self._lease = lease
        return int(responses[0].response_put.header.revision)

    async def mark_ready(self, epoch: int, broker_id: int, addr: str, ha_addr: str) -> bool:
        """The master of ``epoch`` serves now: say so in its leader key (same lease)."""
        if self._lease is None:
            return False
        c = await self._c()
        t = c.transactions
        value = json.dumps({"brokerId": broker_id, "addr": addr, "haAddr": ha_addr, "ready": True}).encode()
        ok, _ = await c.transaction(compare=[t.create(self._key(LEADER)) == epoch],
                                    success=[t.put(self._key(LEADER), value, self._lease)], failure=[])
        return bool(ok)

    async def renew(self) -> bool:
        """Refresh the leader lease: False when it is gone (expired or revoked)."""
        if self._lease is None:
            return False
        # through the current client, not the lease object's: after an error the client is
        # another endpoint's, and the lease lives on (it belongs to the cluster, not the endpoint)
        reply = await (await self._c()).refresh_lease(self._lease.id)
        alive = int(reply.TTL) > 0
        if not alive:
            self._lease = None
        return alive

    async def resign(self) -> None:
        """Give the leader key up at once (planned switchover or shutdown of the master)."""
        lease, self._lease = self._lease, None
        if lease is not None:
            await (await self._c()).revoke_lease(lease.id)

    async def release(self, epoch: int, broker_id: int) -> str:
        """A demoted master gives its leader key up once etcd answers again, instead of leaving it
        until its lease expires: the key is deleted only if it is still the one of ``epoch`` (its
        create revision), so a newer master's key is never touched.  Returns ``released``,
        ``gone`` (it expired first) or ``other`` (another master's key, left alone)."""
        c = await self._c()
        t = c.transactions
        key = self._key(LEADER)
        ok, responses = await c.transaction(compare=[t.create(key) == epoch], success=[t.delete(key)],
                                            failure=[t.get(key)])
        lease, self._lease = self._lease, None
        if lease is not None:
            try:
                await c.revoke_lease(lease.id)
            except Exception:  # already expired: nothing left to give up
                log.debug("revoking the old leader lease failed", exc_info=True)
        if ok:
            return "released"
        return "other" if responses and responses[0] else "gone"  # (a range: the key, or nothing)

    # -- SyncStateSet ------------------------------------------------------------------------

    async def publish_sync_state(self, state: SyncStateSet) -> bool:
        """Write the SyncStateSet if the leader key is still the one of ``state.epoch``."""
        c = await self._c()
        t = c.transactions
        value = json.dumps({"epoch": state.epoch, "master": state.master,
                            "members": sorted(state.members)}).encode()
        ok, _ = await c.transaction(compare=[t.create(self._key(LEADER)) == state.epoch],
                                    success=[t.put(self._key(SYNC_STATE_SET), value)], failure=[])
        return bool(ok)

    async def sync_state(self) -> SyncStateSet | None:
        c = await self._c()
        got = await c.get(self._key(SYNC_STATE_SET))
        if got is None:
            return None
        obj = json.loads(got.value)
        return SyncStateSet(int(obj["epoch"]), int(obj["master"]), frozenset(int(m) for m in obj["members"]))

    # -- members -----------------------------------------------------------------------------

    async def publish_member(self, broker_id: int, max_offset: int, addr: str,
                             leaderless: bool = False) -> None:
        c = await self._c()
        if self._member_lease is None:
            self._member_lease = await c.lease(self.ttl_s)
        else:
            reply = await c.refresh_lease(self._member_lease.id)
            if int(reply.TTL) <= 0:
                self._member_lease = await c.lease(self.ttl_s)
        value = member_json(broker_id, max_offset, addr, leaderless).encode()
        await c.put(self._key(f"{MEMBERS}{broker_id}"), value, self._member_lease)

    async def switchover(self) -> int | None:
        """A pending planned switchover: the requested target (0 = any in-sync slave), or None."""
        c = await self._c()
        got = await c.get(self._key(SWITCHOVER))
        if got is None:
            return None
        return int(json.loads(got.value).get("to", 0))

    async def hand_over(self, target: int) -> None:
        """Name the member that takes over (the others then do not campaign), for a few TTLs."""
        c = await self._c()
        lease = await c.lease(self.ttl_s * 3)
        await c.put(self._key(SWITCHOVER), json.dumps({"to": target, "handover": True}).encode(), lease)

    async def clear_switchover(self) -> None:
        c = await self._c()
        await c.delete(self._key(SWITCHOVER))

    async def members(self) -> dict[int, MemberRecord]:
        """Live members' records by brokerId."""
        c = await self._c()
        return dict(member_record(json.loads(kv.value)) for kv in await c.get_prefix(self._key(MEMBERS)))

    async def failed(self) -> None:
        await self._rotate()
