"""A role switch to master records its new epoch at the log's end after the slave stopped
following the old master (services/broker/controller/runner.py, ``Controller._switch``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from services.broker.config import BrokerConfig, BrokerRole
from services.broker.controller.runner import Controller
from services.broker.replication.epochfile import EpochFile
from services.broker.replication.epochs import EpochEntry
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
