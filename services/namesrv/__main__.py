"""``python -m services.namesrv`` / ``pocketmq-namesrv``: run a NameServer until SIGTERM."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from services.common.config import ConfigError, add_arguments, from_arguments
from services.common.lifecycle import run_service
from services.common.logs import setup_logging
from services.namesrv.app import serve
from services.namesrv.config import NamesrvConfig

log = logging.getLogger("services.namesrv")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pocketmq-namesrv",
        description="PocketMQ NameServer: broker registration, failure detection and topic routes.",
    )
    add_arguments(parser, [NamesrvConfig])
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging("namesrv")
    try:
        (config,) = from_arguments(args, [NamesrvConfig])
    except ConfigError as exc:
        log.error("invalid configuration", extra={"key": exc.key, "error": str(exc)})
        return 2
    return run_service(lambda stop: serve(config, stop))


if __name__ == "__main__":
    sys.exit(main())
