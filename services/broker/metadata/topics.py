"""Topic configuration table (RocketMQ's TopicConfigManager, ``config/topics.json``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from pocketmq.common.v1 import common_pb2
from services.broker import validation as v
from services.broker.metadata.base import DataVersion, MetadataTable
from services.common.errors import NotFoundError


@dataclasses.dataclass(frozen=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 4
    write_queue_nums: int = 4
    perm: int = v.PERM_READ | v.PERM_WRITE
    topic_sys_flag: int = 0
    order: bool = False
    #: RocketMQ 5's ``message.type`` topic attribute (NORMAL, FIFO, DELAY, TRANSACTION; "" =
    #: any): the message types the RocketMQ 5 API accepts on this topic.
    message_type: str = ""

    @property
    def readable(self) -> bool:
        return bool(self.perm & v.PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & v.PERM_WRITE)

    @property
    def attributes(self) -> dict[str, str]:
        return {v.MESSAGE_TYPE_ATTRIBUTE: self.message_type} if self.message_type else {}

    def to_proto(self) -> common_pb2.TopicConfig:
        return common_pb2.TopicConfig(
            topic_name=self.topic_name, read_queue_nums=self.read_queue_nums,
            write_queue_nums=self.write_queue_nums, perm=self.perm,
            topic_sys_flag=self.topic_sys_flag, order=self.order, attributes=self.attributes,
        )

    @classmethod
    def from_proto(cls, msg: common_pb2.TopicConfig) -> TopicConfig:
        return cls(msg.topic_name, msg.read_queue_nums, msg.write_queue_nums, msg.perm,
                   msg.topic_sys_flag, msg.order, msg.attributes.get(v.MESSAGE_TYPE_ATTRIBUTE, ""))

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "topicName": self.topic_name, "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums, "perm": self.perm,
            "topicFilterType": "SINGLE_TAG", "topicSysFlag": self.topic_sys_flag, "order": self.order,
        }
        if self.message_type:
            doc["attributes"] = self.attributes
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> TopicConfig:
        attributes = doc.get("attributes") or {}
        return cls(str(doc["topicName"]), int(doc["readQueueNums"]), int(doc["writeQueueNums"]),
                   int(doc["perm"]), int(doc.get("topicSysFlag", 0)), bool(doc.get("order", False)),
                   str(attributes.get(v.MESSAGE_TYPE_ATTRIBUTE, "")))

    def validated(self) -> TopicConfig:
        """This config if it is acceptable for create/update, else InvalidArgumentError."""
        v.validate_topic(self.topic_name)
        v.validate_queue_nums(self.read_queue_nums, self.write_queue_nums)
        v.validate_perm(self.perm)
        v.validate_message_type(self.message_type)
        return self


#: Topic changes remembered for incremental registrations (older ones: a full registration).
_CHANGE_LOG_MAX = 8192


class TopicConfigManager(MetadataTable):
    file_name = "topics.json"
    journaled = True

    def __init__(self, config_dir: str, *, default_queue_nums: int = 4) -> None:
        super().__init__(config_dir)
        self.default_queue_nums = default_queue_nums
        self._table: dict[str, TopicConfig] = {}
        self._listeners: list[Callable[[], None]] = []
        #: This process's topic changes, oldest first: (the version after it, topic), after the
        #: version ``_log_base`` (incremental registrations, see :meth:`changes_since`).
        self._log: list[tuple[DataVersion, str]] = []
        self._log_base: DataVersion | None = None

    # -- persistence hooks --------------------------------------------------------------------

    def encode_table(self) -> dict[str, Any]:
        return {"topicConfigTable": {name: tc.to_json() for name, tc in sorted(self._table.items())}}

    def decode_table(self, doc: dict[str, Any]) -> None:
        table = doc.get("topicConfigTable", {})
        self._table = {name: TopicConfig.from_json(tc) for name, tc in table.items()}

    def encode_entry(self, key: str) -> Any:
        tc = self._table.get(key)
        return None if tc is None else tc.to_json()

    def apply_entry(self, key: str, value: Any) -> None:
        if value is None:
            self._table.pop(key, None)
        else:
            self._table[key] = TopicConfig.from_json(value)

    def entry_count(self) -> int:
        return len(self._table)

    # -- queries ------------------------------------------------------------------------------

    def add_listener(self, callback: Callable[[], None]) -> None:
        """``callback()`` runs after every change (e.g. re-register with the NameServer)."""
        self._listeners.append(callback)

    def get(self, topic: str) -> TopicConfig | None:
        return self._table.get(topic)

    def require(self, topic: str) -> TopicConfig:
        tc = self._table.get(topic)
        if tc is None:
            raise NotFoundError(f"topic {topic!r} does not exist on this broker")
        return tc

    def __contains__(self, topic: object) -> bool:
        return topic in self._table

    def __len__(self) -> int:
        return len(self._table)

    def all(self) -> list[TopicConfig]:
        return [self._table[name] for name in sorted(self._table)]

    def snapshot(self) -> tuple[DataVersion, list[TopicConfig]]:
        return self.data_version, self.all()

    # -- changes ------------------------------------------------------------------------------

    def changes_since(self, base: DataVersion) -> tuple[DataVersion, list[TopicConfig], list[str]] | None:
        """(current version, topics created or changed since the table had version ``base``,
        topics deleted since), or None when that is not known (``base`` is older than the
        change log, or the version moved without a topic change): then only the whole table
        tells the state."""
        log = self._log
        if not log or log[-1][0] != self.data_version:
            return None if base != self.data_version else (base, [], [])
        if base == self._log_base:
            start = 0
        else:
            start = next((i + 1 for i in range(len(log) - 1, -1, -1) if log[i][0] == base), -1)
            if start < 0:
                return None
        names = dict.fromkeys(topic for _, topic in log[start:])
        table = self._table
        return (self.data_version, [table[n] for n in names if n in table],
                [n for n in names if n not in table])

    def _changed(self, topic: str) -> None:
        before = self.data_version
        self.changed(topic)
        log = self._log
        if not log or log[-1][0] != before:  # the version moved without a logged change
            log.clear()
            self._log_base = before
        log.append((self.data_version, topic))
        if len(log) > _CHANGE_LOG_MAX:
            drop = len(log) // 2
            self._log_base = log[drop - 1][0]
            del log[:drop]
        for callback in self._listeners:
            callback()

    def put(self, config: TopicConfig) -> TopicConfig:
        """Create or update (validated). Returns the stored config."""
        config.validated()
        if self._table.get(config.topic_name) != config:
            self._table[config.topic_name] = config
            self._changed(config.topic_name)
        return config

    def ensure_system_topic(self, config: TopicConfig) -> None:
        """Create a broker-internal topic, or fix its queue counts; no validation of the name
        against the client rules beyond the charset."""
        if self._table.get(config.topic_name) != config:
            self._table[config.topic_name] = config
            self._changed(config.topic_name)

    def auto_create(self, topic: str) -> TopicConfig:
        """Create ``topic`` with the default queue count (autoCreateTopicEnable)."""
        existing = self._table.get(topic)
        if existing is not None:
            return existing
        n = self.default_queue_nums
        return self.put(TopicConfig(topic, n, n))

    def delete(self, topic: str) -> TopicConfig:
        tc = self._table.pop(topic, None)
        if tc is None:
            raise NotFoundError(f"topic {topic!r} does not exist on this broker")
        self._changed(topic)
        return tc

    def replace_all(self, configs: list[TopicConfig], version: DataVersion) -> None:
        """Slave sync: adopt the master's table and version."""
        self._table = {tc.topic_name: tc for tc in configs}
        self.replace_version(version)
        for callback in self._listeners:
            callback()
