"""Run the official RocketMQ 5 Python SDK (rocketmq-python-client) as real consumers.

Runs in the SDK's own virtual environment (.venv-sdk), never in the test process. Usage::

    consume.py --endpoint HOST:PORT --plan '<json list of scenarios>'

Scenarios run in parallel threads; each is ``{"name", "kind", "topic", "group", ...}``:

* ``simple``: a SimpleConsumer receives (``invisible`` s) and acks until ``count`` messages
  were acked or ``timeout`` s passed.
* ``redeliver``: receives one message (its time: when that receive call started), does not
  ack it (with ``change_to`` s: changes its
  invisible duration to that right away), waits until it comes back, acks the second delivery.
* ``push``: a PushConsumer whose listener fails each message ``fail`` times (-1: always), and
  the bodies in ``fail_bodies`` once, and then succeeds (after ``sleep`` s); runs until ``count`` messages
  succeeded or ``timeout`` s passed.
* ``pair``: two SimpleConsumers of one group receive concurrently, hold each message
  ``hold`` s and ack it, until ``count`` messages were acked.

Every delivery is reported as ``[message_id, delivery_attempt, epoch seconds, consumer]``;
acks as ``[message_id, epoch seconds, consumer]``. One JSON line per scenario, then
``{"event": "done"}``.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    MessageListener,
    PushConsumer,
    SimpleConsumer,
)

LOCK = threading.Lock()


def credentials() -> Credentials:
    """``SDK_ACCESS_KEY``/``SDK_SECRET_KEY`` when set (the SDK then signs every request)."""
    ak, sk = os.environ.get("SDK_ACCESS_KEY", ""), os.environ.get("SDK_SECRET_KEY", "")
    return Credentials(ak, sk) if ak else Credentials()


def out(doc: dict) -> None:
    with LOCK:
        print(json.dumps(doc), flush=True)


def config(endpoint: str) -> ClientConfiguration:
    return ClientConfiguration(endpoint, credentials(), request_timeout=10)


def simple(endpoint: str, sc: dict, label: str = "c0") -> SimpleConsumer:
    consumer = SimpleConsumer(
        config(endpoint),
        sc["group"],
        {sc["topic"]: FilterExpression(sc.get("tag", "*"))},
        await_duration=sc.get("await", 2),
    )
    consumer.startup()
    return consumer


def run_simple(endpoint: str, sc: dict) -> dict:
    consumer = simple(endpoint, sc)
    deliveries, acks = [], []
    deadline = time.time() + sc.get("timeout", 60)
    try:
        while len(acks) < sc["count"] and time.time() < deadline:
            for m in consumer.receive(sc.get("batch", 16), sc.get("invisible", 15)) or []:
                deliveries.append([m.message_id, m.delivery_attempt, time.time(), "c0", m.body.decode()])
                consumer.ack(m)
                acks.append([m.message_id, time.time(), "c0"])
    finally:
        consumer.shutdown()
    return {"deliveries": deliveries, "acks": acks}


def run_redeliver(endpoint: str, sc: dict) -> dict:
    consumer = simple(endpoint, sc)
    deliveries = []
    deadline = time.time() + sc.get("timeout", 60)
    first = None
    try:
        while time.time() < deadline:
            asked = time.time()
            for m in consumer.receive(1, sc.get("invisible", 10)) or []:
                # The first delivery counts from before its receive call (no later than the pop),
                # later ones from when they arrived: the gap is never shorter than the real one.
                deliveries.append(
                    [m.message_id, m.delivery_attempt, asked if first is None else time.time(), "c0"]
                )
                if first is None:
                    first = m.message_id
                    if sc.get("change_to"):
                        changing = time.time()  # no later than the broker's new deadline base
                        consumer.change_invisible_duration(m, sc["change_to"])
                        deliveries[-1].append(changing)
                elif m.message_id == first:
                    consumer.ack(m)
                    return {"deliveries": deliveries}
                else:
                    consumer.ack(m)
    finally:
        consumer.shutdown()
    return {"deliveries": deliveries, "error": "not redelivered in time"}


class Listener(MessageListener):
    def __init__(self, fail: int, fail_bodies: list[str], sleep: float = 0.0) -> None:
        self.fail = fail
        self.fail_bodies = set(fail_bodies)
        self.sleep = sleep
        self.lock = threading.Lock()
        self.deliveries: list = []
        self.successes: set = set()
        self.seen: dict = {}

    def consume(self, message) -> ConsumeResult:
        with self.lock:
            n = self.seen.get(message.message_id, 0) + 1
            self.seen[message.message_id] = n
            body = message.body.decode()
            self.deliveries.append([message.message_id, message.delivery_attempt, time.time(), "push", body])
            if self.fail < 0 or n <= self.fail or (body in self.fail_bodies and n == 1):
                return ConsumeResult.FAILURE
        if self.sleep:
            time.sleep(self.sleep)  # a slow handler: longer than the broker's invisible time
        with self.lock:
            self.successes.add(message.message_id)
        return ConsumeResult.SUCCESS


def run_push(endpoint: str, sc: dict) -> dict:
    listener = Listener(sc.get("fail", 0), sc.get("fail_bodies", []), sc.get("sleep", 0.0))
    consumer = PushConsumer(config(endpoint), sc["group"], listener, {sc["topic"]: FilterExpression("*")})
    consumer.startup()
    deadline = time.time() + sc.get("timeout", 60)
    try:
        while time.time() < deadline:
            with listener.lock:
                if sc.get("count") and len(listener.successes) >= sc["count"]:
                    break
                if sc.get("deliveries") and len(listener.deliveries) >= sc["deliveries"]:
                    break
            time.sleep(0.2)
        time.sleep(sc.get("linger", 1))
    finally:
        consumer.shutdown()
    return {"deliveries": listener.deliveries, "successes": sorted(listener.successes)}


def run_pair(endpoint: str, sc: dict) -> dict:
    deliveries, acks = [], []
    lock = threading.Lock()
    stop = threading.Event()

    def one(label: str) -> None:
        consumer = simple(endpoint, sc, label)
        try:
            while not stop.is_set():
                for m in consumer.receive(4, sc.get("invisible", 20)) or []:
                    with lock:
                        deliveries.append([m.message_id, m.delivery_attempt, time.time(), label])
                    time.sleep(sc.get("hold", 0.05))
                    with lock:
                        acks.append([m.message_id, time.time(), label])
                    consumer.ack(m)
                    with lock:
                        if len(acks) >= sc["count"]:
                            stop.set()
        finally:
            consumer.shutdown()

    threads = [threading.Thread(target=one, args=(f"c{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    stop.wait(sc.get("timeout", 60))
    stop.set()
    for t in threads:
        t.join()
    return {"deliveries": deliveries, "acks": acks}


KINDS = {"simple": run_simple, "redeliver": run_redeliver, "push": run_push, "pair": run_pair}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--plan", required=True)
    args = parser.parse_args()

    def run(sc: dict) -> None:
        try:
            result = KINDS[sc["kind"]](args.endpoint, sc)
        except Exception as exc:  # reported, the test decides
            result = {"error": f"{type(exc).__name__}: {exc}"}
        out({"name": sc["name"], **result})

    threads = [threading.Thread(target=run, args=(sc,)) for sc in json.loads(args.plan)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out({"event": "done"})


if __name__ == "__main__":
    main()
