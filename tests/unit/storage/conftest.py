"""Fixtures for storage tests: small segments so roll-over, file rolling and deletion happen
with a few hundred messages."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from services.broker.storage.config import StoreConfig
from services.broker.storage.record import Message
from services.broker.storage.store import MessageStore

#: Commit log segment size used by tests (the minimum allowed is 4096).
SEGMENT = 16 * 1024
#: Consume queue file size: 50 entries.
CQ_FILE = 50 * 20


def small_config(root: Path | str, **overrides: Any) -> StoreConfig:
    values: dict[str, Any] = {
        "store_path_root_dir": str(root),
        "mapped_file_size_commit_log": SEGMENT,
        "mapped_file_size_consume_queue": CQ_FILE,
        "max_message_size": 4096,
        "populate_ahead_size": 8192,
        "flush_interval_commit_log": 50,
        "flush_interval_consume_queue": 100,
    }
    values.update(overrides)
    return StoreConfig(**values)


def msg(i: int, topic: str = "TopicA", queue_id: int = 0, size: int = 100, **kw: Any) -> Message:
    """Message number ``i``: a body that encodes ``i`` and is ``size`` bytes long."""
    body = (f"{topic}-{queue_id}-{i}:".encode() * (size // 8 + 1))[:size]
    return Message.of(topic, body, queue_id, **kw)


StoreFactory = Callable[..., MessageStore]


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator[StoreFactory]:
    """``open_store(**config_overrides)`` -> a started store under ``tmp_path/store`` (or
    ``root=``); every store opened is shut down at the end of the test."""
    opened: list[MessageStore] = []

    def factory(root: Path | str | None = None, **overrides: Any) -> MessageStore:
        store = MessageStore(small_config(root or tmp_path / "store", **overrides))
        store.start()
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.shutdown()
