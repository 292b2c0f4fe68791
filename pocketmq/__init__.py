"""PocketMQ: the Python client of a RocketMQ-style message system.

::

    from pocketmq import Producer, Consumer, Message

    with Producer("127.0.0.1:9876") as producer:
        result = producer.send(Message("orders", b"hello", tags="created"))

    with Consumer("order-service", "127.0.0.1:9876", consume_from="first") as consumer:
        consumer.subscribe("orders", "created || paid")
        for msg in consumer:
            print(msg.queue, msg.queue_offset, msg.body)

``AsyncProducer`` / ``AsyncConsumer`` / ``AsyncAdmin`` are the asyncio versions (the blocking
classes are thin wrappers around them). Errors derive from :class:`pocketmq.errors.PocketMQError`
and carry a ``retriable`` flag.

The names are loaded on first use, so importing the generated protocol packages
(``pocketmq.broker.v1`` ...) does not load the client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pocketmq.client.admin import Admin, AsyncAdmin
    from pocketmq.client.allocate import allocate_averagely
    from pocketmq.client.blocking_consumer import Consumer
    from pocketmq.client.consumer import AsyncConsumer, ConsumeFrom
    from pocketmq.client.message import Message, MessageQueue, ReceivedMessage, SendResult, SendStatus
    from pocketmq.client.popconsumer import PopConsumer, PoppedMessage
    from pocketmq.client.producer import AsyncProducer, Producer
    from pocketmq.client.selector import HashSelector, QueueSelector, RoundRobin
    from pocketmq.client.transaction import TransactionCheck, TransactionSendResult, TransactionState
    from pocketmq.errors import NotDurableError, PocketMQError

__version__ = "0.1.0"

_EXPORTS = {
    "Admin": "pocketmq.client.admin",
    "AsyncAdmin": "pocketmq.client.admin",
    "AsyncConsumer": "pocketmq.client.consumer",
    "AsyncProducer": "pocketmq.client.producer",
    "ConsumeFrom": "pocketmq.client.consumer",
    "Consumer": "pocketmq.client.blocking_consumer",
    "HashSelector": "pocketmq.client.selector",
    "Message": "pocketmq.client.message",
    "MessageQueue": "pocketmq.client.message",
    "NotDurableError": "pocketmq.errors",
    "PocketMQError": "pocketmq.errors",
    "PopConsumer": "pocketmq.client.popconsumer",
    "PoppedMessage": "pocketmq.client.popconsumer",
    "Producer": "pocketmq.client.producer",
    "QueueSelector": "pocketmq.client.selector",
    "ReceivedMessage": "pocketmq.client.message",
    "RoundRobin": "pocketmq.client.selector",
    "SendResult": "pocketmq.client.message",
    "SendStatus": "pocketmq.client.message",
    "TransactionCheck": "pocketmq.client.transaction",
    "TransactionSendResult": "pocketmq.client.transaction",
    "TransactionState": "pocketmq.client.transaction",
    "allocate_averagely": "pocketmq.client.allocate",
}

__all__ = [
    "Admin",
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncProducer",
    "ConsumeFrom",
    "Consumer",
    "HashSelector",
    "Message",
    "MessageQueue",
    "NotDurableError",
    "PocketMQError",
    "PopConsumer",
    "PoppedMessage",
    "Producer",
    "QueueSelector",
    "ReceivedMessage",
    "RoundRobin",
    "SendResult",
    "SendStatus",
    "TransactionCheck",
    "TransactionSendResult",
    "TransactionState",
    "allocate_averagely",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pocketmq' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
