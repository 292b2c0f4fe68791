from pocketmq.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PutStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PUT_STATUS_UNSPECIFIED: _ClassVar[PutStatus]
    PUT_OK: _ClassVar[PutStatus]
    FLUSH_DISK_TIMEOUT: _ClassVar[PutStatus]
    FLUSH_SLAVE_TIMEOUT: _ClassVar[PutStatus]
    SLAVE_NOT_AVAILABLE: _ClassVar[PutStatus]
    SERVICE_NOT_AVAILABLE: _ClassVar[PutStatus]
    CREATE_MAPPED_FILE_FAILED: _ClassVar[PutStatus]
    MESSAGE_ILLEGAL: _ClassVar[PutStatus]
    PROPERTIES_SIZE_EXCEEDED: _ClassVar[PutStatus]
    OS_PAGECACHE_BUSY: _ClassVar[PutStatus]
    UNKNOWN_ERROR: _ClassVar[PutStatus]

class PullStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PULL_STATUS_UNSPECIFIED: _ClassVar[PullStatus]
    FOUND: _ClassVar[PullStatus]
    NO_NEW_MSG: _ClassVar[PullStatus]
    NO_MATCHED_MSG: _ClassVar[PullStatus]
    OFFSET_ILLEGAL: _ClassVar[PullStatus]
PUT_STATUS_UNSPECIFIED: PutStatus
PUT_OK: PutStatus
FLUSH_DISK_TIMEOUT: PutStatus
FLUSH_SLAVE_TIMEOUT: PutStatus
SLAVE_NOT_AVAILABLE: PutStatus
SERVICE_NOT_AVAILABLE: PutStatus
CREATE_MAPPED_FILE_FAILED: PutStatus
MESSAGE_ILLEGAL: PutStatus
PROPERTIES_SIZE_EXCEEDED: PutStatus
OS_PAGECACHE_BUSY: PutStatus
UNKNOWN_ERROR: PutStatus
PULL_STATUS_UNSPECIFIED: PullStatus
FOUND: PullStatus
NO_NEW_MSG: PullStatus
NO_MATCHED_MSG: PullStatus
OFFSET_ILLEGAL: PullStatus

class Message(_message.Message):
    __slots__ = ("topic", "body", "tags", "keys", "properties", "delay_level", "flag")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    FLAG_FIELD_NUMBER: _ClassVar[int]
    topic: str
    body: bytes
    tags: str
    keys: str
    properties: _containers.ScalarMap[str, str]
    delay_level: int
    flag: int
    def __init__(self, topic: _Optional[str] = ..., body: _Optional[bytes] = ..., tags: _Optional[str] = ..., keys: _Optional[str] = ..., properties: _Optional[_Mapping[str, str]] = ..., delay_level: _Optional[int] = ..., flag: _Optional[int] = ...) -> None: ...

class MessageExt(_message.Message):
    __slots__ = ("topic", "queue_id", "queue_offset", "commit_log_offset", "msg_id", "body", "tags", "keys", "properties", "born_timestamp", "store_timestamp", "born_host", "store_host", "reconsume_times", "store_size", "flag", "sys_flag")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    BORN_HOST_FIELD_NUMBER: _ClassVar[int]
    STORE_HOST_FIELD_NUMBER: _ClassVar[int]
    RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    STORE_SIZE_FIELD_NUMBER: _ClassVar[int]
    FLAG_FIELD_NUMBER: _ClassVar[int]
    SYS_FLAG_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    msg_id: str
    body: bytes
    tags: str
    keys: str
    properties: _containers.ScalarMap[str, str]
    born_timestamp: int
    store_timestamp: int
    born_host: str
    store_host: str
    reconsume_times: int
    store_size: int
    flag: int
    sys_flag: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., commit_log_offset: _Optional[int] = ..., msg_id: _Optional[str] = ..., body: _Optional[bytes] = ..., tags: _Optional[str] = ..., keys: _Optional[str] = ..., properties: _Optional[_Mapping[str, str]] = ..., born_timestamp: _Optional[int] = ..., store_timestamp: _Optional[int] = ..., born_host: _Optional[str] = ..., store_host: _Optional[str] = ..., reconsume_times: _Optional[int] = ..., store_size: _Optional[int] = ..., flag: _Optional[int] = ..., sys_flag: _Optional[int] = ...) -> None: ...

class SendMessageRequest(_message.Message):
    __slots__ = ("message", "queue_id", "producer_group", "born_timestamp")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    message: Message
    queue_id: int
    producer_group: str
    born_timestamp: int
    def __init__(self, message: _Optional[_Union[Message, _Mapping]] = ..., queue_id: _Optional[int] = ..., producer_group: _Optional[str] = ..., born_timestamp: _Optional[int] = ...) -> None: ...

class SendMessageResponse(_message.Message):
    __slots__ = ("status", "msg_id", "queue_id", "queue_offset", "remark")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    status: PutStatus
    msg_id: str
    queue_id: int
    queue_offset: int
    remark: str
    def __init__(self, status: _Optional[_Union[PutStatus, str]] = ..., msg_id: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., remark: _Optional[str] = ...) -> None: ...

class SendMessageBatchRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "messages", "producer_group", "born_timestamp", "request_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    producer_group: str
    born_timestamp: int
    request_id: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., producer_group: _Optional[str] = ..., born_timestamp: _Optional[int] = ..., request_id: _Optional[int] = ...) -> None: ...

class SendMessageBatchResponse(_message.Message):
    __slots__ = ("status", "msg_ids", "queue_id", "queue_offset", "remark", "request_id")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MSG_IDS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    status: PutStatus
    msg_ids: _containers.RepeatedScalarFieldContainer[str]
    queue_id: int
    queue_offset: int
    remark: str
    request_id: int
    def __init__(self, status: _Optional[_Union[PutStatus, str]] = ..., msg_ids: _Optional[_Iterable[str]] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., remark: _Optional[str] = ..., request_id: _Optional[int] = ...) -> None: ...

class PullMessageRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id", "queue_offset", "max_msg_nums", "subscription", "suspend_timeout_ms", "raw_records", "commit_offset", "max_bytes", "reset_generation")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_MSG_NUMS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SUSPEND_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    RAW_RECORDS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    RESET_GENERATION_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    subscription: str
    suspend_timeout_ms: int
    raw_records: bool
    commit_offset: int
    max_bytes: int
    reset_generation: int
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., max_msg_nums: _Optional[int] = ..., subscription: _Optional[str] = ..., suspend_timeout_ms: _Optional[int] = ..., raw_records: _Optional[bool] = ..., commit_offset: _Optional[int] = ..., max_bytes: _Optional[int] = ..., reset_generation: _Optional[int] = ...) -> None: ...

class PullMessageResponse(_message.Message):
    __slots__ = ("status", "next_begin_offset", "min_offset", "max_offset", "messages", "records", "suggest_which_broker_id", "remark", "reset_generation")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    NEXT_BEGIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    SUGGEST_WHICH_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    RESET_GENERATION_FIELD_NUMBER: _ClassVar[int]
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: _containers.RepeatedCompositeFieldContainer[MessageExt]
    records: bytes
    suggest_which_broker_id: int
    remark: str
    reset_generation: int
    def __init__(self, status: _Optional[_Union[PullStatus, str]] = ..., next_begin_offset: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[MessageExt, _Mapping]]] = ..., records: _Optional[bytes] = ..., suggest_which_broker_id: _Optional[int] = ..., remark: _Optional[str] = ..., reset_generation: _Optional[int] = ...) -> None: ...

class QueueRequest(_message.Message):
    __slots__ = ("topic", "queue_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class OffsetResponse(_message.Message):
    __slots__ = ("offset",)
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset: int
    def __init__(self, offset: _Optional[int] = ...) -> None: ...

class SearchOffsetRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "timestamp_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    timestamp_ms: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class QueryConsumerOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class UpdateConsumerOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id", "offset", "reset_generation")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    RESET_GENERATION_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    offset: int
    reset_generation: int
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., reset_generation: _Optional[int] = ...) -> None: ...

class UpdateConsumerOffsetResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ConsumerHeartbeatRequest(_message.Message):
    __slots__ = ("consumer_group", "client_id", "subscriptions", "language", "version")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    client_id: str
    subscriptions: _containers.RepeatedCompositeFieldContainer[Subscription]
    language: str
    version: str
    def __init__(self, consumer_group: _Optional[str] = ..., client_id: _Optional[str] = ..., subscriptions: _Optional[_Iterable[_Union[Subscription, _Mapping]]] = ..., language: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...

class Subscription(_message.Message):
    __slots__ = ("topic", "expression")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    expression: str
    def __init__(self, topic: _Optional[str] = ..., expression: _Optional[str] = ...) -> None: ...

class ConsumerHeartbeatResponse(_message.Message):
    __slots__ = ("reset_generations",)
    class ResetGenerationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    RESET_GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    reset_generations: _containers.ScalarMap[str, int]
    def __init__(self, reset_generations: _Optional[_Mapping[str, int]] = ...) -> None: ...

class UnregisterConsumerRequest(_message.Message):
    __slots__ = ("consumer_group", "client_id")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    client_id: str
    def __init__(self, consumer_group: _Optional[str] = ..., client_id: _Optional[str] = ...) -> None: ...

class UnregisterConsumerResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetConsumerListRequest(_message.Message):
    __slots__ = ("consumer_group",)
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    def __init__(self, consumer_group: _Optional[str] = ...) -> None: ...

class GetConsumerListResponse(_message.Message):
    __slots__ = ("client_ids",)
    CLIENT_IDS_FIELD_NUMBER: _ClassVar[int]
    client_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, client_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("topic_config",)
    TOPIC_CONFIG_FIELD_NUMBER: _ClassVar[int]
    topic_config: _common_pb2.TopicConfig
    def __init__(self, topic_config: _Optional[_Union[_common_pb2.TopicConfig, _Mapping]] = ...) -> None: ...

class TopicResponse(_message.Message):
    __slots__ = ("topic_config",)
    TOPIC_CONFIG_FIELD_NUMBER: _ClassVar[int]
    topic_config: _common_pb2.TopicConfig
    def __init__(self, topic_config: _Optional[_Union[_common_pb2.TopicConfig, _Mapping]] = ...) -> None: ...

class CreateTopicsRequest(_message.Message):
    __slots__ = ("topic_configs",)
    TOPIC_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    topic_configs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicConfig]
    def __init__(self, topic_configs: _Optional[_Iterable[_Union[_common_pb2.TopicConfig, _Mapping]]] = ...) -> None: ...

class CreateTopicsResponse(_message.Message):
    __slots__ = ("topic_configs",)
    TOPIC_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    topic_configs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicConfig]
    def __init__(self, topic_configs: _Optional[_Iterable[_Union[_common_pb2.TopicConfig, _Mapping]]] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topic_configs",)
    TOPIC_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    topic_configs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicConfig]
    def __init__(self, topic_configs: _Optional[_Iterable[_Union[_common_pb2.TopicConfig, _Mapping]]] = ...) -> None: ...

class SubscriptionGroupConfig(_message.Message):
    __slots__ = ("group_name", "consume_enable", "consume_from_min_enable", "consume_broadcast_enable", "retry_queue_nums", "retry_max_times", "broker_id", "which_broker_when_consume_slowly", "consume_message_orderly")
    GROUP_NAME_FIELD_NUMBER: _ClassVar[int]
    CONSUME_ENABLE_FIELD_NUMBER: _ClassVar[int]
    CONSUME_FROM_MIN_ENABLE_FIELD_NUMBER: _ClassVar[int]
    CONSUME_BROADCAST_ENABLE_FIELD_NUMBER: _ClassVar[int]
    RETRY_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    RETRY_MAX_TIMES_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    WHICH_BROKER_WHEN_CONSUME_SLOWLY_FIELD_NUMBER: _ClassVar[int]
    CONSUME_MESSAGE_ORDERLY_FIELD_NUMBER: _ClassVar[int]
    group_name: str
    consume_enable: bool
    consume_from_min_enable: bool
    consume_broadcast_enable: bool
    retry_queue_nums: int
    retry_max_times: int
    broker_id: int
    which_broker_when_consume_slowly: int
    consume_message_orderly: bool
    def __init__(self, group_name: _Optional[str] = ..., consume_enable: _Optional[bool] = ..., consume_from_min_enable: _Optional[bool] = ..., consume_broadcast_enable: _Optional[bool] = ..., retry_queue_nums: _Optional[int] = ..., retry_max_times: _Optional[int] = ..., broker_id: _Optional[int] = ..., which_broker_when_consume_slowly: _Optional[int] = ..., consume_message_orderly: _Optional[bool] = ...) -> None: ...

class CreateSubscriptionGroupRequest(_message.Message):
    __slots__ = ("config",)
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    config: SubscriptionGroupConfig
    def __init__(self, config: _Optional[_Union[SubscriptionGroupConfig, _Mapping]] = ...) -> None: ...

class SubscriptionGroupResponse(_message.Message):
    __slots__ = ("config",)
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    config: SubscriptionGroupConfig
    def __init__(self, config: _Optional[_Union[SubscriptionGroupConfig, _Mapping]] = ...) -> None: ...

class DeleteSubscriptionGroupRequest(_message.Message):
    __slots__ = ("group_name",)
    GROUP_NAME_FIELD_NUMBER: _ClassVar[int]
    group_name: str
    def __init__(self, group_name: _Optional[str] = ...) -> None: ...

class DeleteSubscriptionGroupResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSubscriptionGroupsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSubscriptionGroupsResponse(_message.Message):
    __slots__ = ("configs",)
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    configs: _containers.RepeatedCompositeFieldContainer[SubscriptionGroupConfig]
    def __init__(self, configs: _Optional[_Iterable[_Union[SubscriptionGroupConfig, _Mapping]]] = ...) -> None: ...

class GetBrokerStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BrokerStatus(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id", "broker_role", "flush_disk_type", "broker_addr", "ha_server_addr", "commit_log_min_offset", "commit_log_max_offset", "topic_count", "put_total", "get_total", "start_timestamp", "master_addr", "version", "timer_pending", "transaction_half_pending", "broker_permission")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_ROLE_FIELD_NUMBER: _ClassVar[int]
    FLUSH_DISK_TYPE_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    HA_SERVER_ADDR_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOPIC_COUNT_FIELD_NUMBER: _ClassVar[int]
    PUT_TOTAL_FIELD_NUMBER: _ClassVar[int]
    GET_TOTAL_FIELD_NUMBER: _ClassVar[int]
    START_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TIMER_PENDING_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_HALF_PENDING_FIELD_NUMBER: _ClassVar[int]
    BROKER_PERMISSION_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_role: str
    flush_disk_type: str
    broker_addr: str
    ha_server_addr: str
    commit_log_min_offset: int
    commit_log_max_offset: int
    topic_count: int
    put_total: int
    get_total: int
    start_timestamp: int
    master_addr: str
    version: str
    timer_pending: int
    transaction_half_pending: int
    broker_permission: int
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., broker_role: _Optional[str] = ..., flush_disk_type: _Optional[str] = ..., broker_addr: _Optional[str] = ..., ha_server_addr: _Optional[str] = ..., commit_log_min_offset: _Optional[int] = ..., commit_log_max_offset: _Optional[int] = ..., topic_count: _Optional[int] = ..., put_total: _Optional[int] = ..., get_total: _Optional[int] = ..., start_timestamp: _Optional[int] = ..., master_addr: _Optional[str] = ..., version: _Optional[str] = ..., timer_pending: _Optional[int] = ..., transaction_half_pending: _Optional[int] = ..., broker_permission: _Optional[int] = ...) -> None: ...

class GetHAStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ResetConsumerOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "timestamp_ms", "offset", "earliest", "latest")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    EARLIEST_FIELD_NUMBER: _ClassVar[int]
    LATEST_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    timestamp_ms: int
    offset: int
    earliest: bool
    latest: bool
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., timestamp_ms: _Optional[int] = ..., offset: _Optional[int] = ..., earliest: _Optional[bool] = ..., latest: _Optional[bool] = ...) -> None: ...

class QueueOffsetChange(_message.Message):
    __slots__ = ("queue_id", "old_offset", "new_offset")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OLD_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEW_OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    old_offset: int
    new_offset: int
    def __init__(self, queue_id: _Optional[int] = ..., old_offset: _Optional[int] = ..., new_offset: _Optional[int] = ...) -> None: ...

class ResetConsumerOffsetResponse(_message.Message):
    __slots__ = ("queues", "reset_generation")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    RESET_GENERATION_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueOffsetChange]
    reset_generation: int
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueOffsetChange, _Mapping]]] = ..., reset_generation: _Optional[int] = ...) -> None: ...

class GetConsumerConnectionsRequest(_message.Message):
    __slots__ = ("consumer_group",)
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    def __init__(self, consumer_group: _Optional[str] = ...) -> None: ...

class ConsumerConnection(_message.Message):
    __slots__ = ("client_id", "addr", "language", "version", "protocol", "client_type", "subscriptions", "last_heartbeat_ms")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    ADDR_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    CLIENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_MS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    addr: str
    language: str
    version: str
    protocol: str
    client_type: str
    subscriptions: _containers.RepeatedCompositeFieldContainer[Subscription]
    last_heartbeat_ms: int
    def __init__(self, client_id: _Optional[str] = ..., addr: _Optional[str] = ..., language: _Optional[str] = ..., version: _Optional[str] = ..., protocol: _Optional[str] = ..., client_type: _Optional[str] = ..., subscriptions: _Optional[_Iterable[_Union[Subscription, _Mapping]]] = ..., last_heartbeat_ms: _Optional[int] = ...) -> None: ...

class GetConsumerConnectionsResponse(_message.Message):
    __slots__ = ("connections",)
    CONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    connections: _containers.RepeatedCompositeFieldContainer[ConsumerConnection]
    def __init__(self, connections: _Optional[_Iterable[_Union[ConsumerConnection, _Mapping]]] = ...) -> None: ...

class GetBrokerConfigRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BrokerConfigEntry(_message.Message):
    __slots__ = ("key", "value", "live", "overridden")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    LIVE_FIELD_NUMBER: _ClassVar[int]
    OVERRIDDEN_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    live: bool
    overridden: bool
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ..., live: _Optional[bool] = ..., overridden: _Optional[bool] = ...) -> None: ...

class GetBrokerConfigResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[BrokerConfigEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[BrokerConfigEntry, _Mapping]]] = ...) -> None: ...

class UpdateBrokerConfigRequest(_message.Message):
    __slots__ = ("changes",)
    class ChangesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    changes: _containers.ScalarMap[str, str]
    def __init__(self, changes: _Optional[_Mapping[str, str]] = ...) -> None: ...

class UpdateBrokerConfigResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[BrokerConfigEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[BrokerConfigEntry, _Mapping]]] = ...) -> None: ...

class HASlaveStatus(_message.Message):
    __slots__ = ("slave_addr", "request_offset", "ack_offset", "lag_bytes", "connected_since_ms", "transferred_bytes", "last_ack_timestamp_ms", "broker_id", "broker_addr", "epoch")
    SLAVE_ADDR_FIELD_NUMBER: _ClassVar[int]
    REQUEST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ACK_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    TRANSFERRED_BYTES_FIELD_NUMBER: _ClassVar[int]
    LAST_ACK_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    slave_addr: str
    request_offset: int
    ack_offset: int
    lag_bytes: int
    connected_since_ms: int
    transferred_bytes: int
    last_ack_timestamp_ms: int
    broker_id: int
    broker_addr: str
    epoch: int
    def __init__(self, slave_addr: _Optional[str] = ..., request_offset: _Optional[int] = ..., ack_offset: _Optional[int] = ..., lag_bytes: _Optional[int] = ..., connected_since_ms: _Optional[int] = ..., transferred_bytes: _Optional[int] = ..., last_ack_timestamp_ms: _Optional[int] = ..., broker_id: _Optional[int] = ..., broker_addr: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class HAStatus(_message.Message):
    __slots__ = ("broker_role", "commit_log_max_offset", "push2slave_max_offset", "slaves", "master_ha_addr", "client_max_offset", "last_data_timestamp_ms", "reconnects", "connected", "epoch", "problem", "sync_state_set", "failovers")
    BROKER_ROLE_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PUSH2SLAVE_MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SLAVES_FIELD_NUMBER: _ClassVar[int]
    MASTER_HA_ADDR_FIELD_NUMBER: _ClassVar[int]
    CLIENT_MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_DATA_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    RECONNECTS_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    PROBLEM_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_FIELD_NUMBER: _ClassVar[int]
    FAILOVERS_FIELD_NUMBER: _ClassVar[int]
    broker_role: str
    commit_log_max_offset: int
    push2slave_max_offset: int
    slaves: _containers.RepeatedCompositeFieldContainer[HASlaveStatus]
    master_ha_addr: str
    client_max_offset: int
    last_data_timestamp_ms: int
    reconnects: int
    connected: bool
    epoch: int
    problem: str
    sync_state_set: _containers.RepeatedScalarFieldContainer[int]
    failovers: int
    def __init__(self, broker_role: _Optional[str] = ..., commit_log_max_offset: _Optional[int] = ..., push2slave_max_offset: _Optional[int] = ..., slaves: _Optional[_Iterable[_Union[HASlaveStatus, _Mapping]]] = ..., master_ha_addr: _Optional[str] = ..., client_max_offset: _Optional[int] = ..., last_data_timestamp_ms: _Optional[int] = ..., reconnects: _Optional[int] = ..., connected: _Optional[bool] = ..., epoch: _Optional[int] = ..., problem: _Optional[str] = ..., sync_state_set: _Optional[_Iterable[int]] = ..., failovers: _Optional[int] = ...) -> None: ...

class GetAllTopicConfigRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TopicConfigTable(_message.Message):
    __slots__ = ("data_version", "topic_configs")
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    TOPIC_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    data_version: _common_pb2.DataVersion
    topic_configs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicConfig]
    def __init__(self, data_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ..., topic_configs: _Optional[_Iterable[_Union[_common_pb2.TopicConfig, _Mapping]]] = ...) -> None: ...

class GetAllConsumerOffsetsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ConsumerOffsetEntry(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id", "offset")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    offset: int
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class ConsumerOffsetTable(_message.Message):
    __slots__ = ("data_version", "offsets", "reset_generations")
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    RESET_GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    data_version: _common_pb2.DataVersion
    offsets: _containers.RepeatedCompositeFieldContainer[ConsumerOffsetEntry]
    reset_generations: _containers.RepeatedCompositeFieldContainer[ResetGenerationEntry]
    def __init__(self, data_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ..., offsets: _Optional[_Iterable[_Union[ConsumerOffsetEntry, _Mapping]]] = ..., reset_generations: _Optional[_Iterable[_Union[ResetGenerationEntry, _Mapping]]] = ...) -> None: ...

class ResetGenerationEntry(_message.Message):
    __slots__ = ("consumer_group", "topic", "generation")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    generation: int
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., generation: _Optional[int] = ...) -> None: ...

class GetAllDelayOffsetsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DelayOffsetTable(_message.Message):
    __slots__ = ("data_version", "offsets")
    class OffsetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    data_version: _common_pb2.DataVersion
    offsets: _containers.ScalarMap[int, int]
    def __init__(self, data_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ..., offsets: _Optional[_Mapping[int, int]] = ...) -> None: ...

class GetAllSubscriptionGroupsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SubscriptionGroupTable(_message.Message):
    __slots__ = ("data_version", "configs")
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    data_version: _common_pb2.DataVersion
    configs: _containers.RepeatedCompositeFieldContainer[SubscriptionGroupConfig]
    def __init__(self, data_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ..., configs: _Optional[_Iterable[_Union[SubscriptionGroupConfig, _Mapping]]] = ...) -> None: ...

class EndTransactionRequest(_message.Message):
    __slots__ = ("producer_group", "transaction_id", "msg_id", "commit", "from_check")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    FROM_CHECK_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    transaction_id: str
    msg_id: str
    commit: bool
    from_check: bool
    def __init__(self, producer_group: _Optional[str] = ..., transaction_id: _Optional[str] = ..., msg_id: _Optional[str] = ..., commit: _Optional[bool] = ..., from_check: _Optional[bool] = ...) -> None: ...

class EndTransactionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TransactionChecksRequest(_message.Message):
    __slots__ = ("producer_group", "client_id")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    client_id: str
    def __init__(self, producer_group: _Optional[str] = ..., client_id: _Optional[str] = ...) -> None: ...

class TransactionCheck(_message.Message):
    __slots__ = ("transaction_id", "msg_id", "topic", "queue_id", "body", "properties", "born_timestamp", "store_timestamp", "check_times", "producer_group")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    CHECK_TIMES_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    msg_id: str
    topic: str
    queue_id: int
    body: bytes
    properties: _containers.ScalarMap[str, str]
    born_timestamp: int
    store_timestamp: int
    check_times: int
    producer_group: str
    def __init__(self, transaction_id: _Optional[str] = ..., msg_id: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., body: _Optional[bytes] = ..., properties: _Optional[_Mapping[str, str]] = ..., born_timestamp: _Optional[int] = ..., store_timestamp: _Optional[int] = ..., check_times: _Optional[int] = ..., producer_group: _Optional[str] = ...) -> None: ...

class PutAclUserRequest(_message.Message):
    __slots__ = ("user",)
    USER_FIELD_NUMBER: _ClassVar[int]
    user: _common_pb2.AclUser
    def __init__(self, user: _Optional[_Union[_common_pb2.AclUser, _Mapping]] = ...) -> None: ...

class PutAclUserResponse(_message.Message):
    __slots__ = ("user",)
    USER_FIELD_NUMBER: _ClassVar[int]
    user: _common_pb2.AclUser
    def __init__(self, user: _Optional[_Union[_common_pb2.AclUser, _Mapping]] = ...) -> None: ...

class DeleteAclUserRequest(_message.Message):
    __slots__ = ("access_key",)
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    def __init__(self, access_key: _Optional[str] = ...) -> None: ...

class DeleteAclUserResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAclUsersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAclUsersResponse(_message.Message):
    __slots__ = ("users",)
    USERS_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedCompositeFieldContainer[_common_pb2.AclUser]
    def __init__(self, users: _Optional[_Iterable[_Union[_common_pb2.AclUser, _Mapping]]] = ...) -> None: ...

class PutAclPolicyRequest(_message.Message):
    __slots__ = ("access_key", "policy")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    policy: _common_pb2.AclPolicy
    def __init__(self, access_key: _Optional[str] = ..., policy: _Optional[_Union[_common_pb2.AclPolicy, _Mapping]] = ...) -> None: ...

class DeleteAclPolicyRequest(_message.Message):
    __slots__ = ("access_key", "resource")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    resource: str
    def __init__(self, access_key: _Optional[str] = ..., resource: _Optional[str] = ...) -> None: ...

class GetAclTableRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PopMessagesRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id", "max_msg_nums", "subscription", "invisible_time_ms", "poll_time_ms", "client_id")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_MSG_NUMS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    POLL_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    max_msg_nums: int
    subscription: str
    invisible_time_ms: int
    poll_time_ms: int
    client_id: str
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., max_msg_nums: _Optional[int] = ..., subscription: _Optional[str] = ..., invisible_time_ms: _Optional[int] = ..., poll_time_ms: _Optional[int] = ..., client_id: _Optional[str] = ...) -> None: ...

class PopBatch(_message.Message):
    __slots__ = ("topic", "queue_id", "checkpoint_id", "pop_time_ms", "deadline_ms", "queue_offsets", "attempts", "records", "messages")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    POP_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    checkpoint_id: int
    pop_time_ms: int
    deadline_ms: int
    queue_offsets: _containers.RepeatedScalarFieldContainer[int]
    attempts: _containers.RepeatedScalarFieldContainer[int]
    records: bytes
    messages: _containers.RepeatedCompositeFieldContainer[MessageExt]
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., checkpoint_id: _Optional[int] = ..., pop_time_ms: _Optional[int] = ..., deadline_ms: _Optional[int] = ..., queue_offsets: _Optional[_Iterable[int]] = ..., attempts: _Optional[_Iterable[int]] = ..., records: _Optional[bytes] = ..., messages: _Optional[_Iterable[_Union[MessageExt, _Mapping]]] = ...) -> None: ...

class PopMessagesResponse(_message.Message):
    __slots__ = ("batches", "broker_name")
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    batches: _containers.RepeatedCompositeFieldContainer[PopBatch]
    broker_name: str
    def __init__(self, batches: _Optional[_Iterable[_Union[PopBatch, _Mapping]]] = ..., broker_name: _Optional[str] = ...) -> None: ...

class PopReceipt(_message.Message):
    __slots__ = ("topic", "queue_id", "checkpoint_id", "queue_offsets")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    checkpoint_id: int
    queue_offsets: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., checkpoint_id: _Optional[int] = ..., queue_offsets: _Optional[_Iterable[int]] = ...) -> None: ...

class AckMessagesRequest(_message.Message):
    __slots__ = ("consumer_group", "receipts")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    receipts: _containers.RepeatedCompositeFieldContainer[PopReceipt]
    def __init__(self, consumer_group: _Optional[str] = ..., receipts: _Optional[_Iterable[_Union[PopReceipt, _Mapping]]] = ...) -> None: ...

class AckMessagesResponse(_message.Message):
    __slots__ = ("acked", "failed")
    ACKED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    acked: int
    failed: _containers.RepeatedCompositeFieldContainer[PopReceipt]
    def __init__(self, acked: _Optional[int] = ..., failed: _Optional[_Iterable[_Union[PopReceipt, _Mapping]]] = ...) -> None: ...

class ChangeInvisibleTimeRequest(_message.Message):
    __slots__ = ("consumer_group", "receipts", "invisible_time_ms")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    receipts: _containers.RepeatedCompositeFieldContainer[PopReceipt]
    invisible_time_ms: int
    def __init__(self, consumer_group: _Optional[str] = ..., receipts: _Optional[_Iterable[_Union[PopReceipt, _Mapping]]] = ..., invisible_time_ms: _Optional[int] = ...) -> None: ...

class ChangeInvisibleTimeResponse(_message.Message):
    __slots__ = ("batches", "failed")
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    batches: _containers.RepeatedCompositeFieldContainer[PopBatch]
    failed: _containers.RepeatedCompositeFieldContainer[PopReceipt]
    def __init__(self, batches: _Optional[_Iterable[_Union[PopBatch, _Mapping]]] = ..., failed: _Optional[_Iterable[_Union[PopReceipt, _Mapping]]] = ...) -> None: ...

class PopStreamRequest(_message.Message):
    __slots__ = ("request_id", "ack", "pop")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    POP_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    ack: AckMessagesRequest
    pop: PopMessagesRequest
    def __init__(self, request_id: _Optional[int] = ..., ack: _Optional[_Union[AckMessagesRequest, _Mapping]] = ..., pop: _Optional[_Union[PopMessagesRequest, _Mapping]] = ...) -> None: ...

class PopStreamResponse(_message.Message):
    __slots__ = ("request_id", "ack", "pop", "error_code", "error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    POP_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    ack: AckMessagesResponse
    pop: PopMessagesResponse
    error_code: str
    error: str
    def __init__(self, request_id: _Optional[int] = ..., ack: _Optional[_Union[AckMessagesResponse, _Mapping]] = ..., pop: _Optional[_Union[PopMessagesResponse, _Mapping]] = ..., error_code: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...

class ViewMessageRequest(_message.Message):
    __slots__ = ("commit_log_offset",)
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    commit_log_offset: int
    def __init__(self, commit_log_offset: _Optional[int] = ...) -> None: ...

class ViewMessageResponse(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: MessageExt
    def __init__(self, message: _Optional[_Union[MessageExt, _Mapping]] = ...) -> None: ...

class QueryMessageRequest(_message.Message):
    __slots__ = ("topic", "key", "begin_timestamp_ms", "end_timestamp_ms", "max_num", "unique_key")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    BEGIN_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    END_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_KEY_FIELD_NUMBER: _ClassVar[int]
    topic: str
    key: str
    begin_timestamp_ms: int
    end_timestamp_ms: int
    max_num: int
    unique_key: bool
    def __init__(self, topic: _Optional[str] = ..., key: _Optional[str] = ..., begin_timestamp_ms: _Optional[int] = ..., end_timestamp_ms: _Optional[int] = ..., max_num: _Optional[int] = ..., unique_key: _Optional[bool] = ...) -> None: ...

class QueryMessageResponse(_message.Message):
    __slots__ = ("messages", "indexed_offset", "max_offset", "index_enabled")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    INDEXED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    INDEX_ENABLED_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[MessageExt]
    indexed_offset: int
    max_offset: int
    index_enabled: bool
    def __init__(self, messages: _Optional[_Iterable[_Union[MessageExt, _Mapping]]] = ..., indexed_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., index_enabled: _Optional[bool] = ...) -> None: ...

class BrowseMessagesRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "queue_offset", "from_timestamp_ms", "max_num")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FROM_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    queue_offset: int
    from_timestamp_ms: int
    max_num: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., from_timestamp_ms: _Optional[int] = ..., max_num: _Optional[int] = ...) -> None: ...

class BrowseMessagesResponse(_message.Message):
    __slots__ = ("messages", "next_queue_offset", "min_offset", "max_offset")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[MessageExt]
    next_queue_offset: int
    min_offset: int
    max_offset: int
    def __init__(self, messages: _Optional[_Iterable[_Union[MessageExt, _Mapping]]] = ..., next_queue_offset: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ...) -> None: ...
