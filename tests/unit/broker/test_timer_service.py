"""The timer service and the transaction service on a real MessageStore (no processes): index
built from the system queues, delivery, and a restart from an older snapshot that must neither
lose nor repeat a delivery."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from services.broker.delay import restore_message
from services.broker.longpoll import QueueNotifier
from services.broker.rewrite import rewrite_special
from services.broker.storage import record
from services.broker.storage.status import PutResult
from services.broker.storage.store import MessageStore
from services.broker.timer.service import TimerService
from services.broker.transaction import HalfMessage, TransactionService
from services.broker.validation import TIMER_TOPIC, TRANS_HALF_TOPIC
from services.common.errors import InvalidArgumentError, NotFoundError
from tests.unit.storage.conftest import small_config

BASE = 1_000_000


class Clock:
    def __init__(self) -> None:
        self.now = BASE

    def __call__(self) -> int:
        return self.now


def timer_message(i: int, due: int) -> record.Message:
    props = {record.PROPERTY_TIMER_DELIVER_MS: str(due), record.PROPERTY_REAL_TOPIC: "real",
             record.PROPERTY_REAL_QUEUE_ID: str(i % 2), record.PROPERTY_KEYS: f"k{i}"}
    return record.Message(TIMER_TOPIC, f"m{i}".encode(), 0, properties=props)


def real_records(store: MessageStore) -> list[record.MessageRecord]:
    out = []
    for qid in (0, 1):
        offset = 0
        while (result := store.get_messages("real", qid, offset, 32)).messages:
            out += result.messages
            offset = result.next_begin_offset
    return out


def delivered(store: MessageStore) -> list[str]:
    return sorted(m.body.decode() for m in real_records(store))


async def deliver_due(timers: TimerService, clock: Clock) -> None:
    """Delivery rounds until nothing is due at the (fake) clock's time."""
    while (due := timers.index.next_due()) is not None and due <= clock.now:
        await asyncio.wait_for(timers._deliver_round(), 1)


def make_timers(store: MessageStore, root: Path, clock: Clock, notifier: QueueNotifier) -> TimerService:
    def append(msgs: Sequence[record.Message]) -> PutResult:
        return store.append_messages(msgs)

    return TimerService(store, root / "timer" / "snapshot", append=append, notifier=notifier, master=True,
                        deliver_batch=7, clock_ms=clock)


def test_timers_survive_a_restart_from_an_old_snapshot_exactly_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = MessageStore(small_config(tmp_path / "s", mapped_file_size_commit_log=1 << 20))
        store.start()
        clock = Clock()
        notifier = QueueNotifier(asyncio.get_running_loop(), store.max_queue_offset)
        dues = {f"m{i}": BASE + 1000 + (i * 37 % 100) * 10 for i in range(100)}
        assert store.append_messages([timer_message(i, dues[f"m{i}"]) for i in range(100)]).stored
        timers = make_timers(store, tmp_path, clock, notifier)
        timers.load()
        assert timers.pending == 100 and timers.index.next_due() == min(dues.values())
        # A quarter is due: delivered in batches, each with its done record.
        clock.now = BASE + 1250
        await deliver_due(timers, clock)
        first = delivered(store)
        assert first == sorted(b for b, d in dues.items() if d <= clock.now)
        await timers.save_snapshot()
        # More deliveries after the snapshot, then a "crash": the snapshot is older than the log.
        clock.now = BASE + 1600
        await deliver_due(timers, clock)
        second = delivered(store)
        assert len(second) > len(first)
        restarted = make_timers(store, tmp_path, clock, notifier)
        restarted.load()
        assert restarted.pending == 100 - len(second)
        assert sorted(e.offset for e in restarted.index.entries()) == sorted(
            e.offset for e in timers.index.entries())
        # The rest is delivered once; nothing early.
        clock.now = BASE + 5000
        await deliver_due(restarted, clock)
        assert delivered(store) == sorted(dues)
        for m in real_records(store):
            assert m.properties[record.PROPERTY_KEYS] == f"k{m.body.decode()[1:]}"
            assert record.PROPERTY_REAL_TOPIC not in m.properties
        # A corrupt snapshot: rebuilt from the queues, same result (nothing pending).
        (tmp_path / "timer" / "snapshot").write_bytes(b"garbage")
        rebuilt = make_timers(store, tmp_path, clock, notifier)
        rebuilt.load()
        assert rebuilt.pending == 0
        store.shutdown()

    asyncio.run(scenario())


def test_rewrite_special_rules() -> None:
    now = BASE

    def rewrite(props: dict[str, str], level: int = 0) -> tuple[str, int] | None:
        return rewrite_special(props, "t", 3, delay_level=level, max_delay_sec=60, now_ms=now)

    props = {record.PROPERTY_TIMER_DELIVER_MS: str(now + 5000)}
    assert rewrite(props) == (TIMER_TOPIC, 0)
    assert props[record.PROPERTY_REAL_TOPIC] == "t" and props[record.PROPERTY_REAL_QUEUE_ID] == "3"
    assert rewrite({record.PROPERTY_TIMER_DELIVER_MS: str(now)}) is None  # due: stored as sent
    with pytest.raises(InvalidArgumentError, match="timerMaxDelaySec"):
        rewrite({record.PROPERTY_TIMER_DELIVER_MS: str(now + 61_000)})
    with pytest.raises(InvalidArgumentError):
        rewrite({record.PROPERTY_TIMER_DELIVER_MS: "-5"})
    with pytest.raises(InvalidArgumentError, match="not both"):
        rewrite({record.PROPERTY_TIMER_DELIVER_MS: str(now + 5000)}, level=2)
    half = {record.PROPERTY_TRANSACTION_PREPARED: "true", record.PROPERTY_PRODUCER_GROUP: "g"}
    assert rewrite(half) == (TRANS_HALF_TOPIC, 0)
    with pytest.raises(InvalidArgumentError, match="producer group"):
        rewrite({record.PROPERTY_TRANSACTION_PREPARED: "true"})
    with pytest.raises(InvalidArgumentError, match="cannot be delayed"):
        rewrite({**half, record.PROPERTY_TIMER_DELIVER_MS: str(now + 5000)})


def test_transaction_service_resolves_checks_and_discards(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = MessageStore(small_config(tmp_path / "s", mapped_file_size_commit_log=1 << 20))
        store.start()
        clock = Clock()
        notifier = QueueNotifier(asyncio.get_running_loop(), store.max_queue_offset)
        host = store.store_host

        def make() -> TransactionService:
            return TransactionService(
                store, tmp_path / "tx" / "snapshot", append=store.append_messages, notifier=notifier,
                master=True, check_writable=lambda: None,
                msg_id=lambda o: record.offset_msg_id(host, o), timeout_ms=1000, check_max=2,
                clock_ms=clock)

        halves = []
        for i in range(3):
            props = {record.PROPERTY_TRANSACTION_PREPARED: "true", record.PROPERTY_PRODUCER_GROUP: "g",
                     record.PROPERTY_REAL_TOPIC: "real", record.PROPERTY_REAL_QUEUE_ID: "0"}
            result = store.append_messages([record.Message(TRANS_HALF_TOPIC, f"h{i}".encode(), 0,
                                                           properties=props)])
            halves.append(record.offset_msg_id(host, result.physical_offsets[0]))
        tx = make()
        tx.load()
        assert tx.pending == 3
        await tx.end_transaction(producer_group="g", transaction_id=halves[0], message_id="",
                                 commit=True, from_check=False)
        await tx.end_transaction(producer_group="g", transaction_id=halves[1], message_id="",
                                 commit=False, from_check=False)
        with pytest.raises(NotFoundError):
            await tx.end_transaction(producer_group="g", transaction_id=halves[0], message_id="",
                                     commit=True, from_check=False)
        with pytest.raises(NotFoundError, match="belongs to"):
            await tx.end_transaction(producer_group="other", transaction_id=halves[2], message_id="",
                                     commit=True, from_check=False)
        with pytest.raises(InvalidArgumentError):
            await tx.end_transaction(producer_group="g", transaction_id="zz", message_id="",
                                     commit=True, from_check=False)
        assert [m.body for m in store.get_messages("real", 0, 0, 10).messages] == [b"h0"]
        # Checkers are tried in order; the first one that sends a check wins.
        asked: list[tuple[str, HalfMessage]] = []

        async def refuses(half: HalfMessage) -> bool:
            asked.append(("refuses", half))
            return False

        async def sends(half: HalfMessage) -> bool:
            asked.append(("sends", half))
            return True

        tx.register_checker(refuses)
        tx.register_checker(sends)
        clock.now = time.time_ns() // 1_000_000
        assert await tx.check_round() == 0  # younger than transactionTimeOut
        clock.now += 2000
        assert await tx.check_round() == 1
        assert [name for name, _ in asked] == ["refuses", "sends"]
        half = asked[-1][1]
        assert (half.transaction_id, half.topic, half.body, half.check_times) == (halves[2], "real", b"h2", 1)
        assert record.PROPERTY_TRANSACTION_PREPARED not in half.properties
        # A restart (from its snapshot) still knows the unresolved one and its check count.
        await tx.save_snapshot()
        tx2 = make()
        tx2.load()
        assert tx2.pending == 1 and tx2.is_pending(halves[2])
        tx2.register_checker(sends)
        assert await tx2.check_round() == 1
        assert await tx2.check_round() == 0  # checked transactionCheckMax times: discarded
        assert tx2.pending == 0 and tx2.discarded == 1
        assert [m.body for m in store.get_messages("real", 0, 0, 10).messages] == [b"h0"]
        store.shutdown()

    asyncio.run(scenario())


def test_a_delivery_whose_done_record_was_cut_off_is_not_repeated(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = MessageStore(small_config(tmp_path / "s", mapped_file_size_commit_log=1 << 20))
        store.start()
        clock = Clock()
        notifier = QueueNotifier(asyncio.get_running_loop(), store.max_queue_offset)
        result = store.append_messages([timer_message(i, BASE + 100 + i) for i in range(4)])
        offsets = result.physical_offsets
        clock.now = BASE + 1000
        # What a crash at a segment boundary leaves: m0 and m1 delivered, their done record lost.
        torn = []
        for i in (0, 1):
            rec = store.read_message(offsets[i])
            assert rec is not None
            msg = restore_message(rec)
            assert msg is not None
            torn.append(msg._replace(properties={**msg.properties,
                                                 record.PROPERTY_TIMER_SOURCE_OFFSET: str(offsets[i])}))
        assert store.append_messages(torn).stored
        timers = make_timers(store, tmp_path, clock, notifier)
        timers.load()
        assert timers.pending == 2 and sorted(e.offset for e in timers.index.entries()) == offsets[2:]
        await deliver_due(timers, clock)
        assert delivered(store) == ["m0", "m1", "m2", "m3"]
        # The repair is in the log: a rebuild from the queues (no snapshot was written) agrees.
        assert not (tmp_path / "timer" / "snapshot").exists()
        again = make_timers(store, tmp_path, clock, notifier)
        again.load()
        assert again.pending == 0
        store.shutdown()

    asyncio.run(scenario())
