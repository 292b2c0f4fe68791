from __future__ import annotations

import grpc
import pytest

from pocketmq import errors as e


class FakeRpcError(grpc.RpcError):  # type: ignore[misc]
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


@pytest.mark.parametrize(("code", "cls", "retriable"), [
    (grpc.StatusCode.UNAVAILABLE, e.ConnectionFailedError, True),
    (grpc.StatusCode.DEADLINE_EXCEEDED, e.RequestTimeoutError, True),
    (grpc.StatusCode.CANCELLED, e.RequestCancelledError, True),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, e.ResourceExhaustedError, True),
    (grpc.StatusCode.NOT_FOUND, e.NotFoundError, False),
    (grpc.StatusCode.INVALID_ARGUMENT, e.InvalidRequestError, False),
    (grpc.StatusCode.FAILED_PRECONDITION, e.FailedPreconditionError, False),
    (grpc.StatusCode.PERMISSION_DENIED, e.PermissionDeniedError, False),
    (grpc.StatusCode.ALREADY_EXISTS, e.AlreadyExistsError, False),
    (grpc.StatusCode.UNIMPLEMENTED, e.UnimplementedError, False),
    (grpc.StatusCode.INTERNAL, e.InternalError, False),
    (grpc.StatusCode.DATA_LOSS, e.InternalError, False),
])
def test_grpc_codes_map_to_one_hierarchy(
    code: grpc.StatusCode, cls: type[e.RpcError], retriable: bool
) -> None:
    err = e.from_rpc_error(FakeRpcError(code, "topic 'x' does not exist"), "10.0.0.1:10911", "GetTopic")
    assert type(err) is cls
    assert isinstance(err, e.PocketMQError) and isinstance(err, e.RpcError)
    assert err.retriable is retriable
    assert err.code == code
    assert str(err) == "GetTopic: topic 'x' does not exist (10.0.0.1:10911)"
    assert err.to_dict()["code"] == code.name


def test_builtin_bases_for_idiomatic_except() -> None:
    assert isinstance(e.ConnectionFailedError("x"), ConnectionError)
    assert isinstance(e.RequestTimeoutError("x"), TimeoutError)
    assert isinstance(e.InvalidArgumentError("x"), ValueError)
    assert isinstance(e.InvalidRequestError("x"), ValueError)


@pytest.mark.parametrize(("status", "cls", "retriable", "stored"), [
    ("SERVICE_NOT_AVAILABLE", e.ServiceNotAvailableError, True, False),
    ("OS_PAGECACHE_BUSY", e.BrokerBusyError, True, False),
    ("CREATE_MAPPED_FILE_FAILED", e.StorageError, True, False),
    ("UNKNOWN_ERROR", e.ServiceNotAvailableError, True, False),
    ("MESSAGE_ILLEGAL", e.MessageIllegalError, False, False),
    ("PROPERTIES_SIZE_EXCEEDED", e.PropertiesTooLargeError, False, False),
    ("FLUSH_DISK_TIMEOUT", e.FlushDiskTimeoutError, False, True),
    ("FLUSH_SLAVE_TIMEOUT", e.FlushSlaveTimeoutError, False, True),
    ("SLAVE_NOT_AVAILABLE", e.SlaveNotAvailableError, False, True),
])
def test_put_statuses(status: str, cls: type[e.SendError], retriable: bool, stored: bool) -> None:
    err = e.from_put_status(status, "why", address="b:1")
    assert type(err) is cls
    assert err.retriable is retriable and err.stored is stored
    assert err.status == status or status == "UNKNOWN_ERROR"
    assert ("stored" in str(err)) is stored
    if stored:
        assert isinstance(err, e.NotDurableError)


def test_every_exported_error_derives_from_the_root() -> None:
    for name in e.__all__:
        obj = getattr(e, name)
        if isinstance(obj, type):
            assert issubclass(obj, e.PocketMQError), name
