"""NameServer process wiring: gRPC server (NameServer + health + reflection), metrics endpoint
and the periodic scan for expired brokers, all on one asyncio event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import grpc
from grpc_health.v1 import health_pb2

from apache.rocketmq.v2 import service_pb2_grpc as v2_grpc
from pocketmq.namesrv.v1 import namesrv_pb2_grpc
from pocketmq.wire.address import join_host_port
from pocketmq.wire.tls import to_env as tls_env
from services.broker.v2.status import SERVICE_NAME as V2_SERVICE
from services.common.acl.setup import build_interceptor
from services.common.config import to_properties
from services.common.grpcserver import GrpcServer, start_grpc_server
from services.common.metrics import MetricsServer
from services.common.ports import ListenError, bind_error, reason_of
from services.namesrv import kvconfig
from services.namesrv.api import SERVICE_NAME, NameServerServicer
from services.namesrv.config import NamesrvConfig
from services.namesrv.console import ConsoleProcess
from services.namesrv.metrics import NamesrvMetrics
from services.namesrv.v2api import NamesrvMessagingServicer

log = logging.getLogger(__name__)


class NamesrvApp:
    """A running NameServer. Usable in-process (tests) as well as from :func:`serve`."""

    def __init__(self, config: NamesrvConfig) -> None:
        self.config = config
        self.metrics = NamesrvMetrics()
        kv = kvconfig.load(config.kv_config_path) if config.kv_config_path else kvconfig.KVConfig()
        self.servicer = NameServerServicer(config, kv=kv, metrics=self.metrics)
        #: The RocketMQ 5 API's QueryRoute (access point ``namesrv:9876``).
        self.v2 = NamesrvMessagingServicer(self.servicer)
        self._grpc: GrpcServer | None = None
        self._metrics_server: MetricsServer | None = None
        self._scan_task: asyncio.Task[None] | None = None
        self._warm_up_task: asyncio.Task[None] | None = None
        #: The web console (``consolePort``), when on.
        self.console: ConsoleProcess | None = None

    @property
    def ready(self) -> bool:
        """Whether the readiness warm-up (``readinessWarmUpMills``) is over."""
        return self._grpc is not None and self._warm_up_task is None

    @property
    def port(self) -> int:
        """The bound gRPC port (useful with ``listen=127.0.0.1:0``)."""
        assert self._grpc is not None, "not started"
        return self._grpc.port

    @property
    def metrics_port(self) -> int:
        return self._metrics_server.port if self._metrics_server is not None else 0

    async def start(self) -> None:
        def register(server: grpc.aio.Server) -> None:
            namesrv_pb2_grpc.add_NameServerServicer_to_server(self.servicer, server)
            v2_grpc.add_MessagingServiceServicer_to_server(self.v2, server)

        cfg = self.config
        tls = cfg.server_tls()
        acl = build_interceptor(cfg.acl_enable, cfg.acl_config_file, cfg.acl_signature_window_mills, "*",
                                self.metrics.registry, table=self.servicer.acl_document)
        if acl is not None:
            self.servicer.on_acl_change = acl.authenticator.store.table_changed
        self._grpc = await start_grpc_server(
            cfg.listen, register, [SERVICE_NAME, V2_SERVICE], tls,
            cfg.tls_listen if tls is not None and not cfg.tls_main_port else None,
            f"{cfg.listen_host}:{cfg.health_listen_port}" if cfg.health_listen_port else None,
            interceptors=[acl] if acl is not None else ())
        try:
            self._metrics_server = MetricsServer(self.metrics.registry, cfg.listen_host,
                                                 cfg.metrics_port, tls)
        except RuntimeError:
            await self._grpc.stop(0)
            raise
        if self.config.console_port:
            try:
                await self._start_console()
            except ListenError:
                if self._metrics_server is not None:
                    self._metrics_server.stop()
                await self._grpc.stop(0)
                raise
        self._scan_task = asyncio.create_task(self._scan_loop(), name="namesrv-scan")
        warm_up = self.config.readiness_warm_up_mills / 1000
        if warm_up > 0:
            await self._grpc.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.NOT_SERVING)
            self._warm_up_task = asyncio.create_task(self._warm_up(warm_up), name="namesrv-warm-up")
            log.info("namesrv warming up: serving, but reporting NOT_SERVING so brokers register first",
                     extra={"service": SERVICE_NAME, "warm_up_ms": self.config.readiness_warm_up_mills})

    async def _start_console(self) -> None:
        host = self.config.listen_host
        # A taken port fails the start with one line, as the gRPC and metrics ports do (the
        # console process binds it a moment later).
        failed = bind_error(host, self.config.console_port)
        if failed is not None:
            raise ListenError(join_host_port(host, self.config.console_port), reason_of(failed), "console")
        local = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
        # The console's admin client reaches this NameServer over TLS when its port is TLS only;
        # with aclEnable it signs with POCKETMQ_ACCESS_KEY/POCKETMQ_SECRET_KEY of this process.
        self.console = ConsoleProcess(join_host_port(local, self.port),
                                      join_host_port(host, self.config.console_port),
                                      tls_env(self.config.client_tls()))
        self.console.start()

    async def _warm_up(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        assert self._grpc is not None
        await self._grpc.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        self._warm_up_task = None
        log.info("namesrv ready", extra={"service": SERVICE_NAME,
                                         "brokers": len(self.servicer.table.broker_live_table)})

    async def _scan_loop(self) -> None:
        interval = self.config.scan_not_active_broker_interval / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self.servicer.expire_brokers()
            except Exception:
                log.exception("scan for expired brokers failed")

    async def stop(self) -> None:
        if self._warm_up_task is not None:
            self._warm_up_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._warm_up_task
            self._warm_up_task = None
        if self._scan_task is not None:
            self._scan_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scan_task
            self._scan_task = None
        if self.console is not None:
            await self.console.stop()
            self.console = None
        if self._grpc is not None:
            await self._grpc.stop(self.config.shutdown_grace_period / 1000)
            self._grpc = None
        await self.servicer.relay.close()
        if self._metrics_server is not None:
            self._metrics_server.stop()
            self._metrics_server = None


async def serve(config: NamesrvConfig, stop: asyncio.Event) -> None:
    """Run a NameServer until ``stop`` is set, then shut down gracefully."""
    app = NamesrvApp(config)
    await app.start()
    log.info(
        "namesrv started",
        extra={
            "listen": config.listen, "port": app.port, "metrics_port": app.metrics_port,
            "console_port": config.console_port,
            "config": to_properties([config]).strip().replace("\n", " "),
        },
    )
    await stop.wait()
    log.info("namesrv stopping")
    await app.stop()
    log.info("namesrv stopped")
