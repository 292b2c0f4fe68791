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

    def __init__(self, settings: ConsumerSettings, caller: BrokerCaller, failover: Failover,
                 reset_generations: Mapping[str, int] | None = None) -> None:
        self.settings = settings
        self.caller = caller
        self.failover = failover
        #: Topic -> offset-reset generation applied (SubscriptionState.reset_generations).
        self.reset_generations: Mapping[str, int] = reset_generations if reset_generations is not None else {}

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
        """Commit ``pq``'s offset to the master of its broker group (unless the broker has it
        already). Commits of one queue go out one after the other: the broker keeps the value
        that arrives last, so two in flight at once could leave an older offset there. A caller
        cancelled while its call is on the way does not cancel the call; the next commit of the
        queue waits for it."""
        while (previous := pq.commit_task) is not None and not previous.done():
            await asyncio.wait((previous,))  # not cancelled with this caller
        offset = pq.commit_offset()
        if offset < 0 or (offset == pq.committed and not force) or pq.reset:
            return
        task = pq.commit_task = asyncio.ensure_future(self._send(pq, offset))
        await asyncio.shield(task)

    async def _send(self, pq: ProcessQueue, offset: int) -> None:
        s, q, caller = self.settings, pq.queue, self.caller
        # A pull carrying an older commit may still reach the broker after this call: then what
        # the broker holds is not known, and the next commit is sent even if unchanged.
        racing_pull = pq.pull_commit_unconfirmed
        generation = self.reset_generations.get(q.topic, 0)
        try:
            await self.failover.call_group(
                pq, lambda addr: caller.update_consumer_offset(addr, s.group, q.topic, q.queue_id, offset,
                                                               s.request_timeout, generation),
                master_only=True)
        except PocketMQError as exc:
            log.warning("offset commit failed", extra={"queue": str(q), "offset": offset, "error": str(exc)})
            return
        pq.committed = -1 if racing_pull or pq.pull_commit_unconfirmed else offset

    @staticmethod
    def pull_commit(pq: ProcessQueue) -> int:
        """The offset a pull of ``pq`` may commit on its way (-1: none): only when it moved and
        no UpdateConsumerOffset call of the queue is in flight. The pull's answer confirms it
        (:meth:`pull_committed`)."""
        offset = pq.commit_offset()
        task = pq.commit_task
        if offset <= pq.committed or (task is not None and not task.done()) or pq.reset:
            return -1
        pq.pull_commit_unconfirmed = True
        return offset

    @staticmethod
    def pull_committed(pq: ProcessQueue, offset: int, from_master: bool) -> None:
        """The broker answered a pull that carried ``offset`` (-1: none)."""
        if offset < 0:
            return
        pq.pull_commit_unconfirmed = False
        task = pq.commit_task
        if from_master and (task is None or task.done()) and offset > pq.committed:
            pq.committed = offset

    async def commit_all(self, pqs: Iterable[ProcessQueue]) -> None:
        await asyncio.gather(*(self.commit(pq) for pq in list(pqs) if pq.initialized))

    async def commit_loop(self, pqs: Mapping[MessageQueue, ProcessQueue]) -> None:
        while True:
            await asyncio.sleep(self.settings.commit_interval)
            await self.commit_all(pqs.values())
