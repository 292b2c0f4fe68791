"""Queue allocation among the members of a consumer group (pure functions).

Every member computes its share from the same inputs (all queues of the topic, all member ids
as the broker reports them), so the members agree without talking to each other. Inputs are
sorted first: the order in which they arrive does not matter.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

Q = TypeVar("Q")

__all__ = ["allocate_averagely", "allocation_table"]


def _block(index: int, members: int, queues: int) -> range:
    """The contiguous block of queue positions of member ``index``: the first ``queues % members``
    members get one queue more than the others; members past the queue count get none."""
    base, extra = divmod(queues, members)
    size = base + (1 if index < extra else 0)
    start = index * base + min(index, extra)
    return range(start, start + size)


def allocate_averagely(member: str, members: Iterable[str], queues: Iterable[Q]) -> list[Q]:
    """The queues ``member`` consumes: sorted queues cut into contiguous blocks, one per sorted
    member, sizes differing by at most one (RocketMQ's AllocateMessageQueueAveragely).

    A member not in ``members`` (not yet seen by the broker) gets nothing. Duplicate ids or
    queues count once.
    """
    ids = sorted(set(members))
    qs: Sequence[Q] = sorted(set(queues))  # type: ignore[type-var]
    if not ids or not qs or member not in ids:
        return []
    return [qs[i] for i in _block(ids.index(member), len(ids), len(qs))]


def allocation_table(members: Iterable[str], queues: Iterable[Q]) -> dict[str, list[Q]]:
    """Every member's share (what :func:`allocate_averagely` gives each of them)."""
    ids = sorted(set(members))
    qs: Sequence[Q] = sorted(set(queues))  # type: ignore[type-var]
    if not ids:
        return {}
    return {m: [qs[i] for i in _block(n, len(ids), len(qs))] for n, m in enumerate(ids)}
