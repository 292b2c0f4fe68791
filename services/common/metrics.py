"""Prometheus metrics: each service owns a CollectorRegistry (several services can run in one
test process) and serves it on its metrics port at /metrics."""

from __future__ import annotations

import logging
import ssl
import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily  # noqa: F401  (re-exported for collectors)

from services.common.ports import ListenError, join_host_port, reason_of
from services.common.tls import ServerTls

log = logging.getLogger(__name__)


class MetricsServer:
    """Serves ``registry`` over HTTP until :meth:`stop`. ``port`` 0 disables serving."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int,
                 tls: ServerTls | None = None) -> None:
        """``tls``: serve HTTPS with the service's certificate (reloaded with it; mTLS when it
        requires client certificates)."""
        self.registry = registry
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        if port > 0:
            try:
                if tls is None:
                    self._server, self._thread = start_http_server(port, addr=host, registry=registry)
                else:
                    self._server, self._thread = start_http_server(
                        port, addr=host, registry=registry, certfile=tls.cert_path,
                        keyfile=tls.key_path, client_cafile=tls.client_ca_path or None,
                        client_auth_required=bool(tls.client_ca_path))
                    # prometheus-client loads the files once; this makes new connections use
                    # rotated ones.
                    listening = self._server.socket
                    assert isinstance(listening, ssl.SSLSocket)
                    tls.follow(listening.context)
            except OSError as exc:
                raise ListenError(join_host_port(host, port), reason_of(exc), "metrics") from exc
            self.port = self._server.server_port
            log.info("metrics listening", extra={"address": f"{host}:{self.port}", "path": "/metrics",
                                                 "tls": tls is not None})

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
