"""Run the official RocketMQ 5 Python SDK (rocketmq-python-client) as a real producer.

Runs in the SDK's own virtual environment (.venv-sdk), never in the test process. Usage::

    produce.py --endpoint HOST:PORT --plan '<json list of scenarios>'

Each scenario is ``{"name", "kind", "topic", ...}``; kinds: ``sync`` / ``async`` (``count``,
``tag``, ``keys``, ``properties``), ``fifo`` (``groups``, ``count`` per group), ``delay``
(``count``, ``delay_ms``), ``transaction`` (``commit``, ``rollback``, ``unresolved`` counts:
the checker commits unresolved ones, or leaves them open with ``--checker unknown``; with
``"wait_check": true`` the script waits until every unresolved one was checked), ``await_checks``
(``message_ids``: wait until the broker asked this producer's checker about each),
``consumer_start`` (``group``, ``endpoint``: start and stop a SimpleConsumer and a PushConsumer).
Prints one JSON object per scenario (``{"name", "receipts" | "error"}``) and a final ``{"event": "done"}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
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
    """Records every check; answers COMMIT, or "unknown" (no decision: checked again later)."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.checked: list[str] = []
        self.lock = threading.Lock()

    def check(self, msg: Message) -> TransactionResolution:
        with self.lock:
            self.checked.append(msg.message_id)
        if self.answer == "unknown":
            return TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED
        return TransactionResolution.COMMIT


class Listener(MessageListener):
    def consume(self, message: Message) -> ConsumeResult:
        return ConsumeResult.SUCCESS


def wait_checks(checker: Checker, expected: set[str], timeout_s: float) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with checker.lock:
            if expected <= set(checker.checked):
                break
        time.sleep(0.1)
    time.sleep(1.0)  # let the checker's EndTransaction reach the broker
    with checker.lock:
        return sorted(set(checker.checked))


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
            result["checked"] = wait_checks(checker, unresolved, sc.get("check_timeout_s", 60))
    elif kind == "consumer_start":
        # Consumers start only after the broker answered their Settings (the Python
        # PushConsumer gives up after 10 s); receiving is not served yet.
        config = ClientConfiguration(sc["endpoint"], Credentials())
        subscription = {topic: FilterExpression()}
        for name, make in (
            ("simple", lambda: SimpleConsumer(config, sc["group"], subscription)),
            ("push", lambda: PushConsumer(config, sc["group"], Listener(), subscription)),
        ):
            started = time.monotonic()
            consumer = make()
            consumer.startup()
            result[f"{name}_start_s"] = time.monotonic() - started
            consumer.shutdown()
    elif kind == "await_checks":
        # A producer started later (e.g. after a broker restart) resolves what others left open.
        result["checked"] = wait_checks(checker, set(sc["message_ids"]), sc.get("check_timeout_s", 60))
    else:
        raise ValueError(f"unknown scenario kind {kind!r}")
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--plan", required=True)
    parser.add_argument("--namespace", default="")
    parser.add_argument("--checker", choices=["commit", "unknown"], default="commit")
    # TLS: the SDK verifies with gRPC's default roots (GRPC_DEFAULT_SSL_ROOTS_FILE_PATH).
    parser.add_argument("--tls", action="store_true")
    args = parser.parse_args()
    plan = json.loads(args.plan)
    topics = sorted({sc["topic"] for sc in plan})
    checker = Checker(args.checker)
    config = ClientConfiguration(args.endpoint, Credentials(), namespace=args.namespace)
    producer = Producer(config, topics, checker=checker, tls_enable=args.tls)
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
