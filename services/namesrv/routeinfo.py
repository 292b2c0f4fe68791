"""The NameServer's route table: pure data structures and rules, no I/O, no clock of its own.

Four tables, named as in RocketMQ so operators and readers recognise them:

* ``cluster_addr_table``  cluster name -> broker names
* ``broker_addr_table``   broker name  -> :class:`BrokerData` (cluster, {brokerId -> address})
* ``topic_queue_table``   topic        -> {broker name -> :class:`QueueData`}
* ``broker_live_table``   broker address -> :class:`BrokerLiveInfo` (last registration, HA
  address, topic-config version, ...)

Rules (see :meth:`RouteTable.register`): a registration is also the heartbeat; topic configs are
taken only from a master (brokerId 0) and only on its first registration or when its
DataVersion changed, and then *replace* what that broker group served; a slave's reply carries
its master's address and HA address; an address registering under a new brokerId (or a new
broker name) drops its old entry, so a slave promoted to master replaces the old one. A broker not
heard from for the expiry time is removed by :meth:`RouteTable.scan_not_active`, exactly as
:meth:`RouteTable.unregister` removes one; a topic whose last broker group is gone vanishes.

Concurrency: the table has no locks. In the NameServer every call happens on the single asyncio
event loop and no method awaits, so each call is atomic with respect to all others. Code that
uses the table from several threads must serialise the calls itself.

Inputs are assumed valid (see :mod:`services.namesrv.validation`, which the gRPC layer applies
first so that a bad request changes nothing).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple, Protocol

from services.broker.validation import MESSAGE_TYPE_ATTRIBUTE

log = logging.getLogger(__name__)

MASTER_ID = 0
PERM_INHERIT = 1
PERM_WRITE = 2
PERM_READ = 4


class DataVersion(NamedTuple):
    """Version of a broker's topic table (RocketMQ's DataVersion)."""

    timestamp: int
    counter: int


NO_VERSION = DataVersion(0, 0)


class TopicConfigLike(Protocol):
    """What the table reads from a topic config; ``common_pb2.TopicConfig`` fits as is."""

    @property
    def topic_name(self) -> str: ...
    @property
    def read_queue_nums(self) -> int: ...
    @property
    def write_queue_nums(self) -> int: ...
    @property
    def perm(self) -> int: ...
    @property
    def topic_sys_flag(self) -> int: ...
    @property
    def attributes(self) -> Mapping[str, str]: ...


@dataclasses.dataclass(frozen=True)
class TopicConf:
    """A plain topic config, for callers (and tests) without protobuf objects."""

    topic_name: str
    read_queue_nums: int = 4
    write_queue_nums: int = 4
    perm: int = PERM_READ | PERM_WRITE
    topic_sys_flag: int = 0
    attributes: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class QueueData:
    """One broker group's queues for one topic."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int
    #: The topic's RocketMQ 5 ``message.type`` attribute on this group ("" = any type).
    message_type: str = ""


@dataclasses.dataclass
class BrokerData:
    """One broker group: its cluster and brokerId -> address of every registered member."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str]

    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)


@dataclasses.dataclass
class BrokerLiveInfo:
    """What the NameServer knows about one registered broker process (keyed by its address)."""

    broker_addr: str
    cluster_name: str
    broker_name: str
    broker_id: int
    ha_server_addr: str
    data_version: DataVersion
    #: Monotonic clock (ms) of the last registration; drives expiry.
    last_seen_ms: int
    #: Wall clock (ms since the epoch) of the last registration; for display.
    last_update_timestamp: int
    metrics_addr: str = ""
    broker_role: str = ""


@dataclasses.dataclass(frozen=True)
class Registration:
    """One RegisterBroker call."""

    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    ha_server_addr: str = ""
    data_version: DataVersion = NO_VERSION
    topic_configs: Iterable[TopicConfigLike] = ()
    metrics_addr: str = ""
    broker_role: str = ""
    #: Incremental: ``topic_configs`` are the topics changed since the table had this version,
    #: ``deleted_topics`` those deleted since (None: ``topic_configs`` is the whole table).
    delta_base: DataVersion | None = None
    deleted_topics: Iterable[str] = ()


@dataclasses.dataclass(frozen=True)
class RegisterResult:
    #: The group's master (empty for a master itself, or when no live master is known).
    master_addr: str = ""
    master_ha_addr: str = ""
    #: The address was not registered before (a new broker process).
    new_broker: bool = False
    #: Topic configs were read from this registration.
    topics_updated: bool = False
    #: Broker addresses whose entries this registration replaced (e.g. an old master).
    displaced: tuple[str, ...] = ()
    #: An incremental registration did not match the table held: the broker must register in full.
    topic_full_needed: bool = False


class RouteConflictError(ValueError):
    """A registration contradicts the table (a broker name already used by another cluster)."""


@dataclasses.dataclass(frozen=True)
class Route:
    """A topic's route: its queues per broker group and those groups' members."""

    queue_datas: list[QueueData]
    broker_datas: list[BrokerData]


@dataclasses.dataclass
class _Group:
    """Per broker group bookkeeping: where its topics came from."""

    #: (master address, version) the group's queue data was last read from.
    topic_source: tuple[str, DataVersion] | None = None
    topics: set[str] = dataclasses.field(default_factory=set)


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class RouteTable:
    """The route table. ``clock_ms`` (monotonic) drives expiry; ``wall_clock_ms`` stamps
    ``last_update_timestamp``. Inject both in tests."""

    def __init__(
        self,
        clock_ms: Callable[[], int] = monotonic_ms,
        wall_clock_ms: Callable[[], int] = wall_ms,
    ) -> None:
        self.clock_ms = clock_ms
        self.wall_clock_ms = wall_clock_ms
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}
        self._groups: dict[str, _Group] = {}
        #: Incremented whenever membership or routes change (not on a plain heartbeat).
        self.generation = 0
        #: Broker groups whose write permission was wiped (drained): topics the master registers
        #: later lose it too, until add_write_perm.
        self.drained: set[str] = set()

    # ---------------------------------------------------------------- registration

    def register(self, reg: Registration) -> RegisterResult:
        """Apply one registration (also the heartbeat).

        Raises :class:`RouteConflictError`, changing nothing, when ``reg.broker_name`` belongs to
        another cluster and has members other than ``reg.broker_addr``.
        """
        addr = reg.broker_addr
        existing = self.broker_data(reg.broker_name)
        if existing is not None and existing.cluster != reg.cluster_name:
            others = {a for a in existing.broker_addrs.values() if a != addr}
            if others:
                raise RouteConflictError(
                    f"broker name '{reg.broker_name}' already belongs to cluster '{existing.cluster}' "
                    f"(members {', '.join(sorted(others))}); it cannot join cluster '{reg.cluster_name}'"
                )

        displaced: list[str] = []
        changed = False
        prev_live = self.broker_live_table.get(addr)
        # The same address under another identity: drop the old entry first.
        if prev_live is not None and (
            prev_live.broker_name != reg.broker_name or prev_live.cluster_name != reg.cluster_name
        ):
            self._remove_addr(prev_live.broker_name, addr)
            changed = True
            prev_live = None

        group = self.broker_addr_table.get(reg.broker_name)
        first = group is None
        if group is None:
            group = BrokerData(reg.cluster_name, reg.broker_name, {})
            self.broker_addr_table[reg.broker_name] = group
            self._groups[reg.broker_name] = _Group()
            changed = True
        elif group.cluster != reg.cluster_name:
            # Only this address was left in the group: it moves to the new cluster.
            self._discard_from_cluster(group.cluster, reg.broker_name)
            group.cluster = reg.cluster_name
            changed = True
        self.cluster_addr_table.setdefault(reg.cluster_name, set()).add(reg.broker_name)

        # One address has one entry: drop it under any other brokerId (slave promoted to master).
        for other_id in [i for i, a in group.broker_addrs.items() if a == addr and i != reg.broker_id]:
            del group.broker_addrs[other_id]
            changed = True
        old_addr = group.broker_addrs.get(reg.broker_id)
        if old_addr != addr:
            group.broker_addrs[reg.broker_id] = addr
            changed = True
            if old_addr is not None:
                # Another process held this brokerId; its address no longer names a member.
                displaced.append(old_addr)
                if old_addr not in group.broker_addrs.values():
                    self.broker_live_table.pop(old_addr, None)
        first = first or old_addr is None

        topics_updated = full_needed = False
        if reg.broker_id == MASTER_ID:
            source = (addr, reg.data_version)
            meta = self._groups[reg.broker_name]
            if reg.delta_base is not None:
                if first or meta.topic_source != (addr, reg.delta_base):
                    full_needed = meta.topic_source != source
                else:
                    self._apply_topic_delta(reg.broker_name, reg.topic_configs, reg.deleted_topics)
                    meta.topic_source = source
                    topics_updated = changed = True
            elif first or meta.topic_source != source:
                self._replace_topics(reg.broker_name, reg.topic_configs)
                meta.topic_source = source
                topics_updated = True
                changed = True

        self.broker_live_table[addr] = BrokerLiveInfo(
            broker_addr=addr,
            cluster_name=reg.cluster_name,
            broker_name=reg.broker_name,
            broker_id=reg.broker_id,
            ha_server_addr=reg.ha_server_addr,
            data_version=reg.data_version,
            last_seen_ms=self.clock_ms(),
            last_update_timestamp=self.wall_clock_ms(),
            metrics_addr=reg.metrics_addr,
            broker_role=reg.broker_role,
        )
        if prev_live is None:
            changed = True
        if changed:
            self.generation += 1

        master_addr = master_ha = ""
        if reg.broker_id != MASTER_ID:
            candidate = group.master_addr()
            live = self.broker_live_table.get(candidate) if candidate else None
            if candidate and live is not None:
                master_addr, master_ha = candidate, live.ha_server_addr
        return RegisterResult(master_addr, master_ha, prev_live is None, topics_updated, tuple(displaced),
                              full_needed)

    def _put_queue_data(self, broker_name: str, configs: Iterable[TopicConfigLike]) -> set[str]:
        """Set the group's queue data of each topic of ``configs``; their names."""
        names: set[str] = set()
        drained = broker_name in self.drained
        for tc in configs:
            name = tc.topic_name
            names.add(name)
            perm = tc.perm & ~PERM_WRITE if drained else tc.perm
            self.topic_queue_table.setdefault(name, {})[broker_name] = QueueData(
                broker_name, tc.read_queue_nums, tc.write_queue_nums, perm, tc.topic_sys_flag,
                tc.attributes.get(MESSAGE_TYPE_ATTRIBUTE, ""),
            )
        return names

    def _replace_topics(self, broker_name: str, configs: Iterable[TopicConfigLike]) -> None:
        meta = self._groups[broker_name]
        seen = self._put_queue_data(broker_name, configs)
        for gone in meta.topics - seen:
            self._remove_queue_data(gone, broker_name)
        meta.topics = seen

    def _apply_topic_delta(self, broker_name: str, configs: Iterable[TopicConfigLike],
                           deleted: Iterable[str]) -> None:
        """An incremental registration: the changed topics and the deleted ones only (the cost
        of a change does not grow with the broker's topic count)."""
        meta = self._groups[broker_name]
        meta.topics |= self._put_queue_data(broker_name, configs)
        for gone in deleted:
            if gone in meta.topics:
                meta.topics.discard(gone)
                self._remove_queue_data(gone, broker_name)

    def _remove_queue_data(self, topic: str, broker_name: str) -> None:
        queues = self.topic_queue_table.get(topic)
        if queues is None:
            return
        queues.pop(broker_name, None)
        if not queues:
            del self.topic_queue_table[topic]

    def _discard_from_cluster(self, cluster: str, broker_name: str) -> None:
        names = self.cluster_addr_table.get(cluster)
        if names is not None:
            names.discard(broker_name)
            if not names:
                del self.cluster_addr_table[cluster]

    def _remove_addr(self, broker_name: str, addr: str) -> bool:
        """Remove ``addr`` from its group (every brokerId it holds) and drop the group with its
        topics when no member is left. Does not touch the live table."""
        group = self.broker_addr_table.get(broker_name)
        if group is None:
            return False
        ids = [i for i, a in group.broker_addrs.items() if a == addr]
        for i in ids:
            del group.broker_addrs[i]
        if not group.broker_addrs:
            self._drop_group(broker_name)
        elif MASTER_ID in ids:
            # The master left: the next master (new address) must send its topics again.
            self._groups[broker_name].topic_source = None
        return bool(ids)

    def _drop_group(self, broker_name: str) -> None:
        group = self.broker_addr_table.pop(broker_name)
        meta = self._groups.pop(broker_name)
        self._discard_from_cluster(group.cluster, broker_name)
        for topic in meta.topics:
            self._remove_queue_data(topic, broker_name)

    # ---------------------------------------------------------------- removal

    def unregister(self, cluster_name: str, broker_name: str, broker_id: int, broker_addr: str) -> bool:
        """Remove a broker at once. Only removes ``broker_addr`` if it is the address registered
        under (``broker_name``, ``broker_id``), so a late unregister of an old master cannot remove
        the broker that replaced it. Returns whether something was removed."""
        group = self.broker_addr_table.get(broker_name)
        if group is None or group.cluster != cluster_name or group.broker_addrs.get(broker_id) != broker_addr:
            return False
        self._remove_addr(broker_name, broker_addr)
        self.broker_live_table.pop(broker_addr, None)
        self.generation += 1
        return True

    def scan_not_active(self, expired_ms: int) -> list[BrokerLiveInfo]:
        """Remove every broker whose last registration is older than ``expired_ms``; return them."""
        now = self.clock_ms()
        expired = [info for info in self.broker_live_table.values() if now - info.last_seen_ms > expired_ms]
        for info in expired:
            del self.broker_live_table[info.broker_addr]
            self._remove_addr(info.broker_name, info.broker_addr)
        if expired:
            self.generation += 1
        return expired

    # ---------------------------------------------------------------- queries

    def broker_data(self, broker_name: str) -> BrokerData | None:
        return self.broker_addr_table.get(broker_name)

    def route(self, topic: str) -> Route | None:
        """The topic's route, or None when no broker group serves it. Returns copies."""
        queues = self.topic_queue_table.get(topic)
        if not queues:
            return None
        names = sorted(queues)
        queue_datas = [dataclasses.replace(queues[n]) for n in names]
        broker_datas = []
        for name in names:
            group = self.broker_addr_table.get(name)
            if group is not None:
                broker_datas.append(BrokerData(group.cluster, name, dict(group.broker_addrs)))
        return Route(queue_datas, broker_datas)

    def topics_of_cluster(self, cluster_name: str) -> list[str] | None:
        """Sorted topics served by the cluster's broker groups; None for an unknown cluster."""
        names = self.cluster_addr_table.get(cluster_name)
        if names is None:
            return None
        topics: set[str] = set()
        for name in names:
            meta = self._groups.get(name)
            if meta is not None:
                topics |= meta.topics
        return sorted(topics)

    def all_topics(self) -> list[str]:
        return sorted(self.topic_queue_table)

    def live_brokers_per_cluster(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for info in self.broker_live_table.values():
            counts[info.cluster_name] = counts.get(info.cluster_name, 0) + 1
        return counts

    # ---------------------------------------------------------------- permissions

    def wipe_write_perm(self, broker_name: str) -> int:
        """Clear the write bit of the group's queues; return how many topics had it. The group
        stays drained (topics registered later lose it too) until :meth:`add_write_perm`."""
        if broker_name in self._groups:
            self.drained.add(broker_name)
        return self._change_perm(broker_name, lambda p: p & ~PERM_WRITE)

    def add_write_perm(self, broker_name: str) -> int:
        """Set the write bit of the group's queues again; return how many topics lacked it.
        (Topics the broker itself registered read-only get it too, as with RocketMQ.)"""
        self.drained.discard(broker_name)
        return self._change_perm(broker_name, lambda p: p | PERM_WRITE)

    def _change_perm(self, broker_name: str, change: Callable[[int], int]) -> int:
        meta = self._groups.get(broker_name)
        if meta is None:
            return 0
        count = 0
        for topic in meta.topics:
            queue = self.topic_queue_table[topic][broker_name]
            new = change(queue.perm)
            if new != queue.perm:
                queue.perm = new
                count += 1
        if count:
            self.generation += 1
        return count

    # ---------------------------------------------------------------- consistency

    def check_invariants(self) -> None:
        """Assert that the four tables agree with each other (used by tests)."""
        for cluster, names in self.cluster_addr_table.items():
            assert names, f"empty cluster {cluster}"
            for name in names:
                assert self.broker_addr_table[name].cluster == cluster
        for name, group in self.broker_addr_table.items():
            assert group.broker_addrs, f"empty group {name}"
            assert name in self.cluster_addr_table[group.cluster]
            assert len(set(group.broker_addrs.values())) == len(group.broker_addrs), "address twice"
            for addr in group.broker_addrs.values():
                live = self.broker_live_table.get(addr)
                assert live is not None and live.broker_name == name, f"{addr} not live in {name}"
            for topic in self._groups[name].topics:
                assert name in self.topic_queue_table[topic]
        for addr, live in self.broker_live_table.items():
            group = self.broker_addr_table[live.broker_name]
            assert group.broker_addrs.get(live.broker_id) == addr, f"live {addr} not in its group"
        for topic, queues in self.topic_queue_table.items():
            assert queues, f"topic {topic} without queues"
            for name in queues:
                assert topic in self._groups[name].topics
