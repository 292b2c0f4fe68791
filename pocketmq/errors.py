"""Errors raised by the PocketMQ client, one hierarchy rooted at :class:`PocketMQError`.

Every error carries a ``retriable`` flag: ``True`` means the same call may succeed if repeated
(possibly against another broker) without risk beyond a duplicate message; ``False`` means
repeating it unchanged will fail the same way (bad argument, missing topic, ...) or must not be
repeated blindly (the message is already stored, see :class:`NotDurableError`).

gRPC failures become subclasses of :class:`RpcError` through :func:`from_rpc_error`; broker
put statuses that are not ``PUT_OK`` become :class:`SendError` subclasses through
:func:`from_put_status`.
"""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any, ClassVar

import grpc

if TYPE_CHECKING:
    from pocketmq.client.message import SendResult

__all__ = [
    "AlreadyExistsError",
    "BrokerBusyError",
    "ClientClosedError",
    "ConnectionFailedError",
    "FailedPreconditionError",
    "FlushDiskTimeoutError",
    "FlushSlaveTimeoutError",
    "InternalError",
    "InvalidArgumentError",
    "InvalidRequestError",
    "MessageIllegalError",
    "NoRouteError",
    "NotDurableError",
    "NotFoundError",
    "PermissionDeniedError",
    "PocketMQError",
    "PropertiesTooLargeError",
    "RequestCancelledError",
    "RequestTimeoutError",
    "ResourceExhaustedError",
    "RpcError",
    "SendError",
    "ServiceNotAvailableError",
    "SlaveNotAvailableError",
    "StorageError",
    "UnimplementedError",
    "from_put_status",
    "from_rpc_error",
    "from_status_name",
]


class PocketMQError(Exception):
    """Base of every error the client raises.

    ``address`` is the server (``host:port``) the failing call went to, when there was one.
    """

    retriable: ClassVar[bool] = False

    def __init__(self, message: str, *, address: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.address = address

    def __str__(self) -> str:
        return f"{self.message} ({self.address})" if self.address else self.message

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly description (the CLI prints it with ``--output json``)."""
        return {"type": type(self).__name__, "message": self.message, "address": self.address,
                "retriable": self.retriable}


# -- client-side errors ------------------------------------------------------------------------


class ClientClosedError(PocketMQError):
    """The producer/consumer is not started, or already closed."""


class InvalidArgumentError(PocketMQError, ValueError):
    """A bad argument, rejected by the client or the server (gRPC INVALID_ARGUMENT)."""


class NoRouteError(PocketMQError):
    """No NameServer knows a live broker serving the topic (or no queue is writable/readable).

    Retriable: brokers register every few seconds, and a topic created just now appears in
    routes shortly after."""

    retriable = True


# -- gRPC failures -----------------------------------------------------------------------------


class RpcError(PocketMQError):
    """A call failed with a gRPC status other than OK. ``code`` is the status code."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str, *, address: str = "", code: grpc.StatusCode | None = None) -> None:
        super().__init__(message, address=address)
        if code is not None:
            self.code = code

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "code": self.code.name}


class ConnectionFailedError(RpcError, builtins.ConnectionError):
    """The server could not be reached or dropped the connection (UNAVAILABLE)."""

    retriable = True
    code = grpc.StatusCode.UNAVAILABLE


class RequestTimeoutError(RpcError, builtins.TimeoutError):
    """The call's deadline passed (DEADLINE_EXCEEDED). A send that timed out may still have been
    stored: retrying it can produce a duplicate (at-least-once)."""

    retriable = True
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class RequestCancelledError(RpcError):
    """The call was cancelled (CANCELLED), typically because its channel closed."""

    retriable = True
    code = grpc.StatusCode.CANCELLED


class ResourceExhaustedError(RpcError):
    """The server refused the call for lack of resources (RESOURCE_EXHAUSTED)."""

    retriable = True
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class NotFoundError(RpcError):
    """The topic, group, offset or key does not exist (NOT_FOUND)."""

    code = grpc.StatusCode.NOT_FOUND


class AlreadyExistsError(RpcError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDeniedError(RpcError):
    """Not allowed, e.g. writing a topic whose queues are not writable (PERMISSION_DENIED)."""

    code = grpc.StatusCode.PERMISSION_DENIED


class FailedPreconditionError(RpcError):
    """The server is not in a state to do this, e.g. a write sent to a slave
    (FAILED_PRECONDITION). Routes are refreshed when a producer meets it."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class UnimplementedError(RpcError):
    """The server does not offer this call (UNIMPLEMENTED): an older server version."""

    code = grpc.StatusCode.UNIMPLEMENTED


class InternalError(RpcError):
    """The server failed unexpectedly (INTERNAL, UNKNOWN, DATA_LOSS, ...)."""

    code = grpc.StatusCode.INTERNAL


class InvalidRequestError(InvalidArgumentError, RpcError):
    """The server refused the request's arguments (INVALID_ARGUMENT, OUT_OF_RANGE)."""

    code = grpc.StatusCode.INVALID_ARGUMENT


_BY_CODE: dict[grpc.StatusCode, type[RpcError]] = {
    grpc.StatusCode.UNAVAILABLE: ConnectionFailedError,
    grpc.StatusCode.DEADLINE_EXCEEDED: RequestTimeoutError,
    grpc.StatusCode.CANCELLED: RequestCancelledError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNAUTHENTICATED: PermissionDeniedError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidRequestError,
    grpc.StatusCode.OUT_OF_RANGE: InvalidRequestError,
    grpc.StatusCode.UNIMPLEMENTED: UnimplementedError,
}


def from_rpc_error(exc: grpc.RpcError, address: str = "", what: str = "") -> RpcError:
    """The client error for a failed gRPC call (``exc`` from a stub). ``what`` names the call
    in the message, e.g. ``"SendMessage"``."""
    code_fn = getattr(exc, "code", None)
    code = code_fn() if callable(code_fn) else grpc.StatusCode.UNKNOWN
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    details_fn = getattr(exc, "details", None)
    details = (details_fn() if callable(details_fn) else None) or code.name.lower().replace("_", " ")
    cls = _BY_CODE.get(code, InternalError)
    message = f"{what}: {details}" if what else str(details)
    return cls(message, address=address, code=code)


def from_status_name(code_name: str, details: str, address: str = "", what: str = "") -> RpcError:
    """The client error for a failure reported inside a reply (a status code name such as
    ``"FAILED_PRECONDITION"`` and its message), as :func:`from_rpc_error` would raise it."""
    code = grpc.StatusCode.__members__.get(code_name, grpc.StatusCode.UNKNOWN)
    cls = _BY_CODE.get(code, InternalError)
    return cls(f"{what}: {details}" if what else details, address=address, code=code)


# -- put statuses ------------------------------------------------------------------------------


class SendError(PocketMQError):
    """The broker answered a send with a put status other than PUT_OK. ``status`` is the
    status name (RocketMQ's PutMessageStatus), ``stored`` whether the message is stored."""

    status: ClassVar[str] = "UNKNOWN_ERROR"
    stored: ClassVar[bool] = False

    def __init__(self, message: str, *, address: str = "", result: SendResult | None = None) -> None:
        super().__init__(message, address=address)
        #: The send's result (msg id, queue, offset) when the message was stored.
        self.result = result

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "status": self.status, "stored": self.stored}


class ServiceNotAvailableError(SendError):
    """The broker cannot store messages right now (SERVICE_NOT_AVAILABLE, UNKNOWN_ERROR):
    nothing stored; another broker may take it."""

    status = "SERVICE_NOT_AVAILABLE"
    retriable = True


class BrokerBusyError(SendError):
    """The broker's page cache is busy (OS_PAGECACHE_BUSY): nothing stored; retry elsewhere."""

    status = "OS_PAGECACHE_BUSY"
    retriable = True


class StorageError(SendError):
    """The broker could not create a commit-log file (CREATE_MAPPED_FILE_FAILED): nothing
    stored; another broker may take it."""

    status = "CREATE_MAPPED_FILE_FAILED"
    retriable = True


class MessageIllegalError(SendError, InvalidArgumentError):
    """The broker refused the message itself (MESSAGE_ILLEGAL: empty or too large body,
    reserved property, ...). Sending it again fails the same way."""

    status = "MESSAGE_ILLEGAL"


class PropertiesTooLargeError(MessageIllegalError):
    status = "PROPERTIES_SIZE_EXCEEDED"


class NotDurableError(SendError):
    """The message IS stored on the master but not as durable as configured: do not resend it
    blindly (that stores a second copy). Raised only by ``send(..., require_durable=True)``;
    otherwise the status is reported in the :class:`~pocketmq.SendResult`."""

    stored = True


class FlushDiskTimeoutError(NotDurableError):
    """Stored, but not flushed to disk within syncFlushTimeout (SYNC_FLUSH brokers)."""

    status = "FLUSH_DISK_TIMEOUT"


class FlushSlaveTimeoutError(NotDurableError):
    """Stored on the master, but no slave acknowledged it within slaveTimeout (SYNC_MASTER)."""

    status = "FLUSH_SLAVE_TIMEOUT"


class SlaveNotAvailableError(NotDurableError):
    """Stored on the master, but no slave is connected or in sync (SYNC_MASTER): it is not
    replicated yet."""

    status = "SLAVE_NOT_AVAILABLE"


_BY_STATUS: dict[str, type[SendError]] = {
    cls.status: cls
    for cls in (ServiceNotAvailableError, BrokerBusyError, StorageError, MessageIllegalError,
                PropertiesTooLargeError, FlushDiskTimeoutError, FlushSlaveTimeoutError,
                SlaveNotAvailableError)
}
_BY_STATUS["UNKNOWN_ERROR"] = ServiceNotAvailableError
_BY_STATUS["PUT_STATUS_UNSPECIFIED"] = ServiceNotAvailableError


def from_put_status(status: str, remark: str = "", *, address: str = "",
                    result: SendResult | None = None) -> SendError:
    """The error for a put status name other than ``PUT_OK`` (``remark`` is the broker's text)."""
    cls = _BY_STATUS.get(status, ServiceNotAvailableError)
    text = f"{status}: {remark}" if remark else status
    if cls.stored:
        text += " (the message is stored; resending it stores a duplicate)"
    return cls(text, address=address, result=result)
