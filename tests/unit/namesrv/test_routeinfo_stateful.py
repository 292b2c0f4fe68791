"""Random sequences of registrations, unregistrations and expiry scans keep the four tables
consistent, and the table agrees with a simple model of who is alive."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from services.namesrv.routeinfo import DataVersion, Registration, RouteConflictError, RouteTable, TopicConf

EXPIRY = 100
ADDRS = [f"10.0.0.{i}:10911" for i in range(4)]
NAMES = ["broker-a", "broker-b", "broker-c"]
CLUSTERS = ["c1", "c2"]
TOPICS = ["t0", "t1", "t2", "t3"]


class RouteTableMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.table = RouteTable(clock_ms=lambda: self.now, wall_clock_ms=lambda: self.now)
        #: Model: address -> last registration time of the addresses the table must hold.
        self.seen: dict[str, int] = {}

    @rule(
        cluster=st.sampled_from(CLUSTERS), name=st.sampled_from(NAMES), broker_id=st.integers(0, 2),
        addr=st.sampled_from(ADDRS), topics=st.sets(st.sampled_from(TOPICS)), version=st.integers(0, 2),
    )
    def register(
        self, cluster: str, name: str, broker_id: int, addr: str, topics: set[str], version: int
    ) -> None:
        reg = Registration(cluster, name, broker_id, addr, "", DataVersion(0, version),
                           [TopicConf(t) for t in sorted(topics)])
        try:
            result = self.table.register(reg)
        except RouteConflictError:
            return
        self.seen[addr] = self.now
        for gone in result.displaced:  # another address held this brokerId: it is replaced
            assert gone != addr
            self.seen.pop(gone, None)
        live = self.table.broker_live_table[addr]
        assert (live.cluster_name, live.broker_name, live.broker_id) == (cluster, name, broker_id)
        if broker_id == 0 and result.topics_updated:
            assert {t for t, q in self.table.topic_queue_table.items() if name in q} == topics

    @rule(addr=st.sampled_from(ADDRS))
    def unregister(self, addr: str) -> None:
        live = self.table.broker_live_table.get(addr)
        if live is None:
            assert not self.table.unregister("c1", "broker-a", 0, addr)
            return
        assert self.table.unregister(live.cluster_name, live.broker_name, live.broker_id, addr)
        self.seen.pop(addr, None)
        assert addr not in self.table.broker_live_table

    @rule(step=st.integers(0, 80))
    def tick_and_scan(self, step: int) -> None:
        self.now += step
        expired = {e.broker_addr for e in self.table.scan_not_active(EXPIRY)}
        expected = {a for a, t in self.seen.items() if self.now - t > EXPIRY}
        assert expired == expected
        for addr in expired:
            del self.seen[addr]

    @invariant()
    def tables_agree(self) -> None:
        self.table.check_invariants()
        assert set(self.table.broker_live_table) == set(self.seen)
        for topic in self.table.all_topics():
            route = self.table.route(topic)
            assert route is not None and route.broker_datas
            assert [q.broker_name for q in route.queue_datas] == [b.broker_name for b in route.broker_datas]


RouteTableMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestRouteTable = RouteTableMachine.TestCase
