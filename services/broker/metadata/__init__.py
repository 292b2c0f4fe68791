"""Broker metadata tables, each with a DataVersion and atomic JSON persistence under
``<storePathRootDir>/config/``, plus the slave's periodic sync from its master."""

from services.broker.metadata.base import DataVersion, MetadataFileError, MetadataTable, write_file_atomic
from services.broker.metadata.groups import SubscriptionGroupConfig, SubscriptionGroupManager
from services.broker.metadata.offsets import ConsumerOffsetManager, DelayOffsetManager
from services.broker.metadata.topics import TopicConfig, TopicConfigManager

__all__ = [
    "ConsumerOffsetManager",
    "DataVersion",
    "DelayOffsetManager",
    "MetadataFileError",
    "MetadataTable",
    "SubscriptionGroupConfig",
    "SubscriptionGroupManager",
    "TopicConfig",
    "TopicConfigManager",
    "write_file_atomic",
]
