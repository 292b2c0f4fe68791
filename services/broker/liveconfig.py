"""Broker configuration changed while running (``pocketmq broker config get|set``).

Only the keys of :data:`LIVE_KEYS` may change live: each is read where it is used on every
request (or applied by :func:`apply` to the one component that copied it). Any other key is
refused with the reason it is fixed at start. A change is validated as the config file is (the
sections are rebuilt with the same ``__post_init__`` rules), then written to the overrides file
``<storePathRootDir>/config/broker-overrides.properties`` that the broker applies over
``broker.conf``, the environment and flags at its next start (:func:`load_overrides`), so a
restart keeps it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.broker.config import SECRET_KEYS, BrokerConfig
from services.broker.storage.config import StoreConfig
from services.common.config import (
    ConfigError,
    _field_types,
    config_key,
    convert,
    known_keys,
    load_properties_file,
)

if TYPE_CHECKING:
    from services.broker.app import BrokerApp

log = logging.getLogger(__name__)

SECTIONS: tuple[type, ...] = (BrokerConfig, StoreConfig)
OVERRIDES_FILE = "broker-overrides.properties"

#: Keys that may change while the broker runs, and what a change does.
LIVE_KEYS: dict[str, str] = {
    "autoCreateTopicEnable": "sends to unknown topics create them (or are refused) from the next send",
    "autoCreateSubscriptionGroup": "unknown consumer groups are created (or refused) from the next call",
    "maxMessageSize": "the largest accepted message body, from the next send",
    "slaveTimeout": "SYNC_MASTER: how long the next sends wait for a slave",
    "longPollingEnable": "pulls park at the end of a queue (or answer at once) from the next pull",
    "consumerChannelExpiredTime": "consumers silent this long leave their group, from the next scan",
    "brokerPermission": "4 drains the broker of writes (topics re-registered read-only, sends refused), "
                        "6 restores them",
}

_IDENTITY = {"brokerClusterName", "brokerName", "brokerId", "brokerRole"}
_NETWORK = {"namesrvAddr", "brokerIP1", "brokerIP2", "listenHost", "listenPort", "haListenPort",
            "metricsPort", "tlsEnable", "tlsListenPort", "tlsServerCertPath", "tlsServerKeyPath",
            "haMasterAddress"}


def why_not_live(key: str) -> str:
    """Why ``key`` cannot be changed while the broker runs."""
    if key in SECRET_KEYS:
        return "it is a secret: set it in broker.conf or the mounted secret, never over the network"
    if key in _IDENTITY:
        return ("it is the broker's identity in the cluster and its route: change it in broker.conf and "
                "restart (a role change is a switchover)")
    if key in _NETWORK:
        return ("listening sockets, advertised addresses and TLS are set up at start: change broker.conf "
                "and restart")
    section, _ = known_keys(SECTIONS)[key]
    if section is StoreConfig:
        return ("it shapes the store (files, flushing, retention threads) opened at start: change "
                "broker.conf and restart")
    return "it is read once at start: change broker.conf and restart"


def overrides_path(store_config: StoreConfig) -> Path:
    return Path(store_config.store_path_root_dir) / "config" / OVERRIDES_FILE


def _convert_all(changes: Mapping[str, str]) -> dict[type, dict[str, Any]]:
    """Check every key is known and live and convert its value; ConfigError names the key."""
    keys = known_keys(SECTIONS)
    out: dict[type, dict[str, Any]] = {s: {} for s in SECTIONS}
    for key, raw in changes.items():
        if key not in keys:
            raise ConfigError(key, "unknown key")
        if key not in LIVE_KEYS:
            raise ConfigError(key, f"cannot be changed while the broker runs: {why_not_live(key)} "
                                   f"(live keys: {', '.join(sorted(LIVE_KEYS))})")
        section, name = keys[key]
        out[section][name] = convert(key, raw, _field_types(section)[name])
    return out


def rebuild(broker_config: BrokerConfig, store_config: StoreConfig,
            changes: Mapping[str, str]) -> tuple[BrokerConfig, StoreConfig]:
    """The sections with ``changes`` applied, validated as at start (ConfigError names the key)."""
    per_section = _convert_all(changes)
    try:
        new_broker = dataclasses.replace(broker_config, **per_section[BrokerConfig])
        new_store = dataclasses.replace(store_config, **per_section[StoreConfig])
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(next(iter(changes), "config"), str(exc)) from exc
    return new_broker, new_store


def read_overrides(store_config: StoreConfig) -> dict[str, str]:
    path = overrides_path(store_config)
    return load_properties_file(path) if path.exists() else {}


def load_overrides(broker_config: BrokerConfig,
                   store_config: StoreConfig) -> tuple[BrokerConfig, StoreConfig, dict[str, str]]:
    """At start: apply the overrides file of the store directory (keys set live before a
    restart). An entry that is not a live key or is invalid fails the start naming the key."""
    overrides = read_overrides(store_config)
    if not overrides:
        return broker_config, store_config, {}
    try:
        new_broker, new_store = rebuild(broker_config, store_config, overrides)
    except ConfigError as exc:
        raise ConfigError(exc.key, f"{overrides_path(store_config)}: {exc}") from None
    log.info("live config overrides applied", extra={
        "file": str(overrides_path(store_config)), "keys": ",".join(sorted(overrides))})
    return new_broker, new_store, overrides


def _write_overrides(store_config: StoreConfig, values: Mapping[str, str]) -> None:
    path = overrides_path(store_config)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = ("# Written by UpdateBrokerConfig (pocketmq broker config set); applied over broker.conf "
            "at start.\n")
    text += "".join(f"{k}={values[k]}\n" for k in sorted(values))
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def entries(app: BrokerApp) -> list[tuple[str, str, bool, bool]]:
    """(key, value, live, overridden) of every key; secrets are shown as set or not."""
    overridden = read_overrides(app.store_config)
    out = []
    for obj in (app.broker_config, app.store_config):
        for f in dataclasses.fields(obj):
            key = config_key(f)
            value = getattr(obj, f.name)
            text = value.name if hasattr(value, "name") and not isinstance(value, str) else (
                str(value).lower() if isinstance(value, bool) else str(value))
            if key in SECRET_KEYS:
                text = "<set, not shown>" if value else ""
            out.append((key, text, key in LIVE_KEYS, key in overridden))
    return out


def apply(app: BrokerApp, changes: Mapping[str, str]) -> None:
    """Validate, persist and apply ``changes`` to the running broker (all or nothing)."""
    if not changes:
        raise ConfigError("changes", "no key=value given")
    new_broker, new_store = rebuild(app.broker_config, app.store_config, changes)
    merged = {**read_overrides(app.store_config), **{k: str(v).strip() for k, v in changes.items()}}
    _write_overrides(app.store_config, merged)
    old_broker, old_store = app.broker_config, app.store_config
    app.broker_config, app.store_config = new_broker, new_store
    for component in (app.send, app.pull):
        if getattr(component, "config", None) is old_broker:
            component.config = new_broker
        if getattr(component, "store_config", None) is old_store:
            component.store_config = new_store
    app.store.set_max_message_size(new_store.max_message_size)
    expiry_s = new_broker.consumer_channel_expired_time / 1000
    app.consumers.expiry_s = expiry_s
    if app.v2 is not None:
        app.v2.clients.expiry_s = expiry_s
    if new_broker.broker_permission != old_broker.broker_permission:
        app.republish_topics()
    log.info("config changed live",
             extra={"changes": ",".join(f"{k}={v}" for k, v in sorted(changes.items()))})
