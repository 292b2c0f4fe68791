"""The Settings the broker answers on a client's Telemetry stream (pure).

The client's own Settings (type, access point, user agent, publishing topics or subscription)
come back merged with what the broker decides: the body size limit, message-type validation and
retry policy of producers; long polling, batch size, FIFO and the redelivery backoff of
consumers; client metrics off. Values follow RocketMQ's proxy defaults.
"""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf import duration_pb2

from apache.rocketmq.v2 import definition_pb2

ClientType = definition_pb2.ClientType
PRODUCER_TYPES = frozenset({ClientType.PRODUCER})
CONSUMER_TYPES = frozenset({ClientType.PUSH_CONSUMER, ClientType.SIMPLE_CONSUMER, ClientType.PULL_CONSUMER,
                            ClientType.LITE_PUSH_CONSUMER, ClientType.LITE_SIMPLE_CONSUMER})

#: Producers: exponential backoff 10 ms .. 1 s, doubling, 3 attempts in all.
PRODUCER_MAX_ATTEMPTS = 3
PRODUCER_BACKOFF_INITIAL_MS = 10
PRODUCER_BACKOFF_MAX_MS = 1000
PRODUCER_BACKOFF_MULTIPLIER = 2.0
#: Consumers: how long a receive may wait for messages, and how many one receive returns.
LONG_POLLING_TIMEOUT_MS = 20_000
RECEIVE_BATCH_SIZE = 32


def _duration(ms: int) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromMilliseconds(ms)
    return d


def producer_settings(client: definition_pb2.Settings, max_body_size: int) -> definition_pb2.Settings:
    merged = definition_pb2.Settings()
    merged.CopyFrom(client)
    merged.backoff_policy.CopyFrom(definition_pb2.RetryPolicy(
        max_attempts=PRODUCER_MAX_ATTEMPTS,
        exponential_backoff=definition_pb2.ExponentialBackoff(
            initial=_duration(PRODUCER_BACKOFF_INITIAL_MS), max=_duration(PRODUCER_BACKOFF_MAX_MS),
            multiplier=PRODUCER_BACKOFF_MULTIPLIER)))
    merged.publishing.max_body_size = max_body_size
    merged.publishing.validate_message_type = True
    merged.metric.CopyFrom(definition_pb2.Metric(on=False))
    return merged


def consumer_settings(client: definition_pb2.Settings, *, fifo: bool, retry_max_times: int,
                      delay_levels_ms: Sequence[int]) -> definition_pb2.Settings:
    """``delay_levels_ms``: the broker's delay levels, the redelivery backoff of push consumers
    (RocketMQ's proxy uses them the same way); ``max_attempts`` = retryMaxTimes + 1."""
    merged = definition_pb2.Settings()
    merged.CopyFrom(client)
    merged.backoff_policy.CopyFrom(definition_pb2.RetryPolicy(
        max_attempts=retry_max_times + 1,
        customized_backoff=definition_pb2.CustomizedBackoff(next=[_duration(ms) for ms in delay_levels_ms])))
    sub = merged.subscription
    sub.fifo = fifo
    sub.receive_batch_size = RECEIVE_BATCH_SIZE
    sub.long_polling_timeout.CopyFrom(_duration(LONG_POLLING_TIMEOUT_MS))
    merged.metric.CopyFrom(definition_pb2.Metric(on=False))
    return merged
