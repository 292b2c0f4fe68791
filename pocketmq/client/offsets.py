"""Offset tracking of a consumer: where a queue starts (the group's committed offset, else
``consume_from``) and committing what was processed to the queue's master."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping

from pocketmq.client.failover import Failover
from pocketmq.client.message import MessageQueue
from pocketmq.client.subscription import ConsumeFrom, ConsumerSettings, ProcessQueue
from pocketmq.client.transport import BrokerCaller
from pocketmq.errors import NotFoundError, PocketMQError

log = logging.getLogger("pocketmq.client")

__all__ = ["OffsetTracker"]


class OffsetTracker:
    """Initial offsets and commits of a consumer's queues."""

    def __init__(self, settings: ConsumerSettings, caller: BrokerCaller, failover: Failover) -> None:
        self.settings = settings
        self.caller = caller
        self.failover = failover

    async def initial_offset(self, pq: ProcessQueue) -> int:
        """The offset a newly owned queue starts at; a decision not based on a committed offset
        is committed at once, so a member taking the queue over starts there too."""
        s, q, caller, timeout = self.settings, pq.queue, self.caller, self.settings.request_timeout
        try:
            offset, _ = await self.failover.call_group(
                pq, lambda addr: caller.query_consumer_offset(addr, s.group, q.topic, q.queue_id, timeout),
                master_only=True)
            pq.committed = offset
            return offset
        except NotFoundError:
            pass
        if s.consume_from is ConsumeFrom.FIRST_OFFSET:
            offset, _ = await self.failover.call_group(
                pq, lambda addr: caller.queue_offset(addr, "min", q.topic, q.queue_id, timeout))
        elif s.consume_from is ConsumeFrom.LAST_OFFSET:
            offset, _ = await self.failover.call_group(
                pq, lambda addr: caller.queue_offset(addr, "max", q.topic, q.queue_id, timeout))
        else:
            offset, _ = await self.failover.call_group(
                pq, lambda addr: caller.search_offset(addr, q.topic, q.queue_id, s.consume_timestamp_ms,
                                                      timeout))
        pq.next_offset = offset
        pq.initialized = True
        # Remember the decision, so a member taking the queue over starts here too.
        await self.commit(pq, force=True)
        return offset

    async def commit(self, pq: ProcessQueue, force: bool = False) -> None:
        offset = pq.commit_offset()
        if offset < 0 or (offset == pq.committed and not force):
            return
        s, q, caller = self.settings, pq.queue, self.caller
        try:
            await self.failover.call_group(
                pq, lambda addr: caller.update_consumer_offset(addr, s.group, q.topic, q.queue_id, offset,
                                                               s.request_timeout),
                master_only=True)
        except PocketMQError as exc:
            log.warning("offset commit failed", extra={"queue": str(q), "offset": offset, "error": str(exc)})
            return
        pq.committed = max(pq.committed, offset) if not force else offset

    async def commit_all(self, pqs: Iterable[ProcessQueue]) -> None:
        await asyncio.gather(*(self.commit(pq) for pq in list(pqs) if pq.initialized))

    async def commit_loop(self, pqs: Mapping[MessageQueue, ProcessQueue]) -> None:
        while True:
            await asyncio.sleep(self.settings.commit_interval)
            await self.commit_all(pqs.values())
