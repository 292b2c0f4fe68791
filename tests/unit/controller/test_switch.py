"""The controller's role switches (services/broker/controller/runner.py): a switch to master
records its new epoch at the log's end after the slave stopped following the old master
(``Controller._switch``); a slave campaigns only against its rivals' offsets read after the
master left (``Controller._slave_tick``)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace

from services.broker.config import BrokerConfig, BrokerRole
from services.broker.controller.dcs import MemberRecord, SyncStateSet, member_record
from services.broker.controller.runner import Controller
from services.broker.replication.epochfile import EpochFile
from services.broker.replication.epochs import EpochEntry
from services.broker.replication.master_settings import SlaveInfo
from services.broker.storage.config import StoreConfig


class _Store:
    """A slave's store that still appends what the old master sends until replication stops."""

    def __init__(self) -> None:
        self.offset = 1000
        self.following = True

    @property
    def max_offset(self) -> int:
        return self.offset


class _Replication:
    def __init__(self, store: _Store) -> None:
        self.store = store
        self.stops = 0

    async def stop(self) -> None:
        self.stops += 1
        self.store.following = False


class _App:
    def __init__(self) -> None:
        self.store = _Store()
        self.ha = _Replication(self.store)
        self.stopped_at = -1

    async def stop(self, grace_s: float | None = None) -> None:
        if self.store.following:  # (the broker's requests get their grace period first)
            self.store.offset += 500  # a frame of the old master's lands meanwhile, and is acked
        await self.ha.stop()
        self.stopped_at = self.store.offset


def test_a_slave_taking_over_starts_its_epoch_after_what_it_still_received(tmp_path: Path) -> None:
    store_cfg = StoreConfig(store_path_root_dir=str(tmp_path))
    cfg = BrokerConfig(broker_id=2, broker_role=BrokerRole.SLAVE)
    controller = Controller(cfg, store_cfg, None, dcs=object())  # type: ignore[arg-type]
    app = _App()
    controller.app = app  # type: ignore[assignment]
    started: list[bool] = []

    async def start_app(master: bool) -> None:
        started.append(master)

    controller._start_app = start_app  # type: ignore[method-assign]
    asyncio.run(controller._switch(master=True, epoch=7))
    assert started == [True]
    assert app.ha.stops >= 1 and app.stopped_at == app.store.offset
    # the new term starts where the log ended once nothing more came from the old master
    assert EpochFile(str(tmp_path)).entries[-1] == EpochEntry(7, app.store.offset)


class _Dcs:
    """The group's records as etcd would hold them, for the slave's campaign decision."""

    ttl_s = 3.0

    def __init__(self) -> None:
        self.records: dict[int, MemberRecord] = {}
        self.campaigns = 0

    async def publish_member(self, broker_id: int, max_offset: int, addr: str,
                             leaderless: bool = False) -> None:
        self.records[broker_id] = MemberRecord(max_offset, leaderless)

    async def leader(self) -> None:
        return None

    async def sync_state(self) -> SyncStateSet:
        return SyncStateSet(3, 1, frozenset({1, 2, 3}))

    async def switchover(self) -> None:
        return None

    async def members(self) -> dict[int, MemberRecord]:
        return dict(self.records)

    async def campaign(self, broker_id: int, addr: str, ha_addr: str, floor: int = 0) -> None:
        self.campaigns += 1
        return None  # (lost: this test is about whether it tries)


def test_a_slave_campaigns_only_against_offsets_its_rivals_read_after_the_master_left(tmp_path: Path) -> None:
    dcs = _Dcs()
    cfg = BrokerConfig(broker_id=2, broker_role=BrokerRole.SLAVE)
    controller = Controller(cfg, StoreConfig(store_path_root_dir=str(tmp_path)), None, dcs=dcs)  # type: ignore[arg-type]
    controller.app = _App()  # type: ignore[assignment]
    tick = controller._slave_tick
    # member 3 published a lower offset while the old master still served: it may have received
    # (and acknowledged) more since, so member 2 waits for its next record
    dcs.records[3] = MemberRecord(900, False)
    asyncio.run(tick())
    assert dcs.campaigns == 0
    assert "have not published an offset read since the master left" in controller.problem
    assert dcs.records[2] == MemberRecord(1000, False)  # (its own first look found no leader ...)
    asyncio.run(tick())
    assert dcs.records[2] == MemberRecord(1000, True)  # (... which its next record says)
    dcs.records[3] = MemberRecord(1200, True)  # member 3 had more: it is the one to take over
    asyncio.run(tick())
    assert dcs.campaigns == 0 and "has a higher offset" in controller.problem
    dcs.records[3] = MemberRecord(800, True)
    asyncio.run(tick())
    assert dcs.campaigns == 1
    del dcs.records[3]  # a member that is gone (its record expired) is not waited for
    asyncio.run(tick())
    assert dcs.campaigns == 2
    # a member of an earlier version does not say: its offset counts as it is (during a rolling
    # upgrade the group must not wait for a record that never comes)
    dcs.records[3] = MemberRecord(900, None)
    asyncio.run(tick())
    assert dcs.campaigns == 3


def test_member_records_without_the_flag_read_as_unknown() -> None:
    assert member_record({"brokerId": 3, "maxOffset": 7, "addr": "a:1"}) == (3, MemberRecord(7, None))
    assert member_record({"brokerId": 3, "maxOffset": 7, "leaderless": True}) == (3, MemberRecord(7, True))


class _HaMaster:
    """A master's replication as the controller's master tick sees it."""

    def __init__(self) -> None:
        self.acks = {2: 1000, 3: 1000}
        self.in_sync_ids = {2, 3}
        self.acknowledged_offset = 1000
        self.counted: frozenset[int] | None = None

    def in_sync(self, within_s: float) -> list[SlaveInfo]:
        return [s for s in self.slaves() if s.broker_id in self.in_sync_ids]

    def slaves(self) -> list[SlaveInfo]:
        return [SlaveInfo(f"127.0.0.1:{b}", a, a, 0, 0, 0, broker_id=b) for b, a in self.acks.items()]

    def set_counted(self, ids: frozenset[int] | None) -> None:
        self.counted = ids


def _master_app(ha: _HaMaster) -> object:
    """A master's app as the controller's master tick reads it (``app.ha.master``)."""
    return SimpleNamespace(ha=SimpleNamespace(master=ha))


class _SetDcs:
    """The SyncStateSet key; each publish records which slaves counted at that moment."""

    def __init__(self, ha: _HaMaster) -> None:
        self.ha = ha
        self.published: list[tuple[frozenset[int], frozenset[int] | None]] = []
        self.fail = False

    async def publish_sync_state(self, state: SyncStateSet) -> bool:
        self.published.append((state.members, self.ha.counted))
        return not self.fail

    async def switchover(self) -> None:
        return None


def test_with_all_ack_every_published_member_counts_and_a_joiner_must_hold_every_ack(tmp_path: Path) -> None:
    ha = _HaMaster()
    dcs = _SetDcs(ha)
    cfg = BrokerConfig(broker_id=1, broker_role=BrokerRole.SYNC_MASTER, controller_mode="etcd",
                       all_ack_in_sync_state_set=True)
    controller = Controller(cfg, StoreConfig(store_path_root_dir=str(tmp_path)), None, dcs=dcs)  # type: ignore[arg-type]
    controller.app = _master_app(ha)  # type: ignore[assignment]

    def tick() -> None:
        controller._renewed_at = time.monotonic()  # (the lease is renewed: only the set is looked at)
        controller.fence_at = controller._renewed_at + 60
        asyncio.run(controller._master_tick())

    tick()
    assert dcs.published[-1] == (frozenset({1, 2, 3}), frozenset({2, 3}))
    # member 3 stops acknowledging: it still counts when the smaller set is published (until then
    # it may be promoted, so it must hold whatever is acknowledged), not after
    ha.in_sync_ids = {2}
    tick()
    assert dcs.published[-1] == (frozenset({1, 2}), frozenset({2, 3}))
    assert ha.counted == frozenset({2})
    # it catches up with the log, but not yet with what was acknowledged while it was out
    ha.in_sync_ids, ha.acks[3], ha.acknowledged_offset = {2, 3}, 1500, 2000
    tick()
    assert len(dcs.published) == 2 and ha.counted == frozenset({2})
    # once it holds every acknowledged message it counts, before the set that names it is out
    ha.acks[3] = 2000
    tick()
    assert dcs.published[-1] == (frozenset({1, 2, 3}), frozenset({2, 3}))
    # a smaller set that etcd did not take: the leaver keeps counting
    dcs.fail = True
    ha.in_sync_ids = {3}
    tick()
    assert dcs.published[-1][0] == frozenset({1, 3}) and ha.counted == frozenset({2, 3})


def test_without_all_ack_one_member_counts_and_a_joiner_only_once_published(tmp_path: Path) -> None:
    ha = _HaMaster()
    dcs = _SetDcs(ha)
    cfg = BrokerConfig(broker_id=1, broker_role=BrokerRole.SYNC_MASTER, controller_mode="etcd")
    controller = Controller(cfg, StoreConfig(store_path_root_dir=str(tmp_path)), None, dcs=dcs)  # type: ignore[arg-type]
    controller.app = _master_app(ha)  # type: ignore[assignment]
    controller._renewed_at = time.monotonic()
    controller.fence_at = controller._renewed_at + 60
    asyncio.run(controller._master_tick())
    assert dcs.published[-1] == (frozenset({1, 2, 3}), frozenset())
    assert ha.counted == frozenset({2, 3})
    ha.in_sync_ids = {2}
    asyncio.run(controller._master_tick())
    assert dcs.published[-1] == (frozenset({1, 2}), frozenset({2}))
