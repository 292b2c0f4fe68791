"""Master and slave protocol objects wired together in memory: no sockets, no loop."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.broker.replication import (
    AckReceived,
    ContinuityError,
    DataReceived,
    MasterConnectionProtocol,
    RequestBeyondMaxOffsetError,
    SlaveConnectionProtocol,
    SlaveEvent,
    encode_ack,
    encode_transfer_header,
)
from services.broker.replication.waiter import SlaveAckTracker
from services.broker.storage.logerrors import OffsetMismatchError
from services.broker.storage.store import MessageStore
from tests.unit.replication.test_ha_io import BODY, SEGMENT, fill, make_store


@dataclass
class FakeCommitLog:
    """An in-memory commit log holding offsets base..base+len(data), whose :meth:`append_data`
    keeps the contract of ``CommitLog.append_data`` (test_the_fake_keeps_the_commit_logs_contract
    runs both through the same calls)."""

    base: int = 0
    data: bytearray = field(default_factory=bytearray)
    #: mappedFileSizeCommitLog (master and slave use the same; :class:`Link` sets both).
    segment_size: int = 1000

    @property
    def min_offset(self) -> int:
        return self.base

    @property
    def max_offset(self) -> int:
        return self.base + len(self.data)

    def read(self, offset: int, size: int) -> bytes:
        start = offset - self.base
        assert start >= 0 and start + size <= len(self.data)
        return bytes(self.data[start : start + size])

    def append_data(self, start_offset: int, data: bytes | memoryview | Sequence[bytes | memoryview]) -> int:
        """Append replicated bytes (one buffer or several back to back); returns the new max
        offset. ``start_offset`` must be the max offset, or a segment boundary when the log is
        empty; no buffer may cross a segment boundary (the buffers of one call may fill a segment
        and go on in the next). Everything is checked before anything is written."""
        pieces = [data] if isinstance(data, (bytes, bytearray, memoryview)) else list(data)
        size = self.segment_size
        if not self.data:
            if start_offset % size:
                raise OffsetMismatchError(start_offset, 0, f"an empty commit log can only start at a "
                                                           f"segment boundary, not {start_offset}")
        elif start_offset != self.max_offset:
            raise OffsetMismatchError(start_offset, self.max_offset)
        end = start_offset
        for piece in pieces:
            n = len(piece)
            if n and end // size != (end + n - 1) // size:
                raise OffsetMismatchError(start_offset, start_offset,
                                          f"{n} bytes at {end} cross the end of the segment")
            end += n
        if not self.data:
            self.base = start_offset  # an empty slave adopts the master's start
        for piece in pieces:
            self.data += piece
        return self.max_offset


class Link:
    """One replication connection with byte pipes in both directions."""

    def __init__(
        self,
        master_log: FakeCommitLog,
        slave_log: FakeCommitLog,
        *,
        batch_size: int = 64,
        segment_size: int = 1000,
        sync_from_earliest: bool = False,
    ) -> None:
        self.master_log = master_log
        self.slave_log = slave_log
        master_log.segment_size = slave_log.segment_size = segment_size
        self.master = MasterConnectionProtocol(
            batch_size=batch_size, segment_size=segment_size, sync_from_earliest=sync_from_earliest
        )
        self.slave = SlaveConnectionProtocol(slave_log.max_offset)
        self.tracker = SlaveAckTracker()
        self.m2s = bytearray()
        self.s2m = bytearray()
        self.m2s_total = bytearray()  # everything the master ever sent
        self.acks_sent: list[int] = []
        self.acks_seen: list[AckReceived] = []
        self.slave_events: list[SlaveEvent] = []
        self.slave_ack()

    def slave_ack(self) -> None:
        self.acks_sent.append(self.slave_log.max_offset)
        self.s2m += encode_ack(self.slave_log.max_offset)

    def master_send(self) -> bool:
        plan = self.master.next_transfer(self.master_log.max_offset, self.master_log.min_offset)
        if plan is None:
            return False
        body = self.master_log.read(plan.offset, plan.size)
        self.master.advance(len(body))
        frame = encode_transfer_header(plan.offset, len(body)) + body
        self.m2s += frame
        self.m2s_total += frame
        return True

    def master_heartbeat(self) -> None:
        frame = self.master.heartbeat_frame()
        if frame is not None:
            self.m2s += frame
            self.m2s_total += frame

    def to_slave(self, n: int) -> None:
        chunk = bytes(self.m2s[:n])
        del self.m2s[:n]
        events = self.slave.receive_data(chunk)
        self.slave_events += events
        # As the slave does: the bodies of one read, in one append from the first one's offset.
        data = [event for event in events if isinstance(event, DataReceived)]
        if data:
            self.slave_log.append_data(data[0].offset, [event.body for event in data])
        if events:
            self.slave_ack()

    def to_master(self, n: int) -> None:
        chunk = bytes(self.s2m[:n])
        del self.s2m[:n]
        for event in self.master.receive_data(chunk, self.master_log.max_offset):
            self.acks_seen.append(event)
            self.tracker.update("slave-1", event.offset, self.master_log.max_offset)

    def run_until_quiet(self) -> None:
        for _ in range(100_000):
            sent = self.master_send()
            if not (sent or self.m2s or self.s2m):
                return
            self.to_slave(len(self.m2s))
            self.to_master(len(self.s2m))
        raise AssertionError("replication did not converge")


def master_with(size: int, base: int = 0) -> FakeCommitLog:
    return FakeCommitLog(base, bytearray((i * 7 + 3) % 251 for i in range(size)))


def test_empty_slave_gets_the_masters_last_segment() -> None:
    master_log = master_with(3500)
    link = Link(master_log, FakeCommitLog(), segment_size=1000)
    link.run_until_quiet()
    assert link.slave_log.base == 3000
    assert link.slave_log.data == master_log.data[3000:]
    assert link.master.ack_offset == link.tracker.push2slave_max_offset == 3500


def test_empty_slave_from_earliest_gets_everything_retained() -> None:
    master_log = master_with(3500, base=1000)
    link = Link(master_log, FakeCommitLog(), segment_size=1000, sync_from_earliest=True)
    link.run_until_quiet()
    assert (link.slave_log.base, link.slave_log.data) == (1000, master_log.data)


def test_empty_slave_of_a_master_on_a_segment_boundary_waits_for_new_data() -> None:
    master_log = master_with(2000)
    link = Link(master_log, FakeCommitLog(), segment_size=1000)
    link.run_until_quiet()
    assert link.master.next_transfer_offset == 2000
    assert link.slave_log.max_offset == link.master.ack_offset == 0
    master_log.data += b"new"
    link.run_until_quiet()
    assert (link.slave_log.base, bytes(link.slave_log.data)) == (2000, b"new")
    assert link.master.ack_offset == 2003


def test_slave_resumes_where_it_stopped() -> None:
    master_log = master_with(2000)
    slave_log = FakeCommitLog(0, bytearray(master_log.data[:1234]))
    link = Link(master_log, slave_log)
    link.run_until_quiet()
    assert slave_log.data == master_log.data
    assert link.master.request_offset == 1234


def test_reconnect_after_a_continuity_error_resumes_cleanly() -> None:
    master_log = master_with(1000)
    slave_log = FakeCommitLog(0, bytearray(master_log.data[:100]))
    link = Link(master_log, slave_log)
    link.to_master(8)
    assert link.master_send()
    # Recovery truncates the slave's log to 50 while frames starting at 100 are in flight:
    # they no longer continue the log, and the connection must be dropped.
    del slave_log.data[50:]
    link.slave = SlaveConnectionProtocol(slave_log.max_offset)
    with pytest.raises(ContinuityError) as info:
        link.to_slave(len(link.m2s))
    assert (info.value.expected, info.value.received) == (50, 100)
    assert slave_log.max_offset == 50
    relink = Link(master_log, slave_log)
    relink.run_until_quiet()
    assert relink.master.request_offset == 50
    assert slave_log.data == master_log.data


def test_diverged_slave_ahead_of_master_is_refused() -> None:
    master_log = master_with(100)
    link = Link(master_log, FakeCommitLog(0, bytearray(200)))
    with pytest.raises(RequestBeyondMaxOffsetError):
        link.to_master(8)


@settings(max_examples=150, deadline=None)
@given(
    initial_master=st.one_of(st.integers(0, 600), st.sampled_from([256, 512])),
    slave_prefix=st.integers(0, 600),
    batch_size=st.integers(1, 100),
    sync_from_earliest=st.booleans(),
    data=st.data(),
)
def test_random_interleavings_and_splits_converge(
    initial_master: int, slave_prefix: int, batch_size: int, sync_from_earliest: bool, data: st.DataObject
) -> None:
    master_log = master_with(initial_master)
    slave_prefix = min(slave_prefix, initial_master)
    slave_log = FakeCommitLog(0, bytearray(master_log.data[:slave_prefix]))
    link = Link(
        master_log, slave_log, batch_size=batch_size, segment_size=256, sync_from_earliest=sync_from_earliest
    )
    actions = data.draw(
        st.lists(
            st.one_of(
                st.tuples(st.just("send"), st.just(0)),
                st.tuples(st.just("heartbeat"), st.just(0)),
                st.tuples(st.just("append"), st.integers(1, 300)),
                st.tuples(st.just("to_slave"), st.integers(0, 200)),
                st.tuples(st.just("to_master"), st.integers(0, 20)),
            ),
            max_size=60,
        )
    )
    for action, n in actions:
        if action == "send":
            link.master_send()
        elif action == "heartbeat":
            link.master_heartbeat()
        elif action == "append":
            master_log.data += bytes((n + i) % 256 for i in range(n))
        elif action == "to_slave":
            link.to_slave(n)
        else:
            link.to_master(n)
    link.run_until_quiet()

    if slave_prefix > 0 or sync_from_earliest or master_log.max_offset % 256:
        start = 0 if slave_prefix > 0 or sync_from_earliest else link.slave_log.base
        assert start % 256 == 0
        assert link.slave_log.base == start
        assert link.slave_log.data == master_log.data[start:]
        assert link.master.ack_offset == master_log.max_offset
    else:
        # An empty slave of a master sitting exactly on a segment boundary is told to start
        # there; with nothing new to send it stays empty (and acks 0) until the next write.
        if link.slave_log.data:
            assert link.slave_log.data == master_log.data[link.slave_log.base :]
            assert link.master.ack_offset == master_log.max_offset
        else:
            assert link.master.next_transfer_offset == master_log.max_offset
            assert link.master.ack_offset == 0
    assert link.tracker.push2slave_max_offset == link.master.ack_offset == link.slave_log.max_offset
    assert (
        link.tracker.lag("slave-1", master_log.max_offset)
        == master_log.max_offset - link.slave_log.max_offset
    )
    # Acks arrive as sent, whatever the splitting.
    assert [a.offset for a in link.acks_seen] == link.acks_sent
    # The slave saw exactly what an unsplit decode of the master's stream yields (bodies come out
    # as they arrive, so a split frame is several contiguous pieces: compare them joined).
    whole = SlaveConnectionProtocol(slave_prefix).receive_data(bytes(link.m2s_total))
    assert joined(whole) == joined(link.slave_events)


def joined(events: list[SlaveEvent]) -> list[tuple[str, int, bytes]]:
    """Events as (kind, offset, body) with contiguous data pieces joined into one."""
    out: list[tuple[str, int, bytes]] = []
    for e in events:
        if isinstance(e, DataReceived):
            last = out[-1] if out else None
            if last is not None and last[0] == "data" and last[1] + len(last[2]) == e.offset:
                out[-1] = ("data", last[1], last[2] + bytes(e.body))
            else:
                out.append(("data", e.offset, bytes(e.body)))
        else:
            out.append(("heartbeat", e.offset, b""))
    return out


def test_the_fake_keeps_the_commit_logs_contract(stores: tuple[MessageStore, MessageStore],
                                                 tmp_path: Path) -> None:
    """The same append_data calls on a real slave store and on FakeCommitLog: same new max
    offsets, same refusals, same bytes."""
    master, slave = stores
    fill(master, 3 * SEGMENT // BODY)
    data = bytearray()
    while len(data) < master.max_offset:
        with master.get_data(len(data), SEGMENT) as piece:  # type: ignore[union-attr]
            data += piece.data
    s = SEGMENT
    assert 3 * s < len(data) < 4 * s
    calls: list[tuple[int, bytes | list[bytes]]] = [
        (100, [bytes(data[100:110])]),  # an empty log starts at a segment boundary
        (0, [bytes(data[:s - 50]), b""]),
        (s - 49, [bytes(data[s - 49:s - 40])]),  # a gap
        (s - 50, [bytes(data[s - 50:s + 100])]),  # one buffer across the end of a segment
        (s - 50, [bytes(data[s - 50:s]), bytes(data[s:s + 100])]),  # fill a segment, go on in the next
        (s + 100, bytes(data[s + 100:2 * s])),  # one buffer, not a list
        (2 * s, [bytes(data[2 * s:3 * s]), bytes(data[3 * s:])]),
    ]
    fake = FakeCommitLog(segment_size=s)

    def outcome(log: MessageStore | FakeCommitLog, start: int, pieces: bytes | list[bytes]) -> object:
        try:
            return log.append_data(start, pieces)
        except OffsetMismatchError as exc:
            return ("refused", exc.start_offset, exc.max_offset)

    seen = []
    for start, pieces in calls:
        real = outcome(slave, start, pieces)
        assert outcome(fake, start, pieces) == real, (start, real)
        assert fake.max_offset == slave.max_offset
        seen.append(real)
    assert seen == [("refused", 100, 0), s - 50, ("refused", s - 49, s - 50), ("refused", s - 50, s - 50),
                    s + 100, 2 * s, len(data)]
    assert fake.data == data
    assert slave.wait_dispatched(len(data), 10)

    # An empty log may also start at a later segment boundary (the master's last segment).
    late, late_fake = make_store(tmp_path / "late"), FakeCommitLog(segment_size=s)
    try:
        for log in (late, late_fake):
            assert log.append_data(s, bytes(data[s:s + 100])) == s + 100
            assert log.min_offset == s
    finally:
        late.shutdown()
