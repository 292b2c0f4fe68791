"""The data source over TLS: with ``tlsCaFile`` a batch write and a batch read go through a
NameServer and broker whose gRPC ports are TLS only; without it the read fails naming the cause."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pocketmq.client.admin import AsyncAdmin
from pocketmq.wire.tls import ClientTls
from tests.integration.procs import ProcessGroup
from tests.integration.tls.pki import make_pki
from tests.spark.helpers import reader
from tests.support import free_port

pytestmark = pytest.mark.slow


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[ProcessGroup]:
    group = ProcessGroup(tmp_path / "logs")
    try:
        yield group
    finally:
        group.stop_all()


def test_write_and_read_back_over_tls(spark: Any, procs: ProcessGroup, tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    flags = ["--tls-enable", "true", "--tls-server-cert-path", str(pki.server_cert),
             "--tls-server-key-path", str(pki.server_key), "--tls-server-trust-cert-path", str(pki.ca)]
    tls = ClientTls(ca_file=str(pki.ca))
    namesrv = f"127.0.0.1:{free_port()}"
    procs.start_grpc("services.namesrv", ["--listen", namesrv, "--metrics-port", "0", *flags], namesrv,
                     name="namesrv", service="pocketmq.namesrv.v1.NameServer", tls=tls)
    port = free_port()
    procs.start_grpc("services.broker", [
        "--broker-name", "broker-t", "--namesrv-addr", namesrv, "--broker-ip1", "127.0.0.1",
        "--listen-host", "127.0.0.1", "--listen-port", str(port), "--ha-listen-port", str(free_port()),
        "--metrics-port", "0", "--store-path-root-dir", str(tmp_path / "store"),
        "--shutdown-grace-period", "1000", *flags], f"127.0.0.1:{port}", name="broker",
        service="pocketmq.broker.v1.Broker", tls=tls)

    async def create() -> None:
        async with AsyncAdmin(namesrv, tls=tls) as admin:
            for _ in range(50):  # until the broker registered over TLS
                results = await admin.create_topic("spark-tls", read_queues=2, write_queues=2)
                if results and all(r.ok for r in results):
                    return
                await asyncio.sleep(0.2)
            raise AssertionError("topic not created")

    asyncio.run(create())
    bodies = [f"row-{i}".encode() for i in range(50)]
    df = spark.createDataFrame([(b,) for b in bodies], "body binary")
    df.write.format("pocketmq").option("namesrv", namesrv).option("topic", "spark-tls") \
        .option("tlsCaFile", str(pki.ca)).mode("append").save()
    got = reader(spark, namesrv, "spark-tls", tlsCaFile=str(pki.ca)).select("body").collect()
    assert sorted(bytes(r["body"]) for r in got) == sorted(bodies)
    with pytest.raises(Exception, match=r"spark-tls|UNAVAILABLE|connect"):
        reader(spark, namesrv, "spark-tls", requestTimeoutMs=2000).collect()
