"""The ``haAuthSecret`` key: validation, precedence (file < env < flag), never shown, and how the
replication service turns it into master/slave settings."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from services.broker.__main__ import SECTIONS, build_parser
from services.broker.config import BrokerConfig, BrokerRole, mask_secrets
from services.broker.replication import AUTH_TIMEOUT_S
from services.broker.replication.master_settings import MasterSettings
from services.broker.replication.metrics import HAMetrics, MasterSample
from services.broker.replication.service import BrokerReplication
from services.broker.replication.slave import SlaveSettings
from services.broker.storage.config import StoreConfig
from services.common.config import ConfigError, from_arguments, to_properties

SECRET = "s3cr3t-0123456789-abcdef"


def load(argv: list[str], environ: dict[str, str] | None = None) -> BrokerConfig:
    broker, _ = from_arguments(build_parser().parse_args(argv), SECTIONS, environ=environ or {})
    assert isinstance(broker, BrokerConfig)
    return broker


def test_empty_by_default() -> None:
    assert BrokerConfig().ha_auth_secret == ""
    assert load([]).ha_auth_secret == ""


@pytest.mark.parametrize(("secret", "why"), [
    ("short-secret", "at least 16 characters"),
    ("a" * 15, "at least 16 characters"),
    ("a" * 64, "fewer than 4 distinct characters"),
    ("abababababababab", "fewer than 4 distinct characters"),
])
def test_weak_secrets_are_rejected_naming_the_key_but_not_the_value(secret: str, why: str) -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig(ha_auth_secret=secret)
    assert info.value.key == "haAuthSecret"
    assert why in str(info.value) and secret not in str(info.value)


def test_surrounding_whitespace_is_ignored() -> None:
    """A Secret created from a file usually ends with a newline; a conf file value is stripped."""
    assert BrokerConfig(ha_auth_secret=f"  {SECRET}\n").ha_auth_secret == SECRET
    with pytest.raises(ConfigError, match="haAuthSecret"):
        BrokerConfig(ha_auth_secret="   short   \n")


def test_precedence_file_env_flag(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(f"haAuthSecret={SECRET}-file\n")
    env = {"POCKETMQ_HA_AUTH_SECRET": f"{SECRET}-env"}
    assert load(["-c", str(conf)]).ha_auth_secret == f"{SECRET}-file"
    assert load(["-c", str(conf)], env).ha_auth_secret == f"{SECRET}-env"
    flag = ["--ha-auth-secret", f"{SECRET}-flag"]
    assert load(["-c", str(conf), *flag], env).ha_auth_secret == f"{SECRET}-flag"


def test_never_shown_by_repr_or_print_config() -> None:
    cfg = BrokerConfig(ha_auth_secret=SECRET)
    assert SECRET not in repr(cfg) and SECRET not in str(cfg)
    text = mask_secrets(to_properties([cfg, StoreConfig()]))
    assert SECRET not in text
    assert "# haAuthSecret=<hidden: set, not shown>" in text.splitlines()
    # the masked text is still a valid config file (without the secret)
    conf = dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))
    assert "haAuthSecret" not in conf
    # unset: printed as the empty value, as before
    assert "haAuthSecret=" in to_properties([BrokerConfig()]).splitlines()
    assert mask_secrets(to_properties([BrokerConfig()])) == to_properties([BrokerConfig()])
    assert SECRET not in repr(MasterSettings(auth_secret=SECRET.encode()))
    assert SECRET not in repr(SlaveSettings(auth_secret=SECRET.encode()))


def fake_app(tmp_path: Path, **broker: Any) -> Any:
    cfg = BrokerConfig(listen_host="127.0.0.1", **broker)
    store_config = StoreConfig(store_path_root_dir=str(tmp_path))
    return SimpleNamespace(broker_config=cfg, store_config=store_config, store=object(),
                           metrics=SimpleNamespace(registry=CollectorRegistry()))


@pytest.mark.parametrize("housekeeping", [20_000, 3_000])
def test_service_passes_the_secret_and_a_short_deadline_to_both_sides(tmp_path: Path,
                                                                     housekeeping: int) -> None:
    timing = {"ha_housekeeping_interval": housekeeping, "ha_send_heartbeat_interval": 1_000}
    master = BrokerReplication(fake_app(tmp_path, ha_auth_secret=SECRET, **timing))
    assert master.master is not None
    expected_timeout = min(AUTH_TIMEOUT_S, housekeeping / 1000)
    assert master.master.settings.auth_secret == SECRET.encode()
    assert master.master.settings.auth_timeout_s == expected_timeout
    slave = BrokerReplication(fake_app(tmp_path, broker_id=1, broker_role=BrokerRole.SLAVE,
                                       ha_auth_secret=SECRET, **timing))
    assert slave.slave is not None
    assert slave.slave.settings.auth_secret == SECRET.encode()
    assert slave.slave.settings.auth_timeout_s == expected_timeout


def test_service_without_a_secret_disables_authentication(tmp_path: Path) -> None:
    master = BrokerReplication(fake_app(tmp_path))
    assert master.master is not None and master.master.settings.auth_secret == b""
    assert dataclasses.replace(master.master.settings, auth_secret=b"") == master.master.settings


def test_auth_failures_metric() -> None:
    registry = CollectorRegistry()
    metrics = HAMetrics(registry, "c1", "broker-a", 0)
    metrics.add_source(lambda: MasterSample(10, 10, [], auth_failures=3))
    text = generate_latest(registry).decode()
    assert 'pocketmq_ha_auth_failures_total{broker="broker-a",broker_id="0",cluster="c1"} 3.0' in text
    assert "# TYPE pocketmq_ha_auth_failures_total counter" in text or \
        "# TYPE pocketmq_ha_auth_failures counter" in text
