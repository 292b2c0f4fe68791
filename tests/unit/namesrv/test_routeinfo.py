"""The pure route table: registration rules, expiry, unregister, queries, permissions."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from services.namesrv.routeinfo import (
    PERM_READ,
    PERM_WRITE,
    DataVersion,
    Registration,
    RouteConflictError,
    RouteTable,
    TopicConf,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def table(clock: FakeClock) -> RouteTable:
    return RouteTable(clock_ms=clock, wall_clock_ms=lambda: 1_700_000_000_000 + clock.now)


def reg(
    name: str = "broker-a",
    broker_id: int = 0,
    addr: str = "10.0.0.1:10911",
    topics: tuple[str, ...] = (),
    version: int = 1,
    cluster: str = "c1",
    ha: str = "",
) -> Registration:
    return Registration(
        cluster_name=cluster, broker_name=name, broker_id=broker_id, broker_addr=addr,
        ha_server_addr=ha or addr.replace("10911", "10912"), data_version=DataVersion(1000, version),
        topic_configs=[TopicConf(t) for t in topics],
    )


def topics_of(table: RouteTable, broker_name: str) -> set[str]:
    return {t for t, queues in table.topic_queue_table.items() if broker_name in queues}


def test_first_registration_fills_all_four_tables(table: RouteTable) -> None:
    result = table.register(reg(topics=("t1", "t2")))
    assert result.new_broker and result.topics_updated and result.master_addr == ""
    assert table.cluster_addr_table == {"c1": {"broker-a"}}
    assert table.broker_addr_table["broker-a"].broker_addrs == {0: "10.0.0.1:10911"}
    assert set(table.topic_queue_table) == {"t1", "t2"}
    live = table.broker_live_table["10.0.0.1:10911"]
    assert (live.broker_name, live.broker_id, live.ha_server_addr) == ("broker-a", 0, "10.0.0.1:10912")
    assert live.data_version == DataVersion(1000, 1)
    route = table.route("t1")
    assert route is not None
    assert [(q.broker_name, q.read_queue_nums, q.perm) for q in route.queue_datas] == [
        ("broker-a", 4, PERM_READ | PERM_WRITE)
    ]
    assert [(b.cluster, b.broker_addrs) for b in route.broker_datas] == [("c1", {0: "10.0.0.1:10911"})]
    table.check_invariants()


def test_heartbeat_with_same_version_does_not_reread_topics(table: RouteTable, clock: FakeClock) -> None:
    table.register(reg(topics=("t1",)))
    clock.now += 500
    result = table.register(reg(topics=("t1", "sneaky")))  # same version: the table is not read
    assert not result.new_broker and not result.topics_updated
    assert set(table.topic_queue_table) == {"t1"}
    assert table.broker_live_table["10.0.0.1:10911"].last_seen_ms == clock.now


def test_changed_version_replaces_the_groups_topics(table: RouteTable) -> None:
    table.register(reg(topics=("t1", "t2")))
    result = table.register(reg(topics=("t2", "t3"), version=2))
    assert result.topics_updated
    assert set(table.topic_queue_table) == {"t2", "t3"}  # t1 was deleted on the broker
    table.check_invariants()


def test_incremental_registration_applies_only_on_the_version_it_builds_on(table: RouteTable) -> None:
    """A delta (the topics changed and deleted since a version) is applied when the table held
    from that master is of that version; otherwise nothing changes and a full one is asked for."""
    table.register(reg(topics=("t1", "t2", "t3")))
    delta = dataclasses.replace(reg(topics=("t4",), version=2), delta_base=DataVersion(1000, 1),
                                deleted_topics=("t2", "never-had"))
    result = table.register(delta)
    assert result.topics_updated and not result.topic_full_needed
    assert topics_of(table, "broker-a") == {"t1", "t3", "t4"}
    table.check_invariants()
    stale = dataclasses.replace(reg(topics=("t5",), version=4), delta_base=DataVersion(1000, 3))
    result = table.register(stale)  # built on version 3: this table is of version 2
    assert result.topic_full_needed and not result.topics_updated
    assert topics_of(table, "broker-a") == {"t1", "t3", "t4"}
    again = dataclasses.replace(reg(topics=("t4",), version=2), delta_base=DataVersion(1000, 1))
    assert not table.register(again).topic_full_needed  # a repeat of the applied one: nothing to do
    fresh = RouteTable()
    assert fresh.register(delta).topic_full_needed  # a NameServer that never had the table
    assert topics_of(fresh, "broker-a") == set()


def test_topic_shared_by_two_groups_survives_one_of_them(table: RouteTable) -> None:
    table.register(reg("broker-a", addr="10.0.0.1:10911", topics=("shared", "a-only")))
    table.register(reg("broker-b", addr="10.0.0.2:10911", topics=("shared",)))
    route = table.route("shared")
    assert route is not None and [q.broker_name for q in route.queue_datas] == ["broker-a", "broker-b"]
    assert table.unregister("c1", "broker-a", 0, "10.0.0.1:10911")
    route = table.route("shared")
    assert route is not None and [q.broker_name for q in route.queue_datas] == ["broker-b"]
    assert table.route("a-only") is None
    table.check_invariants()


def test_slave_topics_are_ignored_and_its_reply_names_the_master(table: RouteTable) -> None:
    table.register(reg(topics=("t1",), ha="10.0.0.1:20912"))
    result = table.register(reg(broker_id=1, addr="10.0.0.2:10911", topics=("slave-only",), version=9))
    assert not result.topics_updated
    assert (result.master_addr, result.master_ha_addr) == ("10.0.0.1:10911", "10.0.0.1:20912")
    assert table.route("slave-only") is None
    assert table.broker_addr_table["broker-a"].broker_addrs == {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}
    table.check_invariants()


def test_slave_before_its_master_gets_no_master(table: RouteTable) -> None:
    result = table.register(reg(broker_id=1, addr="10.0.0.2:10911"))
    assert (result.master_addr, result.master_ha_addr) == ("", "")
    assert table.all_topics() == []
    table.register(reg(topics=("t1",)))
    assert table.register(reg(broker_id=1, addr="10.0.0.2:10911")).master_addr == "10.0.0.1:10911"


def test_slave_promoted_to_master_at_the_same_address_replaces_the_old_master(table: RouteTable) -> None:
    table.register(reg(addr="10.0.0.1:10911", topics=("t1",)))
    table.register(reg(broker_id=1, addr="10.0.0.2:10911", topics=("t1",)))
    # The old master died; the slave restarts as brokerId 0 with the topics it replicated.
    result = table.register(reg(broker_id=0, addr="10.0.0.2:10911", topics=("t1", "t2")))
    assert result.displaced == ("10.0.0.1:10911",)
    assert result.topics_updated  # a new master address: its table is read even at the same version
    assert table.broker_addr_table["broker-a"].broker_addrs == {0: "10.0.0.2:10911"}
    assert set(table.broker_live_table) == {"10.0.0.2:10911"}
    assert table.all_topics() == ["t1", "t2"]
    table.check_invariants()
    # A late unregister from the old master does not remove the new one.
    assert not table.unregister("c1", "broker-a", 0, "10.0.0.1:10911")
    assert table.broker_addr_table["broker-a"].broker_addrs == {0: "10.0.0.2:10911"}


def test_same_address_under_a_new_broker_name_leaves_its_old_group(table: RouteTable) -> None:
    table.register(reg("broker-a", addr="10.0.0.1:10911", topics=("old",)))
    table.register(reg("broker-b", addr="10.0.0.1:10911", topics=("new",)))
    assert set(table.broker_addr_table) == {"broker-b"}
    assert table.all_topics() == ["new"]
    assert table.cluster_addr_table == {"c1": {"broker-b"}}
    table.check_invariants()


def test_broker_name_of_another_cluster_is_a_conflict_and_changes_nothing(table: RouteTable) -> None:
    table.register(reg("broker-a", addr="10.0.0.1:10911", topics=("t1",)))
    before = copy.deepcopy((table.cluster_addr_table, table.broker_addr_table, table.topic_queue_table,
                            table.broker_live_table))
    with pytest.raises(RouteConflictError, match="already belongs to cluster 'c1'"):
        table.register(reg("broker-a", broker_id=1, addr="10.0.0.9:10911", cluster="c2"))
    after = (table.cluster_addr_table, table.broker_addr_table, table.topic_queue_table,
             table.broker_live_table)
    assert after == before


def test_a_lone_broker_may_move_its_group_to_another_cluster(table: RouteTable) -> None:
    table.register(reg("broker-a", topics=("t1",), cluster="c1"))
    table.register(reg("broker-a", topics=("t1",), cluster="c2"))
    assert table.cluster_addr_table == {"c2": {"broker-a"}}
    assert table.broker_addr_table["broker-a"].cluster == "c2"
    assert table.topics_of_cluster("c2") == ["t1"] and table.topics_of_cluster("c1") is None
    table.check_invariants()


def test_unregister_removes_at_once_and_only_a_matching_entry(table: RouteTable) -> None:
    table.register(reg(topics=("t1",)))
    table.register(reg(broker_id=1, addr="10.0.0.2:10911"))
    assert not table.unregister("c1", "broker-a", 1, "10.0.0.1:10911")  # wrong id for that address
    assert not table.unregister("c2", "broker-a", 0, "10.0.0.1:10911")  # wrong cluster
    assert not table.unregister("c1", "broker-z", 0, "10.0.0.1:10911")  # unknown group
    assert table.unregister("c1", "broker-a", 0, "10.0.0.1:10911")
    # The slave keeps the group (and its routes) alive; the slave now has no master.
    assert table.broker_addr_table["broker-a"].broker_addrs == {1: "10.0.0.2:10911"}
    assert table.route("t1") is not None
    assert table.register(reg(broker_id=1, addr="10.0.0.2:10911")).master_addr == ""
    assert table.unregister("c1", "broker-a", 1, "10.0.0.2:10911")
    assert table.route("t1") is None
    assert table.cluster_addr_table == {} and table.broker_live_table == {}
    table.check_invariants()


def test_expiry_removes_a_silent_broker_after_the_timeout_and_not_before(
    table: RouteTable, clock: FakeClock
) -> None:
    table.register(reg(topics=("t1",)))
    clock.now += 120_000
    assert table.scan_not_active(120_000) == []  # exactly at the limit: still alive
    clock.now += 1
    expired = table.scan_not_active(120_000)
    assert [e.broker_addr for e in expired] == ["10.0.0.1:10911"]
    assert table.route("t1") is None and table.broker_addr_table == {} and table.cluster_addr_table == {}
    table.check_invariants()


def test_heartbeats_keep_a_broker_alive(table: RouteTable, clock: FakeClock) -> None:
    for _ in range(10):
        table.register(reg(topics=("t1",)))
        clock.now += 30_000
        assert table.scan_not_active(120_000) == []
    assert table.route("t1") is not None


def test_master_expiry_keeps_the_slave_and_a_returning_master_resends_topics(
    table: RouteTable, clock: FakeClock
) -> None:
    table.register(reg(topics=("t1",)))
    clock.now += 60_000
    table.register(reg(broker_id=1, addr="10.0.0.2:10911"))
    clock.now += 60_001
    assert [e.broker_id for e in table.scan_not_active(120_000)] == [0]
    assert table.broker_addr_table["broker-a"].broker_addrs == {1: "10.0.0.2:10911"}
    assert table.route("t1") is not None  # still readable from the slave
    # The master comes back at the same version with a changed table: it is read again.
    result = table.register(reg(topics=("t1", "t2")))
    assert result.topics_updated and result.new_broker
    assert table.all_topics() == ["t1", "t2"]
    table.check_invariants()


def test_queries(table: RouteTable) -> None:
    table.register(reg("broker-a", addr="10.0.0.1:10911", topics=("a1", "shared"), cluster="c1"))
    table.register(reg("broker-b", addr="10.0.0.2:10911", topics=("b1", "shared"), cluster="c1"))
    table.register(reg("broker-c", addr="10.0.0.3:10911", topics=("c1",), cluster="c2"))
    assert table.topics_of_cluster("c1") == ["a1", "b1", "shared"]
    assert table.topics_of_cluster("c2") == ["c1"]
    assert table.topics_of_cluster("nope") is None
    assert table.all_topics() == ["a1", "b1", "c1", "shared"]
    assert table.live_brokers_per_cluster() == {"c1": 2, "c2": 1}
    assert table.route("missing") is None


def test_route_returns_copies(table: RouteTable) -> None:
    table.register(reg(topics=("t1",)))
    route = table.route("t1")
    assert route is not None
    route.queue_datas[0].perm = 0
    route.broker_datas[0].broker_addrs[5] = "x:1"
    again = table.route("t1")
    assert again is not None and again.queue_datas[0].perm == 6
    assert 5 not in again.broker_datas[0].broker_addrs


def test_wipe_and_add_write_perm(table: RouteTable) -> None:
    table.register(reg(topics=("t1", "t2")))
    assert table.wipe_write_perm("broker-a") == 2
    assert table.wipe_write_perm("broker-a") == 0
    assert all(q["broker-a"].perm == PERM_READ for q in table.topic_queue_table.values())
    table.register(reg(topics=("t1", "t2")))  # heartbeat, same version: stays wiped
    assert table.route("t1").queue_datas[0].perm == PERM_READ  # type: ignore[union-attr]
    assert table.add_write_perm("broker-a") == 2
    assert table.route("t1").queue_datas[0].perm == PERM_READ | PERM_WRITE  # type: ignore[union-attr]
    assert table.wipe_write_perm("unknown") == 0


def test_a_drained_group_stays_drained_for_topics_registered_later(table: RouteTable) -> None:
    table.register(reg(topics=("t1",)))
    table.wipe_write_perm("broker-a")
    table.register(reg(topics=("t1", "t2"), version=2))  # a new topic: the group re-registers
    assert {q["broker-a"].perm for q in table.topic_queue_table.values()} == {PERM_READ}
    table.add_write_perm("broker-a")
    table.register(reg(topics=("t1", "t2", "t3"), version=3))
    assert {q["broker-a"].perm for q in table.topic_queue_table.values()} == {PERM_READ | PERM_WRITE}
    assert table.wipe_write_perm("unknown") == 0 and "unknown" not in table.drained


def test_generation_changes_on_membership_not_on_plain_heartbeats(table: RouteTable) -> None:
    table.register(reg(topics=("t1",)))
    g = table.generation
    table.register(reg(topics=("t1",)))
    assert table.generation == g
    table.register(reg(topics=("t1",), version=2))
    assert table.generation > g
