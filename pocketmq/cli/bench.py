"""``pocketmq bench produce|consume``: load through the real client, a progress bar while it
runs, a summary (msgs/s, MB/s, latency percentiles) at the end."""

from __future__ import annotations

import array
import asyncio
import contextlib
import dataclasses
import math
import operator
import os
import time
from collections.abc import Iterator
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pocketmq.cli.output import Output, print_json, stderr_console, stdout_console, table
from pocketmq.client.consumer import AsyncConsumer, ConsumeFrom
from pocketmq.client.message import Message
from pocketmq.client.producer import AsyncProducer
from pocketmq.errors import PocketMQError
from pocketmq.wire.auth import Credentials
from pocketmq.wire.tls import ClientTls

_BORN = operator.attrgetter("born_timestamp")
_BODY = operator.attrgetter("body")
#: How often (wall seconds) the consume loop reads its process's CPU time, which costs a system
#: call summing every thread's time: not once per batch.
CPU_SAMPLE_S = 0.005


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (0 for an empty one), at least 0 (an
    end-to-end latency below 0 is clock skew between hosts)."""
    if not sorted_values:
        return 0.0
    rank = max(1, min(len(sorted_values), math.ceil(q / 100 * len(sorted_values))))
    return max(0.0, sorted_values[rank - 1])


@dataclasses.dataclass
class Summary:
    name: str
    messages: int = 0
    bytes: int = 0
    seconds: float = 0.0
    requests: int = 0
    errors: int = 0
    latency_what: str = "request"
    latencies_ms: list[float] = dataclasses.field(default_factory=list, repr=False)  # (200k floats)
    first_error: str = ""
    #: CPU time of this process over ``seconds`` (all its threads).
    cpu_seconds: float = 0.0
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        lat = sorted(self.latencies_ms)
        secs = self.seconds or 1e-9
        return {
            "benchmark": self.name, **self.settings, "messages": self.messages, "bytes": self.bytes,
            "seconds": round(self.seconds, 3), "msgs_per_s": round(self.messages / secs, 1),
            "mb_per_s": round(self.bytes / secs / 1e6, 2), "requests": self.requests, "errors": self.errors,
            "latency": self.latency_what, "p50_ms": round(percentile(lat, 50), 2),
            "p99_ms": round(percentile(lat, 99), 2), "max_ms": round(max(0.0, lat[-1]), 2) if lat else 0.0,
            "first_error": self.first_error,
            "cpu_us_per_msg": round(self.cpu_seconds / max(1, self.messages) * 1e6, 2),
        }


def print_summary(summary: Summary, output: Output) -> None:
    data = summary.to_dict()
    if output is Output.json:
        print_json(data)
        return
    stdout_console().print(table(
        f"bench {summary.name}", ["messages", "MB", "seconds", "msgs/s", "MB/s", f"p50 {data['latency']} ms",
                                  f"p99 {data['latency']} ms", "max ms", "errors"],
        [[data["messages"], f"{summary.bytes / 1e6:.1f}", data["seconds"], f"{data['msgs_per_s']:,.0f}",
          data["mb_per_s"], data["p50_ms"], data["p99_ms"], data["max_ms"], data["errors"]]],
        right=["messages", "MB", "seconds", "msgs/s", "MB/s", f"p50 {data['latency']} ms",
               f"p99 {data['latency']} ms", "max ms", "errors"]))
    if summary.first_error:
        stderr_console().print(f"first error: {summary.first_error}")


@contextlib.contextmanager
def _progress(enabled: bool, what: str, total: int) -> Iterator[tuple[Progress | None, Any]]:
    if not enabled:
        yield None, None
        return
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), console=stderr_console(),
                        transient=False)
    with progress:
        task = progress.add_task(what, total=total, rate="")
        yield progress, task


async def produce(namesrv: str, *, topic: str, messages: int, duration: float, size: int, batch: int,
                  concurrency: int, tags: str, timeout: float, progress: bool,  # noqa: ASYNC109
                  tls: ClientTls | bool | None = None, credentials: Credentials | None = None) -> Summary:
    summary = Summary("produce", settings={"topic": topic, "size": size, "batch": batch,
                                           "concurrency": concurrency})
    body = os.urandom(size)
    batch_msgs = [Message(topic, body, tags=tags) for _ in range(batch)]
    single = batch_msgs[0]
    async with AsyncProducer(namesrv, send_timeout=timeout, group="pocketmq-bench", tls=tls,
                             credentials=credentials) as producer:
        await producer.send(single)  # route + connection warm-up (not counted)
        remaining = messages
        stop_at = time.monotonic() + duration if duration else None

        def take() -> int:
            nonlocal remaining
            if stop_at is not None:
                return batch if time.monotonic() < stop_at else 0
            n = min(batch, remaining)
            remaining -= n
            return n

        with _progress(progress, f"produce {topic}", messages if not duration else 0) as (bar, task):
            started = time.perf_counter()
            started_cpu = time.process_time()

            async def worker() -> None:
                while (n := take()) > 0:
                    t0 = time.perf_counter()
                    try:
                        if n == 1:
                            await producer.send(single)
                        else:
                            await producer.send_batch(batch_msgs[:n])
                    except PocketMQError as exc:
                        summary.errors += 1
                        summary.first_error = summary.first_error or str(exc)
                        continue
                    finally:
                        summary.requests += 1
                    summary.latencies_ms.append((time.perf_counter() - t0) * 1000)
                    summary.messages += n
                    summary.bytes += n * size

            async def ticker() -> None:
                while bar is not None:
                    await asyncio.sleep(0.25)
                    rate = summary.messages / max(1e-9, time.perf_counter() - started)
                    bar.update(task, completed=summary.messages, rate=f"{rate:,.0f} msgs/s")

            tick = asyncio.create_task(ticker())
            try:
                await asyncio.gather(*(worker() for _ in range(concurrency)))
            finally:
                tick.cancel()
            summary.seconds = time.perf_counter() - started
            summary.cpu_seconds = time.process_time() - started_cpu
            if bar is not None:
                bar.update(task, completed=summary.messages,
                           rate=f"{summary.messages / max(1e-9, summary.seconds):,.0f} msgs/s")
    return summary


def _latencies(borns: array.array[int], received: list[tuple[int, float]]) -> list[float]:
    """Each message's born -> received latency (ms): ``borns`` in receive order, ``received``
    the running count and receive time of each batch."""
    latencies: list[float] = []
    start = 0
    for end, at in received:
        latencies.extend(map(at.__sub__, borns[start:end]))
        start = end
    return latencies


async def consume(namesrv: str, *, topic: str, group: str, messages: int, duration: float, idle: float,
                  start: str, batch: int, timeout: float, progress: bool,  # noqa: ASYNC109
                  tls: ClientTls | bool | None = None, credentials: Credentials | None = None) -> Summary:
    summary = Summary("consume", latency_what="e2e",
                      settings={"topic": topic, "group": group, "batch": batch})
    consumer = AsyncConsumer(group, namesrv, consume_from=ConsumeFrom(start), pull_batch_size=batch,
                             buffer_batches=8, request_timeout=timeout, long_poll_timeout=2.0,
                             rebalance_interval=2.0, tls=tls, credentials=credentials)
    consumer.subscribe(topic)
    await consumer.start()
    try:
        with _progress(progress, f"consume {topic}", messages) as (bar, task):
            started = time.perf_counter()
            first_at: float | None = None
            last_at = last_tick = started
            stop_at = time.monotonic() + duration if duration else None
            first_cpu = last_cpu = 0.0
            cpu_at = 0.0
            # Born timestamps as C values, with each batch's receive time: the latencies are
            # worked out after the run, not per message while it is measured.
            borns = array.array("q")
            received: list[tuple[int, float]] = []  # (messages so far, receive time in ms)
            count = 0
            while count < messages:
                wait = idle if stop_at is None else min(idle, stop_at - time.monotonic())
                if wait <= 0:
                    break
                # A batch per call (as pulled): the application's per-message work is its own.
                msgs = await consumer.receive_batch(messages - count, wait)
                if not msgs:
                    break
                now = last_at = time.perf_counter()
                count += len(msgs)
                if first_at is None:
                    first_at = cpu_at = now
                    first_cpu = last_cpu = time.process_time()
                elif now - cpu_at >= CPU_SAMPLE_S or count >= messages:
                    cpu_at = now
                    last_cpu = time.process_time()
                borns.extend(map(_BORN, msgs))
                received.append((count, time.time() * 1000))
                summary.bytes += sum(map(len, map(_BODY, msgs)))
                if bar is not None and now - last_tick > 0.25:
                    last_tick = now
                    rate = count / max(1e-9, now - first_at)
                    bar.update(task, completed=count, rate=f"{rate:,.0f} msgs/s")
            summary.messages = count
            summary.latencies_ms = _latencies(borns, received)
            # Measured from the first to the last message: joining the group and the final idle
            # wait are not counted (the CPU time to within CPU_SAMPLE_S of the last message when
            # the run ends idle).
            summary.seconds = last_at - (first_at or started)
            summary.cpu_seconds = last_cpu - first_cpu
            if bar is not None:
                bar.update(task, completed=summary.messages,
                           rate=f"{summary.messages / max(1e-9, summary.seconds):,.0f} msgs/s")
        await consumer.commit()
    finally:
        await consumer.close()
    return summary
