"""The tls* keys (validation, defaults of the outbound side), certificate loading and reloading,
and the client's ``tls`` argument."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pocketmq.wire.tls import ClientTls, TlsFileError, resolve
from services.broker.config import BrokerConfig
from services.common.config import ConfigError
from services.common.tls import ClientAuth, ServerTls, TlsMode, generate_ca, issue_certificate
from services.namesrv.config import NamesrvConfig


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    generate_ca(d / "ca.crt", d / "ca.key")
    issue_certificate(d / "ca.crt", d / "ca.key", d / "a.crt", d / "a.key", ("127.0.0.1",), "a")
    issue_certificate(d / "ca.crt", d / "ca.key", d / "b.crt", d / "b.key", ("127.0.0.1",), "b")
    return d


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"tls_enable": True}, "tlsServerCertPath"),
    ({"tls_enable": True, "tls_server_cert_path": "c"}, "tlsServerKeyPath"),
    ({"tls_enable": True, "tls_server_cert_path": "c", "tls_server_key_path": "k",
      "tls_server_need_client_auth": ClientAuth.REQUIRE}, "tlsServerTrustCertPath"),
    ({"tls_client_cert_path": "c"}, "tlsClientCertPath"),
    ({"tls_listen_port": 70000}, "tlsListenPort"),
    ({"health_listen_port": -1}, "healthListenPort"),
])
def test_invalid_tls_keys_name_the_key(kwargs: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        NamesrvConfig(**kwargs)  # type: ignore[arg-type]
    assert info.value.key == key


def test_ha_tls_needs_certificate_and_ca() -> None:
    with pytest.raises(ConfigError, match="haTlsEnable"):
        BrokerConfig(ha_tls_enable=True)
    with pytest.raises(ConfigError, match=r"haTlsEnable.*CA"):
        BrokerConfig(ha_tls_enable=True, tls_server_cert_path="c", tls_server_key_path="k")


def test_outbound_tls_follows_the_main_port() -> None:
    base = {"tls_enable": True, "tls_server_cert_path": "s.crt", "tls_server_key_path": "s.key",
            "tls_server_trust_cert_path": "ca.crt"}
    assert NamesrvConfig().client_tls() is None
    assert NamesrvConfig(**base, tls_server_mode=TlsMode.PERMISSIVE).client_tls() is None  # type: ignore[arg-type]
    assert NamesrvConfig(**base).client_tls() == ClientTls("ca.crt", "s.crt", "s.key")  # type: ignore[arg-type]
    own = NamesrvConfig(**base, tls_client_trust_cert_path="other.crt", tls_client_cert_path="c.crt",  # type: ignore[arg-type]
                        tls_client_key_path="c.key", tls_client_server_name="pocketmq")
    assert own.client_tls() == ClientTls("other.crt", "c.crt", "c.key", "pocketmq")
    assert NamesrvConfig(listen="0.0.0.0:9876").tls_listen == "0.0.0.0:9879"


def test_a_key_that_does_not_match_fails_at_start_naming_it(pki: Path) -> None:
    with pytest.raises(ConfigError) as info:
        ServerTls(str(pki / "a.crt"), str(pki / "b.key"))
    assert info.value.key == "tlsServerKeyPath"


def test_reload_takes_a_consistent_new_pair_and_keeps_the_old_one_otherwise(pki: Path,
                                                                            tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes((pki / "a.crt").read_bytes())
    key.write_bytes((pki / "a.key").read_bytes())
    tls = ServerTls(str(cert), str(key))
    assert not tls.refresh()
    # Half a rotation: a new key with the old certificate is not taken.
    key.write_bytes((pki / "b.key").read_bytes())
    os.utime(key, ns=(1, 1))
    assert not tls.refresh() and tls.reloads == 0
    cert.write_bytes((pki / "b.crt").read_bytes())
    assert tls.refresh() and tls.reloads == 1


def test_client_tls_argument_and_environment() -> None:
    assert resolve(None, {}) is None
    assert resolve(False, {"POCKETMQ_TLS_CA_FILE": "ca.crt"}) is None
    assert resolve(True, {}) == ClientTls()
    assert resolve(None, {"POCKETMQ_TLS": "true"}) == ClientTls()
    assert resolve(None, {"POCKETMQ_TLS_CA_FILE": "ca.crt", "POCKETMQ_TLS_SERVER_NAME": "n"}) == ClientTls(
        ca_file="ca.crt", server_name="n")
    with pytest.raises(TlsFileError):
        ClientTls(cert_file="c.crt")
    with pytest.raises(TlsFileError, match="cannot read"):
        ClientTls(ca_file="/nonexistent/ca.crt").credentials()
