"""POP consumption with the official Python SDK (rocketmq-python-client 5.1.2 in .venv-sdk, in a
subprocess) against a real NameServer and broker: SimpleConsumer receive + ack, redelivery after
the invisible time (and not before), ChangeInvisibleDuration, PushConsumer retries with growing
backoff, dead letters after the group's max attempts, and two consumers of one group never
holding the same message at once. The scenarios run in parallel in one SDK process (they wait
for invisible times of 10 s, RocketMQ's minimum for a SimpleConsumer)."""

from __future__ import annotations

import itertools
import json
import subprocess
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.procs import ROOT, ProcessGroup, wait_until
from tests.sdk.cluster import SDK_PYTHON, Cluster, start_cluster

SCRIPT = ROOT / "tests" / "sdk" / "python" / "consume.py"
#: Short delay levels: the push consumer's backoff is 1 s, 2 s, 3 s.
FLAGS = ["--message-delay-level", "1s 2s 3s 4s 5s"]
#: Push consumers get 4 s invisible times, renewed 2 s before they end.
FLAGS += ["--default-invisible-time-mills", "4000", "--renew-ahead-time-millis", "2000"]


def run_consumers(endpoint: str, plan: list[dict[str, Any]], timeout: float = 150) -> dict[str, Any]:
    proc = subprocess.run(
        [str(SDK_PYTHON), str(SCRIPT), "--endpoint", endpoint, "--plan", json.dumps(plan)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            doc = json.loads(line)
            results[doc.get("name") or doc["event"]] = doc
    assert "done" in results, f"SDK run failed (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr[-4000:]}"
    for name, doc in results.items():
        assert "error" not in doc, f"{name}: {doc['error']}\n{proc.stderr[-4000:]}"
    return results


@pytest.fixture(scope="module")
def pop_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("pop-cluster")
    group = ProcessGroup(tmp / "logs")
    try:
        yield start_cluster(group, tmp, names=("broker-a",), extra=FLAGS)
    finally:
        group.stop_all()


@pytest.fixture(scope="module")
def run(pop_cluster: Cluster) -> dict[str, Any]:
    broker = pop_cluster.broker("broker-a")
    counts = {
        "pop-simple": 20,
        "pop-redeliver": 1,
        "pop-change": 1,
        "pop-push": 1,
        "pop-dlq": 1,
        "pop-pair": 40,
    }
    for topic in counts:
        pop_cluster.create_topic(topic)
    broker.client.create_group("g-dlq", retry_max_times=2)
    pop_cluster.create_topic("pop-fifo", "FIFO")
    broker.client.create_group("g-fifo", consume_message_orderly=True, retry_max_times=16)
    for i in range(5):
        for queue, name in ((0, "a"), (1, "b")):
            broker.client.send("pop-fifo", f"{name}-{i}".encode(), queue)
    for topic, n in counts.items():
        for i in range(n):
            broker.client.send(topic, f"{topic}-{i}".encode(), tags="t")
    plan = [
        {"name": "simple", "kind": "simple", "topic": "pop-simple", "group": "g-simple", "count": 20},
        {
            "name": "redeliver",
            "kind": "redeliver",
            "topic": "pop-redeliver",
            "group": "g-redeliver",
            "invisible": 10,
        },
        {
            "name": "change",
            "kind": "redeliver",
            "topic": "pop-change",
            "group": "g-change",
            "invisible": 10,
            "change_to": 20,
        },
        {"name": "push", "kind": "push", "topic": "pop-push", "group": "g-push", "fail": 2, "count": 1},
        {
            "name": "dlq",
            "kind": "push",
            "topic": "pop-dlq",
            "group": "g-dlq",
            "fail": -1,
            "deliveries": 3,
            "linger": 2,
        },
        {
            "name": "fifo",
            "kind": "push",
            "topic": "pop-fifo",
            "group": "g-fifo",
            "fail_bodies": ["a-2"],
            "count": 10,
        },
        {"name": "pair", "kind": "pair", "topic": "pop-pair", "group": "g-pair", "count": 40, "hold": 0.05},
    ]
    return run_consumers(pop_cluster.namesrv, plan)


def test_simple_consumer_receives_and_acks_every_message_once(run: dict[str, Any]) -> None:
    res = run["simple"]
    ids = [d[0] for d in res["deliveries"]]
    assert len(ids) == 20 and len(set(ids)) == 20
    assert sorted(d[4] for d in res["deliveries"]) == sorted(f"pop-simple-{i}" for i in range(20))
    assert {d[1] for d in res["deliveries"]} == {1}


def test_unacked_message_comes_back_after_its_invisible_time_with_attempt_2(run: dict[str, Any]) -> None:
    first, second = run["redeliver"]["deliveries"][:2]
    assert first[0] == second[0] and (first[1], second[1]) == (1, 2)
    assert 10.0 <= second[2] - first[2] < 14.0


def test_change_invisible_duration_extends_the_invisible_time(run: dict[str, Any]) -> None:
    first, second = run["change"]["deliveries"][:2]
    changed_at = first[4]
    assert first[0] == second[0] and second[1] == 2
    assert second[2] - changed_at >= 20.0 and second[2] - first[2] < 25.0


def test_push_consumer_failing_twice_gets_it_three_times_with_growing_delays(run: dict[str, Any]) -> None:
    deliveries = run["push"]["deliveries"]
    assert [d[1] for d in deliveries] == [1, 2, 3] and len({d[0] for d in deliveries}) == 1
    gap1, gap2 = deliveries[1][2] - deliveries[0][2], deliveries[2][2] - deliveries[1][2]
    assert 0.9 <= gap1 < gap2 and gap2 >= 1.9
    assert run["push"]["successes"] == [deliveries[0][0]]


def test_always_failing_message_goes_to_the_dead_letter_topic(
    pop_cluster: Cluster, run: dict[str, Any]
) -> None:
    deliveries = run["dlq"]["deliveries"]
    assert [d[1] for d in deliveries] == [1, 2, 3]  # retryMaxTimes 2: three attempts, no fourth
    client = pop_cluster.broker("broker-a").client
    dead = wait_until(lambda: client.pull_all("%DLQ%g-dlq", 0), 15, message="dead letter")
    assert [m.body for m in dead] == [b"pop-dlq-0"]
    assert dead[0].properties["RETRY_TOPIC"] == "pop-dlq" and dead[0].reconsume_times == 3


def test_fifo_push_consumer_gets_each_queue_in_order_with_a_failure_in_the_middle(
    run: dict[str, Any],
) -> None:
    bodies = [d[4] for d in run["fifo"]["deliveries"]]
    assert [b for b in bodies if b.startswith("a")] == ["a-0", "a-1", "a-2", "a-2", "a-3", "a-4"]
    assert [b for b in bodies if b.startswith("b")] == [f"b-{i}" for i in range(5)]


def test_the_broker_renews_a_push_consumers_invisible_time_while_it_works(pop_cluster: Cluster) -> None:
    """The handler takes 12 s, three times the push consumer's 4 s invisible time: the broker
    renews it for the connected client, so the message is not delivered again meanwhile."""
    pop_cluster.create_topic("pop-renew")
    pop_cluster.broker("broker-a").client.send("pop-renew", b"slow", tags="t")
    plan = [
        {
            "name": "renew",
            "kind": "push",
            "topic": "pop-renew",
            "group": "g-renew",
            "sleep": 12,
            "count": 1,
            "timeout": 40,
        }
    ]
    res = run_consumers(pop_cluster.namesrv, plan)["renew"]
    assert [d[1] for d in res["deliveries"]] == [1] and res["successes"] == [res["deliveries"][0][0]]


def test_two_consumers_of_one_group_never_hold_the_same_message(run: dict[str, Any]) -> None:
    res = run["pair"]
    held: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    acks = {(a[0], a[2]): a[1] for a in res["acks"]}
    for msg_id, _attempt, at, who in res["deliveries"]:
        held[msg_id].append((at, acks.get((msg_id, who), float("inf")), who))
    assert len(held) == 40
    assert {who for spans in held.values() for *_x, who in spans} == {"c0", "c1"}
    for spans in held.values():
        spans.sort()
        for (_s1, e1, _w1), (s2, _e2, _w2) in itertools.pairwise(spans):
            assert e1 <= s2


def test_pop_metrics_count_each_event(pop_cluster: Cluster, run: dict[str, Any]) -> None:
    port = pop_cluster.broker("broker-a").metrics_port
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()

    def value(group: str, event: str) -> float:
        for line in text.splitlines():
            if (
                line.startswith("pocketmq_pop_messages_total{")
                and f'group="{group}"' in line
                and f'event="{event}"' in line
            ):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    assert value("g-simple", "popped") == 20 and value("g-simple", "acked") == 20
    assert value("g-push", "nacked") == 2 and value("g-push", "retried") == 2
    assert value("g-dlq", "dead_lettered") == 1 and value("g-redeliver", "revived") == 1
    assert "pocketmq_pop_in_flight" in text
