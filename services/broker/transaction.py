"""Transactional messages (RocketMQ's TransactionalMessageService).

A half message (``TRAN_MSG=true``) is stored by the send path in
:data:`~services.broker.validation.TRANS_HALF_TOPIC` queue 0 with its real topic/queue in
``REAL_TOPIC`` / ``REAL_QID``: consumers never see it. :meth:`TransactionService.end_transaction`
resolves it: COMMIT appends the real message to its real topic/queue, ROLLBACK appends nothing;
either way an op record in :data:`~services.broker.validation.TRANS_OP_HALF_TOPIC` queue 0
(body: the half record's commit log offset) marks it resolved, in the same store append as the
committed message. The transaction id is the half record's offset message id.

The set of unresolved half messages is built by following both queues (half first, then op),
so a slave has it too and a restarted broker rebuilds it (from ``<store>/transaction/snapshot``
plus the queues since). On masters a check task asks the producers of a half message's group
about it once it is older than ``transactionTimeOut``, every ``transactionCheckInterval``, at
most ``transactionCheckMax`` times, then discards it (an op record, logged).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

from services.broker.longpoll import QueueNotifier
from services.broker.metadata.base import write_file_atomic
from services.broker.storage import record
from services.broker.storage.status import PutResult
from services.broker.systopic import QueueReader, clamp_offset, follow
from services.broker.validation import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from services.common.errors import InvalidArgumentError, NotFoundError, UnavailableError

log = logging.getLogger(__name__)

#: How long an idle follower waits for new half/op records before looking again.
IDLE_WAIT_S = 5.0
RETRY_DELAY_S = 1.0
OP_COMMIT = "commit"
OP_ROLLBACK = "rollback"
OP_DISCARD = "discard"
#: Tag of op records (RocketMQ's "d": remove).
OP_TAG = "d"
_DROPPED = frozenset({record.PROPERTY_REAL_TOPIC, record.PROPERTY_REAL_QUEUE_ID,
                      record.PROPERTY_TRANSACTION_PREPARED, record.PROPERTY_TRANSACTION_CHECK_TIMES})

Append = Callable[[Sequence[record.Message]], PutResult]


@dataclasses.dataclass(frozen=True)
class HalfMessage:
    """An unresolved half message, as given to checkers."""

    producer_group: str
    topic: str
    queue_id: int
    transaction_id: str
    message_id: str
    body: bytes
    properties: Mapping[str, str]
    born_timestamp_ms: int
    store_timestamp_ms: int
    check_times: int
    record: record.MessageRecord


TransactionChecker = Callable[[HalfMessage], Awaitable[bool]]


@dataclasses.dataclass
class _Pending:
    store_timestamp: int
    producer_group: str
    check_times: int = 0


def real_message(rec: record.MessageRecord) -> record.Message | None:
    """The message a committed half record becomes (None without REAL_TOPIC/REAL_QID)."""
    props = rec.properties
    topic = props.get(record.PROPERTY_REAL_TOPIC)
    qid = props.get(record.PROPERTY_REAL_QUEUE_ID)
    if not topic or qid is None or not qid.isdigit():
        return None
    kept = {k: v for k, v in props.items() if k not in _DROPPED}
    return record.Message(topic, rec.body, int(qid), rec.flag, kept, rec.born_timestamp, rec.born_host,
                          rec.sys_flag, rec.reconsume_times, rec.physical_offset)


def _op_offset(body: bytes) -> int:
    text = body.decode("ascii", "replace")
    if not text.isdigit():
        raise ValueError(f"op record body {text[:40]!r} is not a commit log offset")
    return int(text)


class TransactionService:
    def __init__(
        self,
        store: QueueReader,
        snapshot_path: Path,
        *,
        append: Append,
        notifier: QueueNotifier,
        master: bool,
        check_writable: Callable[[], None],
        msg_id: Callable[[int], str],
        timeout_ms: int = 6_000,
        check_interval_ms: int = 60_000,
        check_max: int = 15,
        store_host: record.Host = ("127.0.0.1", 0),
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.store = store
        self.snapshot_path = snapshot_path
        self.append = append
        self.notifier = notifier
        self.master = master
        self.check_writable = check_writable
        self.msg_id = msg_id
        self.timeout_ms = timeout_ms
        self.check_interval_s = check_interval_ms / 1000
        self.check_max = check_max
        self.store_host = store_host
        self.clock_ms = clock_ms
        self.half_offset = 0
        self.op_offset = 0
        self._pending: dict[int, _Pending] = {}
        self._checkers: list[TransactionChecker] = []
        self._dirty = False
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.committed = self.rolled_back = self.discarded = self.checks_sent = 0

    # -- the contract --------------------------------------------------------------------------

    def register_checker(self, checker: TransactionChecker) -> None:
        """Checkers are tried in registration order until one returns True (check sent)."""
        self._checkers.append(checker)

    def unregister_checker(self, checker: TransactionChecker) -> None:
        with contextlib.suppress(ValueError):
            self._checkers.remove(checker)

    async def end_transaction(self, *, producer_group: str, transaction_id: str, message_id: str,
                              commit: bool, from_check: bool) -> None:
        """Commit (the real message is stored, visible) or roll back a half message."""
        self.check_writable()
        try:
            _host, offset = record.parse_offset_msg_id(transaction_id)
        except record.RecordError:
            raise InvalidArgumentError(
                f"transaction id {transaction_id!r} is malformed (expected the 32-hex-digit id the "
                "send returned)") from None
        self.catch_up(limit=None)
        pending = self._pending.get(offset)
        if pending is None:
            raise NotFoundError(f"transaction {transaction_id} is unknown or already resolved")
        if producer_group and pending.producer_group != producer_group:
            raise NotFoundError(f"transaction {transaction_id} belongs to producer group "
                                f"{pending.producer_group!r}, not {producer_group!r}")
        rec = self.store.read_message(offset)
        messages: list[record.Message] = []
        if commit:
            msg = real_message(rec) if rec is not None else None
            if msg is None:
                raise NotFoundError(f"the half message of transaction {transaction_id} is no longer "
                                    "readable (expired or malformed); it cannot be committed")
            messages.append(msg)
        self._resolve(offset, messages, OP_COMMIT if commit else OP_ROLLBACK)
        log.info("transaction ended", extra={
            "transaction_id": transaction_id, "message_id": message_id, "group": pending.producer_group,
            "commit": commit, "from_check": from_check})

    # -- index ----------------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        return len(self._pending)

    def is_pending(self, transaction_id: str) -> bool:
        try:
            return record.parse_offset_msg_id(transaction_id)[1] in self._pending
        except record.RecordError:
            return False

    def load(self) -> None:
        try:
            data = json.loads(self.snapshot_path.read_bytes())
            self.half_offset, self.op_offset = int(data["half_offset"]), int(data["op_offset"])
            self._pending = {int(o): _Pending(int(ts), str(g), int(n)) for o, ts, g, n in data["pending"]}
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error("transaction snapshot unreadable; rebuilding from the half/op topics",
                      extra={"file": str(self.snapshot_path), "error": str(exc)})
            self.half_offset = self.op_offset = 0
            self._pending = {}
        self.half_offset = clamp_offset(self.store, TRANS_HALF_TOPIC, 0, self.half_offset)
        self.op_offset = clamp_offset(self.store, TRANS_OP_HALF_TOPIC, 0, self.op_offset)
        replayed = self.catch_up(limit=None)
        log.info("transaction index loaded", extra={"pending": self.pending, "replayed": replayed})

    def catch_up(self, limit: int | None = 4096) -> int:
        budget = limit if limit is not None else 1 << 62
        count = 0
        for next_offset, rec in follow(self.store, TRANS_HALF_TOPIC, 0, self.half_offset, budget):
            self.half_offset = next_offset
            count += 1
            if rec is not None:
                props = rec.properties
                checks = props.get(record.PROPERTY_TRANSACTION_CHECK_TIMES, "0")
                self._pending[rec.physical_offset] = _Pending(
                    rec.store_timestamp, props.get(record.PROPERTY_PRODUCER_GROUP, ""),
                    int(checks) if checks.isdigit() else 0)
        for next_offset, rec in follow(self.store, TRANS_OP_HALF_TOPIC, 0, self.op_offset, budget):
            self.op_offset = next_offset
            count += 1
            if rec is not None:
                try:
                    self._pending.pop(_op_offset(rec.body), None)
                except ValueError as exc:
                    log.error("bad transaction op record ignored",
                              extra={"offset": rec.physical_offset, "error": str(exc)})
        if count:
            self._dirty = True
        return count

    def _resolve(self, offset: int, messages: list[record.Message], op: str) -> None:
        op_msg = record.Message(
            TRANS_OP_HALF_TOPIC, str(offset).encode(), 0,
            properties={record.PROPERTY_TAGS: OP_TAG, record.PROPERTY_TRANSACTION_OP: op},
            born_timestamp=self.clock_ms(), born_host=self.store_host)
        result = self.append([*messages, op_msg])
        if not result.stored:
            raise UnavailableError(f"the store refused the transaction's op record: "
                                   f"{result.error or result.status.name}; retry")
        self._pending.pop(offset, None)
        self._dirty = True
        if op == OP_COMMIT:
            self.committed += 1
        elif op == OP_ROLLBACK:
            self.rolled_back += 1
        else:
            self.discarded += 1

    async def save_snapshot(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        data = json.dumps({
            "half_offset": self.half_offset, "op_offset": self.op_offset,
            "pending": [[o, p.store_timestamp, p.producer_group, p.check_times]
                        for o, p in self._pending.items()]}).encode()
        try:
            await asyncio.to_thread(write_file_atomic, self.snapshot_path, data)
        except OSError as exc:
            self._dirty = True
            log.error("cannot write the transaction snapshot", extra={"error": str(exc)})

    # -- checks ---------------------------------------------------------------------------------

    async def check_round(self) -> int:
        """Check (or discard) every half message older than transactionTimeOut; checks sent."""
        self.catch_up(limit=None)
        now = self.clock_ms()
        sent = 0
        for offset, pending in list(self._pending.items()):
            if now - pending.store_timestamp < self.timeout_ms:
                break  # in store order: the rest is younger
            if offset not in self._pending:
                continue  # resolved meanwhile
            rec = self.store.read_message(offset)
            if pending.check_times >= self.check_max or rec is None:
                log.warning("unresolved transaction discarded (rolled back)", extra={
                    "transaction_id": self.msg_id(offset), "group": pending.producer_group,
                    "checks": pending.check_times, "readable": rec is not None})
                self._resolve(offset, [], OP_DISCARD)
                continue
            pending.check_times += 1
            self._dirty = True
            if await self._ask(self._half(offset, pending, rec)):
                sent += 1
        self.checks_sent += sent
        return sent

    def _half(self, offset: int, pending: _Pending, rec: record.MessageRecord) -> HalfMessage:
        props = rec.properties
        tid = self.msg_id(offset)
        qid = props.get(record.PROPERTY_REAL_QUEUE_ID, "0")
        kept = {k: v for k, v in props.items() if k not in _DROPPED}
        return HalfMessage(
            producer_group=pending.producer_group, topic=props.get(record.PROPERTY_REAL_TOPIC, ""),
            queue_id=int(qid) if qid.isdigit() else 0, transaction_id=tid,
            message_id=props.get(record.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or tid, body=rec.body,
            properties=kept, born_timestamp_ms=rec.born_timestamp, store_timestamp_ms=rec.store_timestamp,
            check_times=pending.check_times, record=rec)

    async def _ask(self, half: HalfMessage) -> bool:
        for checker in list(self._checkers):
            try:
                if await checker(half):
                    return True
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("transaction checker failed", extra={"transaction_id": half.transaction_id})
        log.info("no producer of the group to check a transaction with", extra={
            "transaction_id": half.transaction_id, "group": half.producer_group, "checks": half.check_times})
        return False

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._follow_loop(), name="transaction-follow"))
        if self.master:
            self._tasks.append(asyncio.create_task(self._check_loop(), name="transaction-check"))
        log.info("transaction service started", extra={"master": self.master, "pending": self.pending})

    async def stop(self) -> None:
        self._stop.set()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        self._dirty = True
        await self.save_snapshot()

    async def _sleep(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), max(0.0, seconds))
        return self._stop.is_set()

    async def _follow_loop(self) -> None:
        while not self._stop.is_set():
            try:
                if self.catch_up() == 0:
                    await self.save_snapshot()
                    await self.notifier.wait(TRANS_HALF_TOPIC, 0, self.half_offset, IDLE_WAIT_S)
                else:
                    await asyncio.sleep(0)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("transaction index update failed, retrying")
                await self._sleep(RETRY_DELAY_S)

    async def _check_loop(self) -> None:
        while not await self._sleep(self.check_interval_s):
            try:
                await self.check_round()
                await self.save_snapshot()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("transaction check round failed")
