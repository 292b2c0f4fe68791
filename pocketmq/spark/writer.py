"""Writing DataFrames to topics (batch and streaming).

Columns: ``body`` (binary or string, required), ``topic`` (else the ``topic`` option), ``tags``,
``keys`` (string or array of strings), ``properties`` (map of strings); the other columns of the
read schema are ignored, so a DataFrame read from one topic can be written to another as is.

Each task groups its rows by topic into SendMessageBatch requests (``sendBatchSize`` messages or
``sendBatchBytes``), keeps up to ``maxInflightBatches`` in flight and waits for all of them
before it reports success. A batch is retried (on another broker group when there is one) only
when nothing was stored; any final status other than PUT_OK (including "stored but not flushed
/ not replicated" ones) fails the task with the status in the error.

Semantics: at-least-once. Spark re-runs a failed task or micro-batch from its first row, and
the brokers have no idempotent producer, so messages sent before the failure are sent again;
``abort`` cannot take back what successful tasks stored. Consumers that need exactly-once
de-duplicate, e.g. on a business key.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import logging
from collections.abc import Iterator, Sequence

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from pocketmq.client.message import Message, SendResult
from pocketmq.errors import InvalidArgumentError, PocketMQError
from pocketmq.spark import _broker
from pocketmq.spark.options import WriteOptions

__all__ = ["PocketMQStreamWriter", "PocketMQWriter", "SentMessages", "send_batches"]

log = logging.getLogger("pocketmq.spark")


@dataclasses.dataclass(frozen=True)
class SentMessages(WriterCommitMessage):  # type: ignore[misc]
    """What one task stored."""

    messages: int
    batches: int


def _column(batch: pa.RecordBatch, name: str) -> list[object] | None:
    index = batch.schema.get_field_index(name)
    return None if index < 0 else batch.column(index).to_pylist()


class _Sender:
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.cluster = _broker.cluster(opts.namesrv, tls=opts.tls)
        self.buffers: dict[str, list[Message]] = {}
        self.sizes: dict[str, int] = collections.defaultdict(int)
        self.inflight: collections.deque[tuple[concurrent.futures.Future[SendResult], str, int]] = \
            collections.deque()
        self.messages = 0
        self.batches = 0

    def add(self, message: Message) -> None:
        topic = message.topic
        buffer = self.buffers.setdefault(topic, [])
        buffer.append(message)
        self.sizes[topic] += len(message.body)
        if len(buffer) >= self.opts.batch_size or self.sizes[topic] >= self.opts.batch_bytes:
            self.flush(topic)

    def flush(self, topic: str) -> None:
        batch = self.buffers.pop(topic, None)
        self.sizes.pop(topic, None)
        if not batch:
            return
        opts = self.opts
        future = self.cluster.submit_send(batch, opts.producer_group, opts.send_timeout, opts.retries)
        self.inflight.append((future, topic, len(batch)))
        while len(self.inflight) >= opts.max_inflight:
            self.wait_oldest()

    def wait_oldest(self) -> None:
        future, topic, count = self.inflight.popleft()
        try:
            future.result(self.opts.send_timeout + 30)
        except PocketMQError as exc:
            exc.add_note(f"while sending a batch of {count} message(s) to topic {topic!r}; messages sent "
                         f"before by this task stay stored (at-least-once)")
            raise
        except concurrent.futures.TimeoutError:
            raise PocketMQError(f"sending a batch of {count} message(s) to topic {topic!r} gave no answer "
                                f"within {self.opts.send_timeout + 30:g}s") from None
        self.messages += count
        self.batches += 1

    def finish(self) -> SentMessages:
        for topic in list(self.buffers):
            self.flush(topic)
        while self.inflight:
            self.wait_oldest()
        return SentMessages(self.messages, self.batches)


def send_batches(opts: WriteOptions, batches: Iterator[pa.RecordBatch]) -> SentMessages:
    """Send every row of ``batches`` (Arrow record batches with the writer's columns)."""
    sender = _Sender(opts)
    default_topic = opts.topic
    for rb in batches:
        n = rb.num_rows
        if not n:
            continue
        bodies = _column(rb, "body")
        assert bodies is not None  # checked against the schema on the driver
        topics = _column(rb, "topic") or [None] * n
        tags = _column(rb, "tags") or [None] * n
        keys = _column(rb, "keys") or [None] * n
        props = _column(rb, "properties") or [None] * n
        for body, topic, tag, key, prop in zip(bodies, topics, tags, keys, props, strict=True):
            topic = topic or default_topic
            if not topic:
                raise InvalidArgumentError("a row has no topic: set the topic column or the topic option")
            if body is None:
                raise InvalidArgumentError(f"a row for topic {topic!r} has a null body")
            sender.add(Message(
                str(topic), body,  # type: ignore[arg-type]
                tags=str(tag) if tag else "",
                keys=key if isinstance(key, (str, list)) else "",  # type: ignore[arg-type]
                properties=dict(prop) if prop else None,  # type: ignore[call-overload]
            ))
    return sender.finish()


def _total(messages: Sequence[WriterCommitMessage | None]) -> tuple[int, int]:
    sent = [m for m in messages if isinstance(m, SentMessages)]
    return sum(m.messages for m in sent), len(messages) - len(sent)


class PocketMQWriter(DataSourceArrowWriter):  # type: ignore[misc]
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SentMessages:
        return send_batches(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total, _ = _total(messages)
        log.info("write committed", extra={"messages": total, "tasks": len(messages)})

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        total, failed = _total(messages)
        log.warning("write aborted: %d message(s) stored by the tasks that succeeded stay in their topics "
                    "(at-least-once); %d task(s) failed", total, failed)


class PocketMQStreamWriter(DataSourceStreamArrowWriter):  # type: ignore[misc]
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SentMessages:
        return send_batches(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        total, _ = _total(messages)
        log.info("micro-batch written", extra={"batch_id": batchId, "messages": total})

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        total, failed = _total(messages)
        log.warning("micro-batch %d aborted: %d message(s) already stored stay in their topics and are "
                    "sent again when the batch is retried (at-least-once); %d task(s) failed",
                    batchId, total, failed)
