"""v2 ``Status`` values: the error type handlers raise, and the mappings from PocketMQ's
service errors and put statuses to RocketMQ 5 codes.

RocketMQ 5 answers request errors in the response's ``status`` (the gRPC call itself ends OK), so
an SDK sees a code such as TOPIC_NOT_FOUND with a readable message instead of a transport
error. Everything here is pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from apache.rocketmq.v2 import definition_pb2, service_pb2
from services.broker.storage.status import PutMessageStatus
from services.common.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ServiceError,
    UnavailableError,
)

Code = definition_pb2.Code
SERVICE_NAME: str = service_pb2.DESCRIPTOR.services_by_name["MessagingService"].full_name
_METHODS = service_pb2.DESCRIPTOR.services_by_name["MessagingService"].methods_by_name


class V2Error(Exception):
    """A request refused with a v2 status code (raised by validation and handlers)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def status(self) -> definition_pb2.Status:
        return definition_pb2.Status(code=self.code, message=self.message)  # type: ignore[arg-type]


def status(code: int, message: str = "") -> definition_pb2.Status:
    return definition_pb2.Status(code=code, message=message or Code.Name(code))  # type: ignore[arg-type]


def ok() -> definition_pb2.Status:
    return definition_pb2.Status(code=Code.OK, message="OK")


def code_name(code: int) -> str:
    try:
        return Code.Name(code)  # type: ignore[arg-type]
    except ValueError:
        return str(code)


_SERVICE_ERROR_CODES: Mapping[type[ServiceError], int] = {
    InvalidArgumentError: Code.BAD_REQUEST,
    NotFoundError: Code.NOT_FOUND,
    AlreadyExistsError: Code.BAD_REQUEST,
    FailedPreconditionError: Code.PRECONDITION_FAILED,
    PermissionDeniedError: Code.FORBIDDEN,
    UnavailableError: Code.INTERNAL_SERVER_ERROR,
}


def from_service_error(exc: ServiceError, *, not_found: int = Code.NOT_FOUND,
                       invalid: int = Code.BAD_REQUEST) -> V2Error:
    """The v2 error for a PocketMQ service error; callers name the specific codes that fit
    their request (e.g. TOPIC_NOT_FOUND for an unknown topic on send)."""
    if isinstance(exc, NotFoundError):
        code = not_found
    elif isinstance(exc, InvalidArgumentError):
        code = invalid
    else:
        code = next((c for t, c in _SERVICE_ERROR_CODES.items() if isinstance(exc, t)),
                    Code.INTERNAL_SERVER_ERROR)
    return V2Error(code, str(exc))


#: Put statuses of a stored message that did not reach the configured durability, and the
#: put failures, as v2 codes (RocketMQ's proxy maps them the same way).
PUT_STATUS_CODES: Mapping[PutMessageStatus, int] = {
    PutMessageStatus.PUT_OK: Code.OK,
    PutMessageStatus.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
    PutMessageStatus.SERVICE_NOT_AVAILABLE: Code.INTERNAL_SERVER_ERROR,
    PutMessageStatus.CREATE_MAPPED_FILE_FAILED: Code.INTERNAL_SERVER_ERROR,
    PutMessageStatus.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: Code.MESSAGE_PROPERTIES_TOO_LARGE,
    PutMessageStatus.OS_PAGECACHE_BUSY: Code.TOO_MANY_REQUESTS,
    PutMessageStatus.UNKNOWN_ERROR: Code.INTERNAL_SERVER_ERROR,
}


def response_class(method: str) -> Any:
    """The generated response message class of a MessagingService method."""
    return getattr(service_pb2, _METHODS[method].output_type.name)


def method_names() -> list[str]:
    return list(_METHODS)


def is_streaming(method: str) -> bool:
    return bool(_METHODS[method].server_streaming)
