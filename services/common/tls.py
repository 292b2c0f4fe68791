"""TLS of the services: the ``tls*`` configuration keys shared by the NameServer and brokers,
the server credentials of the gRPC and metrics listeners (reloaded when the files change), the
client TLS of their outbound channels, and certificate generation for local clusters and tests
(``make run``; generating needs ``cryptography``, in the development lock and the ``tls`` extra;
the broker image only loads PEM files). See docs/tls.md."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import ipaddress
import logging
import os
import ssl
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

from pocketmq.wire.tls import ClientTls
from services.common.config import ConfigError, require

log = logging.getLogger(__name__)

#: Validity of generated certificates.
SELF_SIGNED_DAYS = 365


def generate_self_signed(cert_path: Path, key_path: Path, hosts: Sequence[str] = ("localhost", "127.0.0.1"),
                         common_name: str = "pocketmq") -> None:
    """Write a self-signed certificate (PEM) for ``hosts`` and its private key (PEM, mode 0600)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    names = _alt_names(hosts)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=SELF_SIGNED_DAYS))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path.parent.mkdir(parents=True, exist_ok=True)
    key_path.parent.mkdir(parents=True, exist_ok=True)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))


def load_pair(cert_path: str, key_path: str, cert_key: str, key_key: str) -> tuple[bytes, bytes]:
    """(private key PEM, certificate chain PEM), or ConfigError naming the key at fault."""
    out = []
    for path, key in ((key_path, key_key), (cert_path, cert_key)):
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise ConfigError(key, f"cannot read {path}: {exc.strerror}") from None
        if b"-----BEGIN" not in data:
            raise ConfigError(key, f"{path} is not PEM")
        out.append(data)
    return out[0], out[1]


def _alt_names(hosts: Sequence[str]) -> list[Any]:
    """Subject alternative names: an IP address entry for each literal address, DNS otherwise."""
    from cryptography import x509
    names: list[Any] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _name(common_name: str) -> object:
    from cryptography import x509
    from cryptography.x509.oid import NameOID
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key_path: Path, key: object) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    key_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))


def generate_ca(cert_path: Path, key_path: Path, common_name: str = "pocketmq local CA") -> None:
    """Write a self-signed CA certificate and its key (PEM; the key mode 0600)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(common_name)
    assert isinstance(name, x509.Name)
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=SELF_SIGNED_DAYS * 5))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=True, crl_sign=True,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path.parent.mkdir(parents=True, exist_ok=True)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key_path, key)


def issue_certificate(ca_cert_path: Path, ca_key_path: Path, cert_path: Path, key_path: Path,
                      hosts: Sequence[str] = (), common_name: str = "pocketmq",
                      days: int = SELF_SIGNED_DAYS) -> None:
    """Write a certificate signed by the CA (usable by servers for ``hosts`` and as a client
    certificate for mutual TLS) and its key. The certificate file is replaced atomically."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    ca_cert = x509.load_pem_x509_certificate(ca_cert_path.read_bytes())
    ca_key = serialization.load_pem_private_key(ca_key_path.read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    names = _alt_names(hosts)
    subject = _name(common_name)
    assert isinstance(subject, x509.Name)
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder()
               .subject_name(subject).issuer_name(ca_cert.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                     ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    # Key first, then the certificate by rename: a reader never sees a new certificate with the
    # old key for longer than the two writes take (reloads also check the pair matches).
    _write_key(key_path, key)
    tmp = cert_path.with_name(cert_path.name + ".tmp")
    tmp.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    os.replace(tmp, cert_path)


class TlsMode(enum.Enum):
    """RocketMQ's ``tls.server.mode`` values that apply when ``tlsEnable=true``."""

    #: The main gRPC port speaks TLS only; plaintext clients are refused (the default).
    ENFORCING = "enforcing"
    #: The main port stays plaintext and a second listener (``tlsListenPort``) speaks TLS: for
    #: moving clients over one at a time (gRPC cannot serve both on one port).
    PERMISSIVE = "permissive"


class ClientAuth(enum.Enum):
    """RocketMQ's ``tls.server.need.client.auth`` values (``optional`` has no gRPC equivalent)."""

    NONE = "none"
    REQUIRE = "require"


@dataclasses.dataclass(frozen=True)
class TlsSettings:
    """The ``tls*`` keys of the NameServer and the broker (RocketMQ's TlsSystemConfig names in
    camelCase). Services inherit these fields and call :meth:`check_tls` in ``__post_init__``."""

    #: TLS on the gRPC and metrics ports with the certificate and key below (PEM).
    tls_enable: bool = False
    #: ENFORCING: the gRPC port is TLS only. PERMISSIVE: plaintext stays on the gRPC port and
    #: TLS is served on ``tlsListenPort`` too (0 = the gRPC port + 3).
    tls_server_mode: TlsMode = TlsMode.ENFORCING
    tls_listen_port: int = 0
    tls_server_cert_path: str = ""
    tls_server_key_path: str = ""
    #: REQUIRE: clients must present a certificate signed by ``tlsServerTrustCertPath`` (mTLS).
    tls_server_need_client_auth: ClientAuth = ClientAuth.NONE
    tls_server_trust_cert_path: str = ""
    #: Outbound channels (registration, metadata sync, relay) to TLS peers: the CA to trust
    #: (empty = ``tlsServerTrustCertPath``, then the system roots) and the certificate shown to
    #: peers that require one (empty = the server certificate and key).
    tls_client_trust_cert_path: str = ""
    tls_client_cert_path: str = ""
    tls_client_key_path: str = ""
    #: The name outbound channels check the peers' certificates for instead of the address's
    #: host (peers reached by pod IPs, e.g. in Kubernetes); empty = the host.
    tls_client_server_name: str = ""
    #: A plaintext port on the listen host serving grpc.health.v1 only, for probes that cannot
    #: speak TLS (the kubelet's native gRPC probes); 0 = none.
    health_listen_port: int = 0

    def check_tls(self) -> None:
        require(0 <= self.tls_listen_port < 65536, "tlsListenPort", "must be 0..65535")
        require(0 <= self.health_listen_port < 65536, "healthListenPort", "must be 0..65535 (0 = none)")
        require(bool(self.tls_client_cert_path) == bool(self.tls_client_key_path), "tlsClientCertPath",
                "tlsClientCertPath and tlsClientKeyPath go together")
        if not self.tls_enable:
            return
        require(bool(self.tls_server_cert_path), "tlsServerCertPath", "required when tlsEnable=true")
        require(bool(self.tls_server_key_path), "tlsServerKeyPath", "required when tlsEnable=true")
        if self.tls_server_need_client_auth is ClientAuth.REQUIRE:
            require(bool(self.tls_server_trust_cert_path), "tlsServerTrustCertPath",
                    "required when tlsServerNeedClientAuth=require")

    @property
    def tls_main_port(self) -> bool:
        """Whether the main gRPC port speaks TLS (and so do the peers this service calls)."""
        return self.tls_enable and self.tls_server_mode is TlsMode.ENFORCING

    def server_tls(self) -> ServerTls | None:
        if not self.tls_enable:
            return None
        return ServerTls(self.tls_server_cert_path, self.tls_server_key_path,
                         self.tls_server_trust_cert_path
                         if self.tls_server_need_client_auth is ClientAuth.REQUIRE else "")

    def client_tls(self) -> ClientTls | None:
        """TLS of this service's outbound gRPC channels: on when its own gRPC port is TLS only
        (a cluster is TLS or not); None = plaintext."""
        if not self.tls_main_port:
            return None
        cert, key = self.tls_client_cert_path, self.tls_client_key_path
        if not cert:
            cert, key = self.tls_server_cert_path, self.tls_server_key_path
        return ClientTls(ca_file=self.tls_client_trust_cert_path or self.tls_server_trust_cert_path,
                         cert_file=cert, key_file=key, server_name=self.tls_client_server_name)


def _signature(paths: Sequence[str]) -> tuple[tuple[int, int], ...]:
    out = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append((-1, -1))
        else:
            out.append((st.st_mtime_ns, st.st_size))
    return tuple(out)


class ServerTls:
    """The certificate, key and (for mTLS) client CA of a service's listeners, read again when
    a file changes (a rotated Kubernetes Secret, cert-manager): new connections get the new
    certificate, open ones keep theirs. A changed set that does not load (a key that does not
    match the certificate, a half-written file) is logged and the previous one stays in use."""

    def __init__(self, cert_path: str, key_path: str, client_ca_path: str = "") -> None:
        self.cert_path, self.key_path, self.client_ca_path = cert_path, key_path, client_ca_path
        self._paths = [p for p in (cert_path, key_path, client_ca_path) if p]
        self._lock = threading.Lock()
        self._signature = _signature(self._paths)
        self._key, self._chain, self._ca = self._load(strict=True)
        self._generation = 0
        self._ssl_generation = -1
        self._ssl_context: ssl.SSLContext | None = None
        self.reloads = 0

    def _load(self, strict: bool) -> tuple[bytes, bytes, bytes | None]:
        key, chain = load_pair(self.cert_path, self.key_path, "tlsServerCertPath", "tlsServerKeyPath")
        ca = None
        if self.client_ca_path:
            key_name = "tlsServerTrustCertPath"
            try:
                ca = Path(self.client_ca_path).read_bytes()
            except OSError as exc:
                raise ConfigError(key_name, f"cannot read {self.client_ca_path}: {exc.strerror}") from None
            if b"-----BEGIN CERTIFICATE" not in ca:
                raise ConfigError(key_name, f"{self.client_ca_path} is not a PEM certificate")
        try:  # the stdlib checks the key matches the certificate (no cryptography needed)
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(self.cert_path, self.key_path)
        except (ssl.SSLError, OSError) as exc:
            if strict:
                raise ConfigError("tlsServerKeyPath", f"does not match tlsServerCertPath ({exc})") from None
            raise
        return key, chain, ca

    def refresh(self) -> bool:
        """Re-read the files if any changed since the last look; True when new material loaded."""
        signature = _signature(self._paths)
        with self._lock:
            if signature == self._signature:
                return False
            try:
                material = self._load(strict=False)
            except (ConfigError, ssl.SSLError, OSError) as exc:
                log.warning("TLS files changed but cannot be loaded; keeping the previous certificate",
                            extra={"cert": self.cert_path, "error": str(exc)})
                self._signature = signature  # tried once; the next change is tried again
                return False
            self._signature = signature
            self._key, self._chain, self._ca = material
            self._generation += 1
            self.reloads += 1
        log.info("TLS certificate reloaded", extra={"cert": self.cert_path, "reloads": self.reloads})
        return True

    def _grpc_config(self) -> grpc.ServerCertificateConfiguration:
        return grpc.ssl_server_certificate_configuration([(self._key, self._chain)],
                                                         root_certificates=self._ca)

    def grpc_credentials(self) -> grpc.ServerCredentials:
        """Credentials whose certificate gRPC asks for before each new handshake."""
        def fetch() -> grpc.ServerCertificateConfiguration | None:
            try:
                return self._grpc_config() if self.refresh() else None
            except Exception:  # never let a reload problem break the handshake thread
                log.exception("TLS reload failed")
                return None
        return grpc.dynamic_ssl_server_credentials(self._grpc_config(), fetch,
                                                   require_client_authentication=self._ca is not None)

    def follow(self, initial: ssl.SSLContext) -> None:
        """Make a server SSLContext built from these files (the metrics port's) pick up reloaded
        files: each new handshake first looks for changes and, after one, moves the connection
        to a context built from the new files."""
        def build() -> ssl.SSLContext:
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.minimum_version = initial.minimum_version
            ctx.load_cert_chain(self.cert_path, self.key_path)
            if self.client_ca_path:
                ctx.load_verify_locations(self.client_ca_path)
                ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.sni_callback = on_hello
            return ctx

        def on_hello(sock: ssl.SSLObject | ssl.SSLSocket, _name: str | None, _ctx: ssl.SSLContext) -> None:
            self.refresh()
            if self._ssl_generation != self._generation:
                try:
                    self._ssl_context = build()
                    self._ssl_generation = self._generation
                except (ssl.SSLError, OSError) as exc:
                    log.warning("metrics TLS reload failed", extra={"error": str(exc)})
            if self._ssl_context is not None and sock.context is not self._ssl_context:
                sock.context = self._ssl_context

        initial.sni_callback = on_hello
        self._ssl_generation = self._generation
