"""Consumer offsets (RocketMQ's ConsumerOffsetManager, ``config/consumerOffset.json``) and delay
offsets (ScheduleMessageService's ``config/delayOffset.json``).

Next to RocketMQ's ``offsetTable`` the consumer offset file keeps PocketMQ's offset-reset
generations (``resetGenerationTable``, ``topic@group`` -> generation, present only once a group
was reset): a reset and the generation that fences commits from before it are written, synced to
slaves and reloaded together. RocketMQ's reader ignores the extra key."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from services.broker.metadata.base import DataVersion, MetadataTable

#: RocketMQ's key separator: ``topic@group``.
KEY_SEPARATOR = "@"
#: The file's key of the offset-reset generations (PocketMQ's; absent in RocketMQ's files).
RESET_TABLE_KEY = "resetGenerationTable"


class ConsumerOffsetManager(MetadataTable):
    """The next queue offset each (group, topic, queue) will consume."""

    file_name = "consumerOffset.json"

    def __init__(self, config_dir: str) -> None:
        super().__init__(config_dir)
        # (topic, group) -> {queue id: offset}
        self._table: dict[tuple[str, str], dict[int, int]] = {}
        # (topic, group) -> offset-reset generation (ms since the epoch of the last reset).
        self._resets: dict[tuple[str, str], int] = {}

    def encode_table(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "offsetTable": {
                f"{topic}{KEY_SEPARATOR}{group}": {str(q): off for q, off in sorted(queues.items())}
                for (topic, group), queues in sorted(self._table.items())
            }
        }
        if self._resets:
            doc[RESET_TABLE_KEY] = {f"{topic}{KEY_SEPARATOR}{group}": gen
                                    for (topic, group), gen in sorted(self._resets.items())}
        return doc

    def decode_table(self, doc: dict[str, Any]) -> None:
        table: dict[tuple[str, str], dict[int, int]] = {}
        for key, queues in doc.get("offsetTable", {}).items():
            topic, sep, group = key.partition(KEY_SEPARATOR)
            if not sep:
                raise ValueError(f"offset key {key!r} is not topic@group")
            table[(topic, group)] = {int(q): int(off) for q, off in queues.items()}
        resets: dict[tuple[str, str], int] = {}
        for key, gen in (doc.get(RESET_TABLE_KEY) or {}).items():
            topic, sep, group = key.partition(KEY_SEPARATOR)
            if not sep:
                raise ValueError(f"reset generation key {key!r} is not topic@group")
            resets[(topic, group)] = int(gen)
        self._table = table
        self._resets = resets

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
        resets = [k for k in self._resets if k[0] == topic]
        for key in resets:
            del self._resets[key]
        if keys or resets:
            self.changed()

    # -- offset resets ----------------------------------------------------------------------------

    def record_reset(self, group: str, topic: str) -> int:
        """A reset of (group, topic) happened: its new generation (greater than any before, the
        reset's wall time in ms when the clock allows)."""
        key = (topic, group)
        generation = max(int(time.time() * 1000), self._resets.get(key, 0) + 1)
        self._resets[key] = generation
        self.changed()
        return generation

    def reset_generation(self, group: str, topic: str) -> int:
        """0 when (group, topic) was never reset."""
        return self._resets.get((topic, group), 0) if self._resets else 0

    def reset_generations(self, group: str) -> dict[str, int]:
        return {t: g for (t, grp), g in self._resets.items() if grp == group}

    def reset_entries(self) -> Iterator[tuple[str, str, int]]:
        """(group, topic, generation) of every reset (group, topic)."""
        for (topic, group), gen in sorted(self._resets.items()):
            yield group, topic, gen

    def stale_commit(self, group: str, topic: str, generation: int | None) -> bool:
        """A commit carrying ``generation`` (None: a client that does not track resets) predates
        the last reset of (group, topic) and must be ignored."""
        return generation is not None and generation < self.reset_generation(group, topic)

    def replace_all(self, entries: list[tuple[str, str, int, int]], version: DataVersion,
                    resets: list[tuple[str, str, int]] | None = None) -> None:
        """Adopt the master's table (slave sync); ``resets``: its (group, topic, generation)."""
        table: dict[tuple[str, str], dict[int, int]] = {}
        for group, topic, queue_id, offset in entries:
            table.setdefault((topic, group), {})[queue_id] = offset
        self._table = table
        self._resets = {(topic, group): gen for group, topic, gen in resets or ()}
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
