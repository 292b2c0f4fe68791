"""The ``pocketmq`` command through its real entry point (the installed console script), against
real NameServer and broker processes.

The relay test puts the brokers where the CLI cannot reach them: they listen and register on
127.0.0.2 while the NameServer listens on 127.0.0.1, and the CLI runs with ``grpc_proxy``
pointing at a closed port and ``no_grpc_proxy=127.0.0.1`` - every gRPC connection except the one
to the NameServer fails. (``--access direct`` under the same environment fails, proving it.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.client.cluster import Cluster
from tests.integration.procs import ProcessGroup
from tests.support import free_port, wait_for

pytestmark = pytest.mark.slow

BROKER_HOST = "127.0.0.2"


def cli_argv() -> list[str]:
    script = shutil.which("pocketmq", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "pocketmq.cli"]


class Cli:
    def __init__(self, namesrv: str, env: dict[str, str] | None = None) -> None:
        self.namesrv = namesrv
        base = {k: v for k, v in os.environ.items()
                if not k.startswith("POCKETMQ_") and "proxy" not in k.lower()}
        self.env = {**base, "POCKETMQ_NAMESRV": namesrv, **(env or {})}

    def run(self, *args: str, stdin: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli_argv(), *args], input=stdin, capture_output=True, text=True,
                              env=self.env, timeout=timeout, check=False)

    def json(self, *args: str, stdin: str | None = None, code: int = 0) -> Any:
        proc = self.run(*args, "--output", "json", stdin=stdin)
        assert proc.returncode == code, \
            f"pocketmq {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def hidden_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """NameServer on 127.0.0.1; broker-a (master + slave) and broker-b on 127.0.0.2."""
    tmp = tmp_path_factory.mktemp("cli-cluster")
    group = ProcessGroup(tmp / "logs")
    cluster = Cluster(group, tmp)
    try:
        cluster.start_namesrv()
        cluster.start_broker("broker-a", 0, host=BROKER_HOST)
        cluster.start_broker("broker-a", 1, host=BROKER_HOST)
        cluster.start_broker("broker-b", 0, host=BROKER_HOST)
        yield cluster
    finally:
        group.stop_all()


@pytest.fixture
def relay_only(hidden_cluster: Cluster) -> Cli:
    """A CLI that can reach the NameServer and nothing else."""
    dead = free_port()
    return Cli(hidden_cluster.namesrv,
               {"grpc_proxy": f"http://127.0.0.1:{dead}", "no_grpc_proxy": "127.0.0.1"})


def test_every_admin_command_works_through_the_namesrv_relay_only(
    hidden_cluster: Cluster, relay_only: Cli
) -> None:
    cli = relay_only
    # Control: the brokers really are out of reach for this CLI.
    blocked = cli.json("broker", "status", "--access", "direct", code=1)
    assert all(not b["ok"] and b["error"]["type"] == "ConnectionFailedError" for b in blocked["brokers"])

    clusters = cli.json("cluster", "list")
    assert clusters["clusters"] == {"c1": ["broker-a", "broker-b"]}
    assert sorted((b["broker_name"], b["broker_id"]) for b in clusters["brokers"]) == [
        ("broker-a", 0), ("broker-a", 1), ("broker-b", 0)]
    assert all(b["addr"].startswith(BROKER_HOST) for b in clusters["brokers"])

    created = cli.json("topic", "create", "cli-t", "--read-queues", "3", "--write-queues", "3")
    assert sorted(r["broker_name"] for r in created["results"] if r["ok"]) == ["broker-a", "broker-b"]
    assert all(r["config"]["write_queue_nums"] == 3 for r in created["results"])
    wait_for(lambda: hidden_cluster.route("cli-t") is not None, 10, "cli-t routed")
    route = cli.json("topic", "route", "cli-t")
    assert [(q["broker_name"], q["read_queue_nums"], q["perm_text"]) for q in route["queue_datas"]] == [
        ("broker-a", 3, "RW-"), ("broker-b", 3, "RW-")]
    assert "cli-t" in cli.json("topic", "list")["topics"]
    updated = cli.json("topic", "update", "cli-t", "--write-queues", "2")
    assert {r["config"]["write_queue_nums"] for r in updated["results"]} == {2}
    assert {r["config"]["read_queue_nums"] for r in updated["results"]} == {3}

    group = cli.json("group", "create", "cli-g", "--retry-max-times", "5")
    assert all(r["ok"] and r["config"]["retry_max_times"] == 5 for r in group["results"])
    groups = {g["group_name"]: g for g in cli.json("group", "list")["groups"]}
    assert groups["cli-g"]["brokers"] == ["broker-a", "broker-b"]

    # Data through the relay too (operators behind a port-forward).
    sent = cli.json("send", "cli-t", "hello relay", "--tags", "t1", "--access", "relay")
    assert sent["results"][0]["status"] == "SEND_OK"
    lines = cli.run("consume", "cli-t", "--group", "cli-g", "--count", "1", "--wait", "20",
                    "--access", "relay", "--output", "json")
    assert lines.returncode == 0, lines.stderr
    msg = json.loads(lines.stdout.splitlines()[0])
    assert (msg["body"], msg["tags"], msg["msg_id"]) == ("hello relay", "t1", sent["results"][0]["msg_id"])

    progress = cli.json("consumer", "progress", "cli-g", "--topic", "cli-t")
    assert len(progress["queues"]) == 6 and progress["total_lag"] == 0
    assert cli.json("consumer", "progress", "cli-g") == progress  # topics found from committed offsets
    assert sum(q["broker_offset"] for q in progress["queues"]) == 1
    assert all(q["consumer_offset"] is not None for q in progress["queues"])

    status = {(b["broker_name"], b["broker_id"]): b for b in cli.json("broker", "status")["brokers"]}
    assert set(status) == {("broker-a", 0), ("broker-a", 1), ("broker-b", 0)}
    assert status[("broker-a", 1)]["status"]["broker_role"] == "SLAVE"
    assert status[("broker-a", 0)]["status"]["broker_role"] == "ASYNC_MASTER"

    ha = {(b["broker_name"], b["broker_id"]): b for b in cli.json("broker", "ha-status")["brokers"]}
    assert all(b["ok"] for b in ha.values())
    master_ha = ha[("broker-a", 0)]["ha"]
    assert master_ha["broker_role"] == "ASYNC_MASTER" and isinstance(master_ha["slaves"], list)
    for row in master_ha["slaves"]:  # one per connected slave once replication runs
        assert {"slave_addr", "ack_offset", "lag_bytes", "connected_since_ms"} <= set(row)
        # named by the brokerId and gRPC address its HA hello gave, not the connection's port
        assert int(row["broker_id"]) == 1 and row["broker_addr"] == status[("broker-a", 1)]["addr"]
        assert int(row["epoch"]) in (0, 1)
    assert ha[("broker-a", 1)]["ha"]["broker_role"] == "SLAVE"
    assert int(master_ha["epoch"]) == 1  # a static master's first term

    deleted = cli.json("topic", "delete", "cli-t")
    assert sorted((r["broker_name"], r["existed"]) for r in deleted["results"]) == [
        ("broker-a", True), ("broker-b", True)]
    # Table output of the same commands works too.
    for args in (["cluster", "list"], ["broker", "status"], ["broker", "ha-status"], ["group", "list"]):
        proc = cli.run(*args)
        assert proc.returncode == 0 and "broker-a" in proc.stdout, proc.stderr


def test_errors_exit_codes_and_options(hidden_cluster: Cluster, tmp_path: Path) -> None:
    cli = Cli(hidden_cluster.namesrv)
    # Many topics at once: names and a file (stdin), one batch per broker.
    batch = cli.json("topic", "create", "cli-b1", "cli-b2", "--file", "-", "-r", "2", "-w", "2",
                     stdin="# more\ncli-b3\n\ncli-b4\n")
    assert batch["topics"] == 4
    assert sorted((r["broker_name"], r["created"]) for r in batch["results"]) == [
        ("broker-a", 4), ("broker-b", 4)]
    listed = cli.json("topic", "list")["topics"]
    assert {"cli-b1", "cli-b2", "cli-b3", "cli-b4"} <= set(listed)
    bad_batch = cli.json("topic", "create", "cli-b5", "bad name", code=1)
    assert all(not r["ok"] and r["error"]["code"] == "INVALID_ARGUMENT"
               and "topic_configs[1]" in r["error"]["message"] for r in bad_batch["results"])
    assert "cli-b5" not in cli.json("topic", "list")["topics"]  # all or nothing

    missing = cli.json("topic", "route", "no-such-topic", code=1)
    assert missing["error"]["type"] == "NoRouteError" and missing["error"]["retriable"] is True
    down = Cli("127.0.0.1:1").json("cluster", "list", code=1)
    assert down["error"]["type"] == "ConnectionFailedError"
    # --namesrv beats $POCKETMQ_NAMESRV.
    assert Cli("127.0.0.1:1").json("cluster", "list", "--namesrv", hidden_cluster.namesrv)["brokers"]
    usage = cli.run("topic", "create")
    assert usage.returncode == 2
    bad = cli.run("send", "t", "x", "--property", "novalue")
    assert bad.returncode == 2
    text = cli.run("topic", "route", "no-such-topic")
    assert text.returncode == 1 and "NoRouteError" in text.stderr
    # One broker directly.
    master_b = next(b for b in hidden_cluster.brokers if b.name == "broker-b")
    one = cli.json("broker", "status", "--broker", master_b.addr)
    assert [(b["broker_name"], b["ok"]) for b in one["brokers"]] == [("broker-b", True)]
    created = cli.json("topic", "create", "cli-direct", "--broker", master_b.addr)
    assert [r["broker_name"] for r in created["results"]] == ["broker-b"]


def test_send_stdin_lines_and_consume_with_tags(hidden_cluster: Cluster) -> None:
    cli = Cli(hidden_cluster.namesrv)
    cli.json("topic", "create", "cli-lines", "-r", "2", "-w", "2")
    wait_for(lambda: hidden_cluster.route("cli-lines") is not None, 10, "routed")
    sent = cli.json("send", "cli-lines", "--lines", "--tags", "keep", stdin="a\nb\nc\n")
    assert [r["status"] for r in sent["results"]] == ["SEND_OK"] * 3
    cli.json("send", "cli-lines", "skip me", "--tags", "drop")
    out = cli.run("consume", "cli-lines", "--tags", "keep", "--count", "3", "--wait", "20",
                  "--output", "json")
    assert out.returncode == 0, out.stderr
    assert sorted(json.loads(line)["body"] for line in out.stdout.splitlines()) == ["a", "b", "c"]
    short = cli.run("consume", "cli-lines", "--tags", "keep", "--count", "9", "--idle", "1.5",
                    "--output", "json")
    assert short.returncode == 1 and len(short.stdout.splitlines()) == 3  # fewer than --count: exit 1


def test_bench_produce_and_consume(hidden_cluster: Cluster) -> None:
    cli = Cli(hidden_cluster.namesrv)
    produced = cli.json("bench", "produce", "--topic", "cli-bench", "--messages", "3000",
                        "--size", "128", "--batch", "25", "--concurrency", "4")
    assert produced["messages"] == 3000 and produced["errors"] == 0
    assert produced["msgs_per_s"] > 0 and produced["mb_per_s"] > 0
    assert 0 < produced["p50_ms"] <= produced["p99_ms"] <= produced["max_ms"]
    consumed = cli.json("bench", "consume", "--topic", "cli-bench", "--messages", "3000",
                        "--idle", "5")
    assert consumed["messages"] == 3000 and consumed["bytes"] == 3000 * 128
    assert consumed["msgs_per_s"] > 0 and consumed["p99_ms"] >= consumed["p50_ms"] > 0
    assert consumed["cpu_us_per_msg"] > 0 and produced["cpu_us_per_msg"] > 0
    table = cli.run("bench", "produce", "--topic", "cli-bench", "--messages", "200", "--batch", "10")
    assert table.returncode == 0 and "msgs/s" in table.stdout


def test_dlq_list_show_and_resend_through_the_namesrv_relay_only(
    hidden_cluster: Cluster, relay_only: Cli
) -> None:
    import asyncio

    from pocketmq import AsyncProducer, Message
    from pocketmq.client.popconsumer import PopConsumer

    cli = relay_only
    hidden_cluster.create_topic("dlq-t", queues=2)
    group = cli.json("group", "create", "dlq-g", "--retry-max-times", "0")  # one attempt only
    assert all(r["ok"] for r in group["results"])
    texts = ["dead one", "dead two", "dead three"]

    async def dead_letter() -> None:
        async with AsyncProducer(hidden_cluster.namesrv) as producer:
            for i, text in enumerate(texts):
                await producer.send(Message("dlq-t", text, tags="tg", keys=f"k{i}",
                                            properties={"app": str(i)}))
        async with PopConsumer("dlq-g", hidden_cluster.namesrv) as consumer:
            consumer.subscribe("dlq-t")
            got = []
            for _ in range(20):
                got.extend(await consumer.receive(8, invisible_time=1, wait=0.5))
                if len(got) >= len(texts):
                    break
            assert sorted(m.body.decode() for m in got) == sorted(texts)  # never acked

    asyncio.run(dead_letter())
    wait_for(lambda: hidden_cluster.route("%DLQ%dlq-g") is not None, 15, "%DLQ%dlq-g routed")

    def listed() -> int:
        rows = {q["group"]: q for q in cli.json("dlq", "list")["dead_letter_queues"]}
        return int(rows["dlq-g"]["count"]) if "dlq-g" in rows else 0

    wait_for(lambda: listed() == 3, 15, "three dead letters listed")
    shown = cli.json("dlq", "show", "--group", "dlq-g")["messages"]
    assert sorted(m["body"] for m in shown) == sorted(texts)
    assert {(m["original_topic"], m["reconsume_times"], m["tags"]) for m in shown} == {("dlq-t", 1, "tg")}
    hexed = cli.json("dlq", "show", "--group", "dlq-g", "--limit", "1", "--body", "hex")["messages"]
    assert len(hexed) == 1 and bytes.fromhex(hexed[0]["body"]).decode() in texts

    one = next(m for m in shown if m["body"] == "dead two")
    resent = cli.json("dlq", "resend", "--group", "dlq-g", "--msg-id", one["msg_id"])
    assert [(r["topic"], r["status"]) for r in resent["resent"]] == [("dlq-t", "SEND_OK")]
    assert cli.json("dlq", "resend", "--group", "dlq-g", "--msg-id", "nope", code=1)["not_found"] == ["nope"]
    assert len(cli.json("dlq", "resend", "--group", "dlq-g", "--all")["resent"]) == 3
    assert cli.run("dlq", "resend", "--group", "dlq-g").returncode == 2  # neither --msg-id nor --all

    async def read_back() -> list[Any]:
        async with PopConsumer("dlq-check", hidden_cluster.namesrv) as consumer:
            consumer.subscribe("dlq-t")
            got: list[Any] = []
            for _ in range(40):
                batch = await consumer.receive(16, wait=0.5)
                await consumer.ack(batch)
                got.extend(batch)
                if len(got) >= 7:
                    break
            return got

    again = asyncio.run(read_back())
    assert sorted(m.body.decode() for m in again) == sorted([*texts, *texts, "dead two"])
    resent_copies = [m for m in again if m.message.properties.get("app") is not None]
    assert len(resent_copies) == 7 and {m.message.tags for m in again} == {"tg"}
    assert all("RETRY_TOPIC" not in m.message.properties for m in again)
