"""A consumer group member in its own process, for crash and rebalance tests.

    python -m tests.integration.client.consumer_proc --namesrv H:P --group G --topic T \
        --out received.jsonl --status status.json [--tags EXPR] [--delay-ms N]

Every message the handler processes is appended to ``--out`` (one JSON object per line, flushed
before the handler returns, so a SIGKILL loses nothing that was counted as processed).
``--status`` is rewritten atomically every 100 ms with the member's client id, its queues and
how many messages it processed. SIGTERM closes the consumer gracefully (commit + unregister).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
from pathlib import Path

from pocketmq import AsyncConsumer, ReceivedMessage


async def run(args: argparse.Namespace) -> None:
    consumer = AsyncConsumer(
        args.group, args.namesrv, client_id=args.client_id, consume_from="first",
        heartbeat_interval=0.5, rebalance_interval=0.5, commit_interval=0.3, long_poll_timeout=1.0,
        request_timeout=2.0, master_retry_interval=1.0,
    )
    consumer.subscribe(args.topic, args.tags)
    out = open(args.out, "a", encoding="utf-8")  # noqa: SIM115, ASYNC230 - one small line per message
    processed = 0

    async def handler(msg: ReceivedMessage) -> None:
        nonlocal processed
        if args.delay_ms:
            await asyncio.sleep(args.delay_ms / 1000)
        out.write(json.dumps({"q": str(msg.queue), "o": msg.queue_offset, "b": msg.text}) + "\n")
        out.flush()
        processed += 1

    def write_status() -> None:
        status = Path(args.status)
        tmp = status.with_suffix(".tmp")
        tmp.write_text(json.dumps({
            "client_id": consumer.client_id, "pid": os.getpid(), "processed": processed,
            "assignment": sorted(str(q) for q in consumer.assignment()),
        }))
        tmp.replace(status)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await consumer.start(handler)
    while not stop.is_set():
        write_status()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.1)
    await consumer.close()
    write_status()
    out.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--tags", default="*")
    parser.add_argument("--client-id", default=None)
    parser.add_argument("--out", required=True)
    parser.add_argument("--status", required=True)
    parser.add_argument("--delay-ms", type=float, default=0)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
