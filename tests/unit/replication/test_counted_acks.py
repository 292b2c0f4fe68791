"""Which slaves' acks make a SYNC_MASTER write PUT_OK (``HAMaster.counted_ack``): under a
controller one slave of the SyncStateSet, or with allAckInSyncStateSet every one of them."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from services.broker.replication.master import HAMaster
from services.broker.replication.master_settings import MasterSettings
from services.broker.storage.store import MessageStore


def master(all_ack: bool, acks: dict[int, int]) -> HAMaster:
    ha = HAMaster(cast(MessageStore, None), MasterSettings(all_ack=all_ack))
    ha.connections = {  # type: ignore[assignment]
        f"127.0.0.1:{b}": SimpleNamespace(identity=SimpleNamespace(broker_id=b),
                                          proto=SimpleNamespace(ack_offset=a))
        for b, a in acks.items()}
    return ha


def test_one_counted_slave_is_enough_by_default() -> None:
    ha = master(False, {2: 500, 3: 900, 4: 2000})
    ha.set_counted(frozenset({2, 3}))
    assert ha.counted_ack() == 900  # (slave 4 is not in the set: its ack does not count)
    ha.set_counted(frozenset())
    assert ha.counted_ack() == 0


def test_with_all_ack_every_counted_slave_must_hold_the_write() -> None:
    ha = master(True, {2: 500, 3: 900, 4: 100})
    ha.set_counted(frozenset({2, 3}))
    assert ha.counted_ack() == 500
    ha.set_counted(frozenset({2, 3, 5}))  # a member of the set that is not connected holds nothing
    assert ha.counted_ack() == 0
    ha.set_counted(frozenset())
    assert ha.counted_ack() == 0


def test_the_acknowledged_offset_stays_where_acks_once_reached() -> None:
    ha = master(True, {2: 500, 3: 900})
    ha.set_counted(frozenset({2, 3}))
    assert ha.acknowledged_offset == 500
    # a member that holds nothing joins the counted ones: writes up to 500 may have had their
    # PUT_OK already, so a member joining later must hold them
    ha.set_counted(frozenset({2, 3, 5}))
    assert ha.counted_ack() == 0 and ha.acknowledged_offset == 500
