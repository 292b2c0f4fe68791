"""The one host:port parser (pocketmq.wire.address) and the callers that wrap its errors."""

from __future__ import annotations

import pytest

from pocketmq.client.transport import parse_addresses
from pocketmq.errors import InvalidArgumentError
from pocketmq.wire.address import AddressError, parse_address_list, parse_host_port, split_addresses
from services.namesrv.config import split_listen


@pytest.mark.parametrize(("text", "kwargs", "expected"), [
    ("ns:9876", {}, ("ns", 9876)),
    ("[fd00::7]:9876", {}, ("fd00::7", 9876)),
    (":10911", {"default_host": "0.0.0.0"}, ("0.0.0.0", 10911)),
    ("10911", {"default_host": "h"}, ("h", 10911)),
    ("h:0", {"allow_port_zero": True}, ("h", 0)),
])
def test_parse_host_port(text: str, kwargs: dict[str, object], expected: tuple[str, int]) -> None:
    assert parse_host_port(text, **kwargs) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["no-port", ":9876", "ns:", "ns:http", "h:0", "h:65536", "fd00::7:9876"])
def test_parse_host_port_rejects(text: str) -> None:
    with pytest.raises(AddressError, match=r"address|port"):
        parse_host_port(text)


def test_lists() -> None:
    assert split_addresses(" a:1 ; b:2,a:1;; ") == ["a:1", "b:2"]
    assert parse_address_list(["a:1", " b:2 "]) == ["a:1", "b:2"]
    with pytest.raises(AddressError, match="no namesrv address"):
        parse_address_list(" ; ", "namesrv")
    with pytest.raises(AddressError, match="invalid broker address 'x'"):
        parse_address_list("a:1;x", "broker")


def test_callers_name_their_errors() -> None:
    with pytest.raises(InvalidArgumentError, match="invalid namesrv address 'h:0'"):
        parse_addresses("h:0")
    assert split_listen("0.0.0.0:0") == ("0.0.0.0", 0)
    with pytest.raises(ValueError, match="'listen'"):
        split_listen("h:x")
