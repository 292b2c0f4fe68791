"""Certificates for the TLS tests: a CA, server and client certificates signed by it, and a
second CA nobody trusts."""

from __future__ import annotations

import dataclasses
import socket
import ssl
from pathlib import Path

from services.common.tls import generate_ca, issue_certificate

HOSTS = ("127.0.0.1", "localhost")


@dataclasses.dataclass(frozen=True)
class Pki:
    dir: Path

    @property
    def ca(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def server_cert(self) -> Path:
        return self.dir / "server.crt"

    @property
    def server_key(self) -> Path:
        return self.dir / "server.key"

    @property
    def client_cert(self) -> Path:
        return self.dir / "client.crt"

    @property
    def client_key(self) -> Path:
        return self.dir / "client.key"

    @property
    def other_ca(self) -> Path:
        return self.dir / "other-ca.crt"

    @property
    def rogue_cert(self) -> Path:
        """A client certificate signed by the untrusted CA."""
        return self.dir / "rogue.crt"

    @property
    def rogue_key(self) -> Path:
        return self.dir / "rogue.key"

    def reissue_server(self, common_name: str) -> None:
        issue_certificate(self.ca, self.dir / "ca.key", self.server_cert, self.server_key, HOSTS, common_name)


def make_pki(directory: Path) -> Pki:
    pki = Pki(directory)
    generate_ca(pki.ca, directory / "ca.key")
    issue_certificate(pki.ca, directory / "ca.key", pki.server_cert, pki.server_key, HOSTS, "server-1")
    issue_certificate(pki.ca, directory / "ca.key", pki.client_cert, pki.client_key, (), "client")
    generate_ca(pki.other_ca, directory / "other-ca.key", "untrusted CA")
    issue_certificate(pki.other_ca, directory / "other-ca.key", pki.rogue_cert, pki.rogue_key, (), "rogue")
    return pki


def served_common_name(port: int, ca: Path, alpn: str = "h2", client: tuple[Path, Path] | None = None) -> str:
    """A new TLS connection to 127.0.0.1:``port``: the common name of the certificate served."""
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.set_alpn_protocols([alpn])
    if client is not None:
        ctx.load_cert_chain(str(client[0]), str(client[1]))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
        cert = conn.getpeercert()
    subject = dict(item[0] for item in cert["subject"])  # type: ignore[index, misc]
    return str(subject["commonName"])
