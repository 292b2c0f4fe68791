"""Broker-side helpers: namesrvAddr parsing and the registration period clamp."""

from __future__ import annotations

import pytest

from services.broker.registration import (
    BrokerIdentity,
    BrokerRegistrar,
    clamp_register_period,
    parse_namesrv_addr,
)


def test_parse_namesrv_addr() -> None:
    assert parse_namesrv_addr("a:9876;b:9876") == ["a:9876", "b:9876"]
    assert parse_namesrv_addr(" a:9876 ; ;a:9876;c:1;") == ["a:9876", "c:1"]
    assert parse_namesrv_addr("") == []


@pytest.mark.parametrize(("ms", "seconds"), [
    (30_000, 30.0), (1_000, 10.0), (10_000, 10.0), (60_000, 60.0), (600_000, 60.0), (12_500, 12.5),
    (-5, 10.0),
])
def test_clamp_register_period(ms: int, seconds: float) -> None:
    assert clamp_register_period(ms) == seconds


def test_registrar_rejects_bad_arguments() -> None:
    ident = BrokerIdentity("c", "b", 0, "h:1", "h:2", "", "ASYNC_MASTER")
    with pytest.raises(ValueError, match="NameServer"):
        BrokerRegistrar([], ident, lambda: (None, []))  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="period_s"):
        BrokerRegistrar(["h:9876"], ident, lambda: (None, []), period_s=0)  # type: ignore[arg-type,return-value]
