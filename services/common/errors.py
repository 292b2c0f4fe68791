"""Errors raised by service code and their gRPC status mapping.

Service handlers raise :class:`ServiceError` subclasses; :func:`grpc_method` turns them into a
gRPC status with the error's message, so a client sees e.g. INVALID_ARGUMENT "topic name
'a b' has illegal characters" rather than UNKNOWN.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

log = logging.getLogger(__name__)


class ServiceError(Exception):
    code = grpc.StatusCode.INTERNAL


class InvalidArgumentError(ServiceError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFoundError(ServiceError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExistsError(ServiceError):
    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPreconditionError(ServiceError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class PermissionDeniedError(ServiceError):
    code = grpc.StatusCode.PERMISSION_DENIED


class UnavailableError(ServiceError):
    """A transient refusal the caller may retry (e.g. the store refused an op record)."""

    code = grpc.StatusCode.UNAVAILABLE


R = TypeVar("R")
Handler = Callable[..., Awaitable[R]]


def grpc_method(func: Handler[R]) -> Handler[R]:
    """Decorate an async servicer method ``(self, request, context)``: ServiceError -> its status;
    any other exception is logged and reported as INTERNAL with its text."""

    @functools.wraps(func)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> R:
        try:
            return await func(self, request, context)
        except ServiceError as exc:
            await context.abort(exc.code, str(exc))
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            log.exception("unhandled error in %s", func.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
        raise AssertionError("unreachable")  # context.abort always raises

    return wrapper
