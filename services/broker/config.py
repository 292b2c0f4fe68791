"""Broker configuration: identity, network, NameServer registration and HA keys.

Key names follow RocketMQ's ``broker.conf`` (``brokerClusterName``, ``brokerName``, ``brokerId``,
``brokerRole``, ``namesrvAddr``, ``listenPort``, ``haListenPort``, ...). Storage keys
(``storePathRootDir``, ``flushDiskType``, ...) live in
:class:`services.broker.storage.config.StoreConfig`; both sections load from the same file.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import socket
from pathlib import Path

from pocketmq.wire.address import DEFAULT_NAMESRV, split_addresses
from pocketmq.wire.auth import Credentials
from pocketmq.wire.names import BROKER_NAME_CHARS, BROKER_NAME_CHARSET, BROKER_NAME_MAX_LENGTH
from services.common.acl.setup import DEFAULT_SIGNATURE_WINDOW_MS, check_acl_keys, parse_inner_credentials
from services.common.config import parse_address, require
from services.common.tls import TlsSettings

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_DURATION = re.compile(r"^(\d+)([smhd])$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class BrokerRole(enum.Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


def parse_delay_levels(text: str, key: str = "messageDelayLevel") -> tuple[int, ...]:
    """``"1s 5s 1m"`` -> delays in ms, level 1 first."""
    levels = []
    for token in text.split():
        match = _DURATION.match(token)
        require(match is not None, key, f"invalid delay {token!r} (expected e.g. 5s, 2m, 1h)")
        assert match is not None
        levels.append(int(match.group(1)) * _UNIT_MS[match.group(2)])
    require(bool(levels), key, "at least one delay level is required")
    return tuple(levels)


#: Shortest accepted haAuthSecret.
MIN_SECRET_LENGTH = 16
#: Keys whose values --print-config and logs never show.
SECRET_KEYS = frozenset({"haAuthSecret", "innerClientAuthenticationCredentials"})


def check_secret(secret: str, key: str) -> None:
    """Reject an obviously weak non-empty secret (the message never contains the value)."""
    if not secret:
        return
    hint = "use a random value, e.g. `openssl rand -hex 32`"
    require(len(secret) >= MIN_SECRET_LENGTH, key,
            f"too short: at least {MIN_SECRET_LENGTH} characters are required ({hint})")
    require(len(set(secret)) >= 4, key, f"too weak: fewer than 4 distinct characters ({hint})")


def mask_secrets(properties: str) -> str:
    """``key=value`` text (``to_properties``) with every set secret replaced by a comment line, so
    the output can be shown, logged or reused as a config file without disclosing it."""
    lines = []
    for line in properties.splitlines():
        key, sep, value = line.partition("=")
        if sep and key in SECRET_KEYS and value:
            line = f"# {key}=<hidden: set, not shown>"
        lines.append(line)
    return "\n".join(lines) + ("\n" if properties.endswith("\n") else "")


def detect_host_ip() -> str:
    """The address this host's name resolves to (in Kubernetes: the pod IP), else loopback."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


@dataclasses.dataclass(frozen=True)
class BrokerConfig(TlsSettings):
    """Broker keys; the ``tls*`` keys come from :class:`TlsSettings` (shared with the NameServer)."""

    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = "broker-a"
    #: 0 = master, > 0 = slave.
    broker_id: int = 0
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    #: NameServer addresses, ``host:port;host:port``.
    namesrv_addr: str = DEFAULT_NAMESRV
    #: Address advertised to the NameServer and clients; empty = detect.
    broker_ip1: str = dataclasses.field(default="", metadata={"key": "brokerIP1"})
    #: Address advertised for the HA port; empty = brokerIP1.
    broker_ip2: str = dataclasses.field(default="", metadata={"key": "brokerIP2"})
    #: Interface the servers bind.
    listen_host: str = "0.0.0.0"
    listen_port: int = 10911
    #: 0 = listenPort + 1.
    ha_listen_port: int = 0
    #: Prometheus /metrics port; -1 = listenPort + 2, 0 = disabled.
    metrics_port: int = -1
    register_name_server_period: int = 30_000
    register_broker_timeout_mills: int = 3_000
    #: Slave: replicate from this HA address instead of the one the NameServer reports.
    ha_master_address: str = ""
    #: Shared secret of the HA port (the same on the master and its slaves): the master
    #: challenges every connection and serves only peers that answer with an HMAC of the secret.
    #: Empty = no authentication (the original's wire format). At least 16 characters; never
    #: shown by repr() or --print-config. Surrounding whitespace (a trailing newline from a
    #: secret file) is ignored.
    ha_auth_secret: str = dataclasses.field(default="", repr=False)
    ha_send_heartbeat_interval: int = 5_000
    ha_housekeeping_interval: int = 20_000
    ha_transfer_batch_size: int = 32 * 1024
    ha_slave_fallbehind_max: int = 256 * 1024 * 1024
    #: SYNC_MASTER: how long a send waits for a slave's acknowledgement (ms).
    slave_timeout: int = 3_000
    #: A slave starting empty replicates from the master's earliest retained offset instead of
    #: the start of its last segment (RocketMQ's rule).
    ha_sync_from_earliest: bool = False
    #: Slave: pull metadata (topics, offsets, groups) from the master this often (ms).
    slave_sync_interval: int = 10_000
    auto_create_topic_enable: bool = True
    #: Unknown consumer groups are created on first use (heartbeat, pull, offset commit); when
    #: false they are refused with NOT_FOUND until created by subscription group admin.
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = 4
    #: RocketMQ's brokerPermission: 6 (read and write), 4 (read-only: drained of writes, every
    #: topic is registered without its write bit and sends are refused) or 2 (write-only).
    #: Changed live by ``pocketmq broker drain`` / ``undrain``.
    broker_permission: int = 6
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    long_polling_enable: bool = True
    #: How often changed consumer offsets / delay offsets are persisted (ms).
    flush_consumer_offset_interval: int = 5_000
    flush_delay_offset_interval: int = 10_000
    #: Consumers silent this long leave their group (ms).
    consumer_channel_expired_time: int = 120_000
    #: Time allowed for in-flight requests on shutdown (ms).
    shutdown_grace_period: int = 10_000
    #: TLS on the HA replication stream (the tls* certificate and key, and the peer's
    #: certificate checked against tlsServerTrustCertPath / tlsClientTrustCertPath).
    ha_tls_enable: bool = False
    #: Access control (docs/acl.md): every request must be signed by a user of
    #: ``aclConfigFile`` (JSON, re-read when it changes) or of the broker's ACL table and be
    #: allowed by that user's policies. Off = every caller may do everything.
    acl_enable: bool = False
    acl_config_file: str = ""
    #: A signed request is accepted this long before or after its x-mq-date-time (ms).
    acl_signature_window_mills: int = DEFAULT_SIGNATURE_WINDOW_MS
    #: This broker's own credential, ``{"accessKey": "...", "secretKey": "..."}`` (RocketMQ 5's
    #: key): signs its registrations and a slave's metadata sync. Never shown by --print-config.
    inner_client_authentication_credentials: str = dataclasses.field(default="", repr=False)
    #: Timer messages (TIMER_DELIVER_MS): the farthest accepted delivery time from now (s).
    timer_max_delay_sec: int = 259_200
    #: How often the timer index is snapshotted to the store directory when it changed (ms);
    #: after a crash it is rebuilt from the snapshot plus the commit log written since.
    timer_flush_interval_ms: int = 1_000
    #: Timer messages delivered per store append.
    timer_deliver_batch: int = 64
    #: Transactions: a half message is first checked this long after it was stored (ms) ...
    transaction_time_out: int = 6_000
    #: ... unresolved ones are looked for this often (ms) ...
    transaction_check_interval: int = 60_000
    #: ... and one is discarded (rolled back) after this many unanswered checks.
    transaction_check_max: int = 15
    #: POP: the invisible time of push consumers' receives (they send ``auto_renew`` and none),
    #: renewed this long before it ends while the client stays connected, for at most
    #: ``renewMaxTimeMillis`` after the pop (ms; RocketMQ's proxy defaults).
    default_invisible_time_mills: int = 60_000
    renew_ahead_time_millis: int = 10_000
    renew_max_time_millis: int = 3 * 3600 * 1000
    #: Automatic failover (docs/failover.md): ``none`` (static roles), ``etcd`` or ``kubernetes``
    #: (a coordination.k8s.io/v1 Lease per group).
    #: With a controller, brokerId is the member's id (> 0) and brokerRole the role it takes
    #: while it holds the group's leader lease (ASYNC_MASTER or SYNC_MASTER); it registers as
    #: brokerId 0 while master.
    controller_mode: str = "none"
    #: etcd endpoints, ``host:port;host:port`` (the first reachable one is used).
    controller_etcd_endpoints: str = "127.0.0.1:2379"
    #: controllerMode=kubernetes: the Leases' namespace (empty = this pod's: POD_NAMESPACE, the
    #: ServiceAccount's namespace file, else ``default``), the API server's URL (empty = in-cluster
    #: in a pod, else the kubeconfig), a kubeconfig file (its credentials are used; empty = the
    #: in-cluster ServiceAccount in a pod) and the group's Lease name (empty =
    #: ``pocketmq-<brokerClusterName>-<brokerName>`` lower-cased; members go to ``<name>-members``).
    controller_k8s_namespace: str = ""
    controller_k8s_api_server: str = ""
    controller_k8s_kubeconfig: str = ""
    controller_k8s_lease_name: str = ""
    #: Leader lease TTL (ms) and how often the master renews it (ms).
    controller_lease_ttl: int = 3_000
    controller_renew_interval: int = 500
    #: A slave whose acknowledgement is older than this (ms) leaves the SyncStateSet (RocketMQ 5).
    ha_max_time_slave_not_catchup: int = 15_000
    #: With a controller, a SYNC_MASTER's PUT_OK waits for every slave of the SyncStateSet, not
    #: one (RocketMQ 5's allAckInSyncStateSet): any member may then be promoted without losing
    #: an acknowledged message, at the price of waiting for the slowest member (a member that
    #: stops acknowledging holds writes back until it leaves the set).
    all_ack_in_sync_state_set: bool = False

    def __post_init__(self) -> None:
        for key, name in (("brokerClusterName", self.broker_cluster_name), ("brokerName", self.broker_name)):
            legal = 0 < len(name) <= BROKER_NAME_MAX_LENGTH and bool(BROKER_NAME_CHARS.fullmatch(name))
            require(legal, key, f"invalid name {name!r} "
                    f"(1..{BROKER_NAME_MAX_LENGTH} characters of {BROKER_NAME_CHARSET})")
        require(self.broker_id >= 0, "brokerId", "must be >= 0")
        if self.broker_role is BrokerRole.SLAVE:
            require(self.broker_id > 0, "brokerId", "a SLAVE needs brokerId > 0")
        elif self.controller_mode != "none":
            require(self.broker_id > 0, "brokerId", "with a controller, brokerId is the member id (> 0)")
        else:
            require(self.broker_id == 0, "brokerRole",
                    f"{self.broker_role.name} needs brokerId=0 (got {self.broker_id}); slaves use SLAVE")
        for addr in self.namesrv_addrs:
            parse_address(addr, "namesrvAddr")
        require(0 < self.listen_port < 65536, "listenPort", "must be 1..65535")
        require(0 <= self.ha_listen_port < 65536, "haListenPort", "must be 0..65535")
        require(-1 <= self.metrics_port < 65536, "metricsPort", "must be -1..65535")
        require(self.ha_transfer_batch_size >= 1024, "haTransferBatchSize", "must be >= 1024")
        require(self.ha_slave_fallbehind_max > 0, "haSlaveFallbehindMax", "must be > 0")
        require(self.slave_timeout > 0, "slaveTimeout", "must be > 0")
        require(self.ha_send_heartbeat_interval > 0, "haSendHeartbeatInterval", "must be > 0")
        require(self.ha_housekeeping_interval > self.ha_send_heartbeat_interval, "haHousekeepingInterval",
                "must be greater than haSendHeartbeatInterval")
        require(1 <= self.default_topic_queue_nums <= 1024, "defaultTopicQueueNums", "must be 1..1024")
        require(self.broker_permission in (2, 4, 6), "brokerPermission",
                "must be 6 (read and write), 4 (read-only) or 2 (write-only)")
        require(self.slave_sync_interval > 0, "slaveSyncInterval", "must be > 0")
        require(self.default_invisible_time_mills >= 1000, "defaultInvisibleTimeMills", "must be >= 1000")
        require(0 < self.renew_ahead_time_millis < self.default_invisible_time_mills, "renewAheadTimeMillis",
                "must be > 0 and below defaultInvisibleTimeMills")
        require(self.renew_max_time_millis >= 0, "renewMaxTimeMillis", "must be >= 0")
        require(self.flush_consumer_offset_interval > 0, "flushConsumerOffsetInterval", "must be > 0")
        require(self.flush_delay_offset_interval > 0, "flushDelayOffsetInterval", "must be > 0")
        require(self.consumer_channel_expired_time > 0, "consumerChannelExpiredTime", "must be > 0")
        require(self.shutdown_grace_period >= 0, "shutdownGracePeriod", "must be >= 0")
        if self.ha_master_address:
            parse_address(self.ha_master_address, "haMasterAddress")
        if self.ha_auth_secret != self.ha_auth_secret.strip():
            object.__setattr__(self, "ha_auth_secret", self.ha_auth_secret.strip())
        check_secret(self.ha_auth_secret, "haAuthSecret")
        parse_delay_levels(self.message_delay_level)
        self.check_tls()
        if self.ha_tls_enable:
            require(bool(self.tls_server_cert_path and self.tls_server_key_path), "haTlsEnable",
                    "needs tlsServerCertPath and tlsServerKeyPath")
            require(bool(self.tls_server_trust_cert_path or self.tls_client_trust_cert_path), "haTlsEnable",
                    "needs the CA the peers' certificates are checked against (tlsServerTrustCertPath)")
        check_acl_keys(self.acl_enable, self.acl_config_file, self.acl_signature_window_mills)
        parse_inner_credentials(self.inner_client_authentication_credentials)
        require(self.timer_max_delay_sec > 0, "timerMaxDelaySec", "must be > 0")
        require(self.timer_flush_interval_ms > 0, "timerFlushIntervalMs", "must be > 0")
        require(1 <= self.timer_deliver_batch <= 1024, "timerDeliverBatch", "must be 1..1024")
        require(self.transaction_time_out > 0, "transactionTimeOut", "must be > 0")
        require(self.transaction_check_interval > 0, "transactionCheckInterval", "must be > 0")
        require(self.transaction_check_max > 0, "transactionCheckMax", "must be > 0")
        require(self.controller_mode in ("none", "etcd", "kubernetes"), "controllerMode",
                f"must be none, etcd or kubernetes (got {self.controller_mode!r})")
        self._check_k8s_keys()
        require(self.controller_lease_ttl >= 2000, "controllerLeaseTtl", "must be >= 2000 (etcd's minimum)")
        require(0 < self.controller_renew_interval * 2 < self.controller_lease_ttl, "controllerRenewInterval",
                "must be > 0 and below half of controllerLeaseTtl")
        require(self.ha_max_time_slave_not_catchup > 0, "haMaxTimeSlaveNotCatchup", "must be > 0")
        for addr in self.controller_etcd_endpoints.split(";"):
            if addr.strip():
                parse_address(addr.strip(), "controllerEtcdEndpoints")

    def _check_k8s_keys(self) -> None:
        namespace = self.controller_k8s_namespace
        require(not namespace or bool(_DNS_LABEL.fullmatch(namespace)), "controllerK8sNamespace",
                f"not a namespace name: {namespace!r}")
        lease = self.controller_k8s_lease_name
        require(not lease or (len(lease) <= 240 and bool(_DNS_SUBDOMAIN.fullmatch(lease))),
                "controllerK8sLeaseName", f"not a DNS-1123 subdomain of at most 240 characters: {lease!r}")
        api = self.controller_k8s_api_server
        if api:
            scheme, _, rest = api.partition("://")
            require(scheme in ("http", "https") and bool(rest), "controllerK8sApiServer",
                    f"must be an http(s):// URL (got {api!r})")
        if self.controller_mode == "kubernetes" and self.controller_k8s_kubeconfig:
            require(Path(self.controller_k8s_kubeconfig).is_file(), "controllerK8sKubeconfig",
                    f"no such file: {self.controller_k8s_kubeconfig}")

    @property
    def is_master(self) -> bool:
        return self.broker_role is not BrokerRole.SLAVE

    @property
    def namesrv_addrs(self) -> list[str]:
        return split_addresses(self.namesrv_addr)

    @property
    def effective_ha_port(self) -> int:
        return self.ha_listen_port or self.listen_port + 1

    @property
    def effective_metrics_port(self) -> int:
        return self.listen_port + 2 if self.metrics_port == -1 else self.metrics_port

    @property
    def advertised_ip(self) -> str:
        return self.broker_ip1 or detect_host_ip()

    @property
    def broker_addr(self) -> str:
        return f"{self.advertised_ip}:{self.listen_port}"

    @property
    def inner_credentials(self) -> Credentials | None:
        """The broker's own credential (innerClientAuthenticationCredentials), if set."""
        return parse_inner_credentials(self.inner_client_authentication_credentials)

    @property
    def effective_tls_port(self) -> int:
        return self.tls_listen_port or self.listen_port + 3

    @property
    def ha_server_addr(self) -> str:
        return f"{self.broker_ip2 or self.advertised_ip}:{self.effective_ha_port}"

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        return parse_delay_levels(self.message_delay_level)
