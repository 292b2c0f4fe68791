"""The official RocketMQ 5 Python SDK's send loop for bench_sdk.py: runs in .venv-sdk (never in
PocketMQ's process). Sends ``--size``-byte NORMAL messages for ``--seconds`` per round, either
one at a time (``sync``) or with ``--in-flight`` outstanding ``send_async`` calls, and prints
one JSON line per round: ``{"mode", "round", "messages", "seconds", "cpu", "switches"}`` (the SDK
process's CPU seconds and context switches in the round), preceded by ``{"start": <round>}``
just before the round begins (the caller samples the broker's CPU between the two). With
``--wait`` each round begins only when a line arrives on stdin (the caller interleaves other
rounds with these); EOF ends the run."""

from __future__ import annotations

import argparse
import json
import resource
import sys
import threading
import time

from rocketmq import ClientConfiguration, Credentials, Message, Producer


def message(topic: str, body: bytes) -> Message:
    msg = Message()
    msg.topic = topic
    msg.body = body
    return msg


def run_sync(producer: Producer, topic: str, body: bytes, seconds: float) -> tuple[int, float]:
    n = 0
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        producer.send(message(topic, body))
        n += 1
    return n, time.perf_counter() - start


def run_async(
    producer: Producer, topic: str, body: bytes, seconds: float, in_flight: int
) -> tuple[int, float]:
    slots = threading.Semaphore(in_flight)
    done = 0
    errors: list[BaseException] = []
    lock = threading.Lock()

    def finished(future: object) -> None:
        nonlocal done
        exc = future.exception()  # type: ignore[attr-defined]
        with lock:
            if exc is not None:
                errors.append(exc)
            done += 1
        slots.release()

    sent = 0
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        slots.acquire()
        producer.send_async(message(topic, body)).add_done_callback(finished)
        sent += 1
    for _ in range(in_flight):
        slots.acquire()
    if errors:
        raise RuntimeError(f"{len(errors)} sends failed, first: {errors[0]}")
    return done, time.perf_counter() - start


def context_switches() -> int:
    """This process's context switches so far (voluntary + involuntary, every thread it had); as
    benchlib.context_switches, which this script cannot import (it runs in the SDK's venv)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw + usage.ru_nivcsw


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--mode", choices=["sync", "async"], required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--wait", action="store_true", help="start each round on a line from stdin")
    args = parser.parse_args()
    producer = Producer(ClientConfiguration(args.endpoint, Credentials()), [args.topic])
    producer.startup()
    body = b"x" * args.size
    try:
        producer.send(message(args.topic, body))  # warm-up: route, channels
        for i in range(args.rounds):
            if args.wait and not sys.stdin.readline():
                break
            print(json.dumps({"start": i}), flush=True)
            cpu = time.process_time()
            switches = context_switches()
            if args.mode == "sync":
                n, secs = run_sync(producer, args.topic, body, args.seconds)
            else:
                n, secs = run_async(producer, args.topic, body, args.seconds, args.in_flight)
            cpu = time.process_time() - cpu
            switches = context_switches() - switches
            print(json.dumps({"mode": args.mode, "round": i, "messages": n, "seconds": secs, "cpu": cpu,
                              "switches": switches}), flush=True)
    finally:
        producer.shutdown()


if __name__ == "__main__":
    main()
