"""Request signing shared by the client and the servers: RocketMQ 5's ``MQv2-HMAC-SHA1``
scheme, exactly as the official SDKs send it on ``apache.rocketmq.v2`` and, with the same
headers, on ``pocketmq.*.v1``, so one AccessKey/SecretKey works on every port.

A signed request carries two metadata entries::

    x-mq-date-time: 20261124T121314Z
    authorization:  MQv2-HMAC-SHA1 Credential=<accessKey>, SignedHeaders=x-mq-date-time, Signature=<hex>

where ``<hex>`` is the lowercase hex HMAC-SHA1 of the date-time string keyed with the secret key.
Pure functions only: no I/O, no clock other than the one passed in.
"""

from __future__ import annotations

import calendar
import dataclasses
import hashlib
import hmac
import time
from collections.abc import Callable

ALGORITHM = "MQv2-HMAC-SHA1"
AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
SIGNED_HEADERS = DATE_TIME
DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"


class AuthHeaderError(ValueError):
    """An ``authorization`` header that is not ``MQv2-HMAC-SHA1 Credential=..., Signature=...``."""


@dataclasses.dataclass(frozen=True)
class Credentials:
    """An AccessKey and its SecretKey (the secret never appears in repr())."""

    access_key: str
    secret_key: str = dataclasses.field(repr=False)

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("access key and secret key must both be set")
        if any(c in self.access_key for c in ", =\r\n"):
            raise ValueError("access key must not contain spaces, commas, '=' or line breaks")


def format_date_time(epoch_s: float) -> str:
    """UTC ``yyyyMMddTHHmmssZ`` of ``epoch_s``."""
    return time.strftime(DATE_TIME_FORMAT, time.gmtime(epoch_s))


def parse_date_time(text: str) -> float:
    """Epoch seconds of a ``yyyyMMddTHHmmssZ`` string read as UTC; ValueError when malformed."""
    return float(calendar.timegm(time.strptime(text, DATE_TIME_FORMAT)))


def sign(secret_key: str, date_time: str) -> str:
    """Lowercase hex HMAC-SHA1 of ``date_time`` keyed with ``secret_key``."""
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def authorization_value(access_key: str, signature: str) -> str:
    return f"{ALGORITHM} Credential={access_key}, SignedHeaders={SIGNED_HEADERS}, Signature={signature}"


def auth_metadata(credentials: Credentials, epoch_s: float) -> tuple[tuple[str, str], tuple[str, str]]:
    """The two metadata entries signing a request made at ``epoch_s``."""
    stamp = format_date_time(epoch_s)
    return ((DATE_TIME, stamp),
            (AUTHORIZATION, authorization_value(credentials.access_key, sign(credentials.secret_key, stamp))))


def parse_authorization(value: str) -> tuple[str, str]:
    """``(access key, signature)`` of an ``authorization`` value; AuthHeaderError otherwise.

    ``Credential`` may carry RocketMQ 4-style scope after a ``/`` (ignored). An empty
    ``Credential`` (the Python SDK signs with empty credentials when none are configured) gives
    ``("", "")``: an unauthenticated request."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise AuthHeaderError(f"unsupported authorization scheme (expected {ALGORITHM})")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        key, sep, val = part.strip().partition("=")
        if sep:
            fields[key.strip()] = val.strip()
    access_key = fields.get("Credential", "").split("/", 1)[0]
    signature = fields.get("Signature", "")
    if not access_key:
        return "", ""
    if not signature:
        raise AuthHeaderError("authorization lacks Credential or Signature")
    return access_key, signature


class Signer:
    """Signs requests for one credential, re-signing at most once per second (the date-time has
    second resolution, so the header is the same for every request within that second)."""

    def __init__(self, credentials: Credentials, clock: Callable[[], float] = time.time) -> None:
        self.credentials = credentials
        self._clock = clock
        self._second = -1
        self._metadata: tuple[tuple[str, str], ...] = ()

    @property
    def access_key(self) -> str:
        return self.credentials.access_key

    def metadata(self) -> tuple[tuple[str, str], ...]:
        now = self._clock()
        second = int(now)
        if second != self._second:
            self._metadata = auth_metadata(self.credentials, second)
            self._second = second
        return self._metadata
