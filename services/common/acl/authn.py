"""Who is calling: the ACL source (a hot-reloaded file, plus the broker's ACL table) and the
check of a request's ``MQv2-HMAC-SHA1`` signature within a bounded clock-skew window.

A verified ``(accessKey, x-mq-date-time, signature)`` triple is remembered until its date-time
leaves the window, so the HMAC is computed once per client per second rather than per request.
A request whose date-time is outside the window is refused even with a correct signature: a
captured header cannot be replayed once the window has passed.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from pocketmq.wire.auth import (
    AUTHORIZATION,
    DATE_TIME,
    AuthHeaderError,
    parse_authorization,
    parse_date_time,
    sign,
)
from services.common.acl.model import AclDocument, AclFormatError, User
from services.common.config import ConfigError

log = logging.getLogger(__name__)

#: How often the ACL file's modification is looked for (s).
RELOAD_CHECK_S = 1.0
#: Verified signatures remembered at most (the cache is emptied when full).
SIGNATURE_CACHE_MAX = 65_536


class AuthenticationError(Exception):
    """The request's credentials are missing parts, unknown, wrongly signed or out of window
    (the message names the access key at most, never the secret or the signature)."""


def read_acl_file(path: str) -> AclDocument:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise AclFormatError(f"cannot read {path}: {exc.strerror}") from None
    try:
        doc = json.loads(raw) if raw.strip() else {}
    except ValueError as exc:
        raise AclFormatError(f"{path}: not JSON: {exc}") from None
    return AclDocument.from_json(doc, path)


class AclStore:
    """The current ACL: the file's document (re-read when the file changes, e.g. a rotated
    Kubernetes Secret) merged with ``table()`` (the broker's ACL metadata table), the file
    winning for an access key defined in both."""

    def __init__(self, path: str = "", table: Callable[[], AclDocument] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._table = table
        self._clock = clock
        self._file_doc = AclDocument()
        self._stamp: tuple[int, int, int] | None = None
        self._next_check = 0.0
        self._table_doc: AclDocument | None = None
        self._merged = AclDocument()
        #: Changes whenever the effective ACL changes (caches key on it).
        self.generation = 0
        if path:
            try:
                self._file_doc = read_acl_file(path)
            except AclFormatError as exc:
                raise ConfigError("aclConfigFile", str(exc)) from None
            self._stamp = self._file_stamp()
        self._rebuild()

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _rebuild(self) -> None:
        table_doc = self._table() if self._table is not None else AclDocument()
        self._table_doc = table_doc
        self._merged = self._file_doc.merged(table_doc)
        self.generation += 1

    def table_changed(self) -> None:
        """The ACL table was modified (admin call or slave sync)."""
        self._rebuild()

    def current(self) -> AclDocument:
        if self.path and self._clock() >= self._next_check:
            self._next_check = self._clock() + RELOAD_CHECK_S
            stamp = self._file_stamp()
            if stamp is not None and stamp != self._stamp:
                try:
                    doc = read_acl_file(self.path)
                except AclFormatError as exc:
                    # Kept the previous ACL: a half-written file must not open or lock the cluster.
                    log.error("ACL file not reloaded", extra={"file": self.path, "error": str(exc)})
                else:
                    self._file_doc = doc
                    self._rebuild()
                    log.info("ACL file reloaded", extra={"file": self.path, "users": len(doc.users)})
                self._stamp = stamp
        return self._merged


class Authenticator:
    """Checks signed requests against the users of an :class:`AclStore`."""

    def __init__(self, store: AclStore, window_s: float, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.window_s = window_s
        self._clock = clock
        #: (authorization, x-mq-date-time) -> (user, date-time as epoch s) of verified requests.
        self._cache: dict[tuple[str, str], tuple[User, float]] = {}
        self._generation = -1

    def authenticate(self, authorization: str | None, date_time: str | None) -> User | None:
        """The calling user, None for an unsigned request; AuthenticationError when the request
        is signed but not acceptable."""
        doc = self.store.current()
        if self._generation != self.store.generation:
            self._cache.clear()
            self._generation = self.store.generation
        if not authorization:
            return None
        now = self._clock()
        key = (authorization, date_time or "")
        hit = self._cache.get(key)
        if hit is not None:
            if abs(now - hit[1]) <= self.window_s:
                return hit[0]
            del self._cache[key]
            raise AuthenticationError(f"request of {hit[0].access_key!r} is outside the accepted time window "
                                      f"(+-{self.window_s:g}s): re-sign it with the current time")
        try:
            access_key, signature = parse_authorization(authorization)
        except AuthHeaderError as exc:
            raise AuthenticationError(str(exc)) from None
        if not access_key:
            return None
        if not date_time:
            raise AuthenticationError(f"signed request without {DATE_TIME}")
        try:
            stamp = parse_date_time(date_time)
        except ValueError:
            raise AuthenticationError(f"{DATE_TIME} is not yyyyMMddTHHmmssZ") from None
        if abs(now - stamp) > self.window_s:
            raise AuthenticationError(f"request of {access_key!r} is outside the accepted time window "
                                      f"(+-{self.window_s:g}s; check the client's clock and that it "
                                      "sends UTC)")
        found = doc.users.get(access_key)
        # Compare against a dummy for unknown keys as well, so timing does not tell them apart.
        expected = sign(found.secret_key if found is not None else "-", date_time)
        if not hmac.compare_digest(expected, signature.lower()) or found is None:
            raise AuthenticationError(f"access key {access_key!r} is unknown or the signature is wrong")
        if len(self._cache) >= SIGNATURE_CACHE_MAX:
            self._cache.clear()
        self._cache[key] = (found, stamp)
        return found


def auth_headers(metadata: object) -> tuple[str | None, str | None]:
    """``(authorization, x-mq-date-time)`` from gRPC invocation metadata."""
    authorization = date_time = None
    for item in metadata or ():  # type: ignore[attr-defined]
        key, value = item[0], item[1]
        if key == AUTHORIZATION:
            authorization = value if isinstance(value, str) else value.decode()
        elif key == DATE_TIME:
            date_time = value if isinstance(value, str) else value.decode()
    return authorization, date_time
