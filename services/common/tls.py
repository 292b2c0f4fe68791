"""TLS material for the gRPC listeners: load a configured certificate and key, or generate a
self-signed pair for local clusters and tests (``make run``). Generating needs ``cryptography``
(in the development lock and the ``tls`` extra; the broker image only loads PEM files)."""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path

from services.common.config import ConfigError

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
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
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
