"""BrokerRegistrar with namesrvAddr entries that resolve to several NameServers (a Kubernetes
headless Service in front of NameServer pods): every resolved address is registered with, each
round, following the name as its addresses change.

The NameServers run in this process on 127.0.0.1 and 127.0.0.2 with the same port (loopback is a
/8 on Linux); names resolve through an injected resolver, since tests cannot edit /etc/hosts.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import pytest_asyncio

from services.broker.registration import (
    BrokerRegistrar,
    is_ip_literal,
    join_host_port,
    resolve_host,
    split_host_port,
)
from services.namesrv.app import NamesrvApp
from services.namesrv.config import NamesrvConfig
from services.namesrv.routeinfo import DataVersion, Registration
from tests.integration.namesrv.test_inprocess import Topics, identity
from tests.support import async_wait_until, free_port, ports_free

NAME = "pmq-namesrv-headless.mq.svc.cluster.local"
BROKER = "127.0.0.1:10911"


class FakeDNS:
    """A resolver whose answers the test changes; ``None`` = the name does not resolve."""

    def __init__(self, **answers: list[str] | None) -> None:
        self.answers: dict[str, list[str] | None] = dict(answers)
        self.calls: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append((host, port))
        answer = self.answers.get(host)
        if answer is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return list(answer)


def shared_port(*hosts: str) -> int:
    """A port free on every one of ``hosts``."""
    for _ in range(50):
        port = free_port()
        if ports_free([port], *hosts):
            return port
    raise RuntimeError(f"no port free on all of {hosts}")


Pair = Callable[..., Awaitable[tuple[int, list[NamesrvApp]]]]


@pytest_asyncio.fixture
async def namesrvs() -> AsyncIterator[Pair]:
    """``await namesrvs("127.0.0.1", "127.0.0.2")`` -> (shared port, NameServers on those IPs)."""
    started: list[NamesrvApp] = []

    async def start(*hosts: str, port: int | None = None) -> tuple[int, list[NamesrvApp]]:
        port = port or shared_port(*hosts)
        apps = []
        for host in hosts:
            app = NamesrvApp(NamesrvConfig(listen=f"{host}:{port}", metrics_port=0,  # type: ignore[call-arg]
                                           scan_not_active_broker_interval=50))
            await app.start()
            started.append(app)
            apps.append(app)
        return port, apps

    yield start
    for app in started:
        await app.stop()


def live(app: NamesrvApp) -> set[str]:
    return set(app.servicer.table.broker_live_table)


# -- helpers and the default resolver ------------------------------------------------------------


@pytest.mark.parametrize(("addr", "parsed"), [
    ("ns:9876", ("ns", 9876)),
    ("10.0.0.7:9876", ("10.0.0.7", 9876)),
    ("[fd00::7]:9876", ("fd00::7", 9876)),
    ("a.b.svc.cluster.local:1", ("a.b.svc.cluster.local", 1)),
    ("no-port", None),
    ("ns:", None),
    (":9876", None),
    ("ns:http", None),
    ("fd00::7:9876", None),  # unbracketed IPv6: which colon starts the port?
])
def test_split_host_port(addr: str, parsed: tuple[str, int] | None) -> None:
    assert split_host_port(addr) == parsed


def test_join_host_port_brackets_ipv6_and_is_ip_literal() -> None:
    assert join_host_port("10.0.0.7", 9876) == "10.0.0.7:9876"
    assert join_host_port("fd00::7", 9876) == "[fd00::7]:9876"
    assert split_host_port(join_host_port("fd00::7", 9876)) == ("fd00::7", 9876)
    assert is_ip_literal("10.0.0.7") and is_ip_literal("::1") and is_ip_literal("fe80::1%eth0")
    assert not is_ip_literal("localhost") and not is_ip_literal("ns.example") and not is_ip_literal("")


@pytest.mark.asyncio
async def test_default_resolver_on_localhost_and_literal_addresses() -> None:
    addrs = await resolve_host("localhost", 9876)
    assert addrs and len(addrs) == len(set(addrs)), addrs  # one entry per address, not per socket type
    assert set(addrs) <= {"127.0.0.1", "::1"} and "127.0.0.1" in addrs
    assert await resolve_host("127.0.0.2", 9876) == ["127.0.0.2"]
    if socket.has_ipv6:
        assert await resolve_host("::1", 9876) == ["::1"]
    with pytest.raises(OSError):
        await resolve_host("no-such-namesrv.invalid", 9876)


@pytest.mark.asyncio
async def test_registrar_with_the_default_resolver_reaches_a_namesrv_by_name(namesrvs: Pair) -> None:
    port, [app] = await namesrvs("127.0.0.1")
    registrar = BrokerRegistrar([f"localhost:{port}"], identity(), Topics("t1"), period_s=60, timeout_s=1)
    outcomes = await registrar.register_now()
    by_addr = {o.namesrv_addr: o for o in outcomes}
    assert by_addr[f"127.0.0.1:{port}"].ok  # ([::1]:port, if localhost has it, is refused)
    assert registrar.resolved_addrs == sorted(by_addr, key=lambda a: a.startswith("["))
    assert live(app) == {BROKER}
    await registrar.stop()
    assert live(app) == set()


# -- one name, several NameServers ---------------------------------------------------------------


@pytest.mark.asyncio
async def test_registers_with_every_address_of_a_name_and_unregisters_from_all(namesrvs: Pair) -> None:
    port, apps = await namesrvs("127.0.0.1", "127.0.0.2")
    dns = FakeDNS(**{NAME: ["127.0.0.2", "127.0.0.1", "127.0.0.2"]})  # unordered, with a duplicate
    registrar = BrokerRegistrar([f"{NAME}:{port}"], identity(), Topics("t1"), period_s=60, resolve=dns)
    await registrar.start()
    # both NameServers know the broker once start() returns: the first round went to each address
    assert [live(a) for a in apps] == [{BROKER}, {BROKER}]
    assert all(a.servicer.table.route("t1") is not None for a in apps)
    assert registrar.namesrv_addrs == [f"{NAME}:{port}"]
    assert registrar.resolved_addrs == [f"127.0.0.1:{port}", f"127.0.0.2:{port}"]
    assert set(registrar.last_outcomes) == set(registrar.resolved_addrs)
    assert all(o.ok for o in registrar.last_outcomes.values())
    assert dns.calls == [(NAME, port)]
    await registrar.stop()
    assert [live(a) for a in apps] == [set(), set()]


@pytest.mark.asyncio
async def test_follows_nameservers_joining_and_leaving_behind_the_name(
    namesrvs: Pair, caplog: pytest.LogCaptureFixture,
) -> None:
    port, apps = await namesrvs("127.0.0.1", "127.0.0.2")
    dns = FakeDNS(**{NAME: ["127.0.0.1"]})
    topics = Topics("t1")
    registrar = BrokerRegistrar([f"{NAME}:{port}"], identity(), topics, period_s=60, resolve=dns)
    await registrar.register_now()
    assert [live(a) for a in apps] == [{BROKER}, set()]

    dns.answers[NAME] = ["127.0.0.1", "127.0.0.2"]  # a second NameServer pod became ready
    with caplog.at_level(logging.INFO, logger="services.broker.registration"):
        await registrar.register_now()
    assert [live(a) for a in apps] == [{BROKER}, {BROKER}]
    changed = [r for r in caplog.records if r.getMessage() == "namesrv name resolved"]
    assert [getattr(r, "added", None) for r in changed] == [f"127.0.0.2:{port}"]

    dns.answers[NAME] = ["127.0.0.2"]  # the first one is gone (scaled in, replaced)
    topics.add("t2")
    outcomes = await registrar.register_now()
    assert [o.namesrv_addr for o in outcomes] == [f"127.0.0.2:{port}"]
    assert set(registrar.last_outcomes) == {f"127.0.0.2:{port}"}, "no stale outcome of a vanished address"
    assert set(registrar._channels) == {f"127.0.0.2:{port}"}, "the vanished address' channel is closed"
    assert apps[1].servicer.table.all_topics() == ["t1", "t2"]
    assert apps[0].servicer.table.all_topics() == ["t1"]  # not told any more (it will expire us)
    await registrar.stop()
    assert live(apps[1]) == set()
    assert live(apps[0]) == {BROKER}, "unregister goes to the current addresses only"


@pytest.mark.asyncio
async def test_literal_addresses_are_not_resolved_and_duplicates_register_once(namesrvs: Pair) -> None:
    port, apps = await namesrvs("127.0.0.1", "127.0.0.2")
    dns = FakeDNS(**{NAME: ["127.0.0.2", "127.0.0.1"]})
    registrar = BrokerRegistrar([f"127.0.0.2:{port}", f"{NAME}:{port}"], identity(), Topics("t1"),
                                period_s=60, resolve=dns)
    outcomes = await registrar.register_now()
    # the literal entry first, then the name's other address: every NameServer exactly once
    assert [o.namesrv_addr for o in outcomes] == [f"127.0.0.2:{port}", f"127.0.0.1:{port}"]
    assert all(o.ok for o in outcomes)
    assert dns.calls == [(NAME, port)], "a literal IP is used as is"
    assert [live(a) for a in apps] == [{BROKER}, {BROKER}]
    await registrar.stop()


@pytest.mark.asyncio
async def test_a_name_that_stops_resolving_keeps_its_last_addresses(
    namesrvs: Pair, caplog: pytest.LogCaptureFixture,
) -> None:
    port, apps = await namesrvs("127.0.0.1", "127.0.0.2")
    dns = FakeDNS(**{NAME: ["127.0.0.1", "127.0.0.2"]})
    registrar = BrokerRegistrar([f"{NAME}:{port}"], identity(), Topics("t1"), period_s=60, resolve=dns)
    await registrar.register_now()
    for app in apps:
        app.servicer.table.broker_live_table.clear()

    dns.answers[NAME] = None  # DNS outage (or, for a headless Service, no ready pod for a moment)
    with caplog.at_level(logging.DEBUG, logger="services.broker.registration"):
        outcomes = await registrar.register_now()
        await registrar.register_now()
    assert [o.namesrv_addr for o in outcomes] == [f"127.0.0.1:{port}", f"127.0.0.2:{port}"]
    assert all(o.ok for o in outcomes)
    assert [live(a) for a in apps] == [{BROKER}, {BROKER}]
    levels = [r.levelno for r in caplog.records if r.getMessage().startswith("namesrv name does not resolve")]
    assert levels == [logging.WARNING, logging.DEBUG], "warn once per outage, not every round"
    # an unresolved name makes the round incomplete: retry soon rather than after a period
    assert registrar._next_delay(outcomes, 60) == registrar.retry_s

    dns.answers[NAME] = ["127.0.0.1", "127.0.0.2"]
    outcomes = await registrar.register_now()
    assert registrar._next_delay(outcomes, 60) == 60
    await registrar.stop()


@pytest.mark.asyncio
async def test_a_name_that_never_resolved_is_handed_to_grpc_and_never_raises() -> None:
    dns = FakeDNS()
    port = free_port()
    registrar = BrokerRegistrar([f"{NAME}:{port}"], identity(), Topics("t1"), period_s=60,
                                timeout_s=0.5, resolve=dns)
    [outcome] = await registrar.register_now()
    assert outcome.namesrv_addr == f"{NAME}:{port}" and not outcome.ok
    assert registrar.resolved_addrs == [f"{NAME}:{port}"]
    await registrar.stop()  # unregister fails (logged), never raises


@pytest.mark.asyncio
async def test_a_hanging_resolver_costs_at_most_one_timeout(namesrvs: Pair) -> None:
    port, [app] = await namesrvs("127.0.0.1")

    async def hang(host: str, port: int) -> list[str]:
        await asyncio.sleep(30)
        return []

    async def broken(host: str, port: int) -> list[str]:
        raise RuntimeError("resolver bug")

    for resolve in (hang, broken):
        registrar = BrokerRegistrar([f"127.0.0.1:{port}", f"{NAME}:{port}"], identity(), Topics("t1"),
                                    period_s=60, timeout_s=0.3, resolve=resolve)
        loop = asyncio.get_running_loop()
        started = loop.time()
        outcomes = await registrar.register_now()
        assert loop.time() - started < 2.0
        by_addr = {o.namesrv_addr: o for o in outcomes}
        assert by_addr[f"127.0.0.1:{port}"].ok and not by_addr[f"{NAME}:{port}"].ok
        await registrar.stop()
    assert live(app) == set()


@pytest.mark.asyncio
async def test_slave_votes_over_every_resolved_nameserver(namesrvs: Pair) -> None:
    port, apps = await namesrvs("127.0.0.1", "127.0.0.2", "127.0.0.3")

    def know_master(app: NamesrvApp, master_port: int) -> None:
        app.servicer.table.register(Registration("c1", "broker-a", 0, f"127.0.0.1:{master_port}",
                                                 f"127.0.0.1:{master_port + 1}", DataVersion(1, 1)))

    know_master(apps[0], 40911)
    know_master(apps[1], 50911)
    know_master(apps[2], 50911)
    calls: list[tuple[str, str]] = []
    dns = FakeDNS(**{NAME: ["127.0.0.3", "127.0.0.1", "127.0.0.2"]})
    slave = BrokerRegistrar([f"{NAME}:{port}"], identity(broker_id=1, port=20911), Topics(), period_s=60,
                            resolve=dns, on_master=lambda a, h: calls.append((a, h)))
    await slave.register_now()
    assert slave.master_addr == "127.0.0.1:50911"  # two of three
    assert calls == [("127.0.0.1:50911", "127.0.0.1:50912")]

    # a tie (one each) goes to the lowest address whatever order DNS answers in
    dns.answers[NAME] = ["127.0.0.2", "127.0.0.1"]
    tie = BrokerRegistrar([f"{NAME}:{port}"], identity(broker_id=2, port=21911), Topics(), period_s=60,
                          resolve=dns)
    await tie.register_now()
    assert tie.master_addr == "127.0.0.1:40911"
    dns.answers[NAME] = ["127.0.0.1", "127.0.0.2"]
    await tie.register_now()
    assert tie.master_addr == "127.0.0.1:40911"
    await slave.stop()
    await tie.stop()


@pytest.mark.asyncio
async def test_periodic_rounds_pick_up_a_new_nameserver_without_restart(namesrvs: Pair) -> None:
    port, apps = await namesrvs("127.0.0.1", "127.0.0.2")
    dns = FakeDNS(**{NAME: ["127.0.0.1"]})
    registrar = BrokerRegistrar([f"{NAME}:{port}"], identity(), Topics("t1"), period_s=0.1, resolve=dns)
    await registrar.start()
    dns.answers[NAME] = ["127.0.0.1", "127.0.0.2"]
    await async_wait_until(lambda: live(apps[1]) == {BROKER}, 5, message="registered with the new one")
    await registrar.stop()
    assert [live(a) for a in apps] == [set(), set()]


@pytest.mark.asyncio
async def test_a_new_nameserver_behind_the_name_is_registered_with_between_rounds(
    namesrvs: Pair, caplog: pytest.LogCaptureFixture,
) -> None:
    port, apps = await namesrvs("127.0.0.1", "127.0.0.2")
    dns = FakeDNS(**{NAME: ["127.0.0.1"]})
    registrar = BrokerRegistrar([f"{NAME}:{port}"], identity(), Topics("t1"), period_s=60, resolve=dns,
                                discover_s=0.05)
    with caplog.at_level(logging.INFO, logger="services.broker.registration"):
        await registrar.start()
        try:
            # several discovery passes, nothing new: no extra round
            await async_wait_until(lambda: len(dns.calls) > 3, 5, message="several discovery passes")
            assert registrar.rounds == 1
            assert [live(a) for a in apps] == [{BROKER}, set()]
            dns.answers[NAME] = ["127.0.0.1", "127.0.0.2"]  # a NameServer pod started (period: 60 s)
            await async_wait_until(lambda: live(apps[1]) == {BROKER}, timeout=5)
            assert apps[1].servicer.table.route("t1") is not None
            assert registrar.rounds == 2
            assert any(r.getMessage() == "new namesrv address; registering now" for r in caplog.records)
        finally:
            await registrar.stop()
    assert [live(a) for a in apps] == [set(), set()]


@pytest.mark.asyncio
async def test_no_discovery_task_for_ip_literals(namesrvs: Pair) -> None:
    port, apps = await namesrvs("127.0.0.1")
    registrar = BrokerRegistrar([f"127.0.0.1:{port}"], identity(), Topics("t1"), period_s=60, discover_s=0.01)
    await registrar.start()
    try:
        assert registrar._discovery is None
        await asyncio.sleep(0.1)
        assert registrar.rounds == 1 and live(apps[0]) == {BROKER}
    finally:
        await registrar.stop()
