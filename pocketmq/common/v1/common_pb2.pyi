from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Permission(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PERMISSION_UNSPECIFIED: _ClassVar[Permission]
    PERMISSION_INHERIT: _ClassVar[Permission]
    PERMISSION_WRITE: _ClassVar[Permission]
    PERMISSION_READ: _ClassVar[Permission]
PERMISSION_UNSPECIFIED: Permission
PERMISSION_INHERIT: Permission
PERMISSION_WRITE: Permission
PERMISSION_READ: Permission

class DataVersion(_message.Message):
    __slots__ = ("timestamp", "counter")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    COUNTER_FIELD_NUMBER: _ClassVar[int]
    timestamp: int
    counter: int
    def __init__(self, timestamp: _Optional[int] = ..., counter: _Optional[int] = ...) -> None: ...

class TopicConfig(_message.Message):
    __slots__ = ("topic_name", "read_queue_nums", "write_queue_nums", "perm", "topic_sys_flag", "order", "attributes")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    TOPIC_SYS_FLAG_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    topic_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int
    order: bool
    attributes: _containers.ScalarMap[str, str]
    def __init__(self, topic_name: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., topic_sys_flag: _Optional[int] = ..., order: _Optional[bool] = ..., attributes: _Optional[_Mapping[str, str]] = ...) -> None: ...

class AclPolicy(_message.Message):
    __slots__ = ("resource", "actions", "deny", "source_ips")
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    DENY_FIELD_NUMBER: _ClassVar[int]
    SOURCE_IPS_FIELD_NUMBER: _ClassVar[int]
    resource: str
    actions: _containers.RepeatedScalarFieldContainer[str]
    deny: bool
    source_ips: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, resource: _Optional[str] = ..., actions: _Optional[_Iterable[str]] = ..., deny: _Optional[bool] = ..., source_ips: _Optional[_Iterable[str]] = ...) -> None: ...

class AclUser(_message.Message):
    __slots__ = ("access_key", "secret_key", "user_type", "policies")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    SECRET_KEY_FIELD_NUMBER: _ClassVar[int]
    USER_TYPE_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    secret_key: str
    user_type: str
    policies: _containers.RepeatedCompositeFieldContainer[AclPolicy]
    def __init__(self, access_key: _Optional[str] = ..., secret_key: _Optional[str] = ..., user_type: _Optional[str] = ..., policies: _Optional[_Iterable[_Union[AclPolicy, _Mapping]]] = ...) -> None: ...

class AclTable(_message.Message):
    __slots__ = ("data_version", "users")
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    USERS_FIELD_NUMBER: _ClassVar[int]
    data_version: DataVersion
    users: _containers.RepeatedCompositeFieldContainer[AclUser]
    def __init__(self, data_version: _Optional[_Union[DataVersion, _Mapping]] = ..., users: _Optional[_Iterable[_Union[AclUser, _Mapping]]] = ...) -> None: ...
