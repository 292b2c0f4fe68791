"""CLI helpers: protobuf -> JSON, percentiles, permission parsing; the command tree."""

from __future__ import annotations

import array
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from pocketmq.broker.v1 import broker_pb2
from pocketmq.cli import app, main
from pocketmq.cli.bench import Summary, _latencies, percentile
from pocketmq.cli.commands.topic import _perm
from pocketmq.cli.common import ACCESS, CLUSTER, Access, Conn, connected
from pocketmq.cli.output import Output, human_bytes, ms_to_iso, proto_dict
from pocketmq.namesrv.v1 import namesrv_pb2


def test_proto_dict_keeps_every_field_with_native_types() -> None:
    ha = broker_pb2.HAStatus(broker_role="ASYNC_MASTER", commit_log_max_offset=2**40,
                             slaves=[broker_pb2.HASlaveStatus(slave_addr="s:1", ack_offset=5)])
    d = proto_dict(ha)
    assert d["commit_log_max_offset"] == 2**40 and d["connected"] is False
    assert d["slaves"][0]["ack_offset"] == 5 and d["slaves"][0]["lag_bytes"] == 0
    pull = proto_dict(broker_pb2.PullMessageResponse(status=broker_pb2.FOUND, records=b"\x01\x02"))
    assert pull["status"] == "FOUND" and pull["records"] == "0102"
    group = proto_dict(namesrv_pb2.BrokerData(broker_name="b", broker_addrs={1: "x:2", 0: "x:1"}))
    assert group["broker_addrs"] == {"0": "x:1", "1": "x:2"}


def test_consume_latencies_pair_each_message_with_its_batchs_receive_time() -> None:
    borns = array.array("q", [100, 150, 190, 400])
    # three messages received at 200.5 ms, then one at 450.0 ms
    assert _latencies(borns, [(3, 200.5), (4, 450.0)]) == [100.5, 50.5, 10.5, 50.0]
    assert _latencies(array.array("q"), []) == []


def test_small_helpers() -> None:
    assert percentile([], 50) == 0.0
    values = [float(i) for i in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 99), percentile(values, 100)) == (50, 99, 100)
    s = Summary("produce", messages=1000, bytes=2_000_000, seconds=2.0, latencies_ms=[1.0, 2.0, 3.0])
    d = s.to_dict()
    assert (d["msgs_per_s"], d["mb_per_s"], d["p50_ms"], d["max_ms"]) == (500.0, 1.0, 2.0, 3.0)
    # An end-to-end latency below 0 (another host's clock ahead) counts as 0.
    skewed = Summary("consume", messages=3, seconds=1.0, latencies_ms=[-4.0, -2.0, 1.0]).to_dict()
    assert (skewed["p50_ms"], skewed["p99_ms"], skewed["max_ms"]) == (0.0, 1.0, 1.0)
    assert Summary("consume", latencies_ms=[-3.0]).to_dict()["max_ms"] == 0.0
    assert ms_to_iso(0) == "-" and ms_to_iso(1_700_000_000_123) == "2023-11-14T22:13:20.123Z"
    assert human_bytes(512) == "512 B" and human_bytes(3 * 1024 * 1024) == "3.0 MiB"
    assert (_perm("RW"), _perm("r"), _perm("6"), _perm("RWX")) == (6, 4, 6, 7)
    with pytest.raises(typer.BadParameter):
        _perm("Q")


def test_command_tree_and_common_options() -> None:
    runner = CliRunner()
    commands = {
        ("cluster", "list"), ("topic", "create"), ("topic", "update"), ("topic", "delete"), ("topic", "list"),
        ("topic", "route"), ("group", "create"), ("group", "list"), ("send",), ("consume",),
        ("consumer", "progress"), ("broker", "status"), ("broker", "ha-status"), ("bench", "produce"),
        ("bench", "consume"),
    }
    for path in commands:
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "--namesrv" in result.output and "--output" in result.output, path
    assert main(["--help"]) == 0
    assert main(["topic", "create"]) == 2  # missing argument


def test_shared_options_arrive_as_one_conn() -> None:
    seen: list[Conn] = []
    toy = typer.Typer()

    @toy.command("one")
    @connected(CLUSTER, ACCESS, timeout=7.0)
    def one(name: Annotated[str, typer.Argument()], *, conn: Conn) -> None:
        assert name == "x"
        seen.append(conn)

    @toy.command("two")
    @connected()
    def two(*, conn: Conn) -> None:
        seen.append(conn)

    runner = CliRunner()
    result = runner.invoke(toy, ["one", "x", "-c", "DefaultCluster", "--output", "JSON", "-n", "h:1"],
                           env={"POCKETMQ_ACCESS": "relay"})
    assert result.exit_code == 0, result.output
    assert seen.pop() == Conn(namesrv="h:1", output=Output.json, timeout=7.0, cluster="DefaultCluster",
                              access=Access.relay)
    assert runner.invoke(toy, ["two"], env={"POCKETMQ_NAMESRV": "e:2"}).exit_code == 0
    assert seen.pop() == Conn(namesrv="e:2")
    assert runner.invoke(toy, ["two", "--cluster", "c"]).exit_code == 2  # not one of its options
    with pytest.raises(TypeError, match="conn"):
        connected()(lambda: None)
