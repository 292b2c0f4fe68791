"""Live broker configuration: which keys may change, validation like broker.conf, the overrides
file applied at start."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.broker import liveconfig
from services.broker.config import BrokerConfig
from services.broker.storage.config import StoreConfig
from services.common.config import ConfigError, known_keys


def sections(tmp_path: Path) -> tuple[BrokerConfig, StoreConfig]:
    return BrokerConfig(), StoreConfig(store_path_root_dir=str(tmp_path))


def test_live_keys_are_real_keys() -> None:
    keys = known_keys(liveconfig.SECTIONS)
    assert set(liveconfig.LIVE_KEYS) <= set(keys)


def test_rebuild_changes_live_keys_and_validates_them(tmp_path: Path) -> None:
    broker, store = sections(tmp_path)
    new_broker, new_store = liveconfig.rebuild(broker, store, {"maxMessageSize": "2048",
                                                               "brokerPermission": "4"})
    assert (new_store.max_message_size, new_broker.broker_permission) == (2048, 4)
    assert (store.max_message_size, broker.broker_permission) != (2048, 4)  # frozen originals
    with pytest.raises(ConfigError, match="brokerPermission"):
        liveconfig.rebuild(broker, store, {"brokerPermission": "5"})
    with pytest.raises(ConfigError, match="maxMessageSize"):
        liveconfig.rebuild(broker, store, {"maxMessageSize": "lots"})
    with pytest.raises(ConfigError, match="unknown key"):
        liveconfig.rebuild(broker, store, {"maxMesageSize": "1"})


@pytest.mark.parametrize(("key", "reason"), [
    ("listenPort", "listening sockets"), ("brokerName", "identity"), ("brokerRole", "switchover"),
    ("haAuthSecret", "secret"), ("mappedFileSizeCommitLog", "store"), ("transactionCheckMax", "read once"),
])
def test_keys_that_are_not_live_are_refused_with_the_reason(tmp_path: Path, key: str, reason: str) -> None:
    broker, store = sections(tmp_path)
    with pytest.raises(ConfigError, match=reason) as refused:
        liveconfig.rebuild(broker, store, {key: "1"})
    assert refused.value.key == key


def test_overrides_file_is_applied_at_start_and_checked(tmp_path: Path) -> None:
    broker, store = sections(tmp_path)
    assert liveconfig.load_overrides(broker, store) == (broker, store, {})
    path = liveconfig.overrides_path(store)
    path.parent.mkdir(parents=True)
    path.write_text("# set live\nmaxMessageSize=4096\nbrokerPermission=4\n")
    new_broker, new_store, applied = liveconfig.load_overrides(broker, store)
    assert (new_store.max_message_size, new_broker.broker_permission) == (4096, 4)
    assert applied == {"maxMessageSize": "4096", "brokerPermission": "4"}
    path.write_text("listenPort=1\n")
    with pytest.raises(ConfigError, match=r"broker-overrides\.properties") as bad:
        liveconfig.load_overrides(broker, store)
    assert bad.value.key == "listenPort"
