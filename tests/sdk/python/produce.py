"""Run the official RocketMQ 5 Python SDK (rocketmq-python-client) as a real producer.

Runs in the SDK's own virtual environment (.venv-sdk), never in the test process. Usage::

    produce.py --endpoint HOST:PORT --plan '<json list of scenarios>'

Each scenario is ``{"name", "kind", "topic", ...}``; kinds: ``sync`` / ``async`` (``count``,
``tag``, ``keys``, ``properties``), ``fifo`` (``groups``, ``count`` per group), ``delay``
(``count``, ``delay_ms``), ``transaction`` (``commit``, ``rollback``, ``unresolved`` counts:
the checker commits unresolved ones; with ``"wait_check": true`` the script waits until every
unresolved one was checked, printing ``{"event": "sent"}`` first so a test can restart the
broker in between). Prints one JSON object per scenario (``{"name", "receipts" | "error"}``)
and a final ``{"event": "done"}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    Credentials,
    Message,
    Producer,
    TransactionChecker,
    TransactionResolution,
)


def out(doc: dict) -> None:
    print(json.dumps(doc), flush=True)


def receipt(r, extra: dict | None = None) -> dict:
    q = r.message_queue
    doc = {
        "message_id": r.message_id,
        "transaction_id": r.transaction_id,
        "offset": r.offset,
        "queue_id": getattr(q, "queue_id", None),
        "broker": getattr(q, "broker_name", None),
    }
    doc.update(extra or {})
    return doc


def message(topic: str, body: bytes, sc: dict) -> Message:
    msg = Message()
    msg.topic = topic
    msg.body = body
    if sc.get("tag"):
        msg.tag = sc["tag"]
    if sc.get("keys"):
        msg.keys = sc["keys"]  # one key (the SDK setter takes one value)
    for k, v in (sc.get("properties") or {}).items():
        msg.add_property(k, v)
    return msg


class Checker(TransactionChecker):
    def __init__(self) -> None:
        self.checked: list[str] = []
        self.lock = threading.Lock()

    def check(self, msg: Message) -> TransactionResolution:
        with self.lock:
            self.checked.append(msg.message_id)
        return TransactionResolution.COMMIT


def run(producer: Producer, checker: Checker, sc: dict) -> dict:
    kind, topic = sc["kind"], sc["topic"]
    result: dict = {"name": sc["name"], "receipts": []}
    receipts = result["receipts"]
    if kind == "sync":
        for i in range(sc["count"]):
            receipts.append(
                receipt(producer.send(message(topic, f"{sc['name']}-{i}".encode(), sc)), {"i": i})
            )
    elif kind == "async":
        futures = [
            producer.send_async(message(topic, f"{sc['name']}-{i}".encode(), sc)) for i in range(sc["count"])
        ]
        receipts.extend(receipt(f.result(timeout=30), {"i": i}) for i, f in enumerate(futures))
    elif kind == "fifo":
        for i in range(sc["count"]):
            for group in sc["groups"]:
                msg = message(topic, f"{group}:{i}".encode(), sc)
                msg.message_group = group
                receipts.append(receipt(producer.send(msg), {"group": group, "i": i}))
    elif kind == "delay":
        for i in range(sc["count"]):
            msg = message(topic, f"{sc['name']}-{i}".encode(), sc)
            # The SDK puts this value into Timestamp.seconds: epoch seconds.
            deliver_s = int(time.time()) + max(1, sc["delay_ms"] // 1000)
            msg.delivery_timestamp = deliver_s
            receipts.append(receipt(producer.send(msg), {"i": i, "deliver_ms": deliver_s * 1000}))
    elif kind == "transaction":
        for outcome in ("commit", "rollback", "unresolved"):
            for i in range(sc.get(outcome, 0)):
                tx = producer.begin_transaction()
                r = producer.send(message(topic, f"{outcome}-{i}".encode(), sc), tx)
                if outcome == "commit":
                    tx.commit()
                elif outcome == "rollback":
                    tx.rollback()
                receipts.append(receipt(r, {"outcome": outcome, "i": i}))
        unresolved = {r["message_id"] for r in receipts if r["outcome"] == "unresolved"}
        if sc.get("wait_check") and unresolved:
            out({"event": "sent", "name": sc["name"], "receipts": receipts})
            deadline = time.monotonic() + sc.get("check_timeout_s", 60)
            while time.monotonic() < deadline:
                with checker.lock:
                    if unresolved <= set(checker.checked):
                        break
                time.sleep(0.1)
            time.sleep(1.0)  # let the checker's EndTransaction reach the broker
            with checker.lock:
                result["checked"] = sorted(set(checker.checked))
    else:
        raise ValueError(f"unknown scenario kind {kind!r}")
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--plan", required=True)
    parser.add_argument("--namespace", default="")
    args = parser.parse_args()
    plan = json.loads(args.plan)
    topics = sorted({sc["topic"] for sc in plan})
    checker = Checker()
    config = ClientConfiguration(args.endpoint, Credentials(), namespace=args.namespace)
    producer = Producer(config, topics, checker=checker)
    producer.startup()
    try:
        for sc in plan:
            try:
                out(run(producer, checker, sc))
            except Exception as exc:  # reported, the next scenario still runs
                out({"name": sc["name"], "error": f"{type(exc).__name__}: {exc}"})
    finally:
        producer.shutdown()
    out({"event": "done"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
