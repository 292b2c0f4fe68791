"""NameServer configuration (``namesrv.conf`` keys, ``POCKETMQ_<KEY>`` variables, ``--kebab-key`` flags)."""

from __future__ import annotations

import dataclasses

from pocketmq.wire.address import AddressError, parse_host_port
from services.common.acl.setup import DEFAULT_SIGNATURE_WINDOW_MS, check_acl_keys
from services.common.config import ConfigError, require
from services.common.tls import TlsSettings


def split_listen(value: str) -> tuple[str, int]:
    """``host:port`` -> (host, port); port 0 means "any free port" (tests, embedding)."""
    try:
        return parse_host_port(value, default_host="0.0.0.0", allow_port_zero=True)
    except AddressError as exc:
        raise ConfigError("listen", f"{exc} (expected host:port, port 0..65535)") from None


@dataclasses.dataclass(frozen=True)
class NamesrvConfig(TlsSettings):
    """NameServer keys; the ``tls*`` keys come from :class:`TlsSettings` (shared with brokers)."""

    #: host:port of the gRPC API (NameServer, grpc.health.v1, reflection); port 0 = any free port.
    listen: str = "0.0.0.0:9876"
    #: Prometheus /metrics port on the listen host; 0 disables it. Default: NameServer port + 1.
    metrics_port: int = 9877
    #: How often to look for brokers that stopped registering (ms).
    scan_not_active_broker_interval: int = 5_000
    #: A broker with no registration for this long is removed with its routes (ms).
    broker_channel_expired_time: int = 120_000
    #: The largest topic table one RegisterBroker may carry (bigger ones get INVALID_ARGUMENT).
    max_topics_per_registration: int = 50_000
    #: File the KV config is kept in (JSON, rewritten atomically on change); empty = memory only.
    kv_config_path: str = ""
    #: Time allowed for in-flight requests on shutdown (ms).
    shutdown_grace_period: int = 5_000
    #: Serve RelayBrokerCall (admin calls forwarded to registered brokers).
    relay_enable: bool = True
    #: Deadline of a relayed broker call when the caller names none (ms).
    relay_timeout_mills: int = 10_000
    #: For this long after start the gRPC health status of the NameServer service
    #: (``pocketmq.namesrv.v1.NameServer``) is NOT_SERVING while the server already answers
    #: every call, so brokers register with a new NameServer before a readiness probe on that
    #: service lets clients ask it for routes (ms; 0 = ready at once). Brokers look for new
    #: NameServers every 5 s; the Helm chart sets 15000.
    readiness_warm_up_mills: int = 0
    #: Access control (docs/acl.md): requests must be signed by a user of ``aclConfigFile`` and
    #: allowed by its policies; only Broker users may register. Off = open to every caller.
    acl_enable: bool = False
    acl_config_file: str = ""
    #: A signed request is accepted this long before or after its x-mq-date-time (ms).
    acl_signature_window_mills: int = DEFAULT_SIGNATURE_WINDOW_MS
    #: Port of the web console (clusters, topics, groups, message lookup and a few confirmed
    #: write actions) on the listen host; 0 = off. It has no login of its own: reach it through
    #: ``kubectl port-forward`` (or a private network), never expose it publicly.
    console_port: int = 0

    def __post_init__(self) -> None:
        split_listen(self.listen)
        require(0 <= self.metrics_port < 65536, "metricsPort", "must be 0..65535 (0 = disabled)")
        require(self.scan_not_active_broker_interval > 0, "scanNotActiveBrokerInterval", "must be > 0")
        require(self.broker_channel_expired_time > 0, "brokerChannelExpiredTime", "must be > 0")
        require(self.max_topics_per_registration > 0, "maxTopicsPerRegistration", "must be > 0")
        require(self.shutdown_grace_period >= 0, "shutdownGracePeriod", "must be >= 0")
        require(self.relay_timeout_mills > 0, "relayTimeoutMills", "must be > 0")
        require(self.readiness_warm_up_mills >= 0, "readinessWarmUpMills", "must be >= 0")
        require(0 <= self.console_port < 65536, "consolePort", "must be 0..65535 (0 = off)")
        self.check_tls()
        check_acl_keys(self.acl_enable, self.acl_config_file, self.acl_signature_window_mills)

    @property
    def listen_host(self) -> str:
        return split_listen(self.listen)[0]

    @property
    def tls_listen(self) -> str:
        """Address of the extra TLS listener (tlsServerMode=permissive): tlsListenPort, 0 = port + 3."""
        host, port = split_listen(self.listen)
        return f"{host}:{self.tls_listen_port or port + 3}"
