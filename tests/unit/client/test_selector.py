from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pocketmq.client.message import Message, MessageQueue
from pocketmq.client.selector import HashSelector, RoundRobin, hash_key
from pocketmq.errors import InvalidArgumentError

QUEUES = [MessageQueue("t", b, i) for b in ("broker-a", "broker-b") for i in range(4)]
MSG = Message("t", b"x")


def test_round_robin_cycles_through_every_queue() -> None:
    rr = RoundRobin()
    picked = [rr(QUEUES, MSG, None) for _ in range(16)]
    assert picked == QUEUES + QUEUES


def test_round_robin_counts_per_topic() -> None:
    rr = RoundRobin()
    assert rr.pick("t", QUEUES) == QUEUES[0]
    assert rr.pick("other", QUEUES) == QUEUES[0]
    assert rr.pick("t", QUEUES) == QUEUES[1]


def test_round_robin_avoids_failed_brokers_while_others_exist() -> None:
    rr = RoundRobin()
    picks = {rr.pick("t", QUEUES, avoid={"broker-a"}).broker_name for _ in range(20)}
    assert picks == {"broker-b"}
    # every broker avoided: still a queue
    assert rr.pick("t", QUEUES, avoid={"broker-a", "broker-b"}) in QUEUES


@given(st.text(max_size=30))
def test_hash_selector_is_stable_per_key(key: str) -> None:
    sel = HashSelector()
    first = sel(QUEUES, MSG, key)
    assert all(sel(QUEUES, MSG, key) == first for _ in range(3))
    assert first == QUEUES[hash_key(key) % len(QUEUES)]


def test_hash_key_is_process_independent() -> None:
    assert hash_key("order-42") == zlib.crc32(b"order-42")
    assert hash_key("") == 0


def test_hash_selector_needs_a_key() -> None:
    with pytest.raises(InvalidArgumentError):
        HashSelector()(QUEUES, MSG, None)


def test_hash_spreads_keys() -> None:
    sel = HashSelector()
    used = {sel(QUEUES, MSG, f"k{i}") for i in range(200)}
    assert used == set(QUEUES)
