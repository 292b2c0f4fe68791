"""What the master side of replication is configured with (:class:`MasterSettings`, read from
the broker's configuration) and what it reports about one slave (:class:`SlaveInfo`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Final

from services.broker.config import BrokerConfig
from services.broker.replication.auth import handshake_timeout_s
from services.broker.replication.tls import HaTls, ha_tls
from services.broker.storage.config import StoreConfig

__all__ = ["MasterSettings", "SlaveInfo"]

#: The built-in configuration: the one owner of every default below.
_BROKER: Final = BrokerConfig()
_STORE: Final = StoreConfig()


@dataclass(frozen=True)
class MasterSettings:
    """What :class:`HAMaster` needs from the broker's configuration (:meth:`from_config`); the
    defaults are those of the built-in :class:`~services.broker.config.BrokerConfig` and
    :class:`~services.broker.storage.config.StoreConfig`."""

    host: str = _BROKER.listen_host
    port: int = _BROKER.effective_ha_port
    batch_size: int = _BROKER.ha_transfer_batch_size
    segment_size: int = _STORE.mapped_file_size_commit_log
    sync_from_earliest: bool = _BROKER.ha_sync_from_earliest
    heartbeat_interval_s: float = _BROKER.ha_send_heartbeat_interval / 1000
    housekeeping_interval_s: float = _BROKER.ha_housekeeping_interval / 1000
    fall_behind_max: int = _BROKER.ha_slave_fallbehind_max
    #: allAckInSyncStateSet: a write is replicated once every counted slave acknowledged it.
    all_ack: bool = _BROKER.all_ack_in_sync_state_set
    #: haAuthSecret (UTF-8); empty = no authentication.  Never shown by repr().
    auth_secret: bytes = dataclasses.field(default=_BROKER.ha_auth_secret.encode(), repr=False)
    #: How long a peer has to answer the challenge.
    auth_timeout_s: float = handshake_timeout_s(_BROKER.ha_housekeeping_interval / 1000)
    #: brokerName and brokerId this master gives in its hello.
    broker_name: str = _BROKER.broker_name
    broker_id: int = 0
    #: haTlsEnable: TLS with a client certificate of the CA required (None = plaintext).
    tls: HaTls | None = None

    @classmethod
    def from_config(cls, cfg: BrokerConfig, store: StoreConfig) -> MasterSettings:
        housekeeping_s = cfg.ha_housekeeping_interval / 1000
        return cls(host=cfg.listen_host, port=cfg.effective_ha_port, batch_size=cfg.ha_transfer_batch_size,
                   segment_size=store.mapped_file_size_commit_log,
                   sync_from_earliest=cfg.ha_sync_from_earliest,
                   heartbeat_interval_s=cfg.ha_send_heartbeat_interval / 1000,
                   housekeeping_interval_s=housekeeping_s, fall_behind_max=cfg.ha_slave_fallbehind_max,
                   all_ack=cfg.all_ack_in_sync_state_set,
                   auth_secret=cfg.ha_auth_secret.encode(),
                   auth_timeout_s=handshake_timeout_s(housekeeping_s), broker_name=cfg.broker_name,
                   broker_id=cfg.broker_id, tls=ha_tls(cfg))


@dataclass(frozen=True)
class SlaveInfo:
    """A snapshot of one connection, for status replies and metrics."""

    slave: str
    request_offset: int
    ack_offset: int
    connected_since_ms: int
    transferred_bytes: int
    last_ack_ms: int
    #: From the slave's hello: its brokerId (-1: an original slave that sent none), gRPC address
    #: and newest epoch.
    broker_id: int = -1
    broker_addr: str = ""
    epoch: int = 0

    @property
    def label(self) -> str:
        """The slave's name in metrics and status: its brokerId, or its connection address for
        a slave that did not say who it is."""
        return str(self.broker_id) if self.broker_id >= 0 else self.slave

