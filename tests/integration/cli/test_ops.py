"""Operator commands against real processes, through the NameServer relay only (the CLI reaches
nothing but the NameServer, as through one ``kubectl port-forward``): ``consumer reset`` moving
a running group back, ``consumer connections``, ``broker drain``/``undrain`` under a running
producer, and ``broker config get|set`` (live effect, kept over a restart, unsafe keys refused).
One cluster for the module: NameServer on 127.0.0.1, brokers on 127.0.0.2 (see test_cli.py)."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterator

import pytest

from pocketmq import Consumer, Message, Producer
from pocketmq.client.message import ReceivedMessage
from pocketmq.errors import PocketMQError
from tests.integration.cli.test_cli import BROKER_HOST, Cli
from tests.integration.client.cluster import NAMESRV_SERVICE, Cluster
from tests.integration.procs import ProcessGroup
from tests.support import free_port, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("ops-cluster")
    group = ProcessGroup(tmp / "logs")
    cluster = Cluster(group, tmp)
    try:
        cluster.start_namesrv()
        # Registering every second: the drain test restarts the NameServer.
        for name, broker_id in (("broker-a", 0), ("broker-a", 1), ("broker-b", 0)):
            cluster.start_broker(name, broker_id, "--register-name-server-period", "1000", host=BROKER_HOST)
        yield cluster
    finally:
        group.stop_all()


@pytest.fixture(scope="module")
def cli(cluster: Cluster) -> Cli:
    """A CLI that can reach the NameServer and nothing else."""
    dead = free_port()
    return Cli(cluster.namesrv, {"grpc_proxy": f"http://127.0.0.1:{dead}", "no_grpc_proxy": "127.0.0.1"})


def test_reset_by_time_moves_a_running_group_back_and_it_reads_again(cluster: Cluster, cli: Cli) -> None:
    topic, group = "ops-reset", "ops-reset-g"
    cluster.create_topic(topic, queues=2)
    received: list[str] = []
    lock = threading.Lock()

    def handle(msg: ReceivedMessage) -> None:
        with lock:
            received.append(msg.body.decode())

    with Producer(cluster.namesrv) as producer, \
            Consumer(group, cluster.namesrv, consume_from="first", heartbeat_interval=1.0,
                     rebalance_interval=1.0, commit_interval=0.5, long_poll_timeout=5.0) as consumer:
        consumer.subscribe(topic)
        consumer.start(handle)
        for i in range(20):
            producer.send(Message(topic, f"old-{i}".encode()))
        time.sleep(0.05)  # store timestamps of the two batches differ by more than a millisecond
        cut_ms = int(time.time() * 1000)
        time.sleep(0.05)
        new = [f"new-{i}" for i in range(20)]
        for body in new:
            producer.send(Message(topic, body.encode()))
        wait_until(lambda: len(received) >= 40, 20, message="everything consumed once")
        # The group has committed all of it.
        wait_until(lambda: cli.json("consumer", "progress", group, "--topic", topic)["total_lag"] == 0, 15,
                   message="offsets committed")
        with lock:
            received.clear()

        reset = cli.json("consumer", "reset", "--group", group, "--topic", topic, "--to-time", str(cut_ms))
        changes = [(b["broker_name"], q["queue_id"], q["old_offset"], q["new_offset"])
                   for b in reset["brokers"] for q in b["reset"]["queues"]]
        # Per queue the offset moved back by exactly the "new" messages stored there.
        assert sum(old - new_ for _, _, old, new_ in changes) == 20, changes

        # The running consumer notices and reads the 20 newer messages again (and not the older).
        wait_until(lambda: len(received) >= 20, 20, message="re-read after the reset")
        consumer.commit()
        time.sleep(0.5)
        with lock:
            again = collections.Counter(received)
        assert set(again) == set(new), again
        wait_until(lambda: cli.json("consumer", "progress", group, "--topic", topic)["total_lag"] == 0, 15,
                   message="offsets committed after the reset")

        # Reset to the earliest: everything again; to the latest: nothing pending.
        with lock:
            received.clear()
        cli.json("consumer", "reset", "--group", group, "--topic", topic, "--to-earliest")
        wait_until(lambda: len(set(received)) >= 40, 20, message="re-read from the earliest")
        latest = cli.json("consumer", "reset", "--group", group, "--topic", topic, "--to-latest")
        assert all(q["new_offset"] >= q["old_offset"] or q["old_offset"] < 0
                   for b in latest["brokers"] for q in b["reset"]["queues"])

        bad = cli.run("consumer", "reset", "--group", group, "--topic", topic)
        assert bad.returncode != 0 and "exactly one of" in bad.stderr


def test_connections_lists_the_running_members(cluster: Cluster, cli: Cli) -> None:
    topic, group = "ops-conn", "ops-conn-g"
    cluster.create_topic(topic, queues=2)
    with Consumer(group, cluster.namesrv, heartbeat_interval=1.0) as consumer:
        consumer.subscribe(topic, "a || b")
        consumer.start(lambda m: None)
        got = cli.json("consumer", "connections", "--group", group)
        rows = {c["client_id"]: c for c in got["connections"]}
        assert set(rows) == {consumer.client_id}
        row = rows[consumer.client_id]
        assert row["language"] == "pocketmq-python" and row["version"] and row["protocol"] == "pocketmq"
        assert row["addr"].startswith("127.0.0.")
        assert {(s["topic"], s["expression"]) for s in row["subscriptions"]} >= {(topic, "a || b")}
        table = cli.run("consumer", "connections", "--group", group)
        assert table.returncode == 0 and consumer.client_id in table.stdout


def test_drain_moves_a_running_producer_to_the_other_group(cluster: Cluster, cli: Cli) -> None:
    topic = "ops-drain"
    cluster.create_topic(topic, queues=2)
    by_broker: collections.Counter[str] = collections.Counter()
    errors: list[Exception] = []
    phase = ["before"]
    stop = threading.Event()

    with Producer(cluster.namesrv, route_refresh_interval=0.5) as producer:
        def produce() -> None:
            while not stop.is_set():
                try:
                    result = producer.send(Message(topic, b"x"))
                    by_broker[f"{phase[0]}:{result.queue.broker_name}"] += 1
                except PocketMQError as exc:  # none expected: a retry lands on the other group
                    if phase[0] != "no-namesrv":  # (while the only NameServer restarts, no routes)
                        errors.append(exc)
                time.sleep(0.005)

        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        try:
            wait_until(lambda: by_broker["before:broker-a"] > 5 and by_broker["before:broker-b"] > 5, 15,
                       message="both groups written")
            drained = cli.json("broker", "drain", "broker-a")
            assert all(r["topics_changed"] >= 1 for r in drained["namesrvs"]), drained
            assert sorted((b["broker_id"], b["ok"]) for b in drained["brokers"]) == [(0, True), (1, True)]
            route = cli.json("topic", "route", topic)
            assert {q["broker_name"]: q["perm_text"] for q in route["queue_datas"]} == {
                "broker-a": "R--", "broker-b": "RW-"}
            time.sleep(1.5)  # past the producer's route refresh
            phase[0] = "drained"
            wait_until(lambda: by_broker["drained:broker-b"] > 20, 15, message="writes while drained")
            assert by_broker["drained:broker-a"] == 0
            # A topic created while drained is read-only on broker-a too.
            cluster.create_topic("ops-drain-later", queues=1)
            later = cli.json("topic", "route", "ops-drain-later")
            assert {q["broker_name"]: q["perm_text"] for q in later["queue_datas"]}["broker-a"] == "R--"

            # Kept by the broker: a NameServer that restarts (or another one) gets the topics
            # read-only from the broker's registration, not writable again.
            config = cli.json("broker", "config", "get", "broker-a", "brokerPermission")
            assert [b["config"]["entries"][0]["value"] for b in config["brokers"]] == ["4", "4"]
            restarted = cluster.namesrv_proc
            assert restarted is not None
            phase[0] = "no-namesrv"
            restarted.terminate()
            cluster.namesrv_proc = cluster.group.start_grpc(
                "services.namesrv", ["--listen", cluster.namesrv, "--metrics-port", "0"], cluster.namesrv,
                name="namesrv", service=NAMESRV_SERVICE)
            wait_until(lambda: (r := cluster.route(topic)) is not None
                       and {q.broker_name for q in r.queue_datas} == {"broker-a", "broker-b"}, 20,
                       message="brokers registered with the new NameServer")
            route = cli.json("topic", "route", topic)
            assert {q["broker_name"]: q["perm_text"] for q in route["queue_datas"]} == {
                "broker-a": "R--", "broker-b": "RW-"}
            time.sleep(1.5)
            phase[0] = "drained"

            cli.json("broker", "undrain", "broker-a")
            time.sleep(1.5)
            phase[0] = "undrained"
            wait_until(lambda: by_broker["undrained:broker-a"] > 5, 15, message="broker-a written again")
        finally:
            stop.set()
            thread.join(10)
    assert errors == []
    missing = cli.run("broker", "drain", "no-such-broker", "--output", "json")
    assert missing.returncode == 1 and "no-such-broker" in missing.stdout


def test_config_set_is_live_survives_a_restart_and_refuses_unsafe_keys(cluster: Cluster, cli: Cli) -> None:
    topic = "ops-config"
    broker_b = next(b for b in cluster.brokers if b.name == "broker-b")
    cluster.create_topic(topic, queues=1, masters=[broker_b])
    before = cli.json("broker", "config", "get", "broker-b", "maxMessageSize")
    entry = before["brokers"][0]["config"]["entries"][0]
    assert entry["key"] == "maxMessageSize" and entry["live"] and not entry.get("overridden", False)

    with Producer(cluster.namesrv) as producer:
        producer.send(Message(topic, b"y" * 3000))  # fits today
        cli.json("broker", "config", "set", "broker-b", "maxMessageSize=2048")
        with pytest.raises(PocketMQError, match="2048"):
            producer.send(Message(topic, b"y" * 3000))
        producer.send(Message(topic, b"y" * 1000))

    # Kept over a restart (the overrides file in the store directory).
    broker_b.proc.terminate()
    cluster.restart(broker_b)
    after = cli.json("broker", "config", "get", "broker-b", "maxMessageSize")
    entry = after["brokers"][0]["config"]["entries"][0]
    assert (entry["value"], entry["overridden"]) == ("2048", True)
    with Producer(cluster.namesrv) as producer, pytest.raises(PocketMQError, match="2048"):
        producer.send(Message(topic, b"y" * 3000))

    refused = cli.run("broker", "config", "set", "broker-b", "listenPort=1234", "--output", "json")
    assert refused.returncode == 1
    assert "listenPort" in refused.stdout and "listening sockets" in refused.stdout
    invalid = cli.run("broker", "config", "set", "broker-b", "maxMessageSize=-5", "--output", "json")
    assert invalid.returncode == 1 and "maxMessageSize" in invalid.stdout
    unknown = cli.run("broker", "config", "set", "broker-b", "maxMesageSize=5", "--output", "json")
    assert unknown.returncode == 1 and "unknown key" in unknown.stdout
    secret = cli.run("broker", "config", "set", "broker-b", "haAuthSecret=abcdefghijklmnopqrs")
    assert secret.returncode == 1 and "secret" in secret.stderr
    # Nothing refused changed anything.
    final = cli.json("broker", "config", "get", "broker-b", "maxMessageSize", "listenPort")
    values = {e["key"]: e["value"] for e in final["brokers"][0]["config"]["entries"]}
    assert values["maxMessageSize"] == "2048" and values["listenPort"] == str(broker_b.port)
    cli.json("broker", "config", "set", "broker-b", "maxMessageSize=4194304")
