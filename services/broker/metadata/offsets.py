"""Consumer offsets (RocketMQ's ConsumerOffsetManager, ``config/consumerOffset.json``) and delay
offsets (ScheduleMessageService's ``config/delayOffset.json``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from services.broker.metadata.base import DataVersion, MetadataTable

#: RocketMQ's key separator: ``topic@group``.
KEY_SEPARATOR = "@"


class ConsumerOffsetManager(MetadataTable):
    """The next queue offset each (group, topic, queue) will consume."""

    file_name = "consumerOffset.json"

    def __init__(self, config_dir: str) -> None:
        super().__init__(config_dir)
        # (topic, group) -> {queue id: offset}
        self._table: dict[tuple[str, str], dict[int, int]] = {}

    def encode_table(self) -> dict[str, Any]:
        return {
            "offsetTable": {
                f"{topic}{KEY_SEPARATOR}{group}": {str(q): off for q, off in sorted(queues.items())}
                for (topic, group), queues in sorted(self._table.items())
            }
        }

    def decode_table(self, doc: dict[str, Any]) -> None:
        table: dict[tuple[str, str], dict[int, int]] = {}
        for key, queues in doc.get("offsetTable", {}).items():
            topic, sep, group = key.partition(KEY_SEPARATOR)
            if not sep:
                raise ValueError(f"offset key {key!r} is not topic@group")
            table[(topic, group)] = {int(q): int(off) for q, off in queues.items()}
        self._table = table

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        queues = self._table.setdefault((topic, group), {})
        if queues.get(queue_id) != offset:
            queues[queue_id] = offset
            self.changed()

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        queues = self._table.get((topic, group))
        return None if queues is None else queues.get(queue_id)

    def groups(self) -> set[str]:
        return {group for _, group in self._table}

    def entries(self) -> Iterator[tuple[str, str, int, int]]:
        """(group, topic, queue id, offset) for every committed offset."""
        for (topic, group), queues in sorted(self._table.items()):
            for queue_id, offset in sorted(queues.items()):
                yield group, topic, queue_id, offset

    def remove_topic(self, topic: str) -> None:
        keys = [k for k in self._table if k[0] == topic]
        for key in keys:
            del self._table[key]
        if keys:
            self.changed()

    def replace_all(self, entries: list[tuple[str, str, int, int]], version: DataVersion) -> None:
        table: dict[tuple[str, str], dict[int, int]] = {}
        for group, topic, queue_id, offset in entries:
            table.setdefault((topic, group), {})[queue_id] = offset
        self._table = table
        self.replace_version(version)


class DelayOffsetManager(MetadataTable):
    """Delay level -> next offset to deliver in that level's schedule queue."""

    file_name = "delayOffset.json"

    def __init__(self, config_dir: str) -> None:
        super().__init__(config_dir)
        self._table: dict[int, int] = {}

    def encode_table(self) -> dict[str, Any]:
        return {"offsetTable": {str(level): off for level, off in sorted(self._table.items())}}

    def decode_table(self, doc: dict[str, Any]) -> None:
        self._table = {int(level): int(off) for level, off in doc.get("offsetTable", {}).items()}

    def get(self, level: int) -> int:
        return self._table.get(level, 0)

    def set(self, level: int, offset: int) -> None:
        if self._table.get(level) != offset:
            self._table[level] = offset
            self.changed()

    def all(self) -> dict[int, int]:
        return dict(self._table)

    def replace_all(self, table: dict[int, int], version: DataVersion) -> None:
        self._table = dict(table)
        self.replace_version(version)
