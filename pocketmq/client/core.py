"""The client core: one channel pool, NameServer client, route cache and broker caller, built
once per client (producer, consumer, admin, the Spark data source) and closed together."""

from __future__ import annotations

from collections.abc import Sequence

from pocketmq.client.routes import RouteCache
from pocketmq.client.transport import BrokerCaller, ChannelPool, NamesrvClient, RelayMode
from pocketmq.errors import InvalidArgumentError
from pocketmq.wire.auth import Credentials
from pocketmq.wire.grpcauth import credentials_from_env
from pocketmq.wire.tls import ClientTls
from pocketmq.wire.tls import resolve as resolve_tls


def env_credentials() -> Credentials | None:
    """``POCKETMQ_ACCESS_KEY``/``POCKETMQ_SECRET_KEY`` when set (requests are then signed)."""
    try:
        return credentials_from_env()
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from None

__all__ = ["ClientCore"]


class ClientCore:
    """What every client talks to the cluster through. Build it on the event loop it will run
    on (channels bind to the running loop)."""

    def __init__(self, namesrv_addrs: Sequence[str], *, timeout: float = 3.0,
                 route_refresh_interval: float = 30.0, relay: RelayMode = "direct",
                 tls: ClientTls | bool | None = None, credentials: Credentials | None = None) -> None:
        """``tls``: a :class:`ClientTls`, True (system roots), False (plaintext) or None (the
        ``POCKETMQ_TLS*`` environment, see :func:`pocketmq.wire.tls.resolve`); ``credentials``:
        sign every request (None = ``POCKETMQ_ACCESS_KEY``/``POCKETMQ_SECRET_KEY`` when set)."""
        self.tls = resolve_tls(tls)
        self.pool = ChannelPool(self.tls, credentials if credentials is not None else env_credentials())
        self.namesrv = NamesrvClient(namesrv_addrs, self.pool, timeout)
        self.routes = RouteCache(self.namesrv, route_refresh_interval)
        self.caller = BrokerCaller(self.pool, self.namesrv, relay)

    def start_route_refresh(self) -> None:
        """Refresh the routes of the topics in use in the background (see :class:`RouteCache`)."""
        self.routes.start()

    async def close(self) -> None:
        await self.routes.close()
        await self.caller.close()
        await self.pool.close()
