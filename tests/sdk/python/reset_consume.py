"""A SimpleConsumer of the official RocketMQ 5 Python SDK (run in .venv-sdk) that acks ``count``
messages, reports them, waits for a line on stdin (the test resets the group's offsets
meanwhile), then acks again until ``count`` messages or ``timeout`` s and reports those.

    reset_consume.py --endpoint HOST:PORT --topic T --group G --count N

Output: ``{"event": "first", "bodies": [...]}``, ``{"event": "second", "bodies": [...]}``,
``{"event": "done"}`` (one JSON line each).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer


def drain(consumer: SimpleConsumer, count: int, timeout: float) -> list[str]:
    bodies: list[str] = []
    deadline = time.time() + timeout
    while len(bodies) < count and time.time() < deadline:
        for m in consumer.receive(16, 15) or []:
            bodies.append(m.body.decode())
            consumer.ack(m)
    return bodies


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--endpoint", "--topic", "--group"):
        parser.add_argument(name, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=30)
    args = parser.parse_args()
    configuration = ClientConfiguration(args.endpoint, Credentials(), request_timeout=10)
    subscriptions = {args.topic: FilterExpression("*")}
    consumer = SimpleConsumer(configuration, args.group, subscriptions, await_duration=1)
    consumer.startup()
    try:
        for event in ("first", "second"):
            if event == "second":
                sys.stdin.readline()
            bodies = drain(consumer, args.count, args.timeout)
            print(json.dumps({"event": event, "bodies": bodies}), flush=True)
    finally:
        consumer.shutdown()
    print(json.dumps({"event": "done"}), flush=True)


if __name__ == "__main__":
    main()
