"""``python -m services.broker`` / ``pocketmq-broker``: run a broker until SIGTERM.

    pocketmq-broker -c broker.conf [--broker-role SLAVE --broker-id 1 ...]

``broker.conf`` is RocketMQ-style ``key=value`` (brokerClusterName, brokerName, brokerId,
brokerRole, flushDiskType, namesrvAddr, listenPort, haListenPort, storePathRootDir, ...);
``POCKETMQ_<KEY>`` environment variables and ``--kebab-key`` flags override it.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from services.broker.app import run_broker
from services.broker.config import BrokerConfig, mask_secrets
from services.broker.liveconfig import load_overrides
from services.broker.replication.service import create_replication_service
from services.broker.storage.config import StoreConfig
from services.common.config import ConfigError, add_arguments, from_arguments, to_properties
from services.common.lifecycle import run_service
from services.common.logs import setup_logging

log = logging.getLogger("services.broker")
SECTIONS = [BrokerConfig, StoreConfig]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pocketmq-broker",
        description="PocketMQ broker: stores and serves messages of one broker group member.",
    )
    parser.add_argument("--print-config", action="store_true",
                        help="print the effective configuration as broker.conf lines and exit "
                             "(a set haAuthSecret is shown as a comment, not its value)")
    add_arguments(parser, SECTIONS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging("broker")
    try:
        broker_config, store_config = from_arguments(args, SECTIONS)
        # Keys changed live (pocketmq broker config set) before this start.
        broker_config, store_config, _ = load_overrides(broker_config, store_config)
    except ConfigError as exc:
        log.error("invalid configuration", extra={"key": exc.key, "error": str(exc)})
        return 2
    if args.print_config:
        # A set haAuthSecret is printed as a comment: the output may end up in logs or tickets.
        sys.stdout.write(mask_secrets(to_properties([broker_config, store_config])))
        return 0
    if broker_config.controller_mode != "none":
        from services.broker.controller.runner import Controller, open_dcs  # (needs aetcd / kubernetes)

        try:
            dcs = open_dcs(broker_config)
        except ConfigError as exc:
            log.error("invalid configuration", extra={"key": exc.key, "error": str(exc)})
            return 2
        controller = Controller(broker_config, store_config, create_replication_service, dcs)
        return run_service(controller.run)
    return run_service(lambda stop: run_broker(broker_config, store_config, stop,
                                               ha_factory=create_replication_service))


if __name__ == "__main__":
    sys.exit(main())
