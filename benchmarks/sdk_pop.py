"""The official RocketMQ 5 Python SDK's SimpleConsumer draining a backlog (run by bench_pop.py in
.venv-sdk): ``receive(32)`` then ack every message of the batch (16 acks at a time), until
``--count`` messages were acked. Prints ``{"messages", "seconds", "cpu"}`` (time from the first
receive, after start-up)."""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor

from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=120)
    args = parser.parse_args()
    config = ClientConfiguration(args.endpoint, Credentials(), request_timeout=10)
    consumer = SimpleConsumer(config, args.group, {args.topic: FilterExpression("*")}, await_duration=1)
    # ack_async of SimpleConsumer 5.1.2 fails in its callback: sync acks from a small pool.
    pool = ThreadPoolExecutor(16)
    consumer.startup()
    try:
        done = 0
        start, cpu = time.perf_counter(), time.process_time()
        deadline = start + args.timeout
        while done < args.count and time.perf_counter() < deadline:
            messages = consumer.receive(32, 30) or []
            list(pool.map(consumer.ack, messages))
            done += len(messages)
        print(json.dumps({"messages": done, "seconds": time.perf_counter() - start,
                          "cpu": time.process_time() - cpu}), flush=True)
    finally:
        pool.shutdown()
        consumer.shutdown()


if __name__ == "__main__":
    main()
