"""Allocate-averagely: every queue exactly once, shares differ by at most one, deterministic."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from pocketmq.client.allocate import allocate_averagely, allocation_table
from pocketmq.client.message import MessageQueue

members_st = st.sets(st.text(alphabet="abcdefgh@0123456789", min_size=1, max_size=8), min_size=1, max_size=12)
queues_st = st.sets(
    st.builds(MessageQueue, st.sampled_from(["t1", "t2"]),
              st.sampled_from(["broker-a", "broker-b", "broker-c"]), st.integers(0, 15)),
    max_size=40,
)


@settings(max_examples=60)
@given(members_st, queues_st)
def test_every_queue_assigned_exactly_once_and_balanced(members: set[str], queues: set[MessageQueue]) -> None:
    shares = {m: allocate_averagely(m, members, queues) for m in members}
    assigned = [q for share in shares.values() for q in share]
    assert sorted(assigned) == sorted(queues)
    sizes = [len(s) for s in shares.values()]
    assert max(sizes) - min(sizes) <= 1
    assert shares == allocation_table(members, queues)


@settings(max_examples=60)
@given(members_st, queues_st, st.randoms())
def test_input_order_does_not_matter(
    members: set[str], queues: set[MessageQueue], rnd: random.Random
) -> None:
    ms, qs = list(members), list(queues)
    expected = {m: allocate_averagely(m, ms, qs) for m in ms}
    rnd.shuffle(ms)
    rnd.shuffle(qs)
    assert {m: allocate_averagely(m, ms, qs) for m in ms} == expected


@settings(max_examples=60)
@given(members_st, queues_st)
def test_shares_are_contiguous_blocks_in_member_order(members: set[str], queues: set[MessageQueue]) -> None:
    ordered = [q for m in sorted(members) for q in allocate_averagely(m, members, queues)]
    assert ordered == sorted(queues)


def test_examples() -> None:
    qs = list(range(8))
    assert allocation_table(["c", "a", "b"], qs) == {"a": [0, 1, 2], "b": [3, 4, 5], "c": [6, 7]}
    assert allocation_table(["a", "b", "c"], [0, 1]) == {"a": [0], "b": [1], "c": []}
    assert allocate_averagely("x", ["a", "b"], qs) == []  # not (yet) a member
    assert allocate_averagely("a", [], qs) == []
    assert allocate_averagely("a", ["a", "a"], [1, 1, 2]) == [1, 2]
