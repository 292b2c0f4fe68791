"""Test-only stand-in for a broker process: runs the real :class:`BrokerRegistrar` until SIGTERM
(graceful: unregisters) or SIGKILL (no goodbye), so the NameServer sees what a real broker's
death looks like.

    python -m tests.integration.namesrv.registrar_proc --namesrv "127.0.0.1:9876" \\
        --cluster c1 --broker-name b1 --broker-id 0 --broker-addr 127.0.0.1:10911 \\
        --topics t1,t2 --period 0.3 --status-file /tmp/status.json

The status file (JSON, replaced atomically after every registration round) lets a test see what
the registrar learned: ``rounds``, ``master_addr``, ``master_ha_addr``, ``on_master`` calls and the
latest outcome per NameServer.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from pathlib import Path

from pocketmq.common.v1 import common_pb2
from services.broker.registration import BrokerIdentity, BrokerRegistrar, parse_namesrv_addr
from services.common.lifecycle import run_service
from services.common.logs import setup_logging


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--namesrv", required=True, help="namesrvAddr, a;b")
    p.add_argument("--cluster", default="DefaultCluster")
    p.add_argument("--broker-name", required=True)
    p.add_argument("--broker-id", type=int, default=0)
    p.add_argument("--broker-addr", required=True)
    p.add_argument("--ha-addr", default="")
    p.add_argument("--role", default="")
    p.add_argument("--topics", default="", help="comma-separated topic names")
    p.add_argument("--queues", type=int, default=4)
    p.add_argument("--version", type=int, default=1, help="topic DataVersion counter")
    p.add_argument("--period", type=float, default=0.5, help="registration period (s)")
    p.add_argument("--timeout", type=float, default=1.0, help="per-call timeout (s)")
    p.add_argument("--status-file", type=Path)
    p.add_argument("--no-unregister", action="store_true", help="do not unregister on SIGTERM")
    return p.parse_args(argv)


def write_status(path: Path, status: dict[str, object]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(status, indent=1))
    os.replace(tmp, path)


async def run(args: argparse.Namespace, stop: asyncio.Event) -> None:
    role = args.role or ("ASYNC_MASTER" if args.broker_id == 0 else "SLAVE")
    identity = BrokerIdentity(
        cluster_name=args.cluster, broker_name=args.broker_name, broker_id=args.broker_id,
        broker_addr=args.broker_addr, ha_server_addr=args.ha_addr, metrics_addr="", broker_role=role,
    )
    version = common_pb2.DataVersion(timestamp=int(time.time() * 1000), counter=args.version)
    topics = [
        common_pb2.TopicConfig(
            topic_name=name, read_queue_nums=args.queues, write_queue_nums=args.queues, perm=6
        )
        for name in args.topics.split(",") if name
    ]
    on_master_calls: list[list[str]] = []
    registrar = BrokerRegistrar(
        parse_namesrv_addr(args.namesrv), identity, lambda: (version, topics),
        period_s=args.period, timeout_s=args.timeout,
        on_master=lambda addr, ha: on_master_calls.append([addr, ha]),
    )

    def status() -> dict[str, object]:
        return {
            "pid": os.getpid(),
            "rounds": registrar.rounds,
            "master_addr": registrar.master_addr,
            "master_ha_addr": registrar.master_ha_addr,
            "on_master": on_master_calls,
            "outcomes": {
                addr: {"ok": o.ok, "error": o.error, "elapsed_s": o.elapsed_s}
                for addr, o in registrar.last_outcomes.items()
            },
        }

    async def report() -> None:
        seen = -1
        while True:
            if args.status_file and registrar.rounds != seen:
                seen = registrar.rounds
                write_status(args.status_file, status())
            await asyncio.sleep(0.02)

    reporter = asyncio.create_task(report())
    await registrar.start()
    await stop.wait()
    await registrar.stop(unregister=not args.no_unregister)
    reporter.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await reporter


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging("registrar")
    return run_service(lambda stop: run(args, stop))


if __name__ == "__main__":
    sys.exit(main())
