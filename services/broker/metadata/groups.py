"""Subscription groups (RocketMQ's SubscriptionGroupManager, ``config/subscriptionGroup.json``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from pocketmq.broker.v1 import broker_pb2
from services.broker import validation as v
from services.broker.metadata.base import DataVersion, MetadataTable
from services.common.errors import InvalidArgumentError, NotFoundError


def _has_presence(msg: broker_pb2.SubscriptionGroupConfig, name: str) -> bool:
    return bool(msg.DESCRIPTOR.fields_by_name[name].has_presence)


@dataclasses.dataclass(frozen=True)
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    #: RocketMQ 5: the group consumes each queue in order (FIFO consumers of the 5.x API).
    consume_message_orderly: bool = False

    _JSON_KEYS = (
        ("group_name", "groupName"), ("consume_enable", "consumeEnable"),
        ("consume_from_min_enable", "consumeFromMinEnable"),
        ("consume_broadcast_enable", "consumeBroadcastEnable"), ("retry_queue_nums", "retryQueueNums"),
        ("retry_max_times", "retryMaxTimes"), ("broker_id", "brokerId"),
        ("which_broker_when_consume_slowly", "whichBrokerWhenConsumeSlowly"),
        ("consume_message_orderly", "consumeMessageOrderly"),
    )

    def to_proto(self) -> broker_pb2.SubscriptionGroupConfig:
        return broker_pb2.SubscriptionGroupConfig(**dataclasses.asdict(self))

    @classmethod
    def from_proto(cls, msg: broker_pb2.SubscriptionGroupConfig) -> SubscriptionGroupConfig:
        # An unset optional field keeps the dataclass (RocketMQ) default, not proto3's zero.
        return cls(**{f.name: getattr(msg, f.name) for f in dataclasses.fields(cls)
                      if not _has_presence(msg, f.name) or msg.HasField(f.name)})

    def to_json(self) -> dict[str, Any]:
        return {key: getattr(self, name) for name, key in self._JSON_KEYS}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SubscriptionGroupConfig:
        kwargs: dict[str, Any] = {}
        for name, key in cls._JSON_KEYS:
            if key in doc:
                value = doc[key]
                kwargs[name] = str(value) if name == "group_name" else (
                    bool(value) if isinstance(value, bool) else int(value))
        return cls(**kwargs)

    def validated(self) -> SubscriptionGroupConfig:
        v.validate_group(self.group_name)
        if self.retry_queue_nums < 0 or self.retry_max_times < 0:
            raise InvalidArgumentError("retry_queue_nums and retry_max_times must be >= 0")
        if self.broker_id < 0 or self.which_broker_when_consume_slowly < 0:
            raise InvalidArgumentError("broker_id and which_broker_when_consume_slowly must be >= 0")
        return self


class SubscriptionGroupManager(MetadataTable):
    file_name = "subscriptionGroup.json"

    def __init__(self, config_dir: str) -> None:
        super().__init__(config_dir)
        self._table: dict[str, SubscriptionGroupConfig] = {}

    def encode_table(self) -> dict[str, Any]:
        return {"subscriptionGroupTable": {n: g.to_json() for n, g in sorted(self._table.items())}}

    def decode_table(self, doc: dict[str, Any]) -> None:
        table = doc.get("subscriptionGroupTable", {})
        self._table = {name: SubscriptionGroupConfig.from_json(g) for name, g in table.items()}

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self._table.get(group)

    def __contains__(self, group: object) -> bool:
        return group in self._table

    def __len__(self) -> int:
        return len(self._table)

    def all(self) -> list[SubscriptionGroupConfig]:
        return [self._table[n] for n in sorted(self._table)]

    def put(self, config: SubscriptionGroupConfig) -> SubscriptionGroupConfig:
        config.validated()
        if self._table.get(config.group_name) != config:
            self._table[config.group_name] = config
            self.changed()
        return config

    def delete(self, group: str) -> SubscriptionGroupConfig:
        config = self._table.pop(group, None)
        if config is None:
            raise NotFoundError(f"subscription group {group!r} does not exist")
        self.changed()
        return config

    def replace_all(self, configs: list[SubscriptionGroupConfig], version: DataVersion) -> None:
        self._table = {g.group_name: g for g in configs}
        self.replace_version(version)
