"""gRPC client interceptors that sign every call of a channel (all four call shapes) with
:mod:`pocketmq.wire.auth` headers. Used by the client's channel pool and by brokers for their
own calls (registration, slave metadata sync). Credentials from the environment:
``POCKETMQ_ACCESS_KEY`` / ``POCKETMQ_SECRET_KEY``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import grpc
from grpc.aio import StreamStreamClientInterceptor as _StreamStream
from grpc.aio import StreamUnaryClientInterceptor as _StreamUnary
from grpc.aio import UnaryStreamClientInterceptor as _UnaryStream
from grpc.aio import UnaryUnaryClientInterceptor as _UnaryUnary

from pocketmq.wire.auth import AUTHORIZATION, DATE_TIME, Credentials, Signer

ACCESS_KEY_ENV = "POCKETMQ_ACCESS_KEY"
SECRET_KEY_ENV = "POCKETMQ_SECRET_KEY"


def credentials_from_env(environ: Mapping[str, str] | None = None) -> Credentials | None:
    """Credentials from ``POCKETMQ_ACCESS_KEY``/``POCKETMQ_SECRET_KEY`` (None when unset);
    ValueError when only one of them is set."""
    env = os.environ if environ is None else environ
    ak, sk = env.get(ACCESS_KEY_ENV, "").strip(), env.get(SECRET_KEY_ENV, "").strip()
    if not ak and not sk:
        return None
    if not ak or not sk:
        raise ValueError(f"set both {ACCESS_KEY_ENV} and {SECRET_KEY_ENV}, or neither")
    return Credentials(ak, sk)


def make_credentials(access_key: str | None, secret_key: str | None) -> Credentials | None:
    """Explicit credentials when given (both or neither), else the environment's."""
    if access_key or secret_key:
        if not access_key or not secret_key:
            raise ValueError("an access key needs its secret key (and the other way round)")
        return Credentials(access_key, secret_key)
    return credentials_from_env()


class _Signing:
    """Adds ``authorization`` and ``x-mq-date-time`` to each call (a call that already carries
    an ``authorization``, e.g. one relayed on a caller's behalf, keeps it)."""

    def __init__(self, signer: Signer) -> None:
        self.signer = signer

    def _details(self, details: Any) -> Any:
        existing = list(details.metadata or ())
        if any(item[0] == AUTHORIZATION for item in existing):
            return details
        existing = [item for item in existing if item[0] != DATE_TIME]
        return details._replace(metadata=grpc.aio.Metadata(*existing, *self.signer.metadata()))


# grpc.aio files each interceptor under the first call shape it implements, so every shape
# needs an interceptor object of its own.
class _UnaryUnarySigner(_Signing, _UnaryUnary):  # type: ignore[misc]
    async def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await continuation(self._details(client_call_details), request)


class _UnaryStreamSigner(_Signing, _UnaryStream):  # type: ignore[misc]
    async def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await continuation(self._details(client_call_details), request)


class _StreamUnarySigner(_Signing, _StreamUnary):  # type: ignore[misc]
    async def intercept_stream_unary(self, continuation: Any, client_call_details: Any,
                                     request_iterator: Any) -> Any:
        return await continuation(self._details(client_call_details), request_iterator)


class _StreamStreamSigner(_Signing, _StreamStream):  # type: ignore[misc]
    async def intercept_stream_stream(self, continuation: Any, client_call_details: Any,
                                      request_iterator: Any) -> Any:
        return await continuation(self._details(client_call_details), request_iterator)


def signing_interceptors(credentials: Credentials | None) -> list[Any]:
    """Interceptors for ``grpc.aio.*_channel(..., interceptors=...)`` signing every call of the
    channel, one per call shape; none without credentials."""
    if credentials is None:
        return []
    signer = Signer(credentials)
    shapes = (_UnaryUnarySigner, _UnaryStreamSigner, _StreamUnarySigner, _StreamStreamSigner)
    return [shape(signer) for shape in shapes]
