from __future__ import annotations

import argparse
import dataclasses
import enum
from pathlib import Path

import pytest

from services.common.config import (
    ConfigError,
    add_arguments,
    build_sections,
    camel_to_snake,
    from_arguments,
    parse_address,
    parse_properties,
    require,
    snake_to_camel,
    to_properties,
)


class Role(enum.Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SLAVE = "SLAVE"


@dataclasses.dataclass(frozen=True)
class Identity:
    broker_name: str = "broker-a"
    broker_id: int = 0
    broker_role: Role = Role.ASYNC_MASTER

    def __post_init__(self) -> None:
        require(self.broker_id >= 0, "brokerId", "must be >= 0")


@dataclasses.dataclass(frozen=True)
class Store:
    flush_interval_commit_log: int = 500
    ha_sync_from_earliest: bool = False
    ha_master_address: str | None = None


SECTIONS = [Identity, Store]


def test_key_name_mapping_round_trips() -> None:
    assert snake_to_camel("flush_interval_commit_log") == "flushIntervalCommitLog"
    assert camel_to_snake("flushIntervalCommitLog") == "flush_interval_commit_log"
    assert camel_to_snake(snake_to_camel("ha_listen_port")) == "ha_listen_port"


def test_properties_parse_comments_and_whitespace() -> None:
    text = "# comment\n! also comment\n\nbrokerName = broker-b\nbrokerId=1\n"
    assert parse_properties(text) == {"brokerName": "broker-b", "brokerId": "1"}


def test_properties_line_without_separator_is_an_error() -> None:
    with pytest.raises(ConfigError, match="expected key=value"):
        parse_properties("brokerName broker-b\n")


def test_build_converts_types() -> None:
    ident, store = build_sections(
        SECTIONS,
        {"brokerId": "2", "brokerRole": "slave", "haSyncFromEarliest": "true", "haMasterAddress": ""},
    )
    assert ident == Identity(broker_id=2, broker_role=Role.SLAVE)
    assert store == Store(ha_sync_from_earliest=True, ha_master_address=None)


def test_unknown_key_names_the_key_and_suggests() -> None:
    with pytest.raises(ConfigError) as info:
        build_sections(SECTIONS, {"brokerNmae": "x"})
    assert info.value.key == "brokerNmae"
    assert "did you mean 'brokerName'" in str(info.value)


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [("brokerId", "one", "expected int"), ("brokerRole", "LEADER", "ASYNC_MASTER | SLAVE"),
     ("haSyncFromEarliest", "maybe", "expected bool"), ("brokerId", "-1", "must be >= 0")],
)
def test_invalid_values_name_the_key(key: str, value: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_sections(SECTIONS, {key: value})
    assert info.value.key == key
    assert expected in str(info.value)


def test_precedence_defaults_file_env_flags(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=from-file\nbrokerId=1\nflushIntervalCommitLog=100\n")
    parser = argparse.ArgumentParser()
    add_arguments(parser, SECTIONS)
    args = parser.parse_args(["-c", str(conf), "--broker-id", "3"])
    ident, store = from_arguments(args, SECTIONS, environ={"POCKETMQ_BROKER_ID": "2",
                                                           "POCKETMQ_FLUSH_INTERVAL_COMMIT_LOG": "250"})
    assert ident.broker_name == "from-file"
    assert ident.broker_id == 3  # flag beats env beats file
    assert store.flush_interval_commit_log == 250  # env beats file


def test_missing_config_file_is_a_clear_error(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser, SECTIONS)
    args = parser.parse_args(["-c", str(tmp_path / "nope.conf")])
    with pytest.raises(ConfigError, match="cannot read"):
        from_arguments(args, SECTIONS, environ={})


def test_to_properties_round_trips() -> None:
    objs = [Identity(broker_name="b", broker_id=1, broker_role=Role.SLAVE), Store(ha_sync_from_earliest=True)]
    assert build_sections(SECTIONS, parse_properties(to_properties(objs))) == objs


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.0.1:9876", ("127.0.0.1", 9876)), (":10911", ("0.0.0.0", 10911)), ("[::1]:80", ("::1", 80))],
)
def test_parse_address(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["host:port", "host:0", "host:70000"])
def test_parse_address_rejects(text: str) -> None:
    with pytest.raises(ConfigError, match="namesrvAddr"):
        parse_address(text, key="namesrvAddr")


@dataclasses.dataclass(frozen=True)
class Network:
    broker_ip1: str = dataclasses.field(default="", metadata={"key": "brokerIP1"})


def test_a_field_can_declare_rocketmqs_spelling_of_its_key() -> None:
    (net,) = build_sections([Network], {"brokerIP1": "10.0.0.5"})
    assert net.broker_ip1 == "10.0.0.5"
    with pytest.raises(ConfigError, match="did you mean 'brokerIP1'"):
        build_sections([Network], {"brokerIp1": "10.0.0.5"})
    assert to_properties([net]) == "brokerIP1=10.0.0.5\n"


def test_real_broker_conf_keys_are_accepted() -> None:
    from services.broker.config import BrokerConfig, BrokerRole
    from services.broker.storage.config import FlushDiskType, StoreConfig

    conf = parse_properties(
        "brokerClusterName=DefaultCluster\nbrokerName=broker-a\nbrokerId=0\nbrokerRole=SYNC_MASTER\n"
        "flushDiskType=SYNC_FLUSH\nnamesrvAddr=10.0.0.1:9876;10.0.0.2:9876\nbrokerIP1=10.0.0.5\n"
        "listenPort=10911\nstorePathRootDir=/data/store\nfileReservedTime=48\n"
    )
    broker, store = build_sections([BrokerConfig, StoreConfig], conf)
    assert (broker.broker_role, broker.broker_addr) == (BrokerRole.SYNC_MASTER, "10.0.0.5:10911")
    assert broker.namesrv_addrs == ["10.0.0.1:9876", "10.0.0.2:9876"]
    assert (store.flush_disk_type, store.file_reserved_time) == (FlushDiskType.SYNC_FLUSH, 48)
