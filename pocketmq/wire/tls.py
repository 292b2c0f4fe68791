"""Client side of TLS, shared by the client library, the CLI, the Spark source and the
services' own outbound channels (broker registration, slave metadata sync, NameServer relay):
which CA to trust, which certificate to present for mutual TLS, and the channel made from them."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc

__all__ = ["ClientTls", "TlsFileError", "aio_channel", "resolve", "sync_channel", "to_env"]


class TlsFileError(ValueError):
    """A CA, certificate or key file cannot be read or is not PEM."""


def read_pem(path: str, what: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise TlsFileError(f"{what}: cannot read {path}: {exc.strerror}") from None
    if b"-----BEGIN" not in data:
        raise TlsFileError(f"{what}: {path} is not PEM")
    return data


@dataclasses.dataclass(frozen=True)
class ClientTls:
    """TLS for outbound gRPC channels. ``ca_file`` empty = the system's trusted roots;
    ``cert_file`` + ``key_file`` = the client certificate for servers that require one;
    ``server_name`` = the name checked against the server's certificate instead of the host of
    the address (when connecting by an IP the certificate does not list)."""

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    server_name: str = ""

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise TlsFileError("a client certificate needs both the certificate and the key file")

    def credentials(self) -> grpc.ChannelCredentials:
        """Read the files now (a rotated CA or client certificate is used by new channels)."""
        root = read_pem(self.ca_file, "CA file") if self.ca_file else None
        key = read_pem(self.key_file, "client key file") if self.key_file else None
        chain = read_pem(self.cert_file, "client certificate file") if self.cert_file else None
        return grpc.ssl_channel_credentials(root_certificates=root, private_key=key, certificate_chain=chain)

    def options(self, base: Sequence[tuple[str, Any]]) -> list[tuple[str, Any]]:
        extra = [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []
        return [*base, *extra]


def aio_channel(address: str, options: Sequence[tuple[str, Any]], tls: ClientTls | None,
                interceptors: Sequence[Any] = ()) -> grpc.aio.Channel:
    """A grpc.aio channel to ``address``: TLS with ``tls``, plaintext without; ``interceptors``
    (e.g. the request signers of :mod:`pocketmq.wire.grpcauth`) wrap every call."""
    chain = list(interceptors) or None
    if tls is None:
        return grpc.aio.insecure_channel(address, options=list(options), interceptors=chain)
    return grpc.aio.secure_channel(address, tls.credentials(), options=tls.options(options),
                                   interceptors=chain)


def sync_channel(address: str, options: Sequence[tuple[str, Any]], tls: ClientTls | None) -> grpc.Channel:
    """A blocking grpc channel to ``address``: TLS with ``tls``, plaintext without."""
    if tls is None:
        return grpc.insecure_channel(address, options=list(options))
    return grpc.secure_channel(address, tls.credentials(), options=tls.options(options))


#: Environment variables read when a client is given no ``tls`` argument.
ENV_TLS, ENV_CA, ENV_CERT, ENV_KEY, ENV_SERVER_NAME = (
    "POCKETMQ_TLS", "POCKETMQ_TLS_CA_FILE", "POCKETMQ_TLS_CERT_FILE", "POCKETMQ_TLS_KEY_FILE",
    "POCKETMQ_TLS_SERVER_NAME")


def resolve(value: ClientTls | bool | None, environ: Mapping[str, str] | None = None) -> ClientTls | None:
    """A client's ``tls`` argument -> its TLS (None = plaintext). ``None`` reads the environment:
    ``POCKETMQ_TLS=true`` or a ``POCKETMQ_TLS_CA_FILE`` turns TLS on (with
    ``POCKETMQ_TLS_CERT_FILE`` / ``_KEY_FILE`` / ``_SERVER_NAME``); ``True`` = TLS trusting the
    system roots (or the environment's CA); ``False`` = plaintext."""
    if isinstance(value, ClientTls):
        return value
    if value is False:
        return None
    env = os.environ if environ is None else environ
    on = env.get(ENV_TLS, "").strip().lower() in ("1", "true", "yes", "on") or bool(env.get(ENV_CA))
    if value is None and not on:
        return None
    return ClientTls(ca_file=env.get(ENV_CA, ""), cert_file=env.get(ENV_CERT, ""),
                     key_file=env.get(ENV_KEY, ""), server_name=env.get(ENV_SERVER_NAME, ""))


def to_env(tls: ClientTls | None) -> dict[str, str]:
    """The ``POCKETMQ_TLS*`` variables :func:`resolve` reads back as ``tls`` (a child process's
    clients connect like this one); plaintext = ``POCKETMQ_TLS=false`` and no CA."""
    if tls is None:
        return {ENV_TLS: "false", ENV_CA: "", ENV_CERT: "", ENV_KEY: "", ENV_SERVER_NAME: ""}
    return {ENV_TLS: "true", ENV_CA: tls.ca_file, ENV_CERT: tls.cert_file, ENV_KEY: tls.key_file,
            ENV_SERVER_NAME: tls.server_name}
