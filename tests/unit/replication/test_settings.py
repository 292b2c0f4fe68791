"""HA settings take every value from the broker's configuration: the defaults are the built-in
config's, and a configured value reaches the settings unchanged."""

from __future__ import annotations

import dataclasses

from services.broker.config import BrokerConfig, BrokerRole
from services.broker.replication import AUTH_TIMEOUT_S, DEFAULT_MAX_BODY_SIZE, MasterConnectionProtocol
from services.broker.replication.master_settings import MasterSettings
from services.broker.replication.slave import SlaveSettings
from services.broker.replication.waiter import DEFAULT_SLAVE_FALLBEHIND_MAX
from services.broker.storage.config import StoreConfig


def test_defaults_are_the_built_in_configuration() -> None:
    assert MasterSettings.from_config(BrokerConfig(), StoreConfig()) == MasterSettings()
    slave = SlaveSettings.from_config(BrokerConfig(broker_id=1, broker_role=BrokerRole.SLAVE), StoreConfig())
    assert slave.broker_id == 1 and slave.broker_addr.endswith(":10911")  # (who it is, for the hello)
    assert dataclasses.replace(slave, diverged_dir="", broker_id=-1, broker_addr="") == SlaveSettings()
    assert MasterConnectionProtocol().batch_size == BrokerConfig().ha_transfer_batch_size
    assert BrokerConfig().ha_slave_fallbehind_max == DEFAULT_SLAVE_FALLBEHIND_MAX


def test_configured_values_reach_the_settings() -> None:
    cfg = BrokerConfig(listen_host="127.0.0.1", listen_port=20911, ha_transfer_batch_size=8 * 1024 * 1024,
                       ha_send_heartbeat_interval=1_500, ha_housekeeping_interval=4_000,
                       ha_slave_fallbehind_max=1 << 20, ha_sync_from_earliest=True,
                       ha_auth_secret="0123456789abcdef")
    store = StoreConfig(store_path_root_dir="/srv/store", mapped_file_size_commit_log=1 << 24)
    master = MasterSettings.from_config(cfg, store)
    assert (master.host, master.port, master.batch_size, master.segment_size) == (
        "127.0.0.1", 20912, 8 * 1024 * 1024, 1 << 24)
    assert (master.heartbeat_interval_s, master.housekeeping_interval_s, master.fall_behind_max) == (
        1.5, 4.0, 1 << 20)
    assert master.sync_from_earliest and master.auth_secret == b"0123456789abcdef"
    assert master.auth_timeout_s == min(AUTH_TIMEOUT_S, 4.0)
    slave_cfg = dataclasses.replace(cfg, broker_id=1, broker_role=BrokerRole.SLAVE,
                                    ha_master_address="10.0.0.1:10912")
    slave = SlaveSettings.from_config(slave_cfg, store)
    assert slave.master_address_override == "10.0.0.1:10912"
    assert slave.max_body_size == 8 * 1024 * 1024 > DEFAULT_MAX_BODY_SIZE
    assert (slave.max_truncate, slave.segment_size) == (1 << 20, 1 << 24)
    assert slave.diverged_dir == "/srv/store/ha-diverged"
    assert SlaveSettings.from_config(BrokerConfig(), store).max_body_size == DEFAULT_MAX_BODY_SIZE
