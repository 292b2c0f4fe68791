"""Fixtures shared by the replication I/O tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from services.broker.storage.store import MessageStore
from tests.unit.replication.test_ha_io import make_store


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[MessageStore, MessageStore]]:
    """(master store, slave store), both started, shut down afterwards."""
    m = make_store(tmp_path / "master")
    s = make_store(tmp_path / "slave")
    yield m, s
    for store in (m, s):
        store.shutdown()
