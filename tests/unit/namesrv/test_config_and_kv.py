"""NamesrvConfig loading and the KV config table."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from services.common.config import ConfigError, add_arguments, from_arguments
from services.namesrv import kvconfig
from services.namesrv.config import NamesrvConfig


def load(argv: list[str], environ: dict[str, str] | None = None) -> NamesrvConfig:
    parser = argparse.ArgumentParser()
    add_arguments(parser, [NamesrvConfig])
    (config,) = from_arguments(parser.parse_args(argv), [NamesrvConfig], environ or {})
    return config  # type: ignore[no-any-return]


def test_defaults_are_rocketmqs() -> None:
    c = load([])
    assert (c.listen, c.metrics_port) == ("0.0.0.0:9876", 9877)
    assert (c.broker_channel_expired_time, c.scan_not_active_broker_interval) == (120_000, 5_000)
    assert c.listen_host == "0.0.0.0"


def test_file_env_and_flags_in_order(tmp_path: Path) -> None:
    conf = tmp_path / "namesrv.conf"
    conf.write_text("listen=127.0.0.1:1\nbrokerChannelExpiredTime=3000\nmetricsPort=0\n")
    c = load(["-c", str(conf), "--listen", "127.0.0.1:2"], {"POCKETMQ_BROKER_CHANNEL_EXPIRED_TIME": "4000"})
    assert (c.listen, c.broker_channel_expired_time, c.metrics_port) == ("127.0.0.1:2", 4000, 0)


@pytest.mark.parametrize(("argv", "key"), [
    (["--scan-not-active-broker-interval", "0"], "scanNotActiveBrokerInterval"),
    (["--broker-channel-expired-time", "-1"], "brokerChannelExpiredTime"),
    (["--metrics-port", "70000"], "metricsPort"),
    (["--listen", "localhost:notaport"], "listen"),
    (["--max-topics-per-registration", "0"], "maxTopicsPerRegistration"),
    (["--readiness-warm-up-mills", "-1"], "readinessWarmUpMills"),
])
def test_invalid_values_name_the_key(argv: list[str], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(argv)
    assert info.value.key == key


def test_kv_table() -> None:
    kv = kvconfig.KVConfig()
    assert kv.put("ns", "k", "v") and not kv.put("ns", "k", "v")
    assert kv.get("ns", "k") == "v" and kv.get("ns", "x") is None and kv.get("other", "k") is None
    assert kv.namespace("ns") == {"k": "v"}
    assert kv.delete("ns", "k") and not kv.delete("ns", "k")
    assert kv.namespace("ns") == {}


def test_kv_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "kvConfig.json"
    assert kvconfig.load(path).namespace("ns") == {}
    kv = kvconfig.KVConfig()
    kv.put("ORDER_TOPIC_CONFIG", "orders", "broker-a:4;broker-b:4")
    kvconfig.save(path, kv)
    assert kvconfig.load(path).get("ORDER_TOPIC_CONFIG", "orders") == "broker-a:4;broker-b:4"
    assert not path.with_name("kvConfig.json.tmp").exists()
    path.write_text('{"ns": {"k": 1}}')
    with pytest.raises(ValueError, match=r"kvConfig\.json"):
        kvconfig.load(path)
