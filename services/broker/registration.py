"""The broker's registration with its NameServers (which is also its heartbeat).

:class:`BrokerRegistrar` registers the broker with every NameServer of ``namesrvAddr`` right
after start-up and then every ``registerNameServerPeriod``, in parallel and with a per-call
timeout, so a NameServer that is down or hanging costs at most one timeout and never delays the
registrations with the others. On graceful shutdown it unregisters. A slave learns its master's
gRPC and HA addresses from the replies and reports changes through ``on_master``.

Every round starts by resolving each ``host:port`` entry of ``namesrvAddr`` to all the addresses
the host has (IPv4 and IPv6; a literal IP is used as is), and the broker registers with each of
them. So one name with several addresses, such as a Kubernetes headless Service in front of
NameServer pods (it resolves to every ready pod), works like RocketMQ's ``a:9876;b:9876``, and
NameServers that come and go behind the name are followed round by round. When a name does not
resolve, the addresses it had last time are kept (or the name itself, handed to gRPC, if it never
resolved).

Between rounds the names are resolved again every ``discover_s`` (5 s): an address that was not
there before (a NameServer pod that just started) is registered with at once, so a new
NameServer knows the brokers within seconds instead of a whole period (a NameServer can report
itself not ready for that long; see ``readinessWarmUpMills`` in the NameServer config).

NameServers share nothing, so their replies may disagree for a moment (one has not yet seen the
new master): the registrar takes the master most replies name, ties going to the NameServer listed
first, and keeps the master it knew when no reply names one.

Everything runs on the caller's asyncio event loop; the registrar starts no thread.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import ipaddress
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Sequence

import grpc

from pocketmq.common.v1 import common_pb2
from pocketmq.namesrv.v1 import namesrv_pb2, namesrv_pb2_grpc
from pocketmq.wire.address import AddressError, join_host_port, parse_host_port, split_addresses
from pocketmq.wire.auth import Credentials
from pocketmq.wire.grpcauth import signing_interceptors
from pocketmq.wire.tls import ClientTls, aio_channel
from services.common.grpcserver import CHANNEL_OPTIONS

log = logging.getLogger(__name__)

#: How often the NameServer names are resolved between registration rounds, looking for new
#: NameServers.
DISCOVER_S = 5.0
MIN_REGISTER_PERIOD_MS = 10_000
MAX_REGISTER_PERIOD_MS = 60_000
#: A restarted NameServer is retried within seconds (gRPC's default backoff grows to 120 s, as
#: long as the NameServer's whole expiry time).
NAMESRV_CHANNEL_OPTIONS: list[tuple[str, int]] = [
    *CHANNEL_OPTIONS,
    ("grpc.initial_reconnect_backoff_ms", 500),
    ("grpc.min_reconnect_backoff_ms", 500),
    ("grpc.max_reconnect_backoff_ms", 5_000),
]

TopicSnapshot = Callable[[], tuple[common_pb2.DataVersion, list[common_pb2.TopicConfig]]]
#: ``base version -> (version, changed topics, deleted topic names)`` since ``base``, or None when
#: only the whole table can tell (see TopicConfigManager.changes_since).
TopicDelta = Callable[[common_pb2.DataVersion],
                      tuple[common_pb2.DataVersion, list[common_pb2.TopicConfig], list[str]] | None]
MasterCallback = Callable[[str, str], None]
#: (base version, version, changed topics, deleted topic names) of an incremental registration.
_Delta = tuple[common_pb2.DataVersion, common_pb2.DataVersion, list[common_pb2.TopicConfig], list[str]]
#: ``(host, port) -> IP addresses`` of the host (no ports); raises when the host does not resolve.
Resolver = Callable[[str, int], Awaitable[list[str]]]


def parse_namesrv_addr(text: str) -> list[str]:
    """``"a:9876;b:9876"`` (RocketMQ's ``namesrvAddr``) -> ``["a:9876", "b:9876"]``; blanks and
    duplicates are dropped, order is kept."""
    return split_addresses(text)


def split_host_port(addr: str) -> tuple[str, int] | None:
    """``"host:port"`` / ``"[v6]:port"`` -> ``(host, port)`` (brackets removed); None when
    ``addr`` is not a usable address (no port, an unbracketed IPv6 address)."""
    try:
        return parse_host_port(addr)
    except AddressError:
        return None


def is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


async def resolve_host(host: str, port: int) -> list[str]:
    """The default resolver: every IPv4 and IPv6 address of ``host`` (the system resolver through
    the event loop's ``getaddrinfo``), deduplicated, in the resolver's order. Raises
    ``OSError`` (``socket.gaierror``) when the host does not resolve."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM)
    addrs: list[str] = []
    for family, _type, _proto, _canon, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            ip = str(sockaddr[0])
            if ip not in addrs:
                addrs.append(ip)
    return addrs


def _address_order(ip: str) -> tuple[int, int, str]:
    """IPv4 before IPv6, then numerically: a stable order whatever order DNS answers in (ties of
    the master vote go to the first address, so they must not flip between rounds)."""
    try:
        parsed = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return (9, 0, ip)
    return (parsed.version, int(parsed), ip)


def _is_literal_entry(entry: str) -> bool:
    """Whether a namesrvAddr entry needs no resolution (an IP literal, or unparsable)."""
    parsed = split_host_port(entry)
    return parsed is None or is_ip_literal(parsed[0])


def clamp_register_period(ms: int) -> float:
    """``registerNameServerPeriod`` in ms -> seconds, clamped to 10..60 s as RocketMQ does."""
    return max(MIN_REGISTER_PERIOD_MS, min(ms, MAX_REGISTER_PERIOD_MS)) / 1000


@dataclasses.dataclass(frozen=True)
class BrokerIdentity:
    cluster_name: str
    broker_name: str
    #: 0 = master, > 0 = slave.
    broker_id: int
    #: host:port of the broker's gRPC API, as clients reach it.
    broker_addr: str
    #: host:port of the HA (replication) port.
    ha_server_addr: str
    #: host:port of /metrics (informational; may be empty).
    metrics_addr: str
    #: ASYNC_MASTER, SYNC_MASTER or SLAVE (informational).
    broker_role: str

    @property
    def is_master(self) -> bool:
        return self.broker_id == 0


@dataclasses.dataclass(frozen=True)
class RegistrationOutcome:
    """The result of one RegisterBroker call to one NameServer (one resolved address)."""

    namesrv_addr: str
    ok: bool
    elapsed_s: float
    #: gRPC status name or exception type when not ok.
    error: str = ""
    master_addr: str = ""
    master_ha_addr: str = ""
    #: The NameServer did not apply an incremental registration (it holds another table).
    topic_full_needed: bool = False


class BrokerRegistrar:
    """Keeps one broker registered with every NameServer. Use on one event loop::

        registrar = BrokerRegistrar(addrs, identity, topics.snapshot, period_s=30)
        await registrar.start()      # first registration (bounded by timeout_s), then periodic
        ...
        await registrar.stop()       # unregister from every NameServer

    Call :meth:`register_now` after the topic table changed to publish it at once.

    ``namesrv_addrs`` are ``host:port`` entries; each round registers with every address they
    resolve to through ``resolve`` (default :func:`resolve_host`, the system resolver; each
    lookup bounded by ``timeout_s``). Outcomes, channels and the master vote are per resolved
    address, in entry order and then IPv4 before IPv6, numerically.
    """

    def __init__(
        self,
        namesrv_addrs: Sequence[str],
        identity: BrokerIdentity,
        topic_snapshot: TopicSnapshot,
        period_s: float = 30.0,
        timeout_s: float = 3.0,
        on_master: MasterCallback | None = None,
        retry_s: float = 1.0,
        resolve: Resolver = resolve_host,
        discover_s: float = DISCOVER_S,
        tls: ClientTls | None = None,
        credentials: Credentials | None = None,
        acl_snapshot: Callable[[], common_pb2.AclTable | None] | None = None,
        topic_delta: TopicDelta | None = None,
    ) -> None:
        """``tls``: the NameServers speak TLS (None = plaintext). ``topic_delta``: the topic
        changes since a version, for incremental registrations (``register_now(incremental=True)``)."""
        self.topic_delta = topic_delta
        #: NameServer address -> the topic table version it applied from this broker (only
        #: NameServers that take incremental registrations).
        self._topic_acked: dict[str, common_pb2.DataVersion] = {}
        self.tls = tls
        #: The broker group's ACL table to register (NameServers learn its users), if any.
        self.acl_snapshot = acl_snapshot
        #: Sign the registrations (a NameServer with ACL lets only Broker users register).
        self._interceptors = signing_interceptors(credentials)
        if not namesrv_addrs:
            raise ValueError("at least one NameServer address is required")
        if period_s <= 0 or timeout_s <= 0:
            raise ValueError("period_s and timeout_s must be > 0")
        self.namesrv_addrs = list(dict.fromkeys(namesrv_addrs))
        self.identity = identity
        self.topic_snapshot = topic_snapshot
        self.period_s = period_s
        self.timeout_s = timeout_s
        self.retry_s = min(retry_s, period_s)
        self.on_master = on_master
        self.resolve = resolve
        self.discover_s = discover_s
        #: entry -> the addresses it resolved to last (kept while it fails to resolve).
        self._resolved: dict[str, list[str]] = {}
        #: Entries whose latest resolution failed.
        self._unresolved: set[str] = set()
        #: The addresses registered with in the latest round, in vote order.
        self._targets: list[str] = []
        self._master_addr = ""
        self._master_ha_addr = ""
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, namesrv_pb2_grpc.NameServerStub] = {}
        self._lock = asyncio.Lock()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._discovery: asyncio.Task[None] | None = None
        self._ever_ok: set[str] = set()
        #: The latest outcome per current NameServer address (resolved).
        self.last_outcomes: dict[str, RegistrationOutcome] = {}
        #: Completed registration rounds.
        self.rounds = 0

    @property
    def resolved_addrs(self) -> list[str]:
        """The NameServer addresses of the latest round (``namesrv_addrs`` resolved)."""
        return list(self._targets)

    @property
    def master_addr(self) -> str:
        """The master's gRPC address as the NameServers report it (slaves only; "" until known)."""
        return self._master_addr

    @property
    def master_ha_addr(self) -> str:
        """The master's HA address as the NameServers report it (slaves only; "" until known)."""
        return self._master_ha_addr

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Resolve the NameServer names and register with every address now (waits at most
        ``timeout_s`` for each step), then keep doing so every ``period_s`` in a background task
        (sooner while incomplete, see :meth:`_next_delay`)."""
        if self._task is not None:
            raise RuntimeError("registrar already started")
        first = await self.register_now()
        self._task = asyncio.create_task(self._periodic(first), name="broker-registration")
        if any(not _is_literal_entry(entry) for entry in self.namesrv_addrs):
            self._discovery = asyncio.create_task(self._discover(), name="namesrv-discovery")

    async def stop(self, unregister: bool = True) -> None:
        """Stop the periodic registration; then unregister from every NameServer address of the
        latest round (in parallel, each bounded by ``timeout_s``) unless ``unregister`` is
        false. Never raises."""
        self._stopping.set()
        for task in (self._task, self._discovery):
            if task is not None:
                await task
        self._task = self._discovery = None
        async with self._lock:
            if unregister and self._stubs:
                await asyncio.gather(*(self._unregister_one(addr) for addr in self._stubs))
            for channel in self._channels.values():
                with contextlib.suppress(Exception):
                    await channel.close()
            self._channels.clear()
            self._stubs.clear()

    # ------------------------------------------------------------ resolution

    async def _resolve_entry(self, entry: str) -> list[str]:
        """The addresses (``ip:port``) of one namesrvAddr entry. Never raises: on failure the
        previous addresses, or ``[entry]`` when it never resolved."""
        parsed = split_host_port(entry)
        if parsed is None or _is_literal_entry(entry):
            return [entry]
        host, port = parsed
        try:
            ips = await asyncio.wait_for(self.resolve(host, port), timeout=self.timeout_s)
            if not ips:
                raise OSError("no address")
        except Exception as exc:
            known = self._resolved.get(entry)
            fields = {"namesrv": entry, "error": repr(exc), "kept": ";".join(known or [entry])}
            if entry in self._unresolved:
                log.debug("namesrv name does not resolve", extra=fields)
            else:
                log.warning("namesrv name does not resolve; keeping its last addresses", extra=fields)
            self._unresolved.add(entry)
            return list(known) if known else [entry]
        addrs = [join_host_port(ip, port) for ip in sorted(dict.fromkeys(ips), key=_address_order)]
        if entry in self._unresolved:
            self._unresolved.discard(entry)
            log.info("namesrv name resolves again", extra={"namesrv": entry})
        previous = self._resolved.get(entry)
        if addrs != previous:
            log.info("namesrv name resolved", extra={
                "namesrv": entry, "addrs": ";".join(addrs),
                "added": ";".join(a for a in addrs if a not in (previous or [])) or "-",
                "removed": ";".join(a for a in previous or [] if a not in addrs) or "-",
            })
            self._resolved[entry] = addrs
        return addrs

    async def _refresh_targets(self) -> None:
        """Resolve every entry (in parallel), then open channels to new addresses and close the
        channels of addresses no entry resolves to any more."""
        resolved = await asyncio.gather(*(self._resolve_entry(e) for e in self.namesrv_addrs))
        targets = list(dict.fromkeys(addr for addrs in resolved for addr in addrs))
        for addr in [a for a in self._channels if a not in targets]:
            channel = self._channels.pop(addr)
            self._stubs.pop(addr, None)
            self.last_outcomes.pop(addr, None)
            self._ever_ok.discard(addr)
            with contextlib.suppress(Exception):
                await channel.close()
        for addr in targets:
            if addr not in self._channels:
                channel = aio_channel(addr, NAMESRV_CHANNEL_OPTIONS, self.tls, self._interceptors)
                self._channels[addr] = channel
                self._stubs[addr] = namesrv_pb2_grpc.NameServerStub(channel)
        self._targets = targets

    async def _discover(self) -> None:
        """Every ``discover_s``: resolve the names again and register at once when they name
        an address the latest round did not register with."""
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=self.discover_s)
                return
            try:
                async with self._lock:
                    resolved = await asyncio.gather(*(self._resolve_entry(e) for e in self.namesrv_addrs))
                    known = set(self._targets)
                new = [addr for addrs in resolved for addr in addrs if addr not in known]
                if new and not self._stopping.is_set():
                    log.info("new namesrv address; registering now", extra={"namesrv": ";".join(new)})
                    await self.register_now()
            except Exception:  # _resolve_entry and register_now never raise; be sure anyway
                log.exception("namesrv discovery failed")

    def _next_delay(self, outcomes: Sequence[RegistrationOutcome], previous: float) -> float:
        """The regular period after a good round; after a failed registration or name
        resolution, or while a slave knows no master yet, retry sooner (``retry_s``, doubling up
        to the period) so a broker started before its NameServers or its master is routed within
        seconds, not a period."""
        incomplete = not outcomes or not all(o.ok for o in outcomes) or bool(self._unresolved)
        if not self.identity.is_master and not self._master_addr:
            incomplete = True
        if not incomplete:
            return self.period_s
        return min(self.period_s, self.retry_s if previous >= self.period_s else previous * 2)

    async def _periodic(self, first: Sequence[RegistrationOutcome]) -> None:
        loop = asyncio.get_running_loop()
        delay = self._next_delay(first, self.period_s)
        next_at = loop.time() + delay
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=max(0.0, next_at - loop.time()))
                return
            outcomes = await self.register_now()
            delay = self._next_delay(outcomes, delay)
            next_at += delay
            if next_at < loop.time():  # a round overran a whole period: do not catch up in a burst
                next_at = loop.time() + delay

    # ------------------------------------------------------------ registration

    def _request(self, delta: _Delta | None = None) -> namesrv_pb2.RegisterBrokerRequest:
        """The registration: the whole topic table, or (``delta`` = base, version, changed,
        deleted) the changes since the version ``base``."""
        if delta is None:
            version, topics = self.topic_snapshot()
            base, deleted = None, None
        else:
            base, version, topics, deleted = delta
        ident = self.identity
        return namesrv_pb2.RegisterBrokerRequest(
            topic_delta_base=base, deleted_topics=deleted,
            cluster_name=ident.cluster_name,
            broker_name=ident.broker_name,
            broker_id=ident.broker_id,
            broker_addr=ident.broker_addr,
            ha_server_addr=ident.ha_server_addr,
            topic_config_version=version,
            topic_configs=topics,
            metrics_addr=ident.metrics_addr,
            broker_role=ident.broker_role,
            acl_table=self.acl_snapshot() if self.acl_snapshot is not None else None,
        )

    async def register_now(self, incremental: bool = False) -> list[RegistrationOutcome]:
        """Resolve the NameServer names, then register with every address in parallel (each
        step bounded by ``timeout_s``). Failures are logged with the NameServer's address;
        never raises. Returns one outcome per NameServer address (empty after :meth:`stop`).

        ``incremental`` (a master after topic changes): a NameServer that applied an earlier
        table of this broker gets only the topics changed since (the cost of a topic change
        does not grow with the topic count); the others, and any that asks for it, the whole
        table."""
        async with self._lock:
            if self._stopping.is_set():
                return []
            try:
                await self._refresh_targets()
            except Exception:  # _resolve_entry never raises; a broken channel must not either
                log.exception("cannot refresh the namesrv addresses")
            if not self._targets:
                return []
            full: list[namesrv_pb2.RegisterBrokerRequest] = []

            def full_request() -> namesrv_pb2.RegisterBrokerRequest:
                if not full:
                    full.append(self._request())
                return full[0]

            deltas: dict[str, namesrv_pb2.RegisterBrokerRequest] = {}
            try:
                if incremental and self.topic_delta is not None and self.identity.is_master:
                    deltas = self._delta_requests()
                if len(deltas) < len(self._targets):
                    full_request()
            except Exception:
                log.exception("cannot build the registration (topic snapshot failed)")
                return []
            outcomes = await asyncio.gather(
                *(self._register_addr(addr, deltas.get(addr), full_request) for addr in self._targets)
            )
            self.rounds += 1
            for outcome in outcomes:
                self.last_outcomes[outcome.namesrv_addr] = outcome
            if not self.identity.is_master:
                self._learn_master(outcomes)
            return list(outcomes)

    def _delta_requests(self) -> dict[str, namesrv_pb2.RegisterBrokerRequest]:
        """Incremental registrations for the NameServers that applied an earlier table (one
        per base version)."""
        assert self.topic_delta is not None
        by_base: dict[tuple[int, int], namesrv_pb2.RegisterBrokerRequest | None] = {}
        out: dict[str, namesrv_pb2.RegisterBrokerRequest] = {}
        for addr in self._targets:
            base = self._topic_acked.get(addr)
            if base is None:
                continue
            key = (base.timestamp, base.counter)
            if key not in by_base:
                changes = self.topic_delta(base)
                by_base[key] = None if changes is None else self._request((base, *changes))
            request = by_base[key]
            if request is not None:
                out[addr] = request
        return out

    async def _register_addr(self, addr: str, delta: namesrv_pb2.RegisterBrokerRequest | None,
                             full_request: Callable[[], namesrv_pb2.RegisterBrokerRequest],
                             ) -> RegistrationOutcome:
        """Register with one NameServer: incrementally when ``delta`` is given and it applies
        there, else with the whole table."""
        if delta is not None:
            outcome = await self._register_one(addr, delta)
            if not outcome.ok or not outcome.topic_full_needed:
                return outcome
            log.info("namesrv asks for the whole topic table", extra={"namesrv": addr})
        return await self._register_one(addr, full_request())

    async def _register_one(
        self, addr: str, request: namesrv_pb2.RegisterBrokerRequest
    ) -> RegistrationOutcome:
        start = time.monotonic()
        fields = {"namesrv": addr, "broker": self.identity.broker_name, "broker_id": self.identity.broker_id}
        self._topic_acked.pop(addr, None)  # unknown until it answers
        try:
            reply = await self._stubs[addr].RegisterBroker(request, timeout=self.timeout_s)
        except grpc.aio.AioRpcError as exc:
            elapsed = time.monotonic() - start
            log.warning("registration with namesrv failed", extra={
                **fields, "code": exc.code().name, "error": exc.details(),
                "elapsed_ms": round(elapsed * 1000),
            })
            return RegistrationOutcome(addr, False, elapsed, error=exc.code().name)
        except Exception as exc:  # never let one NameServer break the round
            elapsed = time.monotonic() - start
            log.warning("registration with namesrv failed", extra={**fields, "error": repr(exc)})
            return RegistrationOutcome(addr, False, elapsed, error=type(exc).__name__)
        elapsed = time.monotonic() - start
        if addr not in self._ever_ok:
            self._ever_ok.add(addr)
            log.info("registered with namesrv", extra={**fields, "elapsed_ms": round(elapsed * 1000)})
        else:
            log.debug("registered with namesrv", extra=fields)
        if reply.topic_delta_supported and not reply.topic_full_needed:
            self._topic_acked[addr] = request.topic_config_version
        return RegistrationOutcome(addr, True, elapsed, master_addr=reply.master_addr,
                                   master_ha_addr=reply.ha_server_addr,
                                   topic_full_needed=reply.topic_full_needed)

    def _learn_master(self, outcomes: Sequence[RegistrationOutcome]) -> None:
        votes = collections.Counter(
            (o.master_addr, o.master_ha_addr) for o in outcomes if o.ok and o.master_addr
        )
        if not votes:
            return
        best = max(votes.values())
        # Ties go to the NameServer address first in order (outcomes keep the _targets order).
        master, ha = next(
            (o.master_addr, o.master_ha_addr) for o in outcomes
            if o.ok and o.master_addr and votes[(o.master_addr, o.master_ha_addr)] == best
        )
        if (master, ha) == (self._master_addr, self._master_ha_addr):
            return
        log.info("master address learned", extra={
            "broker": self.identity.broker_name, "master_addr": master, "master_ha_addr": ha or "-",
            "previous": self._master_addr or "-",
        })
        self._master_addr, self._master_ha_addr = master, ha
        if self.on_master is not None:
            try:
                self.on_master(master, ha)
            except Exception:
                log.exception("on_master callback failed", extra={"master_addr": master})

    async def _unregister_one(self, addr: str) -> None:
        ident = self.identity
        request = namesrv_pb2.UnregisterBrokerRequest(
            cluster_name=ident.cluster_name, broker_name=ident.broker_name,
            broker_id=ident.broker_id, broker_addr=ident.broker_addr,
        )
        try:
            await self._stubs[addr].UnregisterBroker(request, timeout=self.timeout_s)
        except grpc.aio.AioRpcError as exc:
            log.warning("unregister from namesrv failed", extra={
                "namesrv": addr, "code": exc.code().name, "error": exc.details(),
            })
        except Exception as exc:
            log.warning("unregister from namesrv failed", extra={"namesrv": addr, "error": repr(exc)})
        else:
            log.info("unregistered from namesrv", extra={"namesrv": addr, "broker": ident.broker_name,
                                                         "broker_id": ident.broker_id})
