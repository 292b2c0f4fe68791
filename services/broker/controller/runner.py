"""Runs a broker under a failover controller (``controllerMode`` etcd or kubernetes): every member starts as a
slave, the one that takes the group's leader lease becomes master in place (same process, same
ports: the broker's services are rebuilt with the new role), and a master that cannot renew its
lease stops acknowledging writes before the lease can expire, then becomes a slave again.
Rules and timings: ``docs/failover.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from typing import Final

from services.broker import k8s_labels
from services.broker.app import BrokerApp, HAFactory
from services.broker.config import BrokerConfig, BrokerRole
from services.broker.controller.dcs import Dcs, EtcdDcs, Leader, SyncStateSet
from services.broker.controller.metrics import ControllerCollector
from services.broker.replication.epochfile import EpochFile
from services.broker.storage.config import StoreConfig

__all__ = ["Controller", "open_dcs"]

log = logging.getLogger(__name__)

#: Grace for in-flight requests when the role switches (a failover should not wait 10 s).
_SWITCH_GRACE_S: Final = 0.2
#: How often the loop runs (the master renews its lease every controllerRenewInterval, but
#: looks at its slaves, for the SyncStateSet, this often).
_TICK_S: Final = 0.1
#: What a demoted master logs about its old leader key (Dcs.release outcomes).
_RELEASED: Final = {
    "released": "demoted master: leader key released",
    "gone": "demoted master: leader key already gone (its lease ran out first)",
    "other": "demoted master: the leader key is another master's, left alone",
}


def open_dcs(cfg: BrokerConfig) -> Dcs:
    """The coordination service of ``controllerMode``.  Raises ConfigError when it cannot be set
    up (e.g. no Kubernetes credentials)."""
    ttl_s = cfg.controller_lease_ttl / 1000
    renew_s = cfg.controller_renew_interval / 1000
    if cfg.controller_mode == "kubernetes":
        from services.broker.controller import k8s_dcs

        return k8s_dcs.KubernetesDcs(
            k8s_dcs.api_client_from(cfg.controller_k8s_api_server, cfg.controller_k8s_kubeconfig),
            k8s_dcs.namespace_of(cfg.controller_k8s_namespace),
            k8s_dcs.lease_name_of(cfg.controller_k8s_lease_name, cfg.broker_cluster_name, cfg.broker_name),
            ttl_s, renew_s, timeout_s=renew_s * 2)
    return EtcdDcs(cfg.controller_etcd_endpoints, cfg.broker_cluster_name, cfg.broker_name,
                   max(2, round(ttl_s)), timeout_s=renew_s * 2)


class Controller:
    """The member's loop (see the module doc)."""

    def __init__(self, cfg: BrokerConfig, store_cfg: StoreConfig, ha_factory: HAFactory | None,
                 dcs: Dcs | None = None) -> None:
        self.cfg = cfg
        self.store_cfg = store_cfg
        self.ha_factory = ha_factory
        self.member_id = cfg.broker_id
        self.ttl_s = cfg.controller_lease_ttl / 1000
        self.renew_s = cfg.controller_renew_interval / 1000
        #: The master stops acknowledging this long before its lease could expire.
        self.margin_s = max(2 * self.renew_s, self.ttl_s / 4)
        self.dcs = dcs if dcs is not None else open_dcs(cfg)
        #: controllerMode=kubernetes: the API client, also for the pod's role label.
        self.k8s_api_client = getattr(self.dcs, "api_client", None)
        self.app: BrokerApp | None = None
        self.is_master = False
        self.epoch = 0
        self.fence_at = 0.0
        #: Renewal start + TTL: the lease cannot be gone before.  A fenced SYNC_MASTER keeps
        #: trying to renew until then and acknowledges again if it manages (an etcd election).
        self.lease_until = 0.0
        self._fence_said = False
        #: The epoch whose leader key this member still holds after demoting itself: given up
        #: (conditionally) as soon as the DCS answers again, so the group need not wait a TTL.
        self._release_epoch = 0
        self.failovers = 0
        self.last_failover_ms = 0
        self.renew_latency_s = 0.0
        self.sync_state: SyncStateSet | None = None
        self.problem = ""
        #: False while the last step could not reach the DCS (or it had no quorum).
        self.dcs_reachable = True
        self._leader: Leader | None = None
        #: A slave's last look at etcd found no leader: the offset it publishes next was read after
        #: the master left (so it holds whatever the old master acknowledged that reached it).
        self._leaderless = False
        self._said = ""
        self._renewed_at = 0.0
        self._wanted_label: tuple[BrokerRole, int] | None = None
        self._label_changed = asyncio.Event()

    # -- roles -----------------------------------------------------------------------------------

    def _config(self, master: bool) -> BrokerConfig:
        if master:
            return dataclasses.replace(self.cfg, controller_mode="none", broker_id=0)
        return dataclasses.replace(self.cfg, controller_mode="none", broker_role=BrokerRole.SLAVE,
                                   broker_id=self.member_id)

    async def _start_app(self, master: bool) -> None:
        app = BrokerApp(self._config(master), self.store_cfg, ha_factory=self.ha_factory)
        app.controller = self
        app.metrics.registry.register(ControllerCollector(self))
        if master:
            app.write_fence = self.fenced
        self.app = app
        self.is_master = master
        await app.start()
        if not master and self._leader is not None:
            self._follow(self._leader)

    async def _switch(self, master: bool, epoch: int = 0) -> None:
        started = time.monotonic()
        app = self.app
        if app is not None and master and not self.is_master and app.ha is not None:
            # A slave taking over stops following the old master first: what it still receives
            # meanwhile (acked to the old master) belongs to the old term, so the new term
            # starts after it, not at a max offset read while appends were still landing.
            await app.ha.stop()
        max_offset = app.store.max_offset if app is not None else 0
        if app is not None:
            await app.stop(grace_s=_SWITCH_GRACE_S)
        if master:
            EpochFile(self.store_cfg.store_path_root_dir).start_epoch(epoch, max_offset)
            self.epoch = epoch
        await self._start_app(master)
        log.warning("role switched in place", extra={
            "role": "master" if master else "slave", "member": self.member_id, "epoch": epoch or self.epoch,
            "max_offset": max_offset, "switch_s": round(time.monotonic() - started, 3)})

    def sync_state_members(self) -> list[int]:
        return sorted(self.sync_state.members) if self.sync_state is not None else []

    def fenced(self) -> bool:
        """True once this master's lease may be gone (local monotonic deadline)."""
        return not self.is_master or time.monotonic() >= self.fence_at

    def _follow(self, leader: Leader) -> None:
        app = self.app
        if app is not None and not self.is_master and leader.broker_id != self.member_id:
            app._on_master(leader.addr, leader.ha_addr)

    def want_pod_label(self, role: BrokerRole, broker_id: int) -> None:
        """Label this pod with ``role`` (services.broker.k8s_labels), after any patch in flight."""
        self._wanted_label = (role, broker_id)
        self._label_changed.set()

    async def _labeller(self) -> None:
        """The one writer of this pod's role label: patches run one at a time, newest role last."""
        written: tuple[BrokerRole, int] | None = None
        while True:
            await self._label_changed.wait()
            self._label_changed.clear()
            want = self._wanted_label
            if want is not None and want != written and await k8s_labels.label_own_pod(
                    *want, api_client=self.k8s_api_client):
                written = want

    def _say(self, problem: str) -> None:
        self.problem = problem
        if problem and problem != self._said:
            log.warning(problem, extra={"member": self.member_id})
        self._said = problem

    # -- the loop --------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        labeller = asyncio.create_task(self._labeller(), name="k8s-self-label")
        await self._start_app(master=False)
        try:
            while not stop.is_set():
                try:
                    await (self._master_tick() if self.is_master else self._slave_tick())
                    self.dcs_reachable = True
                except Exception as exc:
                    log.warning("controller step failed", extra={"member": self.member_id,
                                                                 "error": repr(exc)})
                    self.dcs_reachable = False
                    self._say(f"etcd unreachable or without quorum ({type(exc).__name__}): no lease can be "
                              "renewed or taken, so no member acknowledges writes or is promoted; waiting")
                    await self.dcs.failed()
                now = time.monotonic()
                if self.is_master and now >= self.fence_at and not self._fence_said:
                    self._fence_said = True
                    log.error("leader lease not renewed in time: stopped acknowledging writes",
                              extra={"member": self.member_id, "epoch": self.epoch})
                if self.is_master and now >= self._demote_at():
                    log.error("leader lease not renewed in time: demoting (it may have expired)",
                              extra={"member": self.member_id, "epoch": self.epoch})
                    self._release_epoch = self.epoch
                    await self._switch(master=False)
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), _TICK_S if self.is_master else self.renew_s / 2)
        finally:
            if self.is_master:
                self.fence_at = 0.0
                try:
                    await asyncio.wait_for(self.dcs.resign(), self.renew_s * 2)
                except Exception:
                    log.warning("could not resign the leader lease", extra={"member": self.member_id})
            if self.app is not None:
                await self.app.stop()
            labeller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await labeller
            await self.dcs.close()

    def _demote_at(self) -> float:
        # an ASYNC_MASTER acknowledges without waiting for the fence: it stops serving at the fence
        return self.lease_until if self.cfg.broker_role is BrokerRole.SYNC_MASTER else self.fence_at

    def _renewed(self, started: float) -> None:
        self._renewed_at = started
        self.fence_at = started + self.ttl_s - self.margin_s
        self.lease_until = started + self.ttl_s
        self._fence_said = False

    async def _master_tick(self) -> None:
        started = time.monotonic()
        if started - self._renewed_at >= self.renew_s:
            # at most one renew interval: a stopped etcd member leaves time to renew through the
            # next endpoint before the fence
            ok = await asyncio.wait_for(self.dcs.renew(), self.renew_s)
            self.renew_latency_s = time.monotonic() - started
            if not ok:
                self.fence_at = self.lease_until = 0.0
                return
            if started >= self.fence_at:
                # fenced, and the lease lived on (etcd elected a new leader of its own, which
                # keeps leases): acknowledge again only while the leader key is still this epoch's
                leader = await self.dcs.leader()
                if leader is None or (leader.epoch, leader.broker_id) != (self.epoch, self.member_id):
                    self.fence_at = self.lease_until = 0.0
                    return
                log.warning("leader lease renewed again: acknowledging writes again", extra={
                    "member": self.member_id, "epoch": self.epoch,
                    "fenced_s": round(started - self.fence_at, 3)})
            self._renewed(started)
            target = await self.dcs.switchover()
            if target is not None and await self._hand_over(target):
                return
        app = self.app
        assert app is not None
        ha = getattr(app.ha, "master", None)
        if ha is None:
            return
        in_sync = {s.broker_id for s in ha.in_sync(self.cfg.ha_max_time_slave_not_catchup / 1000)}
        previous = self.sync_state.members if self.sync_state is not None else frozenset()
        if self.cfg.all_ack_in_sync_state_set:
            # every member holds every acknowledged message: a slave joins once it holds all that
            # was acknowledged and counts before it is published; a leaver counts until it is not
            acked = ha.acknowledged_offset
            joining = {s.broker_id for s in ha.slaves()
                       if s.broker_id in in_sync - previous and s.ack_offset >= acked}
            members = frozenset((in_sync & previous) | joining | {self.member_id})
            ha.set_counted(frozenset((previous | joining) - {self.member_id}))
        else:
            members = frozenset(in_sync | {self.member_id})
            # shrink what counts before publishing, grow it only once published (a promoted
            # slave must hold every acknowledged message)
            ha.set_counted(frozenset(in_sync & previous))
        if members != previous or self.sync_state is None:
            state = SyncStateSet(self.epoch, self.member_id, members)
            if await self.dcs.publish_sync_state(state):
                if self.sync_state is None or members != self.sync_state.members:
                    log.info("SyncStateSet changed", extra={"members": sorted(members), "epoch": self.epoch})
                self.sync_state = state
        published = self.sync_state.members if self.sync_state is not None else frozenset()
        ha.set_counted(published - {self.member_id} if self.cfg.all_ack_in_sync_state_set
                       else frozenset(in_sync & published))
        self._say("" if len(members) > 1 else
                  "no in-sync slave: a failover now would lose data, so none would be promoted")

    async def _hand_over(self, requested: int) -> bool:
        """A planned switchover: stop acknowledging, let the target catch up, name it, give the
        lease up and become a slave.  False (and the request dropped) when no member fits."""
        app = self.app
        ha = getattr(app.ha, "master", None) if app is not None else None
        members = self.sync_state.members if self.sync_state is not None else frozenset()
        if ha is None or app is None:
            return False
        candidates = [s for s in ha.slaves() if s.broker_id in members and s.broker_id != self.member_id
                      and (requested == 0 or s.broker_id == requested)]
        if not candidates:
            log.error("switchover refused: the target is not an in-sync slave", extra={
                "requested": requested or "any", "sync_state_set": sorted(members)})
            await self.dcs.clear_switchover()
            return False
        target = max(candidates, key=lambda s: s.ack_offset).broker_id
        log.warning("planned switchover: handing the group over", extra={"to": target, "epoch": self.epoch})
        self.fence_at = 0.0  # from now on nothing is acknowledged here
        deadline = time.monotonic() + self.ttl_s
        while time.monotonic() < deadline:
            acks = {s.broker_id: s.ack_offset for s in ha.slaves()}
            if acks.get(target, -1) >= app.store.max_offset:
                break
            await asyncio.sleep(0.01)
        await self.dcs.hand_over(target)
        await self.dcs.resign()
        await self._switch(master=False)
        return True

    async def _slave_tick(self) -> None:
        app = self.app
        assert app is not None
        max_offset = app.store.max_offset
        await self.dcs.publish_member(self.member_id, max_offset, self.cfg.broker_addr, self._leaderless)
        if self._release_epoch:
            old_epoch = self._release_epoch
            outcome = await self.dcs.release(old_epoch, self.member_id)
            self._release_epoch = 0  # only once done: an error tries again next step
            log.warning(_RELEASED.get(outcome, outcome), extra={"member": self.member_id, "epoch": old_epoch,
                                                              "outcome": outcome})
        leader = await self.dcs.leader()
        self._leaderless = leader is None
        if leader is not None and not leader.ready:
            return  # the new master is switching its role: follow once it serves
        if leader is not None:
            changed = leader != self._leader
            if changed:
                log.info("group master", extra={"master": leader.broker_id, "addr": leader.addr,
                                                "epoch": leader.epoch})
            self._leader = leader
            self.epoch = leader.epoch
            self._follow(leader)
            slave = getattr(app.ha, "slave", None)
            if changed and slave is not None:
                slave.retry_now()  # it may be the same address, backing off from its last term
            self._say("")
            return
        self._leader = None
        state = await self.dcs.sync_state()
        self.sync_state = state
        if state is not None and self.member_id not in state.members:
            self._say(f"not promoted: member {self.member_id} is not in the SyncStateSet "
                      f"{sorted(state.members)} (it may lack acknowledged messages); waiting")
            return
        handover = await self.dcs.switchover()
        if handover is not None and handover not in (0, self.member_id):
            self._say(f"waiting: a planned switchover hands the group to member {handover}")
            return
        members = await self.dcs.members()
        rivals = {m: r.max_offset for m, r in members.items() if m != self.member_id
                  and (state is None or m in state.members)}
        if handover != self.member_id:
            # An offset published while the old master still served may be short of what the
            # master acknowledged on that member's word: wait for one read after it left (or for
            # the record to expire, if the member is gone).
            unsure = sorted(m for m in rivals if members[m].leaderless is False)
            if unsure:
                self._say(f"waiting: in-sync member(s) {unsure} have not published an offset read "
                          "since the master left")
                return
        best = max(rivals.items(), key=lambda mo: (mo[1], -mo[0]), default=None)
        if handover != self.member_id and best is not None and (best[1], -best[0]) > (max_offset,
                                                                                      -self.member_id):
            self._say(f"waiting: in-sync member {best[0]} has a higher offset ({best[1]} > {max_offset})")
            return
        await asyncio.sleep(_TICK_S)  # let the appends in flight land
        max_offset = app.store.max_offset
        before = time.monotonic()  # the lease cannot expire before before + TTL
        stored = EpochFile(self.store_cfg.store_path_root_dir).entries
        floor = max(self.epoch, stored[-1].epoch if stored else 0)
        epoch = await self.dcs.campaign(self.member_id, self.cfg.broker_addr, self.cfg.ha_server_addr, floor)
        if epoch is None:
            return
        self.fence_at = before + self.ttl_s - self.margin_s
        self.lease_until = before + self.ttl_s
        self._fence_said = False
        self.failovers += 1
        self.last_failover_ms = int(time.time() * 1000)
        self._leaderless = False
        log.warning("took the leader lease: becoming master", extra={
            "member": self.member_id, "epoch": epoch, "max_offset": max_offset})
        self._say("")
        self._renewed_at = before
        await self._switch(master=True, epoch=epoch)
        started = time.monotonic()
        if not await self.dcs.renew():
            return  # lost during the switch: the fence demotes at once
        self._renewed(started)
        await self.dcs.mark_ready(epoch, self.member_id, self.cfg.broker_addr, self.cfg.ha_server_addr)
        if handover is not None:
            await self.dcs.clear_switchover()
        await self._master_tick()

