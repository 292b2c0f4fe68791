from pocketmq.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RegisterBrokerRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id", "broker_addr", "ha_server_addr", "topic_config_version", "topic_configs", "metrics_addr", "broker_role", "acl_table", "topic_delta_base", "deleted_topics")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    HA_SERVER_ADDR_FIELD_NUMBER: _ClassVar[int]
    TOPIC_CONFIG_VERSION_FIELD_NUMBER: _ClassVar[int]
    TOPIC_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    METRICS_ADDR_FIELD_NUMBER: _ClassVar[int]
    BROKER_ROLE_FIELD_NUMBER: _ClassVar[int]
    ACL_TABLE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_DELTA_BASE_FIELD_NUMBER: _ClassVar[int]
    DELETED_TOPICS_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    ha_server_addr: str
    topic_config_version: _common_pb2.DataVersion
    topic_configs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicConfig]
    metrics_addr: str
    broker_role: str
    acl_table: _common_pb2.AclTable
    topic_delta_base: _common_pb2.DataVersion
    deleted_topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., broker_addr: _Optional[str] = ..., ha_server_addr: _Optional[str] = ..., topic_config_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ..., topic_configs: _Optional[_Iterable[_Union[_common_pb2.TopicConfig, _Mapping]]] = ..., metrics_addr: _Optional[str] = ..., broker_role: _Optional[str] = ..., acl_table: _Optional[_Union[_common_pb2.AclTable, _Mapping]] = ..., topic_delta_base: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ..., deleted_topics: _Optional[_Iterable[str]] = ...) -> None: ...

class RegisterBrokerResponse(_message.Message):
    __slots__ = ("master_addr", "ha_server_addr", "order_topic_config", "topic_delta_supported", "topic_full_needed")
    class OrderTopicConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    HA_SERVER_ADDR_FIELD_NUMBER: _ClassVar[int]
    ORDER_TOPIC_CONFIG_FIELD_NUMBER: _ClassVar[int]
    TOPIC_DELTA_SUPPORTED_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FULL_NEEDED_FIELD_NUMBER: _ClassVar[int]
    master_addr: str
    ha_server_addr: str
    order_topic_config: _containers.ScalarMap[str, str]
    topic_delta_supported: bool
    topic_full_needed: bool
    def __init__(self, master_addr: _Optional[str] = ..., ha_server_addr: _Optional[str] = ..., order_topic_config: _Optional[_Mapping[str, str]] = ..., topic_delta_supported: _Optional[bool] = ..., topic_full_needed: _Optional[bool] = ...) -> None: ...

class UnregisterBrokerRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id", "broker_addr")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., broker_addr: _Optional[str] = ...) -> None: ...

class UnregisterBrokerResponse(_message.Message):
    __slots__ = ("removed",)
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    removed: bool
    def __init__(self, removed: _Optional[bool] = ...) -> None: ...

class GetRouteInfoByTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class QueueData(_message.Message):
    __slots__ = ("broker_name", "read_queue_nums", "write_queue_nums", "perm", "topic_sys_flag", "message_type")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    TOPIC_SYS_FLAG_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int
    message_type: str
    def __init__(self, broker_name: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., topic_sys_flag: _Optional[int] = ..., message_type: _Optional[str] = ...) -> None: ...

class BrokerData(_message.Message):
    __slots__ = ("cluster", "broker_name", "broker_addrs")
    class BrokerAddrsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: str
        def __init__(self, key: _Optional[int] = ..., value: _Optional[str] = ...) -> None: ...
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDRS_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    broker_name: str
    broker_addrs: _containers.ScalarMap[int, str]
    def __init__(self, cluster: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_addrs: _Optional[_Mapping[int, str]] = ...) -> None: ...

class TopicRouteData(_message.Message):
    __slots__ = ("queue_datas", "broker_datas", "order_topic_conf")
    QUEUE_DATAS_FIELD_NUMBER: _ClassVar[int]
    BROKER_DATAS_FIELD_NUMBER: _ClassVar[int]
    ORDER_TOPIC_CONF_FIELD_NUMBER: _ClassVar[int]
    queue_datas: _containers.RepeatedCompositeFieldContainer[QueueData]
    broker_datas: _containers.RepeatedCompositeFieldContainer[BrokerData]
    order_topic_conf: str
    def __init__(self, queue_datas: _Optional[_Iterable[_Union[QueueData, _Mapping]]] = ..., broker_datas: _Optional[_Iterable[_Union[BrokerData, _Mapping]]] = ..., order_topic_conf: _Optional[str] = ...) -> None: ...

class GetBrokerClusterInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ClusterBrokerNames(_message.Message):
    __slots__ = ("broker_names",)
    BROKER_NAMES_FIELD_NUMBER: _ClassVar[int]
    broker_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, broker_names: _Optional[_Iterable[str]] = ...) -> None: ...

class BrokerLiveInfo(_message.Message):
    __slots__ = ("broker_addr", "ha_server_addr", "last_update_timestamp", "data_version", "metrics_addr", "broker_role", "cluster_name", "broker_name", "broker_id")
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    HA_SERVER_ADDR_FIELD_NUMBER: _ClassVar[int]
    LAST_UPDATE_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    METRICS_ADDR_FIELD_NUMBER: _ClassVar[int]
    BROKER_ROLE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    broker_addr: str
    ha_server_addr: str
    last_update_timestamp: int
    data_version: _common_pb2.DataVersion
    metrics_addr: str
    broker_role: str
    cluster_name: str
    broker_name: str
    broker_id: int
    def __init__(self, broker_addr: _Optional[str] = ..., ha_server_addr: _Optional[str] = ..., last_update_timestamp: _Optional[int] = ..., data_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ..., metrics_addr: _Optional[str] = ..., broker_role: _Optional[str] = ..., cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ...) -> None: ...

class ClusterInfo(_message.Message):
    __slots__ = ("broker_addr_table", "cluster_addr_table", "broker_live_table")
    class BrokerAddrTableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: BrokerData
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[BrokerData, _Mapping]] = ...) -> None: ...
    class ClusterAddrTableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ClusterBrokerNames
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ClusterBrokerNames, _Mapping]] = ...) -> None: ...
    class BrokerLiveTableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: BrokerLiveInfo
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[BrokerLiveInfo, _Mapping]] = ...) -> None: ...
    BROKER_ADDR_TABLE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ADDR_TABLE_FIELD_NUMBER: _ClassVar[int]
    BROKER_LIVE_TABLE_FIELD_NUMBER: _ClassVar[int]
    broker_addr_table: _containers.MessageMap[str, BrokerData]
    cluster_addr_table: _containers.MessageMap[str, ClusterBrokerNames]
    broker_live_table: _containers.MessageMap[str, BrokerLiveInfo]
    def __init__(self, broker_addr_table: _Optional[_Mapping[str, BrokerData]] = ..., cluster_addr_table: _Optional[_Mapping[str, ClusterBrokerNames]] = ..., broker_live_table: _Optional[_Mapping[str, BrokerLiveInfo]] = ...) -> None: ...

class GetTopicsByClusterRequest(_message.Message):
    __slots__ = ("cluster",)
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    def __init__(self, cluster: _Optional[str] = ...) -> None: ...

class GetAllTopicListRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TopicList(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topics: _Optional[_Iterable[str]] = ...) -> None: ...

class WipeWritePermOfBrokerRequest(_message.Message):
    __slots__ = ("broker_name",)
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    def __init__(self, broker_name: _Optional[str] = ...) -> None: ...

class WipeWritePermOfBrokerResponse(_message.Message):
    __slots__ = ("wipe_topic_count",)
    WIPE_TOPIC_COUNT_FIELD_NUMBER: _ClassVar[int]
    wipe_topic_count: int
    def __init__(self, wipe_topic_count: _Optional[int] = ...) -> None: ...

class AddWritePermOfBrokerRequest(_message.Message):
    __slots__ = ("broker_name",)
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    def __init__(self, broker_name: _Optional[str] = ...) -> None: ...

class AddWritePermOfBrokerResponse(_message.Message):
    __slots__ = ("add_topic_count",)
    ADD_TOPIC_COUNT_FIELD_NUMBER: _ClassVar[int]
    add_topic_count: int
    def __init__(self, add_topic_count: _Optional[int] = ...) -> None: ...

class PutKVConfigRequest(_message.Message):
    __slots__ = ("namespace", "key", "value")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    key: str
    value: str
    def __init__(self, namespace: _Optional[str] = ..., key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class PutKVConfigResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetKVConfigRequest(_message.Message):
    __slots__ = ("namespace", "key")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    key: str
    def __init__(self, namespace: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class GetKVConfigResponse(_message.Message):
    __slots__ = ("value",)
    VALUE_FIELD_NUMBER: _ClassVar[int]
    value: str
    def __init__(self, value: _Optional[str] = ...) -> None: ...

class DeleteKVConfigRequest(_message.Message):
    __slots__ = ("namespace", "key")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    key: str
    def __init__(self, namespace: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class DeleteKVConfigResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetKVListByNamespaceRequest(_message.Message):
    __slots__ = ("namespace",)
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    def __init__(self, namespace: _Optional[str] = ...) -> None: ...

class GetKVListByNamespaceResponse(_message.Message):
    __slots__ = ("table",)
    class TableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TABLE_FIELD_NUMBER: _ClassVar[int]
    table: _containers.ScalarMap[str, str]
    def __init__(self, table: _Optional[_Mapping[str, str]] = ...) -> None: ...

class RelayBrokerCallRequest(_message.Message):
    __slots__ = ("broker_addr", "method", "request", "timeout_ms")
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    broker_addr: str
    method: str
    request: bytes
    timeout_ms: int
    def __init__(self, broker_addr: _Optional[str] = ..., method: _Optional[str] = ..., request: _Optional[bytes] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class RelayBrokerCallResponse(_message.Message):
    __slots__ = ("response",)
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: bytes
    def __init__(self, response: _Optional[bytes] = ...) -> None: ...
