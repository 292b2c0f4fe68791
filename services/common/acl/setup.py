"""Building the ACL interceptor of a server from its configuration keys (``aclEnable``,
``aclConfigFile``, ``aclSignatureWindowMills``), shared by the NameServer and brokers."""

from __future__ import annotations

import json
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from pocketmq.wire.auth import Credentials
from services.common.acl.authn import AclStore, Authenticator
from services.common.acl.interceptor import AclInterceptor
from services.common.acl.model import AclDocument
from services.common.config import ConfigError, require

DEFAULT_SIGNATURE_WINDOW_MS = 15 * 60 * 1000


def check_acl_keys(enable: bool, config_file: str, window_ms: int) -> None:
    require(window_ms > 0, "aclSignatureWindowMills", "must be > 0")
    if enable:
        require(bool(config_file), "aclConfigFile", "required when aclEnable=true (a JSON file of users "
                                                    "and policies, e.g. a mounted Kubernetes Secret)")


def parse_inner_credentials(value: str, key: str = "innerClientAuthenticationCredentials",
                            ) -> Credentials | None:
    """``{"accessKey": "...", "secretKey": "..."}`` -> Credentials (None when empty); the error
    never contains the value."""
    if not value.strip():
        return None
    try:
        doc = json.loads(value)
        return Credentials(str(doc["accessKey"]), str(doc["secretKey"]))
    except (ValueError, TypeError, KeyError):
        raise ConfigError(key, 'expected {"accessKey": "...", "secretKey": "..."}') from None


def build_interceptor(enable: bool, config_file: str, window_ms: int, cluster_name: str,
                      registry: CollectorRegistry | None = None,
                      table: Callable[[], AclDocument] | None = None) -> AclInterceptor | None:
    """The server's ACL interceptor, or None when ``aclEnable`` is false (today's open mode)."""
    if not enable:
        return None
    store = AclStore(config_file, table)
    return AclInterceptor(Authenticator(store, window_ms / 1000), cluster_name, registry)
