"""``pocketmq bench produce|consume``: the commands; the load loops are :mod:`pocketmq.cli.bench`."""

from __future__ import annotations

import uuid
from typing import Annotated

import typer

from pocketmq.cli.common import Conn, StartFrom, connected

app = typer.Typer(help="Benchmarks through the client (progress bar, summary table).", no_args_is_help=True)

BENCH_TIMEOUT = 10.0
_TOPIC = typer.Option("--topic", "-t")
DurationOpt = Annotated[float, typer.Option("--duration", min=0, help="Stop after seconds (0 = by count).")]


@app.command("produce")
@connected(timeout=BENCH_TIMEOUT)
def bench_produce(
    topic: Annotated[str, _TOPIC] = "BenchTopic",
    messages: Annotated[int, typer.Option("--messages", "-m", min=1, help="Messages to send.")] = 100_000,
    duration: DurationOpt = 0,
    size: Annotated[int, typer.Option("--size", "-s", min=1, help="Body bytes.")] = 1024,
    batch: Annotated[int, typer.Option("--batch", min=1, max=4096, help="Messages per request.")] = 32,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="Requests in flight.")] = 8,
    tags: Annotated[str, typer.Option("--tags")] = "",
    *,
    conn: Conn,
) -> None:
    """Send messages as fast as possible; print msgs/s, MB/s and request latency."""
    from pocketmq.cli import bench

    summary = conn.run(lambda: bench.produce(
        conn.namesrv, topic=topic, messages=messages, duration=duration, size=size, batch=batch,
        concurrency=concurrency, tags=tags, timeout=conn.timeout, progress=not conn.json,
        tls=conn.client_tls))
    bench.print_summary(summary, conn.output)
    if summary.errors and not summary.messages:
        raise typer.Exit(1)


@app.command("consume")
@connected(timeout=BENCH_TIMEOUT)
def bench_consume(
    topic: Annotated[str, _TOPIC] = "BenchTopic",
    group: Annotated[str | None, typer.Option("--group", "-g", help="Default: a new group.")] = None,
    messages: Annotated[int, typer.Option("--messages", "-m", min=1, help="Stop after this many.")] = 100_000,
    duration: DurationOpt = 0,
    idle: Annotated[float, typer.Option("--idle", min=0.1,
                                        help="Stop after this long without messages.")] = 10.0,
    start: Annotated[StartFrom, typer.Option("--from", case_sensitive=False)] = StartFrom.first,
    batch: Annotated[int, typer.Option("--batch", min=1, max=4096, help="Messages per pull.")] = 256,
    *,
    conn: Conn,
) -> None:
    """Consume as fast as possible; print msgs/s, MB/s and end-to-end latency (store to receive)."""
    from pocketmq.cli import bench

    summary = conn.run(lambda: bench.consume(
        conn.namesrv, topic=topic, group=group or f"bench-{uuid.uuid4().hex[:8]}", messages=messages,
        duration=duration, idle=idle, start=start.value, batch=batch, timeout=conn.timeout,
        progress=not conn.json, tls=conn.client_tls))
    bench.print_summary(summary, conn.output)
    if not summary.messages:
        raise typer.Exit(1)
